// Groups: every consumer group with its state, members and lag.
import { h, replace, table, badge } from '../dom.js';
import { api } from '../api.js';
import * as fmt from '../format.js';

const maxDescribed = 50;

export function stateBadge(state) {
  return badge(state, state === 'stable' ? 'ok' : state === 'empty' ? null : 'warn');
}

// lagTotals sums a group description's lag: records and the worst time lag.
export function lagTotals(d) {
  let lag = 0;
  let lagMs = 0;
  let unknown = false;
  for (const p of d.partitions) {
    if (p.lag < 0) unknown = true; else lag += p.lag;
    if (p.lag_ms > lagMs) lagMs = p.lag_ms;
  }
  return { lag, lagMs, unknown, topics: [...new Set(d.partitions.map(p => p.topic))].sort() };
}

export default function groups() {
  const list = h('div', { id: 'groups-table' });
  const count = h('span', { class: 'sub' });
  const el = h('div', { class: 'page groups' },
    h('div', { class: 'page-head' }, h('h1', null, 'Consumer groups', count)),
    h('section', { class: 'panel flush' }, list));
  return {
    el,
    every: 3000,
    async refresh() {
      const l = await api.groups();
      const ds = await Promise.all(l.groups.slice(0, maxDescribed).map(g => api.group(g.group).catch(() => null)));
      count.textContent = `${l.groups.length} group${l.groups.length === 1 ? '' : 's'}`;
      const rows = l.groups.map((g, i) => {
        const d = ds[i];
        const t = d ? lagTotals(d) : null;
        return {
          attrs: { 'data-group': g.group },
          cells: [
            h('a', { href: `#/groups/${encodeURIComponent(g.group)}` }, g.group),
            stateBadge(g.state),
            h('span', { 'data-field': 'members' }, String(g.members)),
            t ? t.topics.join(', ') || '—' : '—',
            h('span', { 'data-field': 'lag', class: t && t.lag > 0 ? 'warn-text' : null }, t ? fmt.num(t.lag) + (t.unknown ? '+' : '') : '—'),
            t ? fmt.duration(t.lagMs) : '—',
          ],
        };
      });
      replace(list, table([
        { label: 'Group' }, { label: 'State' }, { label: 'Members', num: true }, { label: 'Topics' },
        { label: 'Lag', num: true, title: 'unconsumed records, all partitions' },
        { label: 'Time lag', num: true, title: 'age of the oldest unconsumed record' },
      ], rows, 'No consumer groups yet. Groups appear when a consumer joins one.'));
    },
  };
}
