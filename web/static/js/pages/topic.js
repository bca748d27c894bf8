// One topic: totals, the partition table, configs.
import { h, replace, table, tile, badge } from '../dom.js';
import { api } from '../api.js';
import { observe, topicTotals } from '../rates.js';
import { deleteTopic } from './topics.js';
import * as fmt from '../format.js';

// replicaBadges marks each replica: the leader, in sync, lagging (in the ISR
// but behind the leader's log end as of its last fetch) or out of sync.
function replicaBadges(p) {
  const leo = new Map(p.followers.map(f => [f.broker, f.log_end_offset]));
  const offline = new Map((p.offline_replicas || []).map(o => [o.broker, o]));
  return p.replicas.map(id => {
    const o = offline.get(id);
    if (o && o.reason === 'storage_error') {
      const b = badge(String(id), 'bad failed', `broker ${id}: offline, its log failed: ${o.error}`);
      b.dataset.failed = id;
      return b;
    }
    if (o) return badge(String(id), 'bad', `broker ${id}: offline (broker down)`);
    if (id === p.leader && !p.offline) return badge(String(id), 'leader', `broker ${id}: leader`);
    if (!p.isr.includes(id)) return badge(String(id), 'bad', `broker ${id}: out of sync (not in the ISR)`);
    const l = leo.get(id);
    if (l !== undefined && p.log_end_offset >= 0 && (l < 0 || l < p.log_end_offset)) {
      const behind = l < 0 ? 'has not fetched yet' : `${fmt.num(p.log_end_offset - l)} behind the leader`;
      return badge(String(id), 'warn', `broker ${id}: in the ISR, lagging: ${behind}`);
    }
    return badge(String(id), 'ok', `broker ${id}: in sync`);
  });
}

export default function topic(params, ctl) {
  const name = params.name;
  const tiles = h('div', { class: 'tiles', id: 'topic-tiles' });
  const parts = h('div', { id: 'partitions-table' });
  const configs = h('div');
  const el = h('div', { class: 'page topic' },
    h('div', { class: 'crumbs' }, h('a', { href: '#/topics' }, 'Topics'), ' / '),
    h('div', { class: 'page-head' }, h('h1', { id: 'topic-name' }, name),
      h('div', { class: 'actions' },
        h('a', { class: 'button', href: `#/messages?topic=${encodeURIComponent(name)}` }, 'Browse messages'),
        h('button', { type: 'button', class: 'danger', onclick: async () => { await deleteTopic(name, { refreshNow() { location.hash = '#/topics'; } }); } }, 'Delete'))),
    tiles,
    h('section', { class: 'panel flush' }, h('h2', null, 'Partitions',
      h('span', { class: 'sub' }, 'replicas: ', badge('1', 'leader'), 'leader ', badge('2', 'ok'), 'in sync ', badge('3', 'warn'), 'lagging ', badge('4', 'bad'), 'out of sync or offline')), parts),
    h('section', { class: 'panel' }, h('h2', null, 'Configs'), configs));

  const render = t => {
    const now = Date.now();
    const s = topicTotals(t);
    const rate = observe('topic:' + t.name, s.unknown ? -1 : s.hw, now);
    const [lv, lu] = fmt.bytesParts(s.local);
    const [rv, ru] = fmt.bytesParts(s.remote);
    replace(tiles,
      tile('Partitions', String(t.partitions.length), null, { id: 'tile-partitions' }),
      tile('Replication', String(t.replication_factor), null, { id: 'tile-rf', hint: `min ISR ${t.configs['min.insync.replicas'] || (t.replication_factor >= 3 ? 2 : 1)}` }),
      tile('Records', fmt.num(s.records), null, { id: 'tile-records', hint: 'readable, below the HW' }),
      tile('Rate', rate === null ? '—' : fmt.short(rate), 'rec/s', { id: 'tile-rate' }),
      tile('Size', lv, lu, { id: 'tile-size', hint: 'on the leaders\' disks' }),
      tile('Remote', rv, ru, { id: 'tile-remote', hint: 'in the object store' }),
      tile('Under-replicated', String(s.underReplicated), null, { id: 'tile-urp', state: s.underReplicated ? 'warn' : 'ok', hint: s.offline ? `${s.offline} offline` : 'none offline' }));
    const rows = t.partitions.map(p => {
      const prate = observe(`p:${t.name}/${p.partition}`, p.high_watermark, now);
      return {
        attrs: { 'data-partition': p.partition },
        cells: [
          h('b', null, String(p.partition)),
          p.offline ? badge('offline', 'bad') : h('span', { 'data-field': 'leader' }, String(p.leader)),
          h('span', { 'data-field': 'replicas' }, replicaBadges(p)),
          h('span', { 'data-field': 'isr', class: p.isr.length < p.replicas.length ? 'warn-text' : null }, p.isr.join(', ') || '—'),
          h('span', { 'data-field': 'log_start_offset' }, fmt.offset(p.log_start_offset)),
          h('span', { 'data-field': 'local_start_offset' }, fmt.offset(p.local_start_offset)),
          h('span', { 'data-field': 'remote_end_offset' }, p.remote_end_offset < 0 ? '—' : fmt.offset(p.remote_end_offset)),
          h('span', { 'data-field': 'high_watermark' }, fmt.offset(p.high_watermark)),
          h('span', { 'data-field': 'log_end_offset' }, fmt.offset(p.log_end_offset)),
          h('span', { 'data-field': 'local_bytes', 'data-bytes': p.local_bytes, title: `${fmt.num(p.local_bytes)} bytes` }, fmt.bytes(p.local_bytes)),
          h('span', { 'data-field': 'remote_bytes', 'data-bytes': p.remote_bytes, title: `${fmt.num(p.remote_bytes)} bytes` }, fmt.bytes(p.remote_bytes)),
          fmt.rate(prate),
          h('a', { href: `#/messages?topic=${encodeURIComponent(t.name)}&partition=${p.partition}` }, 'Browse'),
        ],
      };
    });
    replace(parts, table([
      { label: 'P' }, { label: 'Leader' }, { label: 'Replicas' }, { label: 'ISR' },
      { label: 'Log start', num: true, title: 'first readable offset' },
      { label: 'Local start', num: true, title: 'first offset on the leader\'s disk' },
      { label: 'Remote end', num: true, title: 'offset after the last segment in the object store' },
      { label: 'HW', num: true, title: 'high watermark: consumers read below it' },
      { label: 'LEO', num: true, title: 'log end offset on the leader' },
      { label: 'Local', num: true }, { label: 'Remote', num: true }, { label: 'Rate', num: true }, { label: '' },
    ], rows, 'No partitions.'));
    const cfg = Object.entries(t.configs).sort();
    replace(configs, cfg.length
      ? h('dl', { class: 'kv' }, cfg.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]))
      : h('p', { class: 'note' }, 'All defaults.'));
  };
  return {
    el,
    every: 2000,
    async refresh() { render(await api.topic(name)); },
  };
}
