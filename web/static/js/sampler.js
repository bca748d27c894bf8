// The cluster sampler polls GET /v1/cluster every few seconds for as long as
// the dashboard is open, and turns the brokers' traffic counters into rates.
// The overview charts and the status pill in the header read from it, so
// the charts keep their history while another page is shown.
import { api } from './api.js';

const intervalMs = 2000;
const keepMs = 15 * 60 * 1000;

let last = null;        // the last ClusterInfo
let prev = null;        // {t, totals} of the previous sample
let error = null;       // the last error, null after a success
const history = [];     // [{t, produceRecs, produceBytes, fetchRecs, fetchBytes}] rates per second
const listeners = new Set();
let timer = null;
let paused = false;

// totals sums the counters of the brokers that answered, by broker id, so a
// broker that did not answer (or restarted) is left out of one interval's
// rate rather than read as a drop.
function totals(info) {
  const m = new Map();
  for (const b of info.brokers) {
    if (b.alive && b.produced_records >= 0) m.set(b.id, b);
  }
  return m;
}

function rates(before, after, dtSec) {
  const r = { produceRecs: 0, produceBytes: 0, fetchRecs: 0, fetchBytes: 0 };
  let any = false;
  for (const [id, b] of after) {
    const a = before.get(id);
    if (!a || b.produced_records < a.produced_records || b.fetched_records < a.fetched_records) continue;
    any = true;
    r.produceRecs += (b.produced_records - a.produced_records) / dtSec;
    r.produceBytes += (b.produced_bytes - a.produced_bytes) / dtSec;
    r.fetchRecs += (b.fetched_records - a.fetched_records) / dtSec;
    r.fetchBytes += (b.fetched_bytes - a.fetched_bytes) / dtSec;
  }
  return any ? r : null;
}

async function sample() {
  try {
    const info = await api.cluster();
    const now = { t: info.time_ms, totals: totals(info) };
    if (prev && now.t > prev.t) {
      const r = rates(prev.totals, now.totals, (now.t - prev.t) / 1000);
      if (r) history.push({ t: now.t, ...r });
      while (history.length && history[0].t < now.t - keepMs) history.shift();
    }
    prev = now;
    last = info;
    error = null;
  } catch (e) {
    error = e;
  }
  for (const fn of listeners) fn();
}

function loop() {
  timer = null;
  if (paused || document.hidden) return;
  sample().finally(() => { if (!timer && !paused) timer = setTimeout(loop, intervalMs); });
}

export const sampler = {
  start() { if (!timer) loop(); },
  setPaused(p) {
    paused = p;
    if (!p && !timer) loop();
  },
  now() { return sample(); },
  // subscribe calls fn after every sample; it returns the unsubscribe function.
  subscribe(fn) { listeners.add(fn); return () => listeners.delete(fn); },
  get info() { return last; },
  get error() { return error; },
  get history() { return history; },
};

document.addEventListener('visibilitychange', () => { if (!document.hidden && !paused && !timer) loop(); });
