// The seckill dashboard: polls the API every second, draws one card per
// product and coupon batch, and drives the admin actions (stage switch,
// reset, burst). No library: the latency chart is plain SVG.
'use strict';

const STAGES = ['unlocked', 'local-mutex', 'redis-lock', 'redlock', 'db-atomic', 'redis-atomic'];
const $ = (sel, el = document) => el.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const svgEl = (tag, attrs = {}) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};

const state = { fleet: null, stages: [], mode: '', items: new Map(), user: 0, burstMax: 2000, busy: false };
const session = Math.random().toString(36).slice(2, 8);

// ---- HTTP -------------------------------------------------------------

async function getJSON(url) {
  const r = await fetch(url, { cache: 'no-store' });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.json();
}

// problemText turns a problem+json answer into one line.
async function problemText(r) {
  try {
    const p = await r.json();
    return `${p.title || r.statusText}${p.detail ? ': ' + p.detail : ''}`;
  } catch { return `${r.status} ${r.statusText}`; }
}

function token() { return sessionStorage.getItem('seckill.token') || ''; }

// askToken opens the token dialog and resolves with the token, or '' when
// the operator cancels.
function askToken(reason) {
  const dlg = $('#token-dialog'), input = $('#token-input');
  $('#token-h').textContent = reason || 'Admin token';
  input.value = '';
  return new Promise(resolve => {
    const done = v => { dlg.close(); cleanup(); resolve(v); };
    const onSubmit = ev => { ev.preventDefault(); if (input.value.length >= 8) { sessionStorage.setItem('seckill.token', input.value); done(input.value); } };
    const onCancel = () => done('');
    const cleanup = () => { $('#token-form').removeEventListener('submit', onSubmit); $('#token-cancel').removeEventListener('click', onCancel); dlg.removeEventListener('cancel', onCancel); };
    $('#token-form').addEventListener('submit', onSubmit);
    $('#token-cancel').addEventListener('click', onCancel);
    dlg.addEventListener('cancel', onCancel);
    dlg.showModal();
    input.focus();
  });
}

// admin sends an admin request, asking for the token when there is none or
// when the server refuses it. It resolves with the Response, or null when
// the operator cancelled.
async function admin(method, url, body) {
  let t = token() || await askToken('Admin token');
  for (let attempt = 0; t && attempt < 2; attempt++) {
    const r = await fetch(url, {
      method, headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + t },
      body: JSON.stringify(body),
    });
    if (r.status !== 401 && r.status !== 403) return r;
    sessionStorage.removeItem('seckill.token');
    t = await askToken('That token was refused. Admin token');
  }
  return null;
}

function say(msg, bad = false) {
  const s = $('#status');
  s.textContent = msg;
  s.classList.toggle('bad', bad);
}

// ---- polling ----------------------------------------------------------

async function loadFleet() {
  try {
    const f = await getJSON('/api/v1/fleet');
    state.burstMax = f.burst_max || state.burstMax;
    return f.peers;
  } catch {
    const i = await getJSON('/api/v1/info'); // dashboard routes off: this instance alone
    return [{ url: location.origin, instance: i.instance, healthy: true, ready: true, mode: i.mode, stages: i.stages }];
  }
}

async function loadItems() {
  const out = [];
  const { products } = await getJSON('/api/v1/products');
  for (const p of products) out.push({ kind: 'product', id: p.id, name: p.name });
  try {
    const { coupons } = await getJSON('/api/v1/coupons');
    for (const c of coupons) out.push({ kind: 'coupon', id: c.id, name: c.name });
  } catch { /* coupons are optional */ }
  await Promise.all(out.map(async it => {
    it.audit = await getJSON(`/api/v1/${it.kind}s/${it.id}/audit`);
  }));
  return out;
}

async function refresh() {
  try {
    const [peers, items] = await Promise.all([loadFleet(), loadItems()]);
    renderFleet(peers);
    renderItems(items);
    document.body.dataset.ready = '1';
  } catch (e) {
    say('Cannot reach the API: ' + e.message, true);
  } finally {
    setTimeout(refresh, 1000);
  }
}

// ---- fleet and stage --------------------------------------------------

function renderFleet(peers) {
  const tbody = $('#fleet tbody');
  tbody.replaceChildren(...peers.map(p => {
    const ok = p.healthy && p.ready;
    return el('tr', {},
      el('td', { text: p.instance || '?' }),
      el('td', { class: ok ? 'up' : 'down', text: ok ? '✓ up' : (p.healthy ? '✗ not ready' : '✗ DOWN'), title: p.error || '' }),
      el('td', {}, el('code', { text: p.mode || '?' })),
      el('td', { class: 'muted', text: p.url }));
  }));
  const modes = [...new Set(peers.filter(p => p.mode).map(p => p.mode))];
  state.mode = modes.length === 1 ? modes[0] : '';
  $('#stage-now').textContent = modes.length === 1 ? modes[0] : `mixed: ${modes.join(', ')}`;
  document.body.dataset.stage = state.mode;
  const avail = STAGES.filter(s => peers.every(p => !p.stages || p.stages.includes(s)));
  if (avail.join() !== state.stages.join()) {
    state.stages = avail;
    $('#stage-buttons').replaceChildren(...avail.map(s => {
      const b = el('button', { type: 'button', 'data-stage': s, 'aria-pressed': 'false', text: s });
      b.addEventListener('click', () => switchStage(s));
      return b;
    }));
  }
  for (const b of $('#stage-buttons').children) b.setAttribute('aria-pressed', String(b.dataset.stage === state.mode));
}

async function switchStage(mode) {
  say(`Switching every instance to ${mode}…`);
  const r = await admin('PUT', '/api/v1/admin/fleet/mode', { mode });
  if (!r) { say('Stage not switched: no admin token.'); return; }
  if (r.ok) { say(`Every instance now runs ${mode}.`); refresh1(); return; }
  if (r.status === 502) {
    const b = await r.json();
    say('Some instances refused: ' + b.peers.filter(p => p.error).map(p => `${p.url}: ${p.error}`).join('; '), true);
  } else say('Stage not switched: ' + await problemText(r), true);
}

let refreshing = null;
function refresh1() { // one extra refresh now, without starting a second loop
  if (!refreshing) refreshing = Promise.all([loadFleet(), loadItems()]).then(([p, i]) => { renderFleet(p); renderItems(i); }).catch(() => {}).finally(() => { refreshing = null; });
}

// ---- item cards -------------------------------------------------------

function card(it) {
  const key = `${it.kind}-${it.id}`;
  const c = el('article', { class: 'card', 'data-item': key, 'aria-labelledby': `h-${key}` });
  const num = (label, field) => el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': field, text: '–' }));
  c.append(
    el('h3', { id: `h-${key}` }, el('span', { 'data-field': 'name', text: it.name }), el('span', { class: 'kind', text: it.kind === 'product' ? `product #${it.id}` : `coupon batch #${it.id}` })),
    el('dl', { class: 'nums' }, num('Initial stock', 'initial_stock'), num('Stock left', 'stock'), num(it.kind === 'product' ? 'Sold' : 'Grabbed', 'sold')),
    el('div', { class: 'verdicts' },
      el('div', { class: 'verdict', 'data-verdict': 'oversold' }, el('span', { 'data-field': 'oversold-label', text: 'Oversold' }), ' ', el('span', { class: 'n', 'data-field': 'oversold', text: '0' })),
      el('div', { class: 'verdict', 'data-verdict': 'conserved', 'data-field': 'conserved', text: '–' })),
  );
  const buy = el('button', { type: 'button', class: 'primary', 'data-action': 'buy', text: it.kind === 'product' ? 'Buy' : 'Grab' });
  buy.addEventListener('click', () => buyOne(it.kind, it.id, buy));
  const reset = el('button', { type: 'button', 'data-action': 'reset', text: 'Reset stock' });
  reset.addEventListener('click', () => resetItem(it.kind, it.id));
  c.append(el('div', { class: 'actions' }, buy, reset, el('span', { class: 'muted', 'data-field': 'orders' })));
  return c;
}

function renderItems(items) {
  const box = $('#items');
  const sel = $('#burst-item');
  for (const it of items) {
    const key = `${it.kind}-${it.id}`;
    let c = box.querySelector(`[data-item="${key}"]`);
    if (!c) {
      c = card(it);
      box.append(c);
      sel.append(el('option', { value: key, text: `${it.name} (${it.kind} #${it.id})` }));
    }
    const a = it.audit;
    state.items.set(key, it);
    const set = (f, v) => { c.querySelector(`[data-field="${f}"]`).textContent = v; };
    set('initial_stock', a.initial_stock);
    set('stock', a.stock);
    set('sold', a.sold);
    set('oversold', a.oversold);
    set('orders', `${a.orders} ${it.kind === 'product' ? 'orders' : 'grabs'}`);
    const bad = a.oversold > 0;
    const ov = c.querySelector('[data-verdict="oversold"]');
    ov.classList.toggle('bad', bad);
    set('oversold-label', bad ? '⚠ OVERSOLD' : '✓ Oversold');
    const cons = c.querySelector('[data-verdict="conserved"]');
    cons.classList.toggle('bad', !a.conserved);
    cons.textContent = a.conserved ? '✓ Conserved' : '✗ NOT conserved';
    c.classList.toggle('is-bad', bad || !a.conserved);
    c.dataset.oversold = a.oversold;
    c.dataset.stock = a.stock;
  }
}

async function buyOne(kind, id, btn) {
  const user = `web-${session}-${++state.user}`;
  btn.disabled = true;
  try {
    const r = await fetch(`/api/v1/${kind}s/${id}/${kind === 'product' ? 'buy' : 'grab'}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': user },
      body: JSON.stringify(kind === 'product' ? { user_id: user, quantity: 1 } : { user_id: user }),
    });
    const where = `on ${r.headers.get('X-Seckill-Instance') || '?'} (stage ${r.headers.get('X-Seckill-Mode') || '?'})`;
    if (r.ok) say(`${user} ${kind === 'product' ? 'bought 1' : 'grabbed a coupon'} ${where}.`);
    else say(`${user} was refused ${where}: ${await problemText(r)}`, r.status >= 500);
  } catch (e) {
    say('Buy failed: ' + e.message, true);
  } finally {
    btn.disabled = false;
    refresh1();
  }
}

async function resetItem(kind, id, quiet) {
  const it = state.items.get(`${kind}-${id}`);
  const stock = it ? it.audit.initial_stock : 100;
  const r = await admin('POST', `/api/v1/admin/${kind}s/${id}/reset`, { stock });
  if (!r) { say('Not reset: no admin token.'); return false; }
  if (!r.ok) { say('Not reset: ' + await problemText(r), true); return false; }
  if (!quiet) say(`${it ? it.name : kind + ' ' + id} reset to ${stock}; its orders are gone.`);
  refresh1();
  return true;
}

// ---- burst ------------------------------------------------------------

async function runBurst(ev) {
  ev.preventDefault();
  const [kind, id] = $('#burst-item').value.split('-');
  const n = Number($('#burst-n').value);
  const out = $('#burst-out');
  if (!(n >= 1 && n <= state.burstMax)) { say(`N must be between 1 and ${state.burstMax}.`, true); return; }
  const btn = $('#burst-run');
  btn.disabled = true;
  try {
    if ($('#burst-reset').checked && !await resetItem(kind, Number(id), true)) return;
    out.replaceChildren(el('p', { class: 'headline', text: `Firing ${n} buys at once under ${state.mode || 'the current stage'}…` }));
    const r = await admin('POST', '/api/v1/admin/burst', { kind, item_id: Number(id), n });
    if (!r) { out.replaceChildren(el('p', { text: 'No burst: no admin token.' })); return; }
    if (!r.ok) { out.replaceChildren(el('p', { class: 'headline bad', text: 'Burst refused: ' + await problemText(r) })); return; }
    renderBurst(await r.json());
  } finally {
    btn.disabled = false;
    refresh1();
  }
}

function renderBurst(res) {
  const out = $('#burst-out');
  const a = res.audit;
  const stages = Object.keys(res.stages).join(', ') || '?';
  let head;
  if (!a) head = el('p', { class: 'headline bad', text: 'Burst done, but the audit failed: ' + res.audit_error });
  else if (a.oversold > 0) head = el('p', { class: 'headline bad' }, `⚠ OVERSOLD by `, el('span', { 'data-field': 'oversold', text: a.oversold }), `: ${a.sold} sold from ${a.initial_stock} units under ${stages}.`);
  else head = el('p', { class: 'headline good' }, '✓ No oversell (oversold ', el('span', { 'data-field': 'oversold', text: '0' }), `): ${a.sold} sold from ${a.initial_stock} units under ${stages}.`);
  const c = res.counts;
  const li = (label, v) => el('li', {}, `${label} `, el('b', { text: v }));
  const counts = el('ul', { class: 'counts', 'aria-label': 'Outcomes' },
    li('created', c.created), li('sold out', c.sold_out), li('lock timeout', c.lock_timeout),
    li('other 4xx', c.other_4xx), li('5xx', c.server_errors), li('no answer', c.failed));
  const l = res.latency;
  const lat = el('p', { style: 'margin:.2rem 0' }, `${res.request.n} requests in ${Math.round(res.elapsed_ms)} ms · latency p50 `, el('b', { text: fmt(l.p50_ms) }),
    ' · p95 ', el('b', { text: fmt(l.p95_ms) }), ' · p99 ', el('b', { text: fmt(l.p99_ms) }), ' ms · per instance: ',
    Object.entries(res.by_instance).map(([k, v]) => `${k} ${v}`).join(', '));
  out.replaceChildren(head, counts, lat, chart(l));
  out.dataset.oversold = a ? a.oversold : '';
}

const fmt = v => v >= 100 ? Math.round(v) : v.toFixed(1);

// chart draws a latency histogram with the p50/p95/p99 marks, as SVG.
function chart(l) {
  const W = 640, H = 240, L = 46, R = 12, T = 14, B = 40;
  const s = l.samples_ms || [];
  const svg = svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Latency histogram of ${s.length} requests: p50 ${fmt(l.p50_ms)} ms, p95 ${fmt(l.p95_ms)} ms, p99 ${fmt(l.p99_ms)} ms` });
  if (!s.length) return svg;
  const top = niceCeil(l.max_ms || 1), bins = 30, w = top / bins;
  const counts = new Array(bins).fill(0);
  for (const v of s) counts[Math.min(bins - 1, Math.floor(v / w))]++;
  const cmax = Math.max(...counts);
  const x = v => L + (v / top) * (W - L - R), y = n => H - B - (n / cmax) * (H - B - T);
  svg.append(svgEl('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#111' }), svgEl('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#111' }));
  counts.forEach((n, i) => {
    if (n) svg.append(svgEl('rect', { x: x(i * w) + 1, y: y(n), width: Math.max(1, x(w) - L - 2), height: H - B - y(n), fill: '#0b57d0' }));
  });
  for (let i = 0; i <= 4; i++) {
    const v = top * i / 4;
    const t = svgEl('text', { x: x(v), y: H - B + 14, 'text-anchor': 'middle' }); t.textContent = fmt(v); svg.append(t);
  }
  const yl = svgEl('text', { x: L - 6, y: T + 8, 'text-anchor': 'end' }); yl.textContent = cmax; svg.append(yl);
  const y0 = svgEl('text', { x: L - 6, y: H - B, 'text-anchor': 'end' }); y0.textContent = '0'; svg.append(y0);
  const xt = svgEl('text', { x: (W + L) / 2, y: H - 6, 'text-anchor': 'middle' }); xt.textContent = 'latency (ms) → requests per bar'; svg.append(xt);
  [['p50', l.p50_ms, '4 0'], ['p95', l.p95_ms, '6 3'], ['p99', l.p99_ms, '2 2']].forEach(([name, v, dash], i) => {
    svg.append(svgEl('line', { x1: x(v), y1: T, x2: x(v), y2: H - B, stroke: '#b00020', 'stroke-width': 2, 'stroke-dasharray': dash }));
    const t = svgEl('text', { x: x(v) + 3, y: T + 10 + i * 12 }); t.textContent = `${name} ${fmt(v)}`; svg.append(t);
  });
  return svg;
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// ---- lab --------------------------------------------------------------

async function loadLab() {
  const p = $('#lab-summary');
  try {
    const lab = await getJSON('/api/v1/lab/latest');
    if (!lab.available) { p.textContent = lab.hint; return; }
    const rows = lab.results.rows || [];
    const failed = rows.filter(r => r.verdict && !/^(pass|ok)/i.test(r.verdict)).length;
    p.replaceChildren(`Run ${lab.run}: ${rows.length} rows, ${failed} unexpected. `, el('a', { href: '/lab.html', text: 'Open the report (table and plots)' }));
  } catch {
    p.textContent = 'This server does not serve lab reports.';
  }
}

$('#burst-form').addEventListener('submit', runBurst);
refresh();
loadLab();
getJSON('/api/v1/fleet').then(f => { $('#burst-n').max = f.burst_max; }).catch(() => {});
