// delayd's web console: a page per hash route (#/, #/topics, #/jobs, ...),
// built from the HTTP API. Every value from the server goes into the page
// as text (h() below), never as markup: job bodies and errors are user data.
'use strict';

const state = {
  token: sessionStorage.getItem('delayd-token') || '',
  mode: 'full',      // or 'read-only' (/console/config.json)
  scope: 'admin',    // what the token may do: admin, write or read ('none' before one is given)
  timer: null,       // the current page's refresh
  lastMetrics: null, // {at, counters} for rates
  forecast: 'minute',
};

// ------------------------------------------------------------------ DOM

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style') el.style.cssText = v;  // CSSOM: allowed by the page's CSP
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// Puts a page in <main>, unless the user has gone to another page since
// this one was asked for (`at`, the hash it is for): a slow answer never
// replaces a newer page. A page re-rendered after an action passes its own
// `at`, so an action answered after the user moved on renders nothing.
function render(at, ...nodes) {
  if (location.hash !== at) return;
  document.getElementById('main').replaceChildren(...nodes.filter(n => n !== null && n !== undefined && n !== false));
}

function table(headers, rows, numeric = []) {
  return h('div', {class: 'scroll'}, h('table', {},
    h('thead', {}, h('tr', {}, headers.map((x, i) =>
      h('th', {scope: 'col', class: numeric.includes(i) ? 'num' : null}, x)))),
    h('tbody', {}, rows.map(r => h('tr', {}, r.map((c, i) =>
      h('td', {class: numeric.includes(i) ? 'num' : null}, c)))))));
}

function fields(pairs) {
  return table(['Field', 'Value'], pairs.map(([k, v]) => [k, v === null || v === undefined ? '-' : v]));
}

function message(text, ok) {
  return h('p', {class: ok ? 'ok' : 'error', role: ok ? 'status' : 'alert'}, text);
}

function button(text, onclick, cls) {
  return h('button', {type: 'button', class: cls ? `act ${cls}` : 'act', onclick}, text);
}

// ------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? `${problem.title}: ${problem.detail}` : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// Calls the API with the token; a 401 asks for the token, then tries again.
async function api(method, path, body) {
  for (;;) {
    const headers = {'Accept': 'application/json'};
    if (state.token) headers['Authorization'] = `Bearer ${state.token}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(path, {method, headers,
      body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body))});
    if (res.status === 401) {
      await askToken(state.token ? 'The server refused this token.' : '');
      continue;
    }
    const text = await res.text();
    const type = res.headers.get('Content-Type') || '';
    const data = type.includes('json') && text ? JSON.parse(text) : text;
    if (!res.ok) throw new ApiError(res.status, typeof data === 'object' ? data : null);
    return data;
  }
}

let tokenWaiters = [];
function askToken(error) {
  const dialog = document.getElementById('login');
  document.getElementById('login-error').textContent = error;
  if (!dialog.open) dialog.showModal();
  document.getElementById('token').focus();
  return new Promise(resolve => tokenWaiters.push(resolve));
}

// What the console offers: the server answers with its mode (read-only for
// everyone, or full) and the scope of the token given. A read token, or a
// read-only console, hides every action (.act); a write token hides the
// topic settings and pause (.admin), which need an admin token.
async function loadConfig() {
  const headers = state.token ? {'Authorization': `Bearer ${state.token}`} : {};
  const config = await fetch('/console/config.json', {headers}).then(r => r.json()).catch(() => ({}));
  state.mode = config.mode || 'full';
  state.scope = config.scope || 'admin';
  document.body.classList.toggle('readonly', state.mode === 'read-only');
  document.body.classList.toggle('no-admin', state.scope !== 'admin');
  const access = {read: 'read-only access', write: 'write access (no topic settings)', admin: ''};
  document.getElementById('access').textContent =
    state.mode === 'read-only' ? access.read : access[state.scope] || '';
}

function setupLogin() {
  document.getElementById('login-form').addEventListener('submit', async () => {
    state.token = document.getElementById('token').value;
    sessionStorage.setItem('delayd-token', state.token);
    await loadConfig();
    const waiters = tokenWaiters;
    tokenWaiters = [];
    waiters.forEach(w => w());
  });
  document.getElementById('login').addEventListener('cancel', e => e.preventDefault());
}

// ------------------------------------------------------------------ formats

function localTime(iso, zone) {
  if (!iso) return '-';
  const d = new Date(iso);
  try {
    return d.toLocaleString('sv-SE', {timeZone: zone || undefined, hour12: false}) + (zone ? ` ${zone}` : '');
  } catch (e) {
    return iso;
  }
}

function isoFromLocal(value) {  // <input type=datetime-local> to RFC 3339 (UTC)
  return value ? new Date(value).toISOString() : '';
}

function prometheus(text) {  // name{labels} value lines into [{name, labels, value}]
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const p of (m[3] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]] = p[2];
    out.push({name: m[1], labels, value: Number(m[4])});
  }
  return out;
}

function quantile(buckets, q) {  // buckets: [[le, cumulative]] rising; Prometheus's estimate
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) return null;
  const rank = q * total;
  let lo = 0, below = 0;
  for (const [le, cum] of buckets) {
    if (cum >= rank) return le === Infinity ? lo : lo + (le - lo) * (cum > below ? (rank - below) / (cum - below) : 1);
    lo = le; below = cum;
  }
  return lo;
}

function ms(seconds) { return seconds === null ? '-' : `${(seconds * 1000).toFixed(2)} ms`; }

// ------------------------------------------------------------------ pages

async function overview() {
  const at = location.hash;
  const [stats, topics, metricsText, forecast] = await Promise.all([
    api('GET', '/v1/stats'), api('GET', '/v1/topics'),
    api('GET', '/metrics').catch(() => ''),
    api('GET', `/v1/forecast?bucket=${state.forecast}`)]);
  const jobs = stats.jobs;
  const samples = prometheus(typeof metricsText === 'string' ? metricsText : '');
  const sum = name => samples.filter(s => s.name === name).reduce((a, s) => a + s.value, 0);
  const counters = {
    submitted: sum('delayd_jobs_submitted_total'), fired: sum('delayd_fire_lateness_seconds_count'),
    delivered: sum('delayd_push_delivered_total'), failed: sum('delayd_push_failed_total')};
  const now = Date.now();
  const prev = state.lastMetrics;
  const rate = k => prev && now > prev.at ? ((counters[k] - prev.counters[k]) * 1000 / (now - prev.at)).toFixed(1) : '-';
  state.lastMetrics = {at: now, counters};
  const buckets = samples.filter(s => s.name === 'delayd_fire_lateness_seconds_bucket')
    .map(s => [s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), s.value]).sort((a, b) => a[0] - b[0]);
  const card = (n, l) => h('div', {class: 'card'}, h('div', {class: 'n'}, n), h('div', {class: 'l'}, l));
  const max = Math.max(1, ...forecast.counts);
  const step = forecast.bucket_ms;
  render(at, 
    h('h1', {}, 'Overview'),
    h('section', {'aria-label': 'Jobs by state'}, h('div', {class: 'cards'},
      card(jobs.delayed, 'delayed'), card(jobs.ready, 'ready'), card(jobs.reserved, 'reserved'),
      card(jobs.buried, 'dead letters (buried)'), card(stats.waiting_consumers, 'waiting consumers'),
      card(stats.delivery ? stats.delivery.in_flight : 0, 'deliveries in flight'))),
    h('h2', {}, 'Throughput (per second) and fire lateness'),
    h('div', {class: 'cards'},
      card(rate('submitted'), 'submitted / s'), card(rate('fired'), 'fired / s'),
      card(rate('delivered'), 'delivered / s'), card(rate('failed'), 'failed / s'),
      card(ms(quantile(buckets, 0.5)), 'lateness p50'), card(ms(quantile(buckets, 0.99)), 'lateness p99')),
    h('h2', {id: 'forecast-title'}, 'Due forecast'),
    h('div', {class: 'actions'}, ['minute', 'hour', 'day'].map(b =>
      h('button', {type: 'button', 'aria-pressed': String(state.forecast === b),
        onclick: () => { state.forecast = b; route(); }}, `per ${b}`))),
    h('div', {class: 'bars', role: 'img', 'aria-labelledby': 'forecast-title',
      'aria-description': `delayed jobs due per ${forecast.bucket} from ${forecast.from}`},
      forecast.counts.map((n, i) => h('div', {style: `height:${(100 * n / max).toFixed(1)}%`,
        title: `${localTime(new Date(Date.parse(forecast.from) + i * step).toISOString())}: ${n}`}))),
    h('p', {class: 'muted'}, `${forecast.counts.reduce((a, b) => a + b, 0)} jobs due in the next ` +
      `${forecast.counts.length} ${forecast.bucket}s; the busiest ${forecast.bucket} has ` +
      `${forecast.counts.some(x => x) ? max : 0}` +
      (forecast.bucket === 'minute' ? '.' : ` (counted at ${localTime(forecast.as_of)}).`)),
    h('h2', {}, 'Topics'),
    table(['Topic', 'Ready', 'Delayed', 'Reserved', 'Dead letters', 'Paused'],
      topics.topics.map(t => [h('a', {href: `#/topics/${encodeURIComponent(t.name)}`}, t.name),
        t.counts.ready, t.counts.delayed, t.counts.reserved, t.counts.buried, t.paused ? 'yes' : 'no']),
      [1, 2, 3, 4]));
  refreshIn(2000);
}

async function topicsPage() {
  const at = location.hash;
  const {topics} = await api('GET', '/v1/topics');
  render(at, h('h1', {}, 'Topics'),
    table(['Topic', 'Ready', 'Delayed', 'Reserved', 'Dead letters', 'Rate / s', 'Concurrency', 'Paused', 'Lateness'],
      topics.map(t => [h('a', {href: `#/topics/${encodeURIComponent(t.name)}`}, t.name),
        t.counts.ready, t.counts.delayed, t.counts.reserved, t.counts.buried,
        t.rate_limit_per_s || '-', t.max_concurrency || '-', t.paused ? 'yes' : 'no',
        `${t.ready_lateness_ms || 0} ms`]), [1, 2, 3, 4]));
  refreshIn(5000);
}

async function topicPage(name, at = location.hash) {
  const path = `/v1/topics/${encodeURIComponent(name)}`;
  const t = await api('GET', path);
  const settings = {};
  for (const k of ['target', 'retry', 'ttr_ms', 'rate_limit_per_s', 'max_concurrency', 'alert']) {
    if (t[k] !== null && t[k] !== undefined && t[k] !== 0) settings[k] = t[k];
  }
  const out = h('div', {id: 'topic-result'});
  const editor = h('textarea', {id: 'settings', 'aria-describedby': 'settings-help'}, JSON.stringify(settings, null, 2));
  const secret = h('input', {id: 'secret', type: 'password', autocomplete: 'off'});
  const act = (fn, done) => async () => {
    try {
      await fn();
      await topicPage(name, at);  // the page again, as it now is, and what was done
      document.getElementById('topic-result').replaceChildren(message(done, true));
    } catch (e) { out.replaceChildren(message(e.message)); }
  };
  render(at, h('h1', {}, `Topic ${name}`),
    fields([['ready', t.counts.ready], ['delayed', t.counts.delayed], ['reserved', t.counts.reserved],
      ['dead letters', t.counts.buried], ['paused', t.paused ? `yes (${t.pause_left_ms} ms left)` : 'no'],
      ['oldest ready job waiting', `${t.ready_lateness_ms || 0} ms`],
      ['signing secret', t.signing_secret_set ? 'set' : 'none'], ['deliveries in flight', t.in_flight]]),
    h('div', {class: 'actions'},
      t.paused ? button('Resume', act(() => api('POST', `${path}/resume`, {}), 'Resumed.'), 'admin')
               : button('Pause', act(() => api('POST', `${path}/pause`, {}), 'Paused.'), 'admin'),
      h('a', {href: `#/jobs?topic=${encodeURIComponent(name)}`}, 'Jobs of this topic')),
    h('form', {class: 'act admin', onsubmit: async e => {
      e.preventDefault();
      let body;
      try { body = JSON.parse(editor.value); } catch (err) { out.replaceChildren(message('The settings are not valid JSON.')); return; }
      if (secret.value) body.signing_secret = secret.value;
      await act(() => api('PUT', path, body), 'Saved.')();
    }},
      h('h2', {}, 'Settings'),
      h('label', {for: 'settings'}, 'target, retry, ttr_ms, rate_limit_per_s, max_concurrency, alert (JSON)'),
      editor,
      h('p', {id: 'settings-help', class: 'muted'}, 'Saving replaces the settings (PUT); fields left out return to their defaults.'),
      h('label', {for: 'secret'}, 'New signing secret (write-only; empty keeps the current one)'), secret,
      h('div', {class: 'actions'}, h('button', {type: 'submit', class: 'primary'}, 'Save settings'))),
    out);
}

function jobRow(j) {
  return [h('a', {href: `#/jobs/${j.id}`}, String(j.id)), j.topic, j.state, localTime(j.due_at),
    j.key || '-', j.attempts, j.last_error || '-'];
}

async function jobsPage(params) {
  const at = location.hash;
  const f = {id: '', topic: '', key: '', key_prefix: '', state: '', due_after: '', due_before: '', error: '',
    body_field: '', body_value: '', ...params};
  const input = (name, label, attrs = {}) => [h('label', {for: `f-${name}`}, label),
    h('input', {id: `f-${name}`, name, value: f[name], ...attrs})];
  const form = h('form', {class: 'grid', role: 'search', onsubmit: e => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) {
      if (!v) continue;
      q.set(k, k.startsWith('due_') ? isoFromLocal(v) : v);
    }
    location.hash = `#/jobs?${q}`;
  }},
    h('div', {}, input('id', 'Job id', {inputmode: 'numeric'})),
    h('div', {}, input('topic', 'Topic')),
    h('div', {}, input('key', 'Key (with topic)')),
    h('div', {}, input('key_prefix', 'Key prefix')),
    h('div', {}, h('label', {for: 'f-state'}, 'State'), h('select', {id: 'f-state', name: 'state'},
      ['', 'delayed', 'ready', 'reserved', 'buried', 'done'].map(s =>
        h('option', {value: s, selected: s === f.state}, s || 'any')))),
    h('div', {}, input('due_after', 'Due after', {type: 'datetime-local',
      value: f.due_after ? f.due_after.slice(0, 16) : ''})),
    h('div', {}, input('due_before', 'Due before', {type: 'datetime-local',
      value: f.due_before ? f.due_before.slice(0, 16) : ''})),
    h('div', {}, input('error', 'Error text')),
    h('div', {}, input('body_field', 'Body field', {placeholder: 'customer.id'})),
    h('div', {}, input('body_value', 'Body value', {placeholder: 'any value'})),
    h('div', {}, h('button', {type: 'submit', class: 'primary'}, 'Search')));
  const results = h('div', {});
  render(at, h('h1', {}, 'Jobs'), form, results);
  if (f.id) return void (location.hash = `#/jobs/${encodeURIComponent(f.id)}`);
  if (f.key && f.topic) {
    try {
      const j = await api('GET', `/v1/topics/${encodeURIComponent(f.topic)}/keys/${encodeURIComponent(f.key)}`);
      results.replaceChildren(table(['Id', 'Topic', 'State', 'Due', 'Key', 'Attempts', 'Last error'], [jobRow(j)]));
    } catch (e) {
      results.replaceChildren(message(e.status === 404 ? `No job with key ${f.key} in ${f.topic}.` : e.message));
    }
    return;
  }
  const q = new URLSearchParams({limit: '50'});
  for (const k of ['topic', 'key_prefix', 'state', 'due_after', 'due_before', 'error', 'body_field']) {
    if (f[k]) q.set(k, f[k]);
  }
  if (f.body_field && f.body_value) q.set('body_value', f.body_value);
  if (f.cursor) q.set('cursor', f.cursor);
  let page;
  try { page = await api('GET', `/v1/jobs?${q}`); } catch (e) {
    return void results.replaceChildren(message(e.message));
  }
  const next = new URLSearchParams(params);
  next.set('cursor', page.next_cursor || '');
  // A body search reads a bounded number of jobs per page: a short page
  // with a cursor means the search has more jobs to read.
  const short = page.next_cursor && page.jobs.length < 50;
  results.replaceChildren(h('div', {},  // h() skips the nulls; replaceChildren would show them
    table(['Id', 'Topic', 'State', 'Due', 'Key', 'Attempts', 'Last error'], page.jobs.map(jobRow), [5]),
    short ? h('p', {class: 'muted', role: 'status'}, `${page.jobs.length ? 'These are' : 'None are'} ` +
      `the matches among the jobs up to id ${page.next_cursor}; the next page searches on.`)
      : page.jobs.length ? null : h('p', {class: 'muted'}, 'No jobs match.'),
    h('div', {class: 'actions'},
      f.cursor ? h('a', {href: 'javascript:history.back()'}, 'Previous page') : null,
      page.next_cursor ? h('a', {href: `#/jobs?${next}`}, 'Next page') : null)));
}

async function jobPage(id, at = location.hash) {
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  let j;
  try { j = await api('GET', path); } catch (e) {
    return render(at, h('h1', {}, `Job ${id}`), message(e.status === 404 ? 'No such job.' : e.message));
  }
  const attempts = await api('GET', `${path}/attempts`).catch(() => ({attempts: []}));
  const out = h('div', {id: 'job-result'});
  const act = (label, method, sub, body) => button(label, async () => {
    try {
      await api(method, sub ? `${path}/${sub}` : path, body);
      await jobPage(id, at);
      document.getElementById('job-result').replaceChildren(message(`${label}: done.`, true));
    } catch (e) { out.replaceChildren(message(`${label}: ${e.message}`)); }
  }, method === 'DELETE' ? 'danger' : '');
  const delay = h('input', {id: 'e-delay', placeholder: '30m'});
  const priority = h('input', {id: 'e-priority', inputmode: 'numeric', value: j.priority});
  const bodyText = h('textarea', {id: 'e-body'}, j.body === null || j.body === undefined ? '' : JSON.stringify(j.body, null, 2));
  render(at, h('h1', {}, `Job ${j.id}`),
    fields([['topic', h('a', {href: `#/topics/${encodeURIComponent(j.topic)}`}, j.topic)], ['state', j.state],
      ['key', j.key], ['priority', j.priority], ['due', localTime(j.due_at)], ['run at', localTime(j.run_at)],
      ['created', localTime(j.created_at)], ['ttr', `${j.ttr_ms} ms`], ['attempts', j.attempts],
      ['target', !j.target ? 'none (pull)'
        : j.target_kind === 'http' ? `${j.target.method || 'POST'} ${j.target.url}` : j.target.url],
      ['target kind', j.target_kind],
      ['last error', j.last_error], ['timer', j.timer ? JSON.stringify(j.timer) : null],
      ['trace id', j.traceparent ? j.traceparent.slice(3, 35) : null],
      ['tracestate', j.tracestate]]),
    h('h2', {}, 'Body'), h('pre', {}, j.body === undefined ? j.body_base64 || '' : JSON.stringify(j.body, null, 2)),
    h('h2', {}, 'Actions'),
    h('div', {class: 'actions'},
      j.state === 'delayed' ? act('Run now', 'POST', 'run-now', {}) : null,
      j.state === 'buried' ? act('Retry', 'POST', 'retry', {}) : null,
      ['buried', 'delayed'].includes(j.state) ? act('Kick', 'POST', 'kick', {}) : null,
      ['ready', 'delayed'].includes(j.state) ? act('Bury', 'POST', 'bury', {}) : null,
      j.state !== 'reserved' ? act('Delete', 'DELETE', '') : null),
    out,
    j.state === 'reserved' || j.state === 'done' ? null : h('form', {class: 'act', onsubmit: async e => {
      e.preventDefault();
      const patch = {};
      if (delay.value) patch.delay = /^\d+$/.test(delay.value) ? Number(delay.value) : delay.value;
      if (priority.value !== String(j.priority)) patch.priority = Number(priority.value);
      if (bodyText.value.trim() !== JSON.stringify(j.body, null, 2)) {
        try { JSON.parse(bodyText.value); } catch (err) { out.replaceChildren(message('The body is not valid JSON.')); return; }
        patch.body = '__BODY__';
      }
      const text = JSON.stringify(patch).replace('"__BODY__"', bodyText.value);  // the body as typed
      try { await api('PATCH', path, text); await jobPage(id, at); document.getElementById('job-result').replaceChildren(message('Changed.', true)); }
      catch (err) { out.replaceChildren(message(err.message)); }
    }},
      h('h2', {}, 'Change'),
      h('div', {class: 'grid'},
        h('div', {}, h('label', {for: 'e-delay'}, 'New delay from now (ms or 30m)'), delay),
        h('div', {}, h('label', {for: 'e-priority'}, 'Priority'), priority)),
      h('label', {for: 'e-body'}, 'Body (JSON)'), bodyText,
      h('div', {class: 'actions'}, h('button', {type: 'submit', class: 'primary'}, 'Save changes'))),
    h('h2', {}, 'Attempts'),
    table(['#', 'Started', 'Duration', 'Outcome', 'HTTP', 'Error', 'Span (parent id sent)'], attempts.attempts.map(a =>
      [a.attempt, localTime(a.started_at), `${a.duration_ms} ms`, a.outcome, a.http_status || '-', a.error || '-',
       a.parent_id || '-']), [0]));
}

async function runBulk(request, out) {
  let op = await api('POST', '/v1/bulk', request);
  out.replaceChildren(message(`Bulk ${op.action} ${op.id}: started`, true));
  while (op.state === 'running') {
    await new Promise(r => setTimeout(r, 300));
    op = await api('GET', `/v1/bulk/${op.id}`);
    out.replaceChildren(message(`Bulk ${op.action} ${op.id}: ${op.state}, ${op.matched} matched, ${op.applied} applied, ${op.skipped} skipped`, op.state !== 'failed'));
  }
  return op;
}

async function deadPage(at = location.hash) {
  // The groups are the server's (every dead letter); the list is the first 200.
  const [summary, page] = await Promise.all([api('GET', '/v1/dead-letters?limit=100'),
    api('GET', '/v1/jobs?state=buried&limit=200')]);
  const jobs = page.jobs;
  const out = h('div', {id: 'bulk-result', 'aria-live': 'polite'});
  const selected = new Set();
  const each = (label, method, sub) => button(label, async () => {
    for (const id of selected) {
      await api(method, `/v1/jobs/${id}${sub}`, method === 'POST' ? {} : undefined).catch(() => null);
    }
    await deadPage(at);
    const result = document.getElementById('bulk-result');
    if (result) result.replaceChildren(message(`${label}: ${selected.size} jobs.`, true));
  }, method === 'DELETE' ? 'danger' : '');
  const bulk = (label, action, error) => button(label, async () => {
    const op = await runBulk({action, filter: {state: 'buried', error}}, out);
    await deadPage(at);
    const result = document.getElementById('bulk-result');
    if (result) {
      result.replaceChildren(message(`Bulk ${action} ${op.id}: ${op.state}, ${op.matched} matched, ` +
        `${op.applied} applied, ${op.skipped} skipped`, op.state === 'done'));
    }
  }, action === 'cancel' ? 'danger' : '');
  render(at, h('h1', {}, 'Dead letters'),
    h('p', {class: 'muted'}, `${summary.jobs} buried jobs in ${summary.groups.length} groups by last error.`),
    out,
    h('h2', {}, 'By error'),
    table(['Last error', 'Jobs', 'First job', ''], summary.groups.map(g => [g.error || '(no error)', g.count,
      h('a', {href: `#/jobs/${g.first_job_id}`}, String(g.first_job_id)),
      g.error ? h('div', {class: 'actions'}, bulk('Retry all matching', 'retry', g.error),
        bulk('Delete all matching', 'cancel', g.error)) : '-']), [1]),
    h('h2', {}, jobs.length < summary.jobs ? `Jobs (the first ${jobs.length})` : 'Jobs'),
    h('div', {class: 'actions'}, each('Retry selected', 'POST', '/retry'), each('Delete selected', 'DELETE', '')),
    table(['', 'Id', 'Topic', 'Key', 'Attempts', 'Last error'], jobs.map(j => [
      h('input', {type: 'checkbox', class: 'act', 'aria-label': `Select job ${j.id}`,
        onchange: e => e.target.checked ? selected.add(j.id) : selected.delete(j.id)}),
      h('a', {href: `#/jobs/${j.id}`}, String(j.id)), j.topic, j.key || '-', j.attempts, j.last_error || '-'])));
}

// A list of a schedule's next fires in its zone, updated as it is typed
// (POST /v1/timers/preview; an answer older than the last asked is dropped).
function previewList(id) {
  const list = h('ol', {id, 'aria-live': 'polite'});
  let asked = 0;
  list.update = async (schedule, zone) => {
    const mine = ++asked;
    try {
      const r = await api('POST', '/v1/timers/preview', {schedule, timezone: zone, count: 5});
      if (mine === asked) list.replaceChildren(...r.fire_times.map(t => h('li', {}, `${localTime(t, zone)} (${t})`)));
    } catch (e) {
      if (mine === asked) list.replaceChildren(h('li', {class: 'error'}, e.message));
    }
  };
  return list;
}

async function timersPage() {
  const at = location.hash;
  const {timers} = await api('GET', '/v1/timers?limit=1000');
  const val = id => document.getElementById(id).value;
  const preview = previewList('preview');
  const out = h('div', {});
  const update = () => preview.update(val('t-schedule'), val('t-timezone') || 'UTC');
  const input = (id, label, attrs = {}) => h('div', {}, h('label', {for: id}, label), h('input', {id, ...attrs}));
  const form = h('form', {class: 'act', onsubmit: async e => {
    e.preventDefault();
    const t = {name: val('t-name'), topic: val('t-topic'), schedule: val('t-schedule'), timezone: val('t-timezone') || 'UTC'};
    const template = {};
    if (val('t-target')) template.target = {url: val('t-target')};
    let text = JSON.stringify({...t, template});
    if (val('t-body')) {
      try { JSON.parse(val('t-body')); } catch (err) { out.replaceChildren(message('The body is not valid JSON.')); return; }
      text = text.replace(/\}\}$/, `${Object.keys(template).length ? ',' : ''}"body":${val('t-body')}}}`);
    }
    try {
      const made = await api('POST', '/v1/timers', text);
      location.hash = `#/timers/${made.id}`;
    } catch (err) { out.replaceChildren(message(err.message)); }
  }},
    h('h2', {}, 'New timer'),
    h('div', {class: 'grid'},
      input('t-name', 'Name', {required: true}), input('t-topic', 'Topic', {required: true}),
      input('t-schedule', 'Schedule (cron, @daily, @every 90s)', {required: true, oninput: update}),
      input('t-timezone', 'Time zone', {value: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC', oninput: update}),
      input('t-target', 'Target URL (empty: pull)')),
    h('label', {for: 't-body'}, 'Body of each fire\'s job (JSON)'), h('textarea', {id: 't-body'}),
    h('h3', {}, 'Next fires'), preview,
    h('div', {class: 'actions'}, h('button', {type: 'submit', class: 'primary'}, 'Create timer')), out);
  render(at, h('h1', {}, 'Timers'),
    table(['Id', 'Name', 'Topic', 'Schedule', 'Zone', 'Active', 'Next fire'], timers.map(t => [
      h('a', {href: `#/timers/${t.id}`}, String(t.id)), t.name, t.topic, t.schedule, t.timezone,
      t.active ? 'yes' : 'paused', localTime(t.next_fire_at, t.timezone)])),
    form);
}

async function timerPage(id, at = location.hash) {
  const path = `/v1/timers/${encodeURIComponent(id)}`;
  const [t, next, fires] = await Promise.all([api('GET', path), api('GET', `${path}/next?count=5`),
    api('GET', `${path}/fires`)]);
  const out = h('div', {});
  const act = (label, fn, cls) => button(label, async () => {
    try { await fn(); await timerPage(id, at); } catch (e) { out.replaceChildren(message(e.message)); }
  }, cls);
  const editPreview = previewList('edit-preview');
  const changed = () => editPreview.update(schedule.value, zone.value || 'UTC');
  const schedule = h('input', {id: 'e-schedule', value: t.schedule, oninput: changed});
  const zone = h('input', {id: 'e-zone', value: t.timezone, oninput: changed});
  render(at, h('h1', {}, `Timer ${t.name}`),
    fields([['id', t.id], ['topic', t.topic], ['schedule', t.schedule], ['time zone', t.timezone],
      ['active', t.active ? 'yes' : 'paused'], ['misfire', t.misfire], ['overlap', t.overlap],
      ['next fire', localTime(t.next_fire_at, t.timezone)], ['last fire', localTime(t.last_fire_at, t.timezone)]]),
    h('div', {class: 'actions'},
      t.active ? act('Pause', () => api('POST', `${path}/pause`, {})) : act('Resume', () => api('POST', `${path}/resume`, {})),
      act('Delete', async () => { await api('DELETE', path); location.hash = '#/timers'; }, 'danger')),
    out,
    h('form', {class: 'act', onsubmit: async e => {
      e.preventDefault();
      try { await api('PATCH', path, {schedule: schedule.value, timezone: zone.value}); await timerPage(id, at); }
      catch (err) { out.replaceChildren(message(err.message)); }
    }}, h('h2', {}, 'Edit'), h('div', {class: 'grid'},
      h('div', {}, h('label', {for: 'e-schedule'}, 'Schedule'), schedule),
      h('div', {}, h('label', {for: 'e-zone'}, 'Time zone'), zone),
      h('div', {}, h('button', {type: 'submit', class: 'primary'}, 'Save'))),
      h('p', {class: 'muted'}, 'Next fires as edited:'), editPreview),
    h('h2', {}, 'Next fires'),
    h('ol', {}, next.fire_times.map(x => h('li', {}, `${localTime(x, t.timezone)} (${x})`))),
    h('h2', {}, 'Fire history'),
    table(['Fire time', 'Outcome', 'Job', 'Job state', 'Last error'], fires.fires.map(f => [
      localTime(f.fire_at, t.timezone), f.outcome, f.job_id ? h('a', {href: `#/jobs/${f.job_id}`}, String(f.job_id)) : '-',
      f.job_state || '-', f.job_last_error || '-'])));
  refreshIn(5000);
}

async function clusterPage() {
  const at = location.hash;
  let view;
  try { view = await api('GET', '/v1/cluster'); } catch (e) {
    if (e.status === 404) return render(at, h('h1', {}, 'Cluster'), h('p', {}, 'This server is a single node (it runs without --cluster).'));
    throw e;
  }
  const owners = new Map();
  for (const s of view.shards) owners.set(s.owner || '(none)', (owners.get(s.owner || '(none)') || 0) + 1);
  render(at, h('h1', {}, 'Cluster'),
    h('p', {}, `This node: ${view.node}. Lease ${view.lease_ms} ms. ${view.shards.length} shards.`),
    h('h2', {}, 'Nodes'),
    table(['Node', 'Live', 'Shards', 'Beanstalk', 'HTTP', 'Last seen'], view.nodes.map(n => [n.id, n.live ? 'yes' : 'no',
      n.shards_owned, n.beanstalk || '-', n.http || '-', localTime(new Date(n.last_seen_ms).toISOString())]), [2]),
    h('h2', {}, 'Shard owners'),
    table(['Owner', 'Shards'], [...owners].map(([o, n]) => [o, n]), [1]),
    h('h2', {}, 'Leases'),
    h('details', {}, h('summary', {}, `Each shard's lease (${view.shards.length})`),
      table(['Shard', 'Owner', 'Epoch', 'Expires', 'Live'], view.shards.map(s => [s.shard, s.owner || '-', s.epoch,
        localTime(new Date(s.lease_expires_ms).toISOString()), s.live ? 'yes' : 'no']), [0, 2])));
  refreshIn(3000);
}

// ------------------------------------------------------------------ router

// Refreshes the page in `ms`, unless the user has left it, is signing in,
// or is typing in one of its fields (then it waits for them).
function refreshIn(ms) {
  clearTimeout(state.timer);
  const at = location.hash;
  state.timer = setTimeout(() => {
    if (location.hash !== at || document.getElementById('login').open) return;
    const typing = document.activeElement && document.activeElement.matches('input, textarea, select');
    if (typing) refreshIn(ms); else route(true);
  }, ms);
}

async function route(refresh) {
  const at = location.hash;
  clearTimeout(state.timer);
  const hash = location.hash || '#/';
  const [path, query] = hash.slice(1).split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  const page = parts[0] || 'overview';
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (!refresh) document.title = `${page[0].toUpperCase()}${page.slice(1)} - delayd`;
  try {
    if (page === 'overview') await overview();
    else if (page === 'topics') await (parts[1] ? topicPage(parts[1]) : topicsPage());
    else if (page === 'jobs') await (parts[1] ? jobPage(parts[1]) : jobsPage(params));
    else if (page === 'dead') await deadPage(at);
    else if (page === 'timers') await (parts[1] ? timerPage(parts[1]) : timersPage());
    else if (page === 'cluster') await clusterPage();
    else render(at, h('h1', {}, 'Not found'), h('p', {}, h('a', {href: '#/'}, 'Overview')));
  } catch (e) {
    render(at, h('h1', {}, 'Error'), message(e.message));
  }
}

async function start() {
  setupLogin();
  const root = document.documentElement;
  const saved = localStorage.getItem('delayd-theme');
  if (saved) root.classList.add(saved);
  document.getElementById('theme').addEventListener('click', () => {
    const dark = root.classList.contains('dark') ||
      (!root.classList.contains('light') && matchMedia('(prefers-color-scheme: dark)').matches);
    root.classList.remove('dark', 'light');
    root.classList.add(dark ? 'light' : 'dark');
    localStorage.setItem('delayd-theme', dark ? 'light' : 'dark');
  });
  await loadConfig();
  window.addEventListener('hashchange', () => { route(); document.getElementById('main').focus(); });
  await route();
}

start();
