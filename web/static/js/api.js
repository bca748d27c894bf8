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
  if (!res.ok) {
    const err = data && data.error;
    if (res.status === 401 && onUnauthenticated) onUnauthenticated();
    throw new ApiError(res.status, err ? err.code : 'HTTP_' + res.status, err ? err.message : text || res.statusText);
  }
  return data;
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
  testPush: name => call('POST', `/v1/push/${enc(name)}/test`),
  rotatePushSecret: (name, graceSeconds) => call('POST', `/v1/push/${enc(name)}/secrets/rotate`, graceSeconds ? { grace_seconds: graceSeconds } : {}),
  deletePush: name => call('DELETE', `/v1/push/${enc(name)}`),
  // The session cookie (HttpOnly): a token in, sent by the browser with
  // every later request and event stream of this page.
  signIn: token => call('POST', '/v1/session', { token }),
  session: () => call('GET', '/v1/session'),
};

// wsURL is the WebSocket address of a partition stream on this gateway.
export function wsURL(topic, p, offset, credit) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/v1/topics/${enc(topic)}/partitions/${p}/ws?offset=${enc(offset)}&credit=${credit}`;
}
