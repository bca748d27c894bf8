// Numbers with units, for people.

const nf = new Intl.NumberFormat('en-US');

// num: 1234567 -> "1,234,567"; negative (unknown) -> "—".
export function num(n) {
  if (n === null || n === undefined || n < 0 || Number.isNaN(n)) return '—';
  return nf.format(n);
}

// offset: like num but keeps -1 visible as "—" and 0 as "0".
export const offset = num;

const byteUnits = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

// bytesParts: 1536 -> ["1.5", "KiB"].
export function bytesParts(n) {
  if (n === null || n === undefined || n < 0 || Number.isNaN(n)) return ['—', ''];
  let i = 0;
  while (n >= 1024 && i < byteUnits.length - 1) { n /= 1024; i++; }
  return [i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0), byteUnits[i]];
}

export function bytes(n) {
  const [v, u] = bytesParts(n);
  return u ? `${v} ${u}` : v;
}

// short: 1234 -> "1.23k", 2500000 -> "2.5M".
export function short(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  const a = Math.abs(n);
  if (a < 1000) return a < 10 && a % 1 ? n.toFixed(1) : String(Math.round(n));
  for (const [d, s] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) {
    if (a >= d) { const v = n / d; return (Math.abs(v) < 10 ? v.toFixed(2) : Math.abs(v) < 100 ? v.toFixed(1) : v.toFixed(0)) + s; }
  }
  return String(n);
}

// rate: records per second.
export function rate(perSec) {
  if (perSec === null || perSec === undefined || Number.isNaN(perSec)) return '—';
  return `${short(perSec)} rec/s`;
}

export function byteRate(perSec) {
  if (perSec === null || perSec === undefined || Number.isNaN(perSec)) return '—';
  return `${bytes(perSec)}/s`;
}

// duration in ms: 0 -> "0 s", 1500 -> "1.5 s", 125000 -> "2 min 5 s".
export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

// ago: unix ms -> "3 s ago".
export function ago(ms) {
  if (!ms || ms <= 0) return '—';
  return duration(Math.max(0, Date.now() - ms)) + ' ago';
}

// timestamp: unix ms -> "2026-12-01 02:11:05.123" in local time.
export function timestamp(ms) {
  if (ms === null || ms === undefined || ms < 0) return '—';
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function clock(ms) {
  const d = new Date(ms);
  const p = n => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
