// Records per second of topics and partitions, from the rise of their high
// watermarks between two looks. Kept per key across page changes.

const seen = new Map(); // key -> {t, hw, rate}

// observe records a high watermark seen at tMs and returns the rate since
// the previous look (null on the first look, or when hw went back: a topic
// deleted and created again).
export function observe(key, hw, tMs) {
  if (hw < 0) return seen.has(key) ? seen.get(key).rate : null;
  const p = seen.get(key);
  let rate = p ? p.rate : null;
  if (p && tMs - p.t >= 500) {
    rate = hw >= p.hw ? (hw - p.hw) / ((tMs - p.t) / 1000) : null;
    seen.set(key, { t: tMs, hw, rate });
  } else if (!p) {
    seen.set(key, { t: tMs, hw, rate: null });
  }
  return rate;
}

// topicTotals sums a topic's partitions: records (HW minus log start), HW,
// bytes on the leaders' disks and in the object store, and replication health.
export function topicTotals(t) {
  const s = { records: 0, hw: 0, local: 0, remote: 0, underReplicated: 0, offline: 0, unknown: false };
  for (const p of t.partitions) {
    if (p.high_watermark < 0) { s.unknown = true; } else {
      s.hw += p.high_watermark;
      s.records += Math.max(0, p.high_watermark - Math.max(0, p.log_start_offset));
    }
    if (p.local_bytes > 0) s.local += p.local_bytes;
    if (p.remote_bytes > 0) s.remote += p.remote_bytes;
    if (p.offline) s.offline++;
    if (p.isr.length < p.replicas.length) s.underReplicated++;
  }
  return s;
}
