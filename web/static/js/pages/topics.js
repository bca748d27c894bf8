// Topics: the list with rates and the worst lag of any group, create, delete.
import { h, replace, table, badge, confirmDialog, notify } from '../dom.js';
import { api } from '../api.js';
import { observe, topicTotals } from '../rates.js';
import * as fmt from '../format.js';

const maxGroupsDescribed = 50;

// worstLags describes up to maxGroupsDescribed groups and returns, per
// topic, the group with the most lag {group, lag}.
export async function worstLags() {
  const out = new Map();
  const list = await api.groups();
  const ds = await Promise.all(list.groups.slice(0, maxGroupsDescribed).map(g => api.group(g.group).catch(() => null)));
  for (const d of ds) {
    if (!d) continue;
    const perTopic = new Map();
    for (const p of d.partitions) if (p.lag >= 0) perTopic.set(p.topic, (perTopic.get(p.topic) || 0) + p.lag);
    for (const [topic, lag] of perTopic) {
      const w = out.get(topic);
      if (!w || lag > w.lag) out.set(topic, { group: d.group, lag });
    }
  }
  return out;
}

export default function topics(params, ctl) {
  const showInternal = h('input', { type: 'checkbox', id: 'show-internal' });
  const list = h('div', { id: 'topics-table' });
  const count = h('span', { class: 'sub' });
  const el = h('div', { class: 'page topics' },
    h('div', { class: 'page-head' }, h('h1', null, 'Topics', count),
      h('div', { class: 'actions' },
        h('label', { class: 'inline' }, showInternal, 'Show internal'),
        h('button', { type: 'button', id: 'new-topic', onclick: () => createDialog(ctl) }, 'New topic'))),
    h('section', { class: 'panel flush' }, list));
  showInternal.addEventListener('change', () => render());

  let last = null;
  let lags = new Map();
  const render = () => {
    if (!last) return;
    const now = Date.now();
    const ts = last.topics.filter(t => showInternal.checked || !t.name.startsWith('__'));
    count.textContent = `${ts.length} topic${ts.length === 1 ? '' : 's'}`;
    const rows = ts.map(t => {
      const s = topicTotals(t);
      const rate = observe('topic:' + t.name, s.unknown ? -1 : s.hw, now);
      const w = lags.get(t.name);
      const health = [];
      if (s.offline) health.push(badge(`${s.offline} offline`, 'bad'));
      if (s.underReplicated) health.push(badge(`${s.underReplicated} under-replicated`, 'warn'));
      if (!health.length) health.push(badge('healthy', 'ok'));
      return {
        attrs: { 'data-topic': t.name },
        cells: [
          h('a', { href: `#/topics/${encodeURIComponent(t.name)}` }, t.name),
          h('span', { 'data-field': 'partitions' }, String(t.partitions.length)),
          h('span', { 'data-field': 'replication' }, String(t.replication_factor)),
          h('span', { 'data-field': 'records' }, fmt.num(s.records)),
          h('span', { 'data-field': 'rate' }, fmt.rate(rate)),
          fmt.bytes(s.local),
          s.remote ? fmt.bytes(s.remote) : h('span', { class: 'dim' }, '—'),
          health,
          w ? h('span', { 'data-field': 'lag', title: `group ${w.group}` },
            h('span', { class: w.lag > 0 ? 'warn-text' : null }, fmt.num(w.lag)), ' ', h('a', { class: 'dim', href: `#/groups/${encodeURIComponent(w.group)}` }, w.group))
            : h('span', { class: 'dim', 'data-field': 'lag' }, 'no groups'),
          h('span', null,
            h('a', { href: `#/messages?topic=${encodeURIComponent(t.name)}` }, 'Messages'), '  ',
            h('button', { type: 'button', class: 'danger small', 'data-delete': t.name, onclick: () => deleteTopic(t.name, ctl) }, 'Delete')),
        ],
      };
    });
    replace(list, table([
      { label: 'Name' }, { label: 'Partitions', num: true }, { label: 'RF', num: true, title: 'replication factor' },
      { label: 'Records', num: true, title: 'records between log start and high watermark' },
      { label: 'Rate', num: true }, { label: 'Size', num: true, title: 'on the leaders\' disks' },
      { label: 'Remote', num: true, title: 'in the object store' }, { label: 'Health' },
      { label: 'Worst group lag', title: 'the group with the most unconsumed records on this topic' }, { label: '' },
    ], rows, 'No topics yet: create one with New topic.'));
  };
  return {
    el,
    every: 3000,
    async refresh() {
      const [t, l] = await Promise.all([api.topics(), worstLags().catch(() => lags)]);
      last = t;
      lags = l;
      render();
    },
  };
}

export async function deleteTopic(name, ctl) {
  const ok = await confirmDialog({
    title: `Delete topic ${name}?`,
    body: 'Every record of every partition is deleted, on the brokers and in the object store. This cannot be undone.',
    confirmLabel: 'Delete topic', danger: true, typeToConfirm: name,
  });
  if (!ok) return;
  try {
    await api.deleteTopic(name);
  } catch (e) {
    notify(`Deleting ${name}: ${e.code || 'ERROR'}: ${e.message}`);
    return;
  }
  ctl.refreshNow();
}

// createDialog asks for a topic's name, partitions, replication factor and
// configs, and creates it.
function createDialog(ctl) {
  const name = h('input', { type: 'text', name: 'name', required: true, pattern: '[a-zA-Z0-9._\\-]{1,249}', autocomplete: 'off', spellcheck: 'false' });
  const parts = h('input', { type: 'number', name: 'partitions', min: 1, max: 10000, value: '3' });
  const rf = h('input', { type: 'number', name: 'replication_factor', min: 1, max: 16, value: '', placeholder: 'default' });
  const configs = h('textarea', { name: 'configs', rows: 3, placeholder: 'retention.ms=604800000\ncleanup.policy=compact' });
  const err = h('div', { class: 'error-text' });
  const create = h('button', { type: 'submit' }, 'Create topic');
  const cancel = h('button', { type: 'button', class: 'ghost' }, 'Cancel');
  const form = h('form', { method: 'dialog' },
    h('h2', null, 'New topic'),
    h('div', { class: 'form-row' }, h('label', { class: 'grow' }, 'Name', name)),
    h('div', { class: 'form-row' }, h('label', null, 'Partitions', parts), h('label', null, 'Replication factor', rf)),
    h('div', { class: 'form-row' }, h('label', { class: 'grow' }, 'Configs, one name=value a line (optional)', configs)),
    err,
    h('div', { class: 'buttons' }, cancel, create));
  const dlg = h('dialog', { id: 'create-topic' }, form);
  const close = () => { dlg.close(); dlg.remove(); };
  cancel.addEventListener('click', close);
  dlg.addEventListener('cancel', e => { e.preventDefault(); close(); });
  form.addEventListener('submit', async e => {
    e.preventDefault();
    err.textContent = '';
    const req = { name: name.value.trim(), partitions: Number(parts.value) || 1 };
    if (rf.value) req.replication_factor = Number(rf.value);
    const cfg = {};
    for (const line of configs.value.split('\n').map(s => s.trim()).filter(Boolean)) {
      const i = line.indexOf('=');
      if (i <= 0) { err.textContent = `config line "${line}" is not name=value`; return; }
      cfg[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    if (Object.keys(cfg).length) req.configs = cfg;
    create.disabled = true;
    create.textContent = 'Creating…';
    try {
      await api.createTopic(req);
      close();
      ctl.refreshNow();
    } catch (ex) {
      err.textContent = `${ex.code || 'ERROR'}: ${ex.message}`;
      create.disabled = false;
      create.textContent = 'Create topic';
    }
  });
  document.body.appendChild(dlg);
  dlg.showModal();
  name.focus();
}
