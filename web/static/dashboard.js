// The seckill dashboard: polls the API every second, draws one card per
// product and coupon batch, and drives the admin actions (stage switch,
// reset, burst). No library: the latency chart is plain SVG.
//
// Two languages, chosen as on the workshop pages (prefs.js: ?lang=en|zh,
// remembered): the page's fixed words are <span lang> pairs in index.html,
// and every string drawn here goes through T(english, chinese).
'use strict';

const ZH = document.documentElement.dataset.lang === 'zh';
const T = (en, zh) => (ZH ? zh : en);

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

const state = { stages: [], stage: '', items: new Map(), user: 0, burstMax: 2000 };
const session = Math.random().toString(36).slice(2, 8);

document.title = T('seckill dashboard', 'seckill 秒杀仪表盘');
$('#stage-buttons').setAttribute('aria-label', T('Switch the stage of every instance (admin)', '切换所有实例的阶段（需要管理员令牌）'));

// ---- HTTP -------------------------------------------------------------

async function getJSON(url) {
  const r = await fetch(url, { cache: 'no-store' });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.json();
}

// problemZH names the API's problem types (internal/httpapi/errors.go) in
// Chinese; a type missing here shows the server's English title.
const problemZH = {
  'invalid-request': '请求无效', 'malformed-json': 'JSON 格式错误', 'unknown-stage': '未知阶段',
  'stage-unavailable': '此实例不支持该阶段', 'unauthorized': '需要管理员令牌', 'forbidden': '管理员令牌错误',
  'admin-disabled': '管理接口未开启', 'not-found': '不存在', 'sold-out': '已售罄',
  'sale-not-open': '尚未开售', 'sale-closed': '已停售',
  'already-purchased': '已经买过', 'idempotency-in-flight': '同一请求仍在处理中',
  'idempotency-mismatch': '幂等键被用于不同的请求', 'lock-timeout': '等锁超时', 'overloaded': '过载，请稍后重试',
  'lock-lost': '锁已丢失，未写入', 'unavailable': '后端不可用', 'timeout': '请求超时', 'cancelled': '请求被取消',
  'internal': '服务器内部错误',
  'room-not-found': '没有排队室', 'pass-required': '需要排队室通行证', 'pass-spent': '通行证已用过',
  'room-token-malformed': '排队凭证格式错误', 'room-token-forged': '排队凭证是伪造的', 'room-token-expired': '排队凭证已过期',
  'room-token-wrong-item': '排队凭证属于其他商品', 'room-token-wrong-buyer': '排队凭证属于其他买家',
};

// problemText turns a problem+json answer into one line.
async function problemText(r) {
  try {
    const p = await r.json();
    const slug = (p.type || '').replace(/^\/problems\//, '');
    if (ZH) return problemZH[slug] || p.title || `HTTP ${r.status}`;
    return `${p.title || r.statusText}${p.detail ? ': ' + p.detail : ''}`;
  } catch { return `HTTP ${r.status} ${r.statusText}`; }
}

function token() { return sessionStorage.getItem('seckill.token') || ''; }

// askToken opens the token dialog and resolves with the token, or '' when
// the operator cancels.
function askToken(refused) {
  const dlg = $('#token-dialog'), input = $('#token-input');
  $('#token-h').textContent = refused ? T('That token was refused. Admin token', '令牌被拒绝，请重新输入管理员令牌') : T('Admin token', '管理员令牌');
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
  let t = token() || await askToken(false);
  for (let attempt = 0; t && attempt < 2; attempt++) {
    const r = await fetch(url, {
      method, headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + t },
      body: JSON.stringify(body),
    });
    if (r.status !== 401 && r.status !== 403) return r;
    sessionStorage.removeItem('seckill.token');
    t = await askToken(true);
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
    return [{ url: location.origin, instance: i.instance, healthy: true, ready: true, stage: i.stage, stages: i.stages }];
  }
}

// The cards show one page of the catalogue (docs/api.md#pages): PAGE
// products from pager.cursor, and the first PAGE coupon batches, both in
// pager.state when one is chosen. back holds the cursors of the pages
// before; gen changes with the page, so that an answer for another page
// is not drawn.
const PAGE = 12;
const pager = { state: '', cursor: '', back: [], next: '', gen: 0 };

function listURL(kind) {
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (kind === 'product' && pager.cursor) q.set('cursor', pager.cursor);
  if (pager.state) q.set('state', pager.state);
  return `/api/v1/${kind}s?${q}`;
}

function turnPage(cursor, back) {
  pager.cursor = cursor;
  pager.back = back;
  pager.next = '';
  pager.gen++;
  renderPager();
  refresh1();
}

function renderPager() {
  $('#page-prev').disabled = pager.back.length === 0;
  $('#page-next').disabled = !pager.next;
  const n = pager.back.length + 1;
  $('#page-n').textContent = T(`Page ${n}`, `第 ${n} 页`);
}

{
  const sel = $('#page-state');
  for (const [v, en, zh] of [['', 'All', '全部'], ['scheduled', 'Scheduled', '未开售'], ['open', 'On sale', '在售'], ['sold-out', 'Sold out', '已售罄'], ['closed', 'Closed', '已停售']]) {
    sel.append(el('option', { value: v, text: T(en, zh) }));
  }
  sel.addEventListener('change', () => { pager.state = sel.value; turnPage('', []); });
  $('#page-next').addEventListener('click', () => { if (pager.next) turnPage(pager.next, [...pager.back, pager.cursor]); });
  $('#page-prev').addEventListener('click', () => { if (pager.back.length) turnPage(pager.back.at(-1), pager.back.slice(0, -1)); });
  renderPager();
}

async function loadItems() {
  const out = [];
  const gen = pager.gen;
  out.gen = gen;
  // The sale window, and the server's clock minus this page's, measured
  // when the answer came: the countdown runs on the server's clock.
  const item = (kind, x) => ({ kind, id: x.id, name: x.name, opens_at: x.opens_at, closes_at: x.closes_at,
    skew: Date.parse(x.server_time) - Date.now() });
  const { products, next_cursor } = await getJSON(listURL('product'));
  for (const p of products) out.push(item('product', p));
  if (gen === pager.gen) { pager.next = next_cursor || ''; renderPager(); }
  try {
    const { coupons } = await getJSON(listURL('coupon'));
    for (const c of coupons) out.push(item('coupon', c));
  } catch { /* coupons are optional */ }
  await Promise.all(out.map(async it => {
    try {
      it.audit = await getJSON(`/api/v1/${it.kind}s/${it.id}/audit`);
    } catch (e) {
      if (!e.message.endsWith(': 404')) throw e;
      it.gone = true; // archived since the list was read
    }
  }));
  // A product's waiting room, if it has one (404 room-not-found: none).
  await Promise.all(out.filter(it => it.kind === 'product' && !it.gone).map(async it => {
    const r = await fetch(`/api/v1/products/${it.id}/room`, { cache: 'no-store' }).catch(() => null);
    if (r && r.ok) it.room = await r.json();
  }));
  const kept = out.filter(it => !it.gone);
  kept.gen = gen;
  return kept;
}

async function refresh() {
  try {
    const [peers, items] = await Promise.all([loadFleet(), loadItems()]);
    renderFleet(peers);
    renderItems(items);
    renderRecord(items);
    renderRooms(items);
    document.body.dataset.ready = '1';
  } catch (e) {
    say(T('Cannot reach the API: ', '无法连接 API：') + e.message, true);
  } finally {
    setTimeout(refresh, 1000);
  }
}

// ---- fleet and stage --------------------------------------------------

// shortURL drops the scheme: the table has room for host and port only.
const shortURL = u => u.replace(/^https?:\/\//, '');

function renderFleet(peers) {
  const tbody = $('#fleet tbody');
  tbody.replaceChildren(...peers.map(p => {
    const ok = p.healthy && p.ready;
    const health = ok ? T('✓ up', '✓ 正常') : (p.healthy ? T('✗ not ready', '✗ 未就绪') : T('✗ DOWN', '✗ 宕机'));
    return el('tr', {},
      el('td', { class: 'nowrap', 'data-label': T('Instance', '实例') }, el('span', { text: p.instance || '?' })),
      el('td', { class: ok ? 'nowrap up' : 'nowrap down', 'data-label': T('Health', '状态'), title: p.error || '' }, el('span', { text: health })),
      el('td', { class: 'nowrap', 'data-label': T('Stage', '阶段') }, el('code', { text: p.stage || '?' })),
      el('td', { class: 'nowrap url', 'data-label': T('Address', '地址') }, el('a', { href: p.url + '/', text: shortURL(p.url) })));
  }));
  const running = [...new Set(peers.filter(p => p.stage).map(p => p.stage))];
  state.stage = running.length === 1 ? running[0] : '';
  $('#stage-now').textContent = running.length === 1 ? running[0] : T('mixed: ', '不一致：') + running.join(', ');
  document.body.dataset.stage = state.stage;
  // The stages every instance offers, in the order the API lists them
  // (inventory.Stages: the teaching order).
  const first = peers.find(p => p.stages) || { stages: [] };
  const avail = first.stages.filter(s => peers.every(p => !p.stages || p.stages.includes(s)));
  if (avail.join() !== state.stages.join()) {
    state.stages = avail;
    $('#stage-buttons').replaceChildren(...avail.map(s => {
      const b = el('button', { type: 'button', 'data-stage': s, 'aria-pressed': 'false', text: s });
      b.addEventListener('click', () => switchStage(s));
      return b;
    }));
  }
  for (const b of $('#stage-buttons').children) b.setAttribute('aria-pressed', String(b.dataset.stage === state.stage));
}

async function switchStage(stage) {
  say(T(`Switching every instance to ${stage}…`, `正在把所有实例切换到 ${stage}…`));
  const r = await admin('PUT', '/api/v1/admin/fleet/stage', { stage });
  if (!r) { say(T('Stage not switched: no admin token.', '未切换阶段：没有管理员令牌。')); return; }
  if (r.ok) { say(T(`Every instance now runs ${stage}.`, `所有实例现在运行 ${stage}。`)); refresh1(); return; }
  if (r.status === 502) {
    const b = await r.json();
    say(T('Some instances refused: ', '部分实例拒绝了切换：') + b.peers.filter(p => p.error).map(p => `${p.url}: ${p.error}`).join('; '), true);
  } else say(T('Stage not switched: ', '未切换阶段：') + await problemText(r), true);
}

let refreshing = null;
function refresh1() { // one extra refresh now, without starting a second loop
  if (!refreshing) refreshing = Promise.all([loadFleet(), loadItems()]).then(([p, i]) => { renderFleet(p); renderItems(i); renderRecord(i); renderRooms(i); }).catch(() => {}).finally(() => { refreshing = null; });
}

// ---- item cards -------------------------------------------------------

const kindName = it => it.kind === 'product' ? T(`product #${it.id}`, `商品 #${it.id}`) : T(`coupon batch #${it.id}`, `优惠券批次 #${it.id}`);

function card(it) {
  const key = `${it.kind}-${it.id}`;
  const c = el('article', { class: 'card', 'data-item': key, 'aria-labelledby': `h-${key}` });
  const num = (label, field) => el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': field, text: '–' }));
  c.append(
    el('h3', { id: `h-${key}` }, el('span', { 'data-field': 'name', text: it.name }), el('span', { class: 'kind', text: kindName(it) })),
    el('dl', { class: 'nums' },
      num(T('Initial stock', '初始库存'), 'initial_stock'),
      num(T('Stock left', '剩余库存'), 'stock'),
      num(it.kind === 'product' ? T('Sold', '已售') : T('Grabbed', '已领取'), 'sold')),
    el('div', { class: 'verdicts' },
      el('div', { class: 'verdict', 'data-verdict': 'oversold' }, el('span', { 'data-field': 'oversold-label', text: T('Oversold', '超卖') }), ' ', el('span', { class: 'n', 'data-field': 'oversold', text: '0' })),
      el('div', { class: 'verdict', 'data-verdict': 'conserved', 'data-field': 'conserved', text: '–' })),
  );
  const buy = el('button', { type: 'button', class: 'primary', 'data-action': 'buy', text: it.kind === 'product' ? T('Buy', '购买') : T('Grab', '领取') });
  buy.addEventListener('click', () => buyOne(it.kind, it.id, buy));
  const reset = el('button', { type: 'button', 'data-action': 'reset', text: T('Reset stock', '重置库存') });
  reset.addEventListener('click', () => resetItem(it.kind, it.id));
  c.append(el('div', { class: 'actions' }, buy, reset, el('span', { class: 'muted', 'data-field': 'orders' })));
  // The sale window: a countdown, and a workshop's "open in N seconds".
  const secs = el('input', { type: 'number', min: '1', max: '3600', value: '10', 'data-field': 'open-in', 'aria-label': T('seconds', '秒') });
  const openIn = el('button', { type: 'button', 'data-action': 'open-in', text: T('Open in N s', 'N 秒后开售') });
  openIn.addEventListener('click', () => openItemIn(it.kind, it.id, Number(secs.value)));
  c.append(el('div', { class: 'actions window' }, el('span', { 'data-field': 'window', text: '–' }), secs, openIn));
  return c;
}

// windowText says where the item's sale window stands on the server's
// clock (the page's clock plus the skew measured at the last refresh).
function windowText(it) {
  const now = Date.now() + (it.skew || 0);
  const opens = it.opens_at ? Date.parse(it.opens_at) : null;
  const closes = it.closes_at ? Date.parse(it.closes_at) : null;
  if (opens !== null && now < opens) {
    const s = Math.ceil((opens - now) / 1000);
    return [T(`Opens in ${s} s`, `${s} 秒后开售`), 'soon'];
  }
  if (closes !== null && now >= closes) return [T('✗ Sale closed', '✗ 已停售'), 'closed'];
  if (closes !== null) return [T(`✓ On sale, closes in ${Math.ceil((closes - now) / 1000)} s`, `✓ 在售，${Math.ceil((closes - now) / 1000)} 秒后结束`), 'open'];
  return [T('✓ On sale', '✓ 在售'), 'open'];
}

function tickWindows() {
  for (const [key, it] of state.items) {
    const f = document.querySelector(`[data-item="${key}"] [data-field="window"]`);
    if (!f) continue;
    const [text, phase] = windowText(it);
    f.textContent = text;
    f.closest('.card').dataset.window = phase;
  }
}
setInterval(tickWindows, 250);

// openItemIn restocks the item and opens its sale n seconds from now on
// the server's clock: the crowd that buys before gets 409 sale-not-open.
async function openItemIn(kind, id, n) {
  const it = state.items.get(`${kind}-${id}`);
  if (!(n >= 1 && n <= 3600)) { say(T('N must be between 1 and 3600 seconds.', 'N 必须在 1 到 3600 秒之间。'), true); return; }
  const stock = it ? it.audit.initial_stock : 100;
  const opens_at = new Date(Date.now() + (it ? it.skew : 0) + n * 1000).toISOString();
  const r = await admin('POST', `/api/v1/admin/${kind}s/${id}/reset`, { stock, opens_at });
  if (!r) { say(T('Not reset: no admin token.', '未重置：没有管理员令牌。')); return; }
  if (!r.ok) { say(T('Not reset: ', '未重置：') + await problemText(r), true); return; }
  const name = it ? it.name : `${kind} ${id}`;
  say(T(`${name} reset to ${stock}; its sale opens in ${n} s.`, `${name} 已重置为 ${stock} 件，${n} 秒后开售。`));
  refresh1();
}

function renderItems(items) {
  if (items.gen !== pager.gen) return; // an answer for another page
  const box = $('#items');
  const sel = $('#burst-item');
  // Cards of items no longer on the page go, with their burst choice.
  const shown = new Set(items.map(it => `${it.kind}-${it.id}`));
  for (const c of [...box.querySelectorAll('[data-item]')]) {
    if (shown.has(c.dataset.item)) continue;
    c.remove();
    state.items.delete(c.dataset.item);
    for (const o of [...sel.options]) if (o.value === c.dataset.item) o.remove();
  }
  $('#items-empty').hidden = items.length > 0;
  for (const it of items) {
    const key = `${it.kind}-${it.id}`;
    let c = box.querySelector(`[data-item="${key}"]`);
    if (!c) {
      c = card(it);
      box.append(c);
      sel.append(el('option', { value: key, text: `${it.name} (${kindName(it)})` }));
    }
    const a = it.audit;
    state.items.set(key, it);
    const set = (f, v) => { c.querySelector(`[data-field="${f}"]`).textContent = v; };
    set('initial_stock', a.initial_stock);
    set('stock', a.stock);
    set('sold', a.sold);
    set('oversold', a.oversold);
    set('orders', it.kind === 'product' ? T(`${a.orders} orders`, `${a.orders} 笔订单`) : T(`${a.orders} grabs`, `${a.orders} 次领取`));
    const bad = a.oversold > 0;
    const ov = c.querySelector('[data-verdict="oversold"]');
    ov.classList.toggle('bad', bad);
    set('oversold-label', bad ? T('⚠ OVERSOLD', '⚠ 已超卖') : T('✓ Oversold', '✓ 超卖'));
    const cons = c.querySelector('[data-verdict="conserved"]');
    cons.classList.toggle('bad', !a.conserved);
    cons.textContent = a.conserved ? T('✓ Conserved', '✓ 守恒') : T('✗ NOT conserved', '✗ 不守恒');
    c.classList.toggle('is-bad', bad || !a.conserved);
    c.dataset.oversold = a.oversold;
    c.dataset.stock = a.stock;
    c.dataset.initial = a.initial_stock;
    c.dataset.conserved = a.conserved ? '1' : '0';
  }
}

// renderRooms shows the waiting rooms of the page's products: length,
// passes per second, pass holders inside, the oldest wait, and what a
// buyer joining now would be told (the last place, its wait at the rate).
function renderRooms(items) {
  if (items.gen !== pager.gen) return;
  const rooms = items.filter(it => it.room);
  $('#rooms-panel').hidden = rooms.length === 0;
  const secs = ms => T(`${(ms / 1000).toFixed(1)} s`, `${(ms / 1000).toFixed(1)} 秒`);
  $('#rooms tbody').replaceChildren(...rooms.map(it => {
    const r = it.room;
    const place = r.waiting + 1;
    const told = r.sold_out ? T('sold out', '已售罄')
      : !r.drawn ? T('drawing: place by lot at the opening', '开场抽签中：位置在开场时抽定')
      : T(`position ${place}, about ${secs(place * 1000 / r.passes_per_second)}`, `第 ${place} 位，约 ${secs(place * 1000 / r.passes_per_second)}`);
    return el('tr', { 'data-room': String(it.id) },
      el('td', { 'data-label': T('Item', '商品') }, el('span', { text: `${it.name} (${kindName(it)})` })),
      el('td', { class: 'nowrap', 'data-label': T('Waiting', '排队中'), 'data-field': 'waiting' }, el('span', { text: String(r.waiting) })),
      el('td', { class: 'nowrap', 'data-label': T('Passes/s', '通行证/秒') }, el('span', { text: String(r.passes_per_second) })),
      el('td', { class: 'nowrap', 'data-label': T('Inside / max', '场内 / 上限') }, el('span', { text: `${r.inside} / ${r.max_inside}` })),
      el('td', { class: 'nowrap', 'data-label': T('Oldest wait', '最久等待') }, el('span', { text: secs(r.oldest_wait_ms) })),
      el('td', { 'data-label': T('A buyer joining now', '此刻加入的买家'), 'data-field': 'told' }, el('span', { text: told })));
  }));
}

// when shows a verdict's time: the time of day for today's, the date too
// for older ones (the record outlives the day).
function when(at) {
  const d = new Date(at);
  const time = d.toTimeString().slice(0, 8);
  return d.toDateString() === new Date().toDateString() ? time : `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')} ${time}`;
}

// renderRecord lists the last bursts' verdicts of every item, newest first,
// from the audits (the server keeps them across resets and cancellations).
function renderRecord(items) {
  const all = items.flatMap(it => (it.audit.bursts || []).map(v => ({ ...v, name: it.name })));
  all.sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
  const rows = all.slice(0, 20);
  $('#record-empty').hidden = rows.length > 0;
  $('#record tbody').replaceChildren(...rows.map(v => {
    const over = v.oversold > 0;
    const left = v.initial_stock - v.sold;
    const verdict = over ? T(`⚠ OVERSOLD by ${v.oversold}`, `⚠ 超卖 ${v.oversold} 件`)
      : left <= 0 ? T('✓ exact: sold out, none oversold', '✓ 精确：售罄，无超卖')
        : T(`✓ no oversell, ${left} left`, `✓ 无超卖，剩余 ${left} 件`);
    const td = (label, child, cls) => el('td', { class: cls || 'nowrap', 'data-label': label }, child);
    return el('tr', { 'data-stage': v.stage, 'data-oversold': String(v.oversold) },
      td(T('When', '时间'), el('span', { text: when(v.at) })),
      td(T('Item', '商品'), el('span', { text: v.name })),
      td(T('Stage', '阶段'), el('code', { text: v.stage })),
      td(T('Sold', '卖出'), el('span', { text: `${v.sold}/${v.initial_stock}` })),
      td(T('Oversold', '超卖'), el('span', { text: String(v.oversold) })),
      td('p99 ms', el('span', { text: fmt(v.p99_ms) })),
      // Buyer time, from the burst's start; 0 in a verdict recorded before it was kept.
      td(T('buyer p99 ms', '买家 p99 ms'), el('span', { text: v.buyer_p99_ms > 0 ? fmt(v.buyer_p99_ms) : '–' })),
      td(T('Verdict', '结论'), el('span', { text: verdict }), over ? 'bad' : 'good'));
  }));
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
    const inst = r.headers.get('X-Seckill-Instance') || '?', ranAs = r.headers.get('X-Seckill-Stage') || '?';
    const where = T(`on ${inst} (stage ${ranAs})`, `（实例 ${inst}，阶段 ${ranAs}）`);
    if (r.ok) {
      say(kind === 'product' ? T(`${user} bought 1 ${where}.`, `${user} 买到 1 件${where}。`) : T(`${user} grabbed a coupon ${where}.`, `${user} 领到一张优惠券${where}。`));
      $('#status').dataset.outcome = 'created';
    } else {
      say(T(`${user} was refused ${where}: `, `${user} 被拒绝${where}：`) + await problemText(r), r.status >= 500);
      $('#status').dataset.outcome = 'refused';
    }
  } catch (e) {
    say(T('Buy failed: ', '购买失败：') + e.message, true);
  } finally {
    btn.disabled = false;
    refresh1();
  }
}

async function resetItem(kind, id, quiet) {
  const it = state.items.get(`${kind}-${id}`);
  const stock = it ? it.audit.initial_stock : 100;
  const r = await admin('POST', `/api/v1/admin/${kind}s/${id}/reset`, { stock });
  if (!r) { say(T('Not reset: no admin token.', '未重置：没有管理员令牌。')); return false; }
  if (!r.ok) { say(T('Not reset: ', '未重置：') + await problemText(r), true); return false; }
  const name = it ? it.name : `${kind} ${id}`;
  if (!quiet) say(T(`${name} reset to ${stock}; its orders are gone.`, `${name} 已重置为 ${stock} 件，订单已清空。`));
  refresh1();
  return true;
}

// ---- burst ------------------------------------------------------------

async function runBurst(ev) {
  ev.preventDefault();
  const [kind, id] = $('#burst-item').value.split('-');
  const n = Number($('#burst-n').value);
  const out = $('#burst-out');
  if (!(n >= 1 && n <= state.burstMax)) { say(T(`N must be between 1 and ${state.burstMax}.`, `N 必须在 1 到 ${state.burstMax} 之间。`), true); return; }
  const btn = $('#burst-run');
  btn.disabled = true;
  // out.dataset.state says how the burst ended, for a reader and for the
  // browser test: running, done, refused, or failed (no answer, or none
  // that could be read).
  const ended = (st, p) => { if (p) out.replaceChildren(p); out.dataset.state = st; };
  out.dataset.state = 'running';
  try {
    if ($('#burst-reset').checked && !await resetItem(kind, Number(id), true)) { ended('refused'); return; }
    const stage = state.stage || T('the current stage', '当前阶段');
    out.replaceChildren(el('p', { class: 'headline', text: T(`Firing ${n} buys at once under ${stage}…`, `正在以 ${stage} 同时发出 ${n} 个购买请求…`) }));
    const r = await admin('POST', '/api/v1/admin/burst', { kind, item_id: Number(id), n });
    if (!r) { ended('refused', el('p', { text: T('No burst: no admin token.', '未发起：没有管理员令牌。') })); return; }
    if (!r.ok) { ended('refused', el('p', { class: 'headline bad', text: T('Burst refused: ', '抢购被拒绝：') + await problemText(r) })); return; }
    renderBurst(await r.json());
    ended(out.dataset.oversold === '' ? 'failed' : 'done');
  } catch (e) {
    ended('failed', el('p', { class: 'headline bad', text: T('Burst failed: ', '抢购失败：') + e.message }));
  } finally {
    btn.disabled = false;
    refresh1();
  }
}

function renderBurst(res) {
  const out = $('#burst-out');
  const a = res.audit;
  const stages = Object.keys(res.stages).join(', ') || '?';
  const n = v => el('span', { class: 'n', 'data-field': 'oversold', text: v });
  let head;
  if (!a) head = el('p', { class: 'headline bad', text: T('Burst done, but the audit failed: ', '抢购完成，但审计失败：') + res.audit_error });
  else if (a.oversold > 0) head = el('p', { class: 'headline bad' }, T('⚠ OVERSOLD by ', '⚠ 超卖 '), n(a.oversold),
    T(`: ${a.sold} sold from ${a.initial_stock} units under ${stages}.`, ` 件：${stages} 下 ${a.initial_stock} 件库存卖出了 ${a.sold} 件。`));
  else head = el('p', { class: 'headline good' }, T('✓ No oversell (oversold ', '✓ 没有超卖（超卖 '), n('0'),
    T(`): ${a.sold} sold from ${a.initial_stock} units under ${stages}.`, `）：${stages} 下 ${a.initial_stock} 件库存卖出了 ${a.sold} 件。`));
  const c = res.counts;
  const li = (label, v, key) => el('li', { 'data-count': key }, `${label} `, el('b', { text: v }));
  const counts = el('ul', { class: 'counts', 'aria-label': T('Outcomes', '结果') },
    li(T('created', '下单成功'), c.created, 'created'), li(T('accepted (202)', '已受理 (202)'), c.accepted ?? 0, 'accepted'),
    li(T('sold out', '售罄'), c.sold_out, 'sold_out'),
    li(T('lock timeout', '等锁超时'), c.lock_timeout, 'lock_timeout'), li(T('other 4xx', '其他 4xx'), c.other_4xx, 'other_4xx'),
    li(T('overloaded', '过载'), c.overloaded, 'overloaded'), li(T('other 5xx', '其他 5xx'), c.server_errors, 'server_errors'),
    li(T('no answer', '无应答'), c.failed, 'failed'));
  const l = res.latency;
  const per = Object.entries(res.by_instance).map(([k, v]) => `${k} ${v}`).join(', ');
  const lat = el('p', { class: 'latency' },
    T(`${res.request.n} requests in ${Math.round(res.elapsed_ms)} ms · latency p50 `, `${res.request.n} 个请求，用时 ${Math.round(res.elapsed_ms)} ms · 延迟 p50 `),
    el('b', { text: fmt(l.p50_ms) }), ' · p95 ', el('b', { text: fmt(l.p95_ms) }), ' · p99 ', el('b', { text: fmt(l.p99_ms) }),
    T(' ms · buyer time (from the burst\'s start) p99 ', ' ms · 买家时间（从抢购开始计）p99 '), el('b', { text: res.buyer_latency ? fmt(res.buyer_latency.p99_ms) : '–' }),
    T(` ms · per instance: ${per}`, ` ms · 各实例应答数：${per}`));
  out.replaceChildren(head, counts, lat);
  state.latency = l;
  drawChart();
  out.dataset.oversold = a ? a.oversold : '';
  out.dataset.created = c.created;
}

const fmt = v => v >= 100 ? String(Math.round(v)) : v.toFixed(1);

// The chart is drawn at the width it is shown at, with text at the page's
// type size (larger in large type), so its labels are as readable on a phone
// as on a projector. Its SVG units are then CSS pixels, and placeLabels can
// keep the labels apart however the page is set.
const charWidth = font => font * 0.62; // generous for digits and "p9"

// placeLabels gives each percentile mark's label a row above the bars so
// that no two labels overlap, however close the percentiles: a label goes
// to the right of its line, or to the left when it would leave the chart,
// in the first row where it clears every label already there.
function placeLabels(marks, left, right, font) {
  const rows = [];
  return marks.map(m => {
    const w = m.text.length * charWidth(font);
    const anchorEnd = m.x + 4 + w > right;
    const x0 = Math.max(left, anchorEnd ? m.x - 4 - w : m.x + 4);
    const span = [x0 - 3, x0 + w + 3];
    let row = rows.findIndex(r => r.every(([a, b]) => span[1] <= a || span[0] >= b));
    if (row < 0) { rows.push([]); row = rows.length - 1; }
    rows[row].push(span);
    return { ...m, row, x: anchorEnd ? x0 + w : x0, anchor: anchorEnd ? 'end' : 'start' };
  });
}

// chart draws a latency histogram with the p50/p95/p99 marks, as SVG,
// width px wide.
function chart(l, width) {
  const font = Math.round(0.65 * parseFloat(getComputedStyle(document.documentElement).fontSize));
  const W = Math.round(Math.min(1000, Math.max(280, width))), L = Math.round(font * 3.4), R = 12, B = font * 3, ROW = font + 5;
  const s = l.samples_ms || [];
  const label = T(`Latency histogram of ${s.length} requests: p50 ${fmt(l.p50_ms)} ms, p95 ${fmt(l.p95_ms)} ms, p99 ${fmt(l.p99_ms)} ms`,
    `${s.length} 个请求的延迟分布：p50 ${fmt(l.p50_ms)} ms，p95 ${fmt(l.p95_ms)} ms，p99 ${fmt(l.p99_ms)} ms`);
  if (!s.length) return svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} 60`, role: 'img', 'aria-label': label });
  const top = niceCeil(l.max_ms || 1), bins = Math.min(30, Math.floor(W / 12)), w = top / bins;
  const x = v => L + (v / top) * (W - L - R);
  const marks = placeLabels([['p50', l.p50_ms, '4 0'], ['p95', l.p95_ms, '6 3'], ['p99', l.p99_ms, '2 2']]
    .map(([name, v, dash]) => ({ name, dash, lineX: x(v), x: x(v), text: `${name} ${fmt(v)}` })), L, W - R, font);
  const rows = Math.max(...marks.map(m => m.row)) + 1;
  const T0 = 6 + rows * ROW; // the bars start below the label rows
  const H = T0 + Math.round(Math.max(120, W * 0.28)) + B;
  const svg = svgEl('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label });
  const text = (attrs, s) => { const t = svgEl('text', { 'font-size': font, ...attrs }); t.textContent = s; svg.append(t); return t; };
  const counts = new Array(bins).fill(0);
  for (const v of s) counts[Math.min(bins - 1, Math.floor(v / w))]++;
  const cmax = Math.max(...counts);
  const y = n => H - B - (n / cmax) * (H - B - T0);
  svg.append(svgEl('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#111' }), svgEl('line', { x1: L, y1: T0, x2: L, y2: H - B, stroke: '#111' }));
  counts.forEach((n, i) => {
    if (n) svg.append(svgEl('rect', { x: x(i * w) + 1, y: y(n), width: Math.max(1, x(w) - L - 2), height: H - B - y(n), fill: '#0b57d0' }));
  });
  const ticks = W < 420 ? 2 : 4;
  for (let i = 0; i <= ticks; i++) text({ x: x(top * i / ticks), y: H - B + font + 3, 'text-anchor': i === ticks ? 'end' : 'middle' }, fmt(top * i / ticks));
  text({ x: L - 6, y: T0 + font - 2, 'text-anchor': 'end' }, String(cmax));
  text({ x: L - 6, y: H - B, 'text-anchor': 'end' }, '0');
  text({ x: (W + L) / 2, y: H - 6, 'text-anchor': 'middle' }, T('latency (ms) → requests per bar', '延迟（ms）→ 每根柱子的请求数'));
  for (const m of marks) {
    const ly = 6 + m.row * ROW + font;
    svg.append(svgEl('line', { x1: m.lineX, y1: ly + 3, x2: m.lineX, y2: H - B, stroke: '#b00020', 'stroke-width': 2, 'stroke-dasharray': m.dash }));
    text({ x: m.x, y: ly, 'text-anchor': m.anchor, 'data-mark': m.name }, m.text);
  }
  return svg;
}

// drawChart (re)draws the last burst's chart at the width and type size
// the page has now: after a burst, on a resize, and when large type is
// switched.
function drawChart() {
  const out = $('#burst-out');
  if (!state.latency) return;
  const svg = chart(state.latency, out.clientWidth);
  const old = $('svg.chart', out);
  if (old) old.replaceWith(svg); else out.append(svg);
  state.chartKey = chartKey();
}
const chartKey = () => `${$('#burst-out').clientWidth}/${getComputedStyle(document.documentElement).fontSize}`;
new ResizeObserver(() => { if (state.latency && chartKey() !== state.chartKey) drawChart(); }).observe($('#burst-out'));
$('#large').addEventListener('click', () => requestAnimationFrame(drawChart));

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
    if (!lab.available) {
      if (!ZH) { p.textContent = lab.hint; return; }
      const dir = (/\(reports go to ([^)]*)\)/.exec(lab.hint || '') || [])[1];
      p.replaceChildren('还没有压测报告。运行 ', el('code', { text: 'make lab' }), dir ? ` 生成（报告目录 ${dir}）。` : ' 生成。');
      return;
    }
    const rows = lab.results.rows || [];
    // Verdicts are pass, fail or skipped (loadtest/results/row.go; the rules in loadtest/verdict).
    const judged = rows.filter(r => r.verdict !== 'skipped').length;
    const failed = rows.filter(r => r.verdict === 'fail').length;
    p.replaceChildren(T(`Run ${lab.run}: ${judged} verdicts, ${failed} failed. `, `运行 ${lab.run}：${judged} 项判定，${failed} 项未通过。`),
      el('a', { href: '/lab.html', text: T('Open the report (table and plots)', '打开报告（表格和图表）') }));
  } catch {
    p.textContent = T('This server does not serve lab reports.', '此服务器不提供压测报告。');
  }
}

$('#burst-form').addEventListener('submit', runBurst);
refresh();
loadLab();
getJSON('/api/v1/fleet').then(f => { $('#burst-n').max = f.burst_max; }).catch(() => {});
