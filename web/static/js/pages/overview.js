// Overview: brokers, partition health tiles, produce and fetch rates.
import { h, replace, table, tile, badge } from '../dom.js';
import { sampler } from '../sampler.js';
import { timeChart, palette } from '../chart.js';
import * as fmt from '../format.js';

export default function overview() {
  const tiles = h('div', { class: 'tiles', id: 'overview-tiles' });
  const recChart = h('div');
  const byteChart = h('div');
  const brokers = h('div', { id: 'brokers' });
  const el = h('div', { class: 'page overview' },
    h('div', { class: 'page-head' }, h('h1', null, 'Cluster overview')),
    tiles,
    h('div', { class: 'grid two' },
      h('section', { class: 'panel' }, h('h2', null, 'Records', h('span', { class: 'sub' }, 'per second, last 10 min')), recChart),
      h('section', { class: 'panel' }, h('h2', null, 'Bytes', h('span', { class: 'sub' }, 'per second, last 10 min')), byteChart)),
    h('section', { class: 'panel flush' }, h('h2', null, 'Brokers'), brokers));

  let charts = null;
  const render = () => {
    const info = sampler.info;
    if (!info) return;
    if (!charts && el.isConnected) {
      charts = {
        recs: timeChart(recChart, [{ label: 'produce', color: palette[0] }, { label: 'fetch', color: palette[1] }], { fmt: fmt.rate }),
        bytes: timeChart(byteChart, [{ label: 'produce', color: palette[0] }, { label: 'fetch', color: palette[1] }], { fmt: fmt.byteRate }),
      };
    }
    if (charts) {
      const hist = sampler.history;
      charts.recs.set(hist.map(p => [p.t, p.produceRecs, p.fetchRecs]));
      charts.bytes.set(hist.map(p => [p.t, p.produceBytes, p.fetchBytes]));
    }
    const alive = info.brokers.filter(b => b.alive).length;
    const p = info.partitions;
    const sum = f => info.brokers.reduce((a, b) => a + Math.max(0, b[f]), 0);
    const lastRate = sampler.history.length ? sampler.history[sampler.history.length - 1] : null;
    const [localV, localU] = fmt.bytesParts(sum('local_bytes'));
    replace(tiles,
      tile('Brokers alive', `${alive}/${info.brokers.length}`, null,
        { id: 'tile-brokers', state: alive < info.brokers.length ? 'bad' : 'ok', hint: info.controller >= 0 ? `controller ${info.controller}` : 'no controller' }),
      tile('Under-replicated', fmt.num(p.under_replicated), null,
        { id: 'tile-under-replicated', state: p.under_replicated ? 'warn' : 'ok', hint: `of ${fmt.num(p.total)} partitions` }),
      tile('Under min ISR', fmt.num(p.under_min_isr), null,
        { id: 'tile-under-min-isr', state: p.under_min_isr ? 'bad' : 'ok', hint: 'acks=all fails here' }),
      tile('Offline', fmt.num(p.offline), null,
        { id: 'tile-offline', state: p.offline ? 'bad' : 'ok', hint: 'no live leader' }),
      tile('Produce', lastRate ? fmt.short(lastRate.produceRecs) : '—', 'rec/s',
        { id: 'tile-produce', hint: lastRate ? fmt.byteRate(lastRate.produceBytes) : 'measuring…' }),
      tile('Fetch', lastRate ? fmt.short(lastRate.fetchRecs) : '—', 'rec/s',
        { id: 'tile-fetch', hint: lastRate ? fmt.byteRate(lastRate.fetchBytes) : 'measuring…' }),
      tile('Topics', fmt.num(info.topics), null, { id: 'tile-topics', hint: `${fmt.num(p.total)} partitions` }),
      tile('On disk', localV, localU, { id: 'tile-stored', hint: `all replicas · ${fmt.bytes(sum('remote_bytes'))} in object store` }));
    const rows = info.brokers.map(b => ({
      attrs: { 'data-broker': b.id },
      cells: [
        h('b', null, String(b.id)),
        h('span', { 'data-field': 'status' }, b.alive ? badge('alive', 'ok') : badge('down', 'bad'),
          (b.failed_logs || []).length ? badge(`${b.failed_logs.length} failed ${b.failed_logs.length === 1 ? 'log' : 'logs'}`, 'bad',
            b.failed_logs.map(f => `${f.topic}/${f.partition}: ${f.error}`).join('\n')) : null),
        b.controller ? badge('controller', 'leader') : h('span', { class: 'dim' }, '—'),
        h('span', { 'data-field': 'partitions_led' }, fmt.num(b.partitions_led)),
        h('span', { 'data-field': 'replicas' }, fmt.num(b.replicas)),
        h('span', { 'data-field': 'local_bytes', 'data-bytes': b.local_bytes, title: `${fmt.num(b.local_bytes)} bytes` }, fmt.bytes(b.local_bytes)),
        h('span', { 'data-field': 'remote_bytes', 'data-bytes': b.remote_bytes, title: `${fmt.num(b.remote_bytes)} bytes` }, fmt.bytes(b.remote_bytes)),
        fmt.short(b.produced_records < 0 ? null : b.produced_records) + (b.produced_records >= 0 ? ' rec' : ''),
        fmt.short(b.fetched_records < 0 ? null : b.fetched_records) + (b.fetched_records >= 0 ? ' rec' : ''),
        h('span', { class: 'mono dim' }, b.address || '—'),
      ],
    }));
    replace(brokers, table([
      { label: 'Broker' }, { label: 'Status' }, { label: 'Role' },
      { label: 'Leads', num: true, title: 'partitions this broker leads' },
      { label: 'Replicas', num: true, title: 'partition replicas on this broker' },
      { label: 'Local', num: true, title: 'bytes on the broker\'s disk' },
      { label: 'Remote', num: true, title: 'bytes in the object store, of partitions it leads' },
      { label: 'Produced', num: true, title: 'records appended as leader since the broker started' },
      { label: 'Fetched', num: true, title: 'records served to consumers since the broker started' },
      { label: 'Address' },
    ], rows, 'No brokers registered.'));
  };
  const unsubscribe = sampler.subscribe(render);
  return {
    el,
    every: 2000,
    async refresh() {
      render();
      if (sampler.error) throw sampler.error;
    },
    destroy() {
      unsubscribe();
      if (charts) { charts.recs.destroy(); charts.bytes.destroy(); }
    },
  };
}
