// The live tail: a partition's records, or every partition's of a topic,
// from the moment it starts, over Server-Sent Events (EventSource on the
// gateway's .../sse routes, openapi.yaml). EventSource reconnects by itself
// and sends the id of the last event it saw, from which the gateway resumes
// right after it: a dropped connection skips nothing and repeats nothing.
//
// A tail of every partition is one stream, the topic's: a browser holds at
// most six HTTP/1.1 connections to a host, event streams included, so one
// stream per partition would leave the page's own calls waiting. The topic
// stream starts at "latest" as the gateway resolves it when the stream
// opens; what the partitions received between the click and then is read
// with GET .../records, so nothing produced after the click is missed.
import { api, streamRefusal, partitionStreamPath, topicStreamPath } from './api.js';

const maxFillReads = 50; // reads of one partition's gap at most

// readRange reads a partition's records from `from` up to (not including)
// `to`.
async function readRange(topic, p, from, to) {
  const out = [];
  for (let i = 0; i < maxFillReads && from < to; i++) {
    const res = await api.records(topic, p, from, Math.min(10000, to - from));
    for (const r of res.records) if (r.offset < to) out.push({ partition: p, ...r });
    if (res.next_offset <= from) break;
    from = res.next_offset;
  }
  return out;
}

// openTail starts a tail of topic's partition (a number) or of all of its
// partitions ('all', partitions of them). onRecords(records) gets the
// records in order within each partition, each with its partition;
// onChange({open, want, error}) tells how many of the wanted partitions are
// streaming and the last error ('' once streaming again). keep bounds the
// records read for the start's gap per partition (older ones would be
// dropped anyway). It returns {close}.
export function openTail(topic, partition, { partitions, keep, onRecords, onChange }) {
  const all = partition === 'all';
  const st = { open: 0, want: all ? partitions : 1, error: '' };
  let closed = false;
  let es = null;
  let path = '';
  let lastId = '';
  // A topic stream's first records wait in held until its gap is read;
  // then gate says, per partition, from which offset on the stream's
  // records are new (those before it came with the gap).
  let before = null; // partition -> high watermark at the click
  let held = null;
  let gate = null;

  const changed = () => { if (!closed) onChange({ ...st }); };
  const fail = e => { st.error = e.code ? `${e.code}: ${e.message}` : String(e.message || e); changed(); };
  const deliver = recs => { if (!closed && recs.length) onRecords(recs); };

  const onMessage = ev => {
    if (closed) return;
    lastId = ev.lastEventId;
    let r;
    try { r = JSON.parse(ev.data); } catch { return; }
    if (held) { held.push(r); return; }
    if (gate && r.offset < (gate.get(r.partition) ?? 0)) return;
    deliver([r]);
  };

  // settle reads what each partition got between its high watermark at
  // the click and the stream's start, which is at most its high watermark
  // now, shows it, then what the stream held. false when the gap could not
  // be read (the tail then shows the stream's records only).
  const settle = async hw => {
    let ok = true;
    try {
      const now = await api.topic(topic);
      const g = new Map();
      const gaps = [];
      for (const p of now.partitions) {
        const from = hw.get(p.partition);
        const to = p.high_watermark;
        const known = to >= 0 && from !== undefined && from >= 0;
        g.set(p.partition, known ? to : 0);
        if (known && to > from) gaps.push(readRange(topic, p.partition, Math.max(from, to - keep), to));
      }
      const fill = (await Promise.all(gaps)).flat()
        .sort((a, b) => a.timestamp - b.timestamp || a.partition - b.partition || a.offset - b.offset);
      gate = g;
      deliver(fill);
    } catch (e) {
      ok = false;
      fail(e);
    }
    const h = held;
    held = null;
    deliver(h.filter(r => !gate || r.offset >= (gate.get(r.partition) ?? 0)));
    return ok;
  };

  let settling = false;
  const onOpen = async () => {
    if (closed) return;
    let ok = true;
    if (before) { // a topic stream's first open: its gap first
      const hw = before;
      before = null;
      settling = true;
      ok = await settle(hw);
      settling = false;
    } else if (settling) {
      return; // reconnected while the gap is read: the first open reports
    }
    if (closed) return;
    st.open = es.readyState === EventSource.OPEN ? st.want : 0;
    if (ok) st.error = '';
    changed();
  };

  const onError = async ev => {
    if (closed) return;
    st.open = 0;
    if (typeof ev.data === 'string') {
      // The gateway's error event: the error envelope, then the end of the
      // stream. EventSource reconnects, unless the error is final.
      let e = {};
      try { e = JSON.parse(ev.data).error || {}; } catch { /* not JSON */ }
      if (!e.retriable) es.close();
      fail({ code: e.code || 'ERROR', message: (e.message || ev.data) + (e.retriable ? ' (reconnecting)' : '') });
      return;
    }
    if (es.readyState !== EventSource.CLOSED) {
      if (!st.error) st.error = 'reconnecting…';
      changed();
      return;
    }
    // The gateway refused the stream (an HTTP error): EventSource gives up
    // without the answer's body, so ask once more to show the envelope.
    const e = await streamRefusal(path, lastId);
    if (!closed) fail(e || { message: 'the stream closed' });
  };

  (async () => {
    try {
      if (all) {
        const t = await api.topic(topic);
        before = new Map(t.partitions.map(p => [p.partition, p.high_watermark]));
        held = [];
        path = topicStreamPath(topic, 'latest');
      } else {
        // A partition's stream starts exactly where it was at the click.
        const o = await api.offsets(topic, partition, 'latest');
        path = partitionStreamPath(topic, partition, o.high_watermark);
      }
    } catch (e) {
      fail(e);
      return;
    }
    if (closed) return;
    es = new EventSource(path);
    es.addEventListener('message', onMessage);
    es.addEventListener('open', onOpen);
    es.addEventListener('error', onError);
  })();

  return {
    close() {
      closed = true;
      if (es) es.close();
    },
  };
}
