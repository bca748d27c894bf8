// Push: every push subscription with its state, endpoint and lag.
import { h, replace, table, badge } from '../dom.js';
import { api } from '../api.js';
import * as fmt from '../format.js';

const maxDescribed = 50;

// pushStateBadge marks a subscription's state: active, paused, backing_off
// (active, but its endpoint is down) or disabled.
export function pushStateBadge(state, reason) {
  const cls = { active: 'ok', paused: 'info', backing_off: 'warn', disabled: 'bad' }[state] || null;
  return badge(state === 'backing_off' ? 'backing off' : state, cls, reason || null);
}

// pushLag sums a subscription status's lag: records and the worst time lag.
export function pushLag(st) {
  let lag = 0;
  let lagMs = 0;
  let unknown = false;
  for (const p of st.partitions) {
    if (p.lag < 0) unknown = true; else lag += p.lag;
    if (p.lag_ms > lagMs) lagMs = p.lag_ms;
  }
  return { lag, lagMs, unknown };
}

export default function pushes() {
  const list = h('div', { id: 'push-table' });
  const count = h('span', { class: 'sub' });
  const el = h('div', { class: 'page pushes' },
    h('div', { class: 'page-head' }, h('h1', null, 'Push subscriptions', count)),
    h('section', { class: 'panel flush' }, list));
  return {
    el,
    every: 3000,
    async refresh() {
      const l = await api.pushes();
      const subs = l.subscriptions;
      const sts = await Promise.all(subs.slice(0, maxDescribed).map(s => api.push(s.name).catch(() => null)));
      count.textContent = `${subs.length} subscription${subs.length === 1 ? '' : 's'}`;
      const rows = subs.map((s, i) => {
        const lag = sts[i] ? pushLag(sts[i]) : null;
        return {
          attrs: { 'data-push': s.name, 'data-state': s.state },
          cells: [
            h('a', { href: `#/push/${encodeURIComponent(s.name)}` }, s.name),
            h('span', { 'data-field': 'state' }, pushStateBadge(s.state, s.reason),
              s.reason ? h('span', { class: 'dim', 'data-field': 'reason' }, ' ' + s.reason) : null),
            h('span', { 'data-field': 'topics' }, s.topics.map((t, k) => [k ? ', ' : null, h('a', { href: `#/topics/${encodeURIComponent(t)}` }, t)])),
            h('span', { class: 'mono', 'data-field': 'endpoint', title: s.endpoint }, s.endpoint),
            h('span', { 'data-field': 'format' }, s.format),
            h('span', { 'data-field': 'ordering' }, s.ordering),
            h('span', { 'data-field': 'lag', class: lag && lag.lag > 0 ? 'warn-text' : null }, lag ? fmt.num(lag.lag) + (lag.unknown ? '+' : '') : '—'),
            lag ? fmt.duration(lag.lagMs) : '—',
          ],
        };
      });
      replace(list, table([
        { label: 'Name' }, { label: 'State' }, { label: 'Topics' }, { label: 'Endpoint' }, { label: 'Format' },
        { label: 'Ordering' },
        { label: 'Lag', num: true, title: 'records not delivered yet, all partitions' },
        { label: 'Time lag', num: true, title: 'age of the oldest record not delivered yet' },
      ], rows, 'No push subscriptions yet: create one with sluice push create, or POST /v1/push.'));
    },
  };
}
