// The dashboard shell: hash routes, the refresh loop of the current page,
// the cluster status pill, pause and resume.
import { h, replace } from './dom.js';
import { sampler } from './sampler.js';
import { api, whenUnauthenticated } from './api.js';
import * as fmt from './format.js';
import overview from './pages/overview.js';
import topics from './pages/topics.js';
import topic from './pages/topic.js';
import messages from './pages/messages.js';
import groups from './pages/groups.js';
import group from './pages/group.js';
import pushes from './pages/pushes.js';
import push from './pages/push.js';

// Routes: #/overview, #/topics, #/topics/NAME, #/messages?topic=T&partition=P,
// #/groups, #/groups/NAME, #/push, #/push/NAME.
function route() {
  const raw = location.hash.replace(/^#/, '') || '/overview';
  const [path, query] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  switch (parts[0]) {
    case 'topics': return parts[1] ? { nav: 'topics', page: topic, params: { ...params, name: parts[1] } } : { nav: 'topics', page: topics, params };
    case 'messages': return { nav: 'messages', page: messages, params };
    case 'groups': return parts[1] ? { nav: 'groups', page: group, params: { ...params, name: parts[1] } } : { nav: 'groups', page: groups, params };
    case 'push': return parts[1] ? { nav: 'push', page: push, params: { ...params, name: parts[1] } } : { nav: 'push', page: pushes, params };
    default: return { nav: 'overview', page: overview, params };
  }
}

const main = document.getElementById('main');
const banner = document.getElementById('banner');
const updated = document.getElementById('updated');
const pauseBtn = document.getElementById('pause');
let current = null; // {page instance, timer, gen}
let paused = false;
let gen = 0;

function showError(e) {
  if (!e) { banner.hidden = true; return; }
  banner.hidden = false;
  replace(banner, e.code ? `${e.code}: ${e.message}` : String(e.message || e));
}

async function tick(my) {
  if (!current || current.gen !== my || !current.inst.refresh) return;
  try {
    await current.inst.refresh();
    if (current && current.gen === my) {
      showError(null);
      updated.textContent = 'Updated ' + fmt.clock(Date.now());
    }
  } catch (e) {
    if (e.name !== 'AbortError' && current && current.gen === my) showError(e);
  }
  schedule(my);
}

function schedule(my) {
  if (!current || current.gen !== my || paused || document.hidden) return;
  clearTimeout(current.timer);
  current.timer = setTimeout(() => tick(my), current.inst.every || 3000);
}

function show() {
  if (current) {
    clearTimeout(current.timer);
    if (current.inst.destroy) current.inst.destroy();
  }
  const r = route();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === r.nav);
  const my = ++gen;
  showError(null);
  const inst = r.page(r.params, { refreshNow: () => { if (current && current.gen === my) { clearTimeout(current.timer); tick(my); } } });
  current = { inst, gen: my, timer: null };
  replace(main, inst.el);
  window.scrollTo(0, 0);
  tick(my);
}

function setPaused(p) {
  paused = p;
  pauseBtn.textContent = p ? 'Resume' : 'Pause';
  pauseBtn.classList.toggle('active', p);
  sampler.setPaused(p);
  if (!p && current) tick(current.gen);
}

pauseBtn.addEventListener('click', () => setPaused(!paused));
document.addEventListener('visibilitychange', () => { if (!document.hidden && current && !paused) tick(current.gen); });
window.addEventListener('hashchange', show);

// The status pill: brokers alive, controller, partitions in trouble.
const pill = document.getElementById('cluster-pill');
const version = document.getElementById('version');
sampler.subscribe(() => {
  const info = sampler.info;
  if (sampler.error) {
    pill.className = 'pill bad';
    pill.textContent = 'gateway unreachable';
    return;
  }
  if (!info) return;
  const alive = info.brokers.filter(b => b.alive).length;
  const p = info.partitions;
  const trouble = p.offline + p.under_min_isr;
  pill.className = 'pill ' + (p.offline > 0 || info.controller < 0 ? 'bad' : trouble + p.under_replicated > 0 || alive < info.brokers.length ? 'warn' : 'ok');
  pill.textContent = `${alive}/${info.brokers.length} brokers` + (info.controller >= 0 ? ` · controller ${info.controller}` : ' · no controller');
  pill.title = `${p.total} partitions: ${p.under_replicated} under-replicated, ${p.under_min_isr} under min ISR, ${p.offline} offline`;
  version.textContent = info.version ? 'sluice ' + info.version : '';
});

// Sign-in: a gateway started with --auth required answers 401 until the
// browser holds a session cookie; the form exchanges a token for one, and
// the current page is shown again.
let started = false;
function run() {
  if (!started) {
    started = true;
    sampler.start();
  }
  show();
}

let signInShown = false;
function showSignIn() {
  if (signInShown) return;
  signInShown = true;
  const input = h('input', { id: 'signin-token', type: 'password', placeholder: 'slc_…', autocomplete: 'off', required: true });
  const msg = h('p', { class: 'signin-error', id: 'signin-error' });
  const form = h('form', { id: 'signin', class: 'signin' },
    h('h2', {}, 'Sign in'),
    h('p', {}, 'This gateway requires a token (sluice tokens create, or the bootstrap token).'),
    input, h('button', { type: 'submit' }, 'Sign in'), msg);
  const overlay = h('div', { class: 'signin-overlay' }, form);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    try {
      await api.signIn(input.value.trim());
    } catch (e) {
      msg.textContent = e.code ? `${e.code}: ${e.message}` : String(e.message || e);
      return;
    }
    overlay.remove();
    signInShown = false;
    run();
  });
  document.body.append(overlay);
  input.focus();
}
whenUnauthenticated(showSignIn);

run();
// Offer sign-in at once where the gateway requires it (the pages' own
// requests would be refused anyway, and a 401 shows the form too).
api.session().then(s => {
  if (s.auth_required && s.principal === 'User:ANONYMOUS') showSignIn();
}, () => {});
