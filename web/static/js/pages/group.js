// One group: lag over time, members and their assignment, lag per partition.
import { h, replace, table, tile } from '../dom.js';
import { api } from '../api.js';
import { timeChart, palette } from '../chart.js';
import { stateBadge, lagTotals } from './groups.js';
import * as fmt from '../format.js';

const keepMs = 15 * 60 * 1000;
const histories = new Map(); // group -> [{t, total, byTopic: {topic: lag}}], kept while the dashboard is open

export default function group(params) {
  const name = params.name;
  const tiles = h('div', { class: 'tiles', id: 'group-tiles' });
  const chartBox = h('div');
  const members = h('div', { id: 'members-table' });
  const parts = h('div', { id: 'group-partitions' });
  const el = h('div', { class: 'page group' },
    h('div', { class: 'crumbs' }, h('a', { href: '#/groups' }, 'Groups'), ' / '),
    h('div', { class: 'page-head' }, h('h1', { id: 'group-name' }, name)),
    tiles,
    h('section', { class: 'panel' }, h('h2', null, 'Lag', h('span', { class: 'sub' }, 'records behind the high watermark, while this dashboard is open')), chartBox),
    h('section', { class: 'panel flush' }, h('h2', null, 'Members'), members),
    h('section', { class: 'panel flush' }, h('h2', null, 'Partitions'), parts));
  if (!histories.has(name)) histories.set(name, []);
  const hist = histories.get(name);
  let chart = null;
  let chartTopics = null;

  const render = d => {
    const now = Date.now();
    const t = lagTotals(d);
    const byTopic = {};
    for (const p of d.partitions) if (p.lag >= 0) byTopic[p.topic] = (byTopic[p.topic] || 0) + p.lag;
    hist.push({ t: now, total: t.lag, byTopic });
    while (hist.length && hist[0].t < now - keepMs) hist.shift();

    replace(tiles,
      h('div', { class: 'tile', id: 'tile-state' }, h('div', { class: 'label' }, 'State'), h('div', { class: 'value' }, stateBadge(d.state)),
        h('div', { class: 'hint' }, `epoch ${d.group_epoch}${d.assignor ? ' · ' + d.assignor : ''}`)),
      tile('Members', String(d.members.length), null, { id: 'tile-members' }),
      tile('Partitions', String(d.partitions.length), null, { id: 'tile-group-partitions', hint: t.topics.join(', ') }),
      tile('Lag', fmt.num(t.lag), 'rec', { id: 'tile-lag', state: t.lag > 0 ? 'warn' : 'ok' }),
      tile('Time lag', fmt.duration(t.lagMs), null, { id: 'tile-lag-ms', hint: 'oldest unconsumed record' }));

    // The chart: the total, and each topic when there are several.
    const topics = t.topics.length > 1 ? t.topics.slice(0, palette.length - 1) : [];
    const key = topics.join(',');
    if (el.isConnected && (!chart || chartTopics !== key)) {
      if (chart) chart.destroy();
      chartTopics = key;
      chart = timeChart(chartBox, [{ label: 'total', color: palette[0] }, ...topics.map((tp, i) => ({ label: tp, color: palette[i + 1] }))],
        { fmt: v => fmt.short(v) + ' rec', windowSec: 900 });
    }
    if (chart) chart.set(hist.map(s => [s.t, s.total, ...topics.map(tp => s.byTopic[tp] ?? null)]));

    const owned = new Map();
    for (const p of d.partitions) if (p.owner) owned.set(p.owner, (owned.get(p.owner) || 0) + Math.max(0, p.lag));
    replace(members, table([
      { label: 'Member' }, { label: 'Kind' }, { label: 'Epoch', num: true }, { label: 'Assignment' },
      { label: 'Lag', num: true }, { label: 'Last seen', num: true },
    ], d.members.map(m => ({
      attrs: { 'data-member': m.member_id },
      cells: [
        h('span', { class: 'mono', title: m.member_id }, m.instance_id ? `${m.instance_id} (static)` : m.member_id.slice(0, 12) + (m.member_id.length > 12 ? '…' : '')),
        m.kind, String(m.member_epoch),
        h('span', { 'data-field': 'assignment' }, m.assignment.map(a => `${a.topic}/${a.partition}`).join(', ') || '—'),
        fmt.num(owned.get(m.member_id) || 0),
        fmt.ago(m.last_seen_ms),
      ],
    })), 'No members: the group only holds committed offsets.'));

    const sorted = [...d.partitions].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    replace(parts, table([
      { label: 'Topic' }, { label: 'P', num: true }, { label: 'Owner' }, { label: 'Committed', num: true },
      { label: 'HW', num: true }, { label: 'Lag', num: true }, { label: 'Time lag', num: true },
    ], sorted.map(p => ({
      attrs: { 'data-topic': p.topic, 'data-partition': p.partition },
      cells: [
        h('a', { href: `#/topics/${encodeURIComponent(p.topic)}` }, p.topic), String(p.partition),
        p.owner ? h('span', { class: 'mono', title: p.owner }, p.owner.slice(0, 12) + (p.owner.length > 12 ? '…' : '')) : h('span', { class: 'dim' }, 'unowned'),
        h('span', { 'data-field': 'committed' }, p.committed_offset < 0 ? 'none' : fmt.num(p.committed_offset)),
        h('span', { 'data-field': 'hw' }, fmt.num(p.high_watermark)),
        h('span', { 'data-field': 'lag', class: p.lag > 0 ? 'warn-text' : null }, fmt.num(p.lag)),
        fmt.duration(p.lag_ms),
      ],
    })), 'No partitions.'));
  };
  return {
    el,
    every: 2000,
    async refresh() { render(await api.group(name)); },
    destroy() { if (chart) chart.destroy(); },
  };
}
