// Live time-series charts on uPlot (vendor/uPlot.iife.min.js, the global uPlot).
import { h, replace } from './dom.js';

const css = getComputedStyle(document.documentElement);
const muted = css.getPropertyValue('--muted').trim() || '#8b98a8';
const line = css.getPropertyValue('--line').trim() || '#2a3441';

// timeChart draws series over the last windowSec seconds into container.
// series: [{label, color}]; fmt formats a y value with its unit. push(tMs,
// values) adds a point to each series (null: a gap); set(points) replaces
// the data with [[tMs, ...values], ...].
export function timeChart(container, series, { height = 200, fmt = String, windowSec = 600 } = {}) {
  const legend = h('div', { class: 'chart-legend' });
  const plot = h('div', { class: 'chart' });
  replace(container, legend, plot);
  const data = [[], ...series.map(() => [])];
  const values = series.map(() => null);
  const opts = {
    width: Math.max(200, container.clientWidth || 600),
    height,
    padding: [8, 8, 0, 0],
    legend: { show: false },
    cursor: { y: false, points: { size: 6 } },
    series: [
      {},
      ...series.map(s => ({
        label: s.label, stroke: s.color, width: 2, fill: s.color + '22',
        points: { show: false }, spanGaps: false,
      })),
    ],
    scales: {
      // The x axis ends now and starts at the first point, widening to
      // windowSec as points come (at least a minute, so early points
      // are not a smear at the edge).
      x: {
        time: true,
        range: (u, min, max) => {
          const end = Math.max(max || 0, Date.now() / 1000);
          const first = data[0].length ? data[0][0] : end;
          return [Math.max(end - windowSec, Math.min(first, end - 60)), end];
        },
      },
      y: { range: (u, min, max) => [0, max > 0 ? max * 1.15 : 10] },
    },
    axes: [
      { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 }, font: '11px system-ui' },
      { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 }, font: '11px system-ui',
        size: 78, values: (u, vals) => vals.map(v => fmt(v)) },
    ],
  };
  const u = new uPlot(opts, data, plot);
  const drawLegend = () => replace(legend, series.map((s, i) =>
    h('span', null, h('span', { class: 'sw', style: `background:${s.color}` }), s.label + ' ', h('b', null, values[i] === null ? '—' : fmt(values[i])))));
  drawLegend();
  const ro = new ResizeObserver(() => {
    const w = container.clientWidth;
    if (w > 0) u.setSize({ width: w, height });
  });
  ro.observe(container);
  const trim = () => {
    const cutoff = Date.now() / 1000 - windowSec - 5;
    let n = 0;
    while (n < data[0].length && data[0][n] < cutoff) n++;
    if (n) data.forEach(a => a.splice(0, n));
  };
  return {
    push(tMs, vals) {
      data[0].push(tMs / 1000);
      vals.forEach((v, i) => { data[i + 1].push(v); if (v !== null) values[i] = v; });
      trim();
      u.setData(data);
      drawLegend();
    },
    set(points) {
      data.forEach(a => { a.length = 0; });
      for (const p of points) {
        data[0].push(p[0] / 1000);
        for (let i = 0; i < series.length; i++) { data[i + 1].push(p[i + 1]); if (p[i + 1] !== null) values[i] = p[i + 1]; }
      }
      trim();
      u.setData(data);
      drawLegend();
    },
    destroy() { ro.disconnect(); u.destroy(); },
  };
}

// Colours of chart series, in order.
export const palette = ['#2dd4bf', '#60a5fa', '#f472b6', '#fbbf24', '#a78bfa', '#34d399', '#fb923c', '#f87171'];
