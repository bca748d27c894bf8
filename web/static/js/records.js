// Records as the dashboard shows, filters and exports them.
import { h } from './dom.js';
import * as fmt from './format.js';

// keyText is a record's key for display and filtering ('' when null).
export function keyText(r) {
  if (r.key !== undefined) return r.key;
  if (r.key_b64 !== undefined) return r.key_b64;
  return '';
}

// valueText is the compact text of a value (JSON or base64) for filtering.
export function valueText(r) {
  if (r.value !== undefined) return typeof r.value === 'string' ? r.value : JSON.stringify(r.value);
  if (r.value_b64 !== undefined) return r.value_b64;
  return '';
}

// parseFilters reads the three filter inputs into a predicate. key and value
// match as case-insensitive substrings; header matches a header name
// ("trace"), or a name and a value substring ("trace=abc").
export function parseFilters(key, header, value) {
  const k = key.trim().toLowerCase();
  const v = value.trim().toLowerCase();
  let hn = header.trim().toLowerCase();
  let hv = null;
  const eq = hn.indexOf('=');
  if (eq >= 0) { hv = hn.slice(eq + 1); hn = hn.slice(0, eq); }
  if (!k && !v && !hn && hv === null) return null;
  return r => {
    if (k && !keyText(r).toLowerCase().includes(k)) return false;
    if (v && !valueText(r).toLowerCase().includes(v)) return false;
    if (hn || hv !== null) {
      const hs = Object.entries(r.headers || {});
      const ok = hs.some(([name, val]) =>
        (hv === null ? name.toLowerCase().includes(hn) : name.toLowerCase() === hn && String(val).toLowerCase().includes(hv)));
      if (!ok) return false;
    }
    return true;
  };
}

// ndjson renders records as one JSON object a line, in the gateway's shape
// plus topic and partition.
export function ndjson(topic, records) {
  return records.map(r => {
    const o = { topic, partition: r.partition, offset: r.offset, timestamp: r.timestamp };
    for (const f of ['key', 'key_b64', 'value', 'value_b64', 'headers']) if (r[f] !== undefined) o[f] = r[f];
    return JSON.stringify(o);
  }).join('\n') + (records.length ? '\n' : '');
}

// inline renders a JSON value on one line, with a space after each colon
// and comma.
function inline(v) {
  if (Array.isArray(v)) return '[' + v.map(inline).join(', ') + ']';
  if (v !== null && typeof v === 'object') return '{' + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ': ' + inline(x)).join(', ') + '}';
  return JSON.stringify(v);
}

// pretty renders a JSON value indented by two spaces a level, keeping any
// part that fits in width characters on one line.
export function pretty(v, indent = '', width = 72) {
  const one = inline(v);
  if (v === null || typeof v !== 'object' || indent.length + one.length <= width) return one;
  const inner = indent + '  ';
  if (Array.isArray(v)) {
    if (!v.length) return '[]';
    return '[\n' + v.map(x => inner + pretty(x, inner, width)).join(',\n') + '\n' + indent + ']';
  }
  const es = Object.entries(v);
  if (!es.length) return '{}';
  return '{\n' + es.map(([k, x]) => {
    const key = inner + JSON.stringify(k) + ': ';
    const one = inline(x);
    return key + (key.length + one.length <= width ? one : pretty(x, inner, width));
  }).join(',\n') + '\n' + indent + '}';
}

// recordRow is one record: offset, partition, time, key and headers, value.
export function recordRow(r, fresh) {
  let val;
  if (r.value !== undefined) {
    val = h('pre', null, typeof r.value === 'string' ? r.value : pretty(r.value));
  } else if (r.value_b64 !== undefined) {
    val = h('pre', null, h('span', { class: 'tag', title: 'not valid JSON: shown as base64' }, 'base64'), r.value_b64);
  } else {
    val = h('span', { class: 'tag' }, 'null');
  }
  const key = r.key !== undefined ? r.key
    : r.key_b64 !== undefined ? [h('span', { class: 'tag' }, 'base64'), r.key_b64] : h('span', { class: 'dim' }, 'no key');
  const hs = Object.entries(r.headers || {});
  return h('div', { class: 'rec' + (fresh ? ' fresh' : ''), 'data-offset': r.offset, 'data-partition': r.partition },
    h('span', { class: 'off' }, fmt.num(r.offset)),
    h('span', { class: 'part' }, 'p' + r.partition),
    h('span', { class: 'ts', title: String(r.timestamp) }, fmt.timestamp(r.timestamp)),
    h('div', { class: 'key' }, key,
      hs.length ? h('div', { class: 'hdrs' }, hs.map(([k, v]) => h('span', { class: 'hdr' }, `${k}=${v}`))) : null),
    h('div', { class: 'val' }, val));
}
