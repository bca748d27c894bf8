// Messages: browse a partition (or all) from earliest, latest, an offset or a
// time; tail live over Server-Sent Events; filter; export NDJSON; produce.
import { h, replace } from '../dom.js';
import { api } from '../api.js';
import { openTail } from '../tail.js';
import { parseFilters, ndjson, recordRow } from '../records.js';
import * as fmt from '../format.js';

const maxKept = 20000;      // records kept in the page, oldest dropped first
const maxShown = 2000;      // rows drawn at once
const maxPartitionsAll = 64; // browsing "all partitions" covers at most this many

export default function messages(params) {
  const topicSel = h('select', { id: 'msg-topic', 'aria-label': 'topic' });
  const partSel = h('select', { id: 'msg-partition', 'aria-label': 'partition' });
  const fromSel = h('select', { id: 'msg-from', 'aria-label': 'start from' },
    h('option', { value: 'latest' }, 'Latest'), h('option', { value: 'earliest' }, 'Earliest'),
    h('option', { value: 'offset' }, 'Offset'), h('option', { value: 'timestamp' }, 'Time'));
  const offsetIn = h('input', { id: 'msg-offset', type: 'number', min: 0, placeholder: 'offset', hidden: true });
  const timeIn = h('input', { id: 'msg-time', type: 'datetime-local', step: 1, hidden: true });
  const limitSel = h('select', { id: 'msg-limit', 'aria-label': 'how many' },
    [50, 100, 500, 1000].map(n => h('option', { value: n, selected: n === 100 }, String(n))));
  const loadBtn = h('button', { type: 'button', id: 'msg-load' }, 'Load');
  const tailBtn = h('button', { type: 'button', id: 'msg-tail', class: 'ghost' }, 'Live tail');
  const dlBtn = h('button', { type: 'button', id: 'msg-download', class: 'ghost' }, 'Download NDJSON');
  const fKey = h('input', { id: 'filter-key', type: 'search', placeholder: 'key contains' });
  const fHeader = h('input', { id: 'filter-header', type: 'search', placeholder: 'header, or name=value' });
  const fValue = h('input', { id: 'filter-value', type: 'search', placeholder: 'value contains' });
  const counts = h('div', { class: 'counts', id: 'msg-counts' });
  const list = h('div', { class: 'records', id: 'records' });
  const produce = produceForm(() => topicSel.value);

  const el = h('div', { class: 'page messages' },
    h('div', { class: 'page-head' }, h('h1', null, 'Messages')),
    h('section', { class: 'panel flush' },
      h('div', { class: 'toolbar' },
        h('label', null, 'Topic', topicSel), h('label', null, 'Partition', partSel),
        h('label', null, 'From', fromSel), offsetIn, timeIn, h('label', null, 'Records', limitSel),
        loadBtn, tailBtn, h('span', { class: 'spacer' }), dlBtn),
      h('div', { class: 'toolbar' },
        h('label', { class: 'grow' }, 'Key', fKey), h('label', { class: 'grow' }, 'Header', fHeader), h('label', { class: 'grow' }, 'Value', fValue)),
      counts,
      list),
    produce.el);

  // State: the records in the page, how they came, and the live sockets.
  let topics = [];
  let records = [];     // [{partition, offset, timestamp, key..., value..., headers}]
  let mode = 'idle';    // idle | browse | tail
  let tail = null;      // {stream, received, open, want}
  let freshFrom = Infinity; // records at or after this index are highlighted
  let status = '';
  let drawTimer = null;

  const selectedPartitions = () => {
    const t = topics.find(x => x.name === topicSel.value);
    if (!t) return [];
    if (partSel.value === 'all') return t.partitions.slice(0, maxPartitionsAll).map(p => p.partition);
    return [Number(partSel.value)];
  };

  const filtered = () => {
    const f = parseFilters(fKey.value, fHeader.value, fValue.value);
    return f ? records.filter(f) : records;
  };

  const draw = () => {
    drawTimer = null;
    const shown = filtered();
    const ordered = mode === 'tail' ? shown.slice(-maxShown).reverse() : shown.slice(0, maxShown);
    const freshSet = new Set(records.slice(freshFrom));
    replace(list,
      h('div', { class: 'rec head' }, h('span', null, 'Offset'), h('span', { class: 'part' }, 'Part.'), h('span', null, 'Time'),
        h('span', null, 'Key · headers'), h('span', null, 'Value')),
      ordered.length ? ordered.map(r => recordRow(r, freshSet.has(r)))
        : h('div', { class: 'note', style: 'padding:24px 16px' }, mode === 'tail' ? 'Waiting for records…' : mode === 'browse' ? 'No records here.' : 'Pick a topic and Load, or start a live tail.'));
    freshFrom = records.length;
    replace(counts,
      mode === 'tail' && tail ? h('span', { id: 'tail-state', 'data-open': tail.open, 'data-want': tail.want, 'data-transport': 'sse' },
        h('span', { class: 'live-dot' }), 'Live: ', h('b', { id: 'tail-received' }, fmt.num(tail.received)), ' received · ',
        `${tail.open}/${tail.want} partitions streaming`) : null,
      h('span', null,
        shown.length !== records.length ? [h('b', null, fmt.num(shown.length)), ' of '] : null,
        h('b', { id: 'loaded-count' }, fmt.num(records.length)), records.length === 1 ? ' record' : ' records',
        shown.length !== records.length ? ' match the filters' : null,
        Math.min(shown.length, maxShown) < shown.length ? ` · the ${mode === 'tail' ? 'newest' : 'first'} ${fmt.num(maxShown)} shown` : null),
      status ? h('span', { class: 'error-text', id: 'msg-status' }, status) : null);
  };
  const scheduleDraw = () => { if (!drawTimer) drawTimer = setTimeout(draw, 100); };
  for (const f of [fKey, fHeader, fValue]) f.addEventListener('input', scheduleDraw);

  const syncURL = () => {
    const q = new URLSearchParams({ topic: topicSel.value, partition: partSel.value });
    history.replaceState(null, '', `#/messages?${q}`);
  };

  const fillPartitions = keep => {
    const t = topics.find(x => x.name === topicSel.value);
    const n = t ? t.partitions.length : 0;
    replace(partSel, h('option', { value: 'all' }, n > maxPartitionsAll ? `All (first ${maxPartitionsAll})` : 'All'),
      Array.from({ length: n }, (_, i) => h('option', { value: i }, String(i))));
    partSel.value = keep !== undefined && keep !== null && (keep === 'all' || Number(keep) < n) ? String(keep) : 'all';
  };

  fromSel.addEventListener('change', () => {
    offsetIn.hidden = fromSel.value !== 'offset';
    timeIn.hidden = fromSel.value !== 'timestamp';
  });
  topicSel.addEventListener('change', () => { stopTail(); fillPartitions('all'); syncURL(); records = []; mode = 'idle'; draw(); });
  partSel.addEventListener('change', () => { stopTail(); syncURL(); });

  // browse reads up to limit records of each selected partition from the
  // chosen start, then merges them by time.
  const browse = async () => {
    stopTail();
    const topic = topicSel.value;
    const limit = Number(limitSel.value);
    status = '';
    loadBtn.disabled = true;
    try {
      const per = await Promise.all(selectedPartitions().map(p => readPartition(topic, p, fromSel.value, offsetIn.value, timeIn.value, limit)));
      let all = per.flat().sort((a, b) => a.timestamp - b.timestamp || a.partition - b.partition || a.offset - b.offset);
      all = fromSel.value === 'latest' ? all.slice(-limit) : all.slice(0, limit);
      records = all;
      freshFrom = Infinity;
      mode = 'browse';
    } catch (e) {
      status = `${e.code || 'ERROR'}: ${e.message}`;
    } finally {
      loadBtn.disabled = false;
    }
    draw();
  };
  loadBtn.addEventListener('click', browse);

  // The live tail (js/tail.js): the selected partition, or all of them,
  // from the click on; the newest maxKept records are kept.
  const startTail = () => {
    stopTail();
    const topic = topicSel.value;
    const t = topics.find(x => x.name === topic);
    const partition = partSel.value === 'all' ? 'all' : Number(partSel.value);
    records = [];
    freshFrom = 0;
    status = '';
    mode = 'tail';
    const my = { stream: null, received: 0, open: 0, want: partition === 'all' ? (t ? t.partitions.length : 0) : 1 };
    tail = my;
    tailBtn.textContent = 'Stop tail';
    tailBtn.classList.add('danger');
    draw();
    my.stream = openTail(topic, partition, {
      partitions: my.want,
      keep: maxKept,
      onRecords: recs => {
        if (tail !== my) return;
        for (const r of recs) records.push(r);
        my.received += recs.length;
        if (records.length > maxKept) { const n = records.length - maxKept; records.splice(0, n); freshFrom = Math.max(0, freshFrom - n); }
        scheduleDraw();
      },
      onChange: s => {
        if (tail !== my) return;
        my.open = s.open;
        my.want = s.want;
        status = s.error;
        scheduleDraw();
      },
    });
  };
  const stopTail = () => {
    if (!tail) return;
    tail.stream.close();
    tail = null;
    if (mode === 'tail') mode = 'browse';
    tailBtn.textContent = 'Live tail';
    tailBtn.classList.remove('danger');
  };
  tailBtn.addEventListener('click', () => { if (tail) { stopTail(); draw(); } else startTail(); });

  dlBtn.addEventListener('click', () => {
    const blob = new Blob([ndjson(topicSel.value, filtered())], { type: 'application/x-ndjson' });
    const a = h('a', { href: URL.createObjectURL(blob), download: `${topicSel.value || 'records'}-${Date.now()}.ndjson` });
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  });

  let first = true;
  let topicsSig = null;
  return {
    el,
    every: 5000,
    async refresh() {
      const list = await api.topics();
      topics = list.topics.filter(t => !t.name.startsWith('__') || t.name === params.topic);
      // Rebuild the selects only when topics or partition counts changed,
      // so a refresh never resets what the user is picking.
      const sig = topics.map(t => `${t.name}:${t.partitions.length}`).join(',');
      if (sig !== topicsSig) {
        topicsSig = sig;
        const keep = topicSel.value || params.topic;
        replace(topicSel, topics.length ? topics.map(t => h('option', { value: t.name }, t.name)) : h('option', { value: '' }, 'no topics'));
        if (keep && topics.some(t => t.name === keep)) topicSel.value = keep;
        fillPartitions(first ? params.partition : partSel.value);
      }
      produce.setPartitions(topics.find(t => t.name === topicSel.value));
      if (first) { first = false; draw(); }
    },
    destroy() { stopTail(); clearTimeout(drawTimer); },
  };
}

// readPartition reads up to limit records of one partition from a start:
// latest (the last limit records), earliest, an offset or a time.
async function readPartition(topic, p, from, offsetValue, timeValue, limit) {
  let start;
  let end = Infinity;
  if (from === 'latest') {
    const o = await api.offsets(topic, p, 'latest');
    start = Math.max(o.log_start_offset, o.high_watermark - limit);
    end = o.high_watermark;
  } else if (from === 'earliest') {
    start = 'earliest';
  } else if (from === 'offset') {
    start = Math.max(0, Math.floor(Number(offsetValue) || 0));
  } else {
    const ms = timeValue ? new Date(timeValue).getTime() : Date.now();
    const o = await api.offsets(topic, p, String(ms));
    if (o.offset < 0) return [];
    start = o.offset;
  }
  const out = [];
  for (let i = 0; i < 50 && out.length < limit; i++) {
    if (typeof start === 'number' && start >= end) break;
    const res = await api.records(topic, p, start, Math.min(10000, limit - out.length));
    for (const r of res.records) out.push({ partition: p, ...r });
    if (!res.records.length || res.next_offset >= res.high_watermark) break;
    start = res.next_offset;
  }
  return out;
}

// produceForm writes one record with acks=all and says where it went.
function produceForm(topicOf) {
  const key = h('input', { id: 'produce-key', type: 'text', placeholder: 'optional', autocomplete: 'off' });
  const part = h('select', { id: 'produce-partition' }, h('option', { value: '' }, 'by key'));
  const headers = h('textarea', { id: 'produce-headers', rows: 2, placeholder: 'name=value, one a line' });
  const value = h('textarea', { id: 'produce-value', rows: 5, placeholder: '{"hello": "world"}' });
  const asJSON = h('input', { id: 'produce-json', type: 'checkbox', checked: true });
  const send = h('button', { type: 'submit', id: 'produce-send' }, 'Produce');
  const result = h('div', { id: 'produce-result' });
  const form = h('form', { id: 'produce-form' },
    h('div', { class: 'form-row' },
      h('label', { class: 'grow' }, 'Key', key), h('label', null, 'Partition', part),
      h('label', { class: 'grow' }, 'Headers', headers)),
    h('div', { class: 'form-row' }, h('label', { class: 'grow' }, 'Value', value)),
    h('div', { class: 'form-row' },
      h('label', { class: 'inline' }, asJSON, 'Value is JSON (otherwise sent as a string)'), send, result));
  form.addEventListener('submit', async e => {
    e.preventDefault();
    const topic = topicOf();
    replace(result);
    const rec = {};
    if (key.value) rec.key = key.value;
    if (part.value !== '') rec.partition = Number(part.value);
    const hs = {};
    for (const line of headers.value.split('\n').map(s => s.trim()).filter(Boolean)) {
      const i = line.indexOf('=');
      if (i <= 0) { replace(result, h('span', { class: 'error-text' }, `header "${line}" is not name=value`)); return; }
      hs[line.slice(0, i).trim()] = line.slice(i + 1);
    }
    if (Object.keys(hs).length) rec.headers = hs;
    if (asJSON.checked) {
      try { rec.value = JSON.parse(value.value); } catch (ex) {
        replace(result, h('span', { class: 'error-text' }, `value is not JSON (${ex.message}); untick "Value is JSON" to send it as a string`));
        return;
      }
    } else {
      rec.value = value.value;
    }
    send.disabled = true;
    try {
      const res = await api.produce(topic, { records: [rec] });
      const o = res.offsets[0];
      replace(result, h('span', { class: 'success-text', 'data-partition': o.partition, 'data-offset': o.offset },
        `Written to ${topic} partition ${o.partition} at offset ${fmt.num(o.offset)}`));
    } catch (ex) {
      replace(result, h('span', { class: 'error-text' }, `${ex.code || 'ERROR'}: ${ex.message}`));
    } finally {
      send.disabled = false;
    }
  });
  return {
    el: h('section', { class: 'panel' }, h('h2', null, 'Produce a record', h('span', { class: 'sub' }, 'acks=all')), form),
    setPartitions(t) {
      const keep = part.value;
      const n = t ? t.partitions.length : 0;
      replace(part, h('option', { value: '' }, 'by key'), Array.from({ length: n }, (_, i) => h('option', { value: i }, String(i))));
      part.value = keep !== '' && Number(keep) < n ? keep : '';
    },
  };
}
