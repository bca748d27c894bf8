// Element building without innerHTML: every text from the API goes in as a
// text node, so a record value can never become markup.

// h builds an element. attrs: class, dataset (object), on* handlers
// (functions), boolean attributes, and anything else as an attribute.
// Children are nodes, strings, numbers, arrays of those, or null (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace swaps el's children for the given ones.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// table builds a table inside a horizontal scroller. cols: [{label, num}];
// rows: arrays of cells (nodes or text); empty: text when there are no rows.
export function table(cols, rows, empty = 'Nothing here yet.', attrs = {}) {
  const head = h('tr', null, cols.map(c => h('th', { class: c.num ? 'num' : null, title: c.title }, c.label)));
  const body = rows.length
    ? rows.map(r => h('tr', r.attrs || null, (r.cells || r).map((cell, i) => h('td', { class: cols[i] && cols[i].num ? 'num' : null }, cell))))
    : [h('tr', null, h('td', { class: 'empty', colspan: cols.length }, empty))];
  return h('div', { class: 'table-wrap' }, h('table', attrs, h('thead', null, head), h('tbody', null, body)));
}

// tile is one big number with a label.
export function tile(label, value, unit, { state, hint, id } = {}) {
  return h('div', { class: 'tile' + (state ? ' ' + state : ''), id },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value' }, value, unit ? h('span', { class: 'unit' }, unit) : null),
    hint ? h('div', { class: 'hint' }, hint) : null);
}

// badge is a small labelled box; cls is ok, warn, bad, info or leader.
export function badge(text, cls, title) {
  return h('span', { class: 'badge' + (cls ? ' ' + cls : ''), title }, text);
}

// confirmDialog shows a modal asking to confirm; resolves true or false.
// When typeToConfirm is set, the confirm button stays disabled until the user
// types exactly that text.
export function confirmDialog({ title, body, confirmLabel = 'Confirm', danger = false, typeToConfirm = null }) {
  return new Promise(resolve => {
    const input = typeToConfirm ? h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', 'aria-label': 'confirmation' }) : null;
    const ok = h('button', { type: 'button', class: danger ? 'danger solid' : null, disabled: !!typeToConfirm }, confirmLabel);
    const cancel = h('button', { type: 'button', class: 'ghost' }, 'Cancel');
    const dlg = h('dialog', { class: 'confirm' },
      h('h2', null, title),
      h('p', null, body),
      input ? h('label', null, `Type ${typeToConfirm} to confirm`, input) : null,
      h('div', { class: 'buttons' }, cancel, ok));
    if (input) input.addEventListener('input', () => { ok.disabled = input.value !== typeToConfirm; });
    const done = v => { dlg.close(); dlg.remove(); resolve(v); };
    ok.addEventListener('click', () => done(true));
    cancel.addEventListener('click', () => done(false));
    dlg.addEventListener('cancel', e => { e.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    (input || ok).focus();
  });
}

// notify shows a message in the banner under the header until the next
// successful refresh.
export function notify(message) {
  const b = document.getElementById('banner');
  if (!b) return;
  b.hidden = false;
  b.textContent = message;
}
