// One push subscription: state, settings, delivery per partition, the
// records it is stuck on, and its actions (pause, resume, seek, test event,
// secret rotation, delete).
import { h, replace, table, tile, badge, confirmDialog } from '../dom.js';
import { api } from '../api.js';
import { pushStateBadge, pushLag } from './pushes.js';
import * as fmt from '../format.js';

const verdictClass = { delivered: 'ok', refused: 'bad', unreachable: 'bad', throttled: 'warn', gone: 'bad' };

function errorText(e) {
  return `${e.code || 'ERROR'}: ${e.message}`;
}

// lastErrorText is a last error in a line: when, the offset and attempt,
// the status and the start of the error.
function lastErrorText(e) {
  const status = e.status ? `HTTP ${e.status}` : 'no answer';
  const msg = e.error ? ` · ${e.error.slice(0, 80)}` : '';
  return `${fmt.ago(e.at_ms)}: offset ${fmt.num(e.offset)} attempt ${e.attempt}, ${status}${msg}`;
}

function short(id) {
  return id.length > 12 ? id.slice(0, 12) + '…' : id;
}

export default function push(params, ctl) {
  const name = params.name;
  const btn = (id, label, cls, onclick) => h('button', { type: 'button', id, class: cls, onclick }, label);
  const pauseBtn = btn('push-pause', 'Pause', 'ghost', () => setState('paused'));
  const resumeBtn = btn('push-resume', 'Resume', null, () => setState('active'));
  const buttons = [
    pauseBtn, resumeBtn,
    btn('push-seek-earliest', 'Seek to earliest', 'ghost', () => seek('earliest')),
    btn('push-seek-latest', 'Seek to latest', 'ghost', () => seek('latest')),
    btn('push-test', 'Send test event', 'ghost', sendTest),
    btn('push-rotate', 'Rotate secret', 'ghost', rotate),
    btn('push-delete', 'Delete', 'danger', remove),
  ];
  pauseBtn.hidden = resumeBtn.hidden = true; // until the state is known
  const result = h('div', { id: 'push-result', class: 'push-result' });
  const tiles = h('div', { class: 'tiles', id: 'push-tiles' });
  const settings = h('div', { id: 'push-settings' });
  const parts = h('div', { id: 'push-partitions' });
  const failures = h('div', { id: 'push-failures' });
  const el = h('div', { class: 'page push' },
    h('div', { class: 'crumbs' }, h('a', { href: '#/push' }, 'Push'), ' / '),
    h('div', { class: 'page-head' }, h('h1', { id: 'push-name' }, name), h('div', { class: 'actions' }, buttons)),
    result,
    tiles,
    h('section', { class: 'panel', id: 'push-failures-panel' }, h('h2', null, 'Recent failures',
      h('span', { class: 'sub' }, 'why the state is what it is, and the partitions whose next record was refused')), failures),
    h('section', { class: 'panel flush' }, h('h2', null, 'Partitions',
      h('span', { class: 'sub' }, 'the committed offset passes a record once the endpoint took it or it was dead-lettered')), parts),
    h('section', { class: 'panel' }, h('h2', null, 'Settings'), settings));

  let last = null;

  // act runs one action with the buttons disabled, shows its outcome (or
  // its error) above the tiles, and refreshes the page.
  const act = async (what, f) => {
    for (const b of buttons) b.disabled = true;
    replace(result, h('span', { class: 'note' }, what + '…'));
    try {
      const shown = await f();
      replace(result, shown || null);
    } catch (e) {
      replace(result, h('span', { class: 'error-text', id: 'push-error', 'data-code': e.code }, `${what}: ${errorText(e)}`));
    } finally {
      for (const b of buttons) b.disabled = false;
      ctl.refreshNow();
    }
  };

  async function setState(state) {
    await act(state === 'paused' ? 'Pausing' : 'Resuming', async () => {
      const s = await api.setPushState(name, state);
      return h('span', { class: 'success-text' }, `${s.name} is ${s.state}${s.reason ? ' (' + s.reason + ')' : ''}.`);
    });
  }

  async function seek(to) {
    const ok = await confirmDialog(to === 'latest' ? {
      title: `Seek ${name} to latest?`,
      body: 'Every partition\'s committed offset moves to its high watermark: the records not delivered yet are skipped, never pushed, and only records produced from now on are.',
      confirmLabel: 'Seek to latest', danger: true,
    } : {
      title: `Seek ${name} to earliest?`,
      body: 'Every partition\'s committed offset moves to its log start: every record still in the log is pushed again, including those the endpoint already took.',
      confirmLabel: 'Seek to earliest', danger: true,
    });
    if (!ok) return;
    await act(`Seeking to ${to}`, async () => {
      const res = await api.seekPush(name, to);
      const n = res.committed.length;
      return h('span', { class: 'success-text', id: 'push-seeked', 'data-to': to },
        `Committed offsets of ${n} partition${n === 1 ? '' : 's'} moved to ${to}.`);
    });
  }

  async function sendTest() {
    await act('Sending a test event', async () => {
      const r = await api.testPush(name);
      return h('div', { id: 'push-test-result', 'data-status': r.status, 'data-verdict': r.verdict },
        h('span', null, 'Test event: '),
        badge(r.verdict, verdictClass[r.verdict] || null),
        h('b', { 'data-field': 'status' }, r.status ? `HTTP ${r.status}` : 'no answer'),
        h('span', { class: 'dim' }, ` in ${fmt.duration(r.latency_ms)}`),
        r.response ? h('pre', { class: 'push-response', 'data-field': 'response' }, r.response) : null);
    });
  }

  async function rotate() {
    const grace = h('select', { id: 'push-grace', 'aria-label': 'grace' },
      h('option', { value: 3600 }, '1 hour'), h('option', { value: 86400, selected: true }, '24 hours'),
      h('option', { value: 604800 }, '7 days'));
    const ok = await confirmDialog({
      title: `Rotate the signing secret of ${name}?`,
      body: h('span', null, 'A new secret signs every request from now on. The current secrets sign too, for ',
        grace, ', so the endpoint can switch to the new one without refusing a request.'),
      confirmLabel: 'Rotate secret',
    });
    if (!ok) return;
    const secs = Number(grace.value);
    await act('Rotating the secret', async () => {
      const s = await api.rotatePushSecret(name, secs);
      showSecret(s.secret, grace.selectedOptions[0].textContent);
      return h('span', { class: 'success-text' }, 'A new secret signs from now on.');
    });
  }

  async function remove() {
    const dlt = last ? last.dead_letter.topic : `${name}.dlt`;
    const ok = await confirmDialog({
      title: `Delete push subscription ${name}?`,
      body: `Its pushers stop, and its group push.${name} is deleted with its committed offsets. The dead-letter topic ${dlt} and the records of its topics stay.`,
      confirmLabel: 'Delete subscription', danger: true, typeToConfirm: name,
    });
    if (!ok) return;
    for (const b of buttons) b.disabled = true;
    try {
      await api.deletePush(name);
    } catch (e) {
      replace(result, h('span', { class: 'error-text', id: 'push-error', 'data-code': e.code }, `Deleting ${name}: ${errorText(e)}`));
      for (const b of buttons) b.disabled = false;
      return;
    }
    location.hash = '#/push';
  }

  const render = st => {
    last = st;
    const lag = pushLag(st);
    const owners = new Set(st.partitions.map(p => p.owner).filter(Boolean));
    const stuck = st.partitions.filter(p => p.head_attempts > 0);
    pauseBtn.hidden = !(st.state === 'active' || st.state === 'backing_off');
    resumeBtn.hidden = !pauseBtn.hidden;

    replace(tiles,
      h('div', { class: 'tile', id: 'tile-push-state', 'data-state': st.state },
        h('div', { class: 'label' }, 'State'), h('div', { class: 'value' }, pushStateBadge(st.state, st.reason)),
        h('div', { class: 'hint', title: st.reason || null }, st.reason || `updated ${fmt.ago(st.updated_ms)}`)),
      tile('Lag', fmt.num(lag.lag) + (lag.unknown ? '+' : ''), 'rec', { id: 'tile-push-lag', state: lag.lag > 0 ? 'warn' : 'ok' }),
      tile('Time lag', fmt.duration(lag.lagMs), null, { id: 'tile-push-lag-ms', hint: 'oldest record not delivered' }),
      tile('Partitions', String(st.partitions.length), null, { id: 'tile-push-partitions', hint: st.topics.join(', ') }),
      tile('Pushers', String(owners.size), null, { id: 'tile-push-owners', hint: 'gateways delivering it' }),
      tile('Failing', String(stuck.length), null, { id: 'tile-push-failing', state: stuck.length ? 'bad' : null, hint: 'partitions retrying a record' }));

    const items = [];
    if (st.reason) {
      items.push(h('li', { 'data-failure': 'state' }, pushStateBadge(st.state), ' ', h('span', { 'data-field': 'reason' }, st.reason)));
    }
    for (const p of stuck) {
      items.push(h('li', { 'data-failure': `${p.topic}/${p.partition}` },
        h('b', null, `${p.topic}/${p.partition}`), ': ',
        h('span', { 'data-field': 'head_attempts' }, String(p.head_attempts)),
        ` of ${st.retry.max_attempts} attempts failed at offset `, h('span', { 'data-field': 'offset' }, fmt.num(p.committed_offset)),
        `; after the last it goes to ${st.dead_letter.topic} and the partition moves on`,
        p.last_error ? h('div', { class: 'dim', 'data-field': 'last_error' }, lastErrorText(p.last_error)) : null));
    }
    replace(failures, items.length ? h('ul', { class: 'failures' }, items)
      : h('p', { class: 'note', 'data-failure': 'none' }, 'Nothing failing: no partition\'s next record was refused.'));

    replace(parts, table([
      { label: 'Topic' }, { label: 'P', num: true }, { label: 'Owner' }, { label: 'Committed', num: true },
      { label: 'HW', num: true }, { label: 'Lag', num: true }, { label: 'Time lag', num: true },
      { label: 'Head attempts', num: true, title: 'attempts counted against the record at the committed offset' },
      { label: 'In flight', num: true, title: 'requests its pusher has out now' },
      { label: 'Last error', title: 'the last failed attempt its pusher saw' },
    ], st.partitions.map(p => ({
      attrs: { 'data-topic': p.topic, 'data-partition': p.partition },
      cells: [
        h('a', { href: `#/topics/${encodeURIComponent(p.topic)}` }, p.topic), String(p.partition),
        p.owner ? h('span', { class: 'mono', title: p.owner, 'data-field': 'owner' }, short(p.owner)) : h('span', { class: 'dim', 'data-field': 'owner' }, 'unowned'),
        h('span', { 'data-field': 'committed' }, p.committed_offset < 0 ? 'none' : fmt.num(p.committed_offset)),
        h('span', { 'data-field': 'hw' }, fmt.num(p.high_watermark)),
        h('span', { 'data-field': 'lag', class: p.lag > 0 ? 'warn-text' : null }, fmt.num(p.lag)),
        fmt.duration(p.lag_ms),
        h('span', { 'data-field': 'head_attempts', class: p.head_attempts > 0 ? 'bad-text' : null }, String(p.head_attempts)),
        h('span', { 'data-field': 'in_flight' }, String(p.in_flight || 0)),
        p.last_error ? h('span', { 'data-field': 'last_error', title: p.last_error.error }, lastErrorText(p.last_error))
          : h('span', { class: 'dim', 'data-field': 'last_error' }, 'none'),
      ],
    })), 'No partitions yet: the rows appear once the group has committed offsets.'));

    const kv = (k, ...v) => [h('dt', null, k), h('dd', null, ...v)];
    const b = st.batch;
    const r = st.retry;
    replace(settings, h('dl', { class: 'kv' },
      kv('Endpoint', h('span', { 'data-field': 'endpoint' }, st.endpoint)),
      kv('Topics', st.topics.map((t, i) => [i ? ', ' : null, h('a', { href: `#/topics/${encodeURIComponent(t)}` }, t)])),
      kv('Format', h('span', { 'data-field': 'format' }, st.format)),
      kv('Event type', st.type),
      kv('Ordering', h('span', { 'data-field': 'ordering' }, st.ordering), st.ordering === 'partition' ? null : ` · at most ${st.max_in_flight} in flight per partition`),
      kv('Batch', b.max_records > 1 ? `up to ${fmt.num(b.max_records)} records, ${fmt.bytes(b.max_bytes)}, waiting ${fmt.duration(b.max_wait_ms)}` : 'one record a request'),
      kv('Timeout', fmt.duration(st.timeout_ms)),
      kv('Retry', `${r.max_attempts} attempts, backoff ${fmt.duration(r.min_backoff_ms)} to ${fmt.duration(r.max_backoff_ms)}, Retry-After up to ${fmt.duration(r.retry_after_max_ms)}`),
      kv('Dead letters', h('a', { href: `#/topics/${encodeURIComponent(st.dead_letter.topic)}`, 'data-field': 'dead_letter' }, st.dead_letter.topic)),
      kv('Rate', st.rate.max_per_second > 0 ? `${st.rate.max_per_second} requests/s` : 'unbounded'),
      kv('Disabled after', `${fmt.duration(st.outage.disable_after_ms)} of outage`),
      kv('Group', h('a', { href: `#/groups/${encodeURIComponent(st.group)}` }, st.group)),
      kv('Created', fmt.timestamp(st.created_ms)),
      kv('Updated', fmt.timestamp(st.updated_ms))));
  };

  return {
    el,
    every: 2000,
    async refresh() { render(await api.push(name)); },
  };
}

// showSecret shows a rotated secret once, in a dialog that removes it from
// the page when closed.
function showSecret(secret, grace) {
  const value = h('input', { id: 'push-secret-value', type: 'text', readonly: true, spellcheck: 'false', autocomplete: 'off', value: secret });
  const copy = h('button', { type: 'button', class: 'ghost' }, 'Copy');
  const done = h('button', { type: 'button', id: 'push-secret-done' }, 'I have stored it');
  const dlg = h('dialog', { id: 'push-secret', class: 'confirm' },
    h('h2', null, 'The new signing secret'),
    h('p', { class: 'warn-text' }, 'This is the only time it is shown: store it where the endpoint verifies signatures now. ' +
      `The previous secrets keep signing for ${grace}.`),
    value,
    h('div', { class: 'buttons' }, copy, done));
  copy.addEventListener('click', async () => {
    value.select();
    try {
      await navigator.clipboard.writeText(secret);
      copy.textContent = 'Copied';
    } catch {
      copy.textContent = 'Select and copy';
    }
  });
  const close = () => { dlg.close(); dlg.remove(); };
  done.addEventListener('click', close);
  dlg.addEventListener('cancel', e => { e.preventDefault(); close(); });
  document.body.appendChild(dlg);
  dlg.showModal();
  value.select();
}
