// The public HTTP API of the gateway that served this page (openapi.yaml).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// onUnauthenticated runs on every 401: the shell offers sign-in.
let onUnauthenticated = null;
export function whenUnauthenticated(f) { onUnauthenticated = f; }

async function call(method, path, body, { signal, contentType = 'application/json' } = {}) {
  const init = { method, signal, headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = contentType;
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'UNREACHABLE', `the gateway did not answer (${e.message})`);
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) throw refusal(res, data, text);
  return data;
}

// refusal is the ApiError of a response that is not ok, from its error
// envelope {"error": {"code", "message"}} when it has one.
function refusal(res, data, text) {
  const err = data && data.error;
  if (res.status === 401 && onUnauthenticated) onUnauthenticated();
  return new ApiError(res.status, err ? err.code : 'HTTP_' + res.status, err ? err.message : text || res.statusText);
}

const enc = encodeURIComponent;

export const api = {
  cluster: opts => call('GET', '/v1/cluster', undefined, opts),
  topics: opts => call('GET', '/v1/topics', undefined, opts),
  topic: (name, opts) => call('GET', `/v1/topics/${enc(name)}`, undefined, opts),
  createTopic: req => call('POST', '/v1/topics', req),
  deleteTopic: name => call('DELETE', `/v1/topics/${enc(name)}`),
  offsets: (topic, p, at, opts) => call('GET', `/v1/topics/${enc(topic)}/partitions/${p}/offsets?at=${enc(at)}`, undefined, opts),
  records: (topic, p, offset, maxRecords, opts) =>
    call('GET', `/v1/topics/${enc(topic)}/partitions/${p}/records?offset=${enc(offset)}&max_records=${maxRecords}`, undefined, opts),
  produce: (topic, body) => call('POST', `/v1/topics/${enc(topic)}/records?acks=all`, body),
  groups: opts => call('GET', '/v1/groups', undefined, opts),
  group: (name, opts) => call('GET', `/v1/groups/${enc(name)}`, undefined, opts),
  pushes: opts => call('GET', '/v1/push', undefined, opts),
  push: (name, opts) => call('GET', `/v1/push/${enc(name)}`, undefined, opts),
  setPushState: (name, state) => call('PUT', `/v1/push/${enc(name)}/state`, { state }),
  seekPush: (name, to) => call('POST', `/v1/push/${enc(name)}/seek`, { to }),
  testPush: name => call('POST', `/v1/push/${enc(name)}/test`, {}),
  rotatePushSecret: (name, graceSeconds) => call('POST', `/v1/push/${enc(name)}/secrets/rotate`, graceSeconds ? { grace_seconds: graceSeconds } : {}),
  deletePush: name => call('DELETE', `/v1/push/${enc(name)}`),
  // The session cookie (HttpOnly): a token in, sent by the browser with
  // every later request and event stream of this page.
  signIn: token => call('POST', '/v1/session', { token }),
  session: () => call('GET', '/v1/session'),
};

// partitionStreamPath is the event stream of a partition from offset on;
// topicStreamPath a topic's, its partitions starting at from (earliest or
// latest).
export const partitionStreamPath = (topic, p, offset) => `/v1/topics/${enc(topic)}/partitions/${p}/sse?offset=${enc(offset)}`;
export const topicStreamPath = (topic, from) => `/v1/topics/${enc(topic)}/sse?offset=${enc(from)}`;

// streamRefusal asks for an event stream once more, with fetch, to read
// why the gateway refused it: EventSource gives up on an HTTP error without
// exposing the answer. It returns the ApiError, or null when the stream
// opens this time (it is closed at once).
export async function streamRefusal(path, lastEventId) {
  const ctl = new AbortController();
  let res;
  try {
    res = await fetch(path, { signal: ctl.signal, headers: lastEventId ? { 'Last-Event-ID': lastEventId } : {} });
  } catch (e) {
    return new ApiError(0, 'UNREACHABLE', `the gateway did not answer (${e.message})`);
  }
  if (res.ok) {
    ctl.abort();
    return null;
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  return refusal(res, data, text);
}
