// The order queue of redis-stream, next to the stock cards: while a burst
// drains, how many accepted orders are still pending (queued in Redis) and
// how many are confirmed (written to the database); and, once the payment
// window passes, how many were cancelled and came back to the stock. Kept
// apart from dashboard.js: it only reads the audits. Each item is one line
// of label-number pairs that wraps, so it fits a phone in large type.
'use strict';

(() => {
  const ZH = document.documentElement.dataset.lang === 'zh';
  const T = (en, zh) => (ZH ? zh : en);
  const fields = [
    ['pending_orders', T('Pending', '待写入')],
    ['orders', T('Confirmed', '已确认')],
    ['paid', T('Paid', '已支付')],
    ['cancelled_orders', T('Cancelled', '已取消')],
    ['failed', T('Failed', '失败')],
  ];
  const el = (tag, props, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    e.append(...kids);
    return e;
  };

  const list = el('div', { class: 'stream-items', 'aria-live': 'off' });
  const code = el('code', { text: 'redis-stream' });
  const box = el('section', { class: 'panel', id: 'stream-panel', 'aria-labelledby': 'stream-h' },
    el('h2', { id: 'stream-h', text: T('Orders: pending → confirmed', '订单：待写入 → 已确认') }),
    el('p', { class: 'muted' },
      ...(ZH
        ? ['在 ', code, ' 阶段，Redis 扣下库存后立即回答 202；订单稍后由队列消费者写入数据库。超过支付时限未支付的订单会被取消，库存退回。']
        : ['Under ', code, ' a buy is answered 202 as soon as Redis took the unit; a queue consumer writes the order moments later. Orders unpaid when the payment window closes are cancelled and their units return to the stock.'])),
    list);
  const anchor = document.getElementById('items');
  if (anchor && anchor.parentNode) anchor.parentNode.insertBefore(box, anchor.nextSibling);
  else (document.querySelector('main') || document.body).append(box);

  const getJSON = async url => {
    const r = await fetch(url, { cache: 'no-store' });
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return r.json();
  };

  // The items of the page the stock cards show (dashboard.js pages the
  // catalogue): their rows, in the cards' order, and no other.
  function items() {
    const out = [];
    for (const c of document.querySelectorAll('#items [data-item]')) {
      const [kind, id] = c.dataset.item.split('-');
      const name = c.querySelector('[data-field="name"]');
      out.push({ kind, id, key: c.dataset.item, name: name ? name.textContent : c.dataset.item });
    }
    return out;
  }

  function row(key, name) {
    let it = list.querySelector(`[data-stream="${key}"]`);
    if (!it) {
      it = el('div', { class: 'stream-item', 'data-stream': key },
        el('h3', { 'data-field': 'name', text: name }),
        el('dl', {}, ...fields.map(([f, label]) => el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': f, text: '–' })))));
    }
    return it;
  }

  // sync gives every card its row as the card appears, before the page is
  // next drawn: the panel sits above the burst form, and rows added one by
  // one as their audits came moved that form down while a reader (or a
  // click) was going for it.
  function sync() {
    const want = items().map(it => row(it.key, it.name));
    const have = [...list.children];
    if (want.length !== have.length || want.some((r, i) => r !== have[i])) list.replaceChildren(...want);
    return want;
  }
  if (anchor) new MutationObserver(sync).observe(anchor, { childList: true });

  // Poll fast while orders are pending (the drain is the thing to watch),
  // slowly otherwise. The audits are read side by side.
  async function tick() {
    let draining = false;
    try {
      const rows = sync();
      const audits = await Promise.all(rows.map(r => {
        const [kind, id] = r.dataset.stream.split('-');
        return getJSON(`/api/v1/${kind}s/${id}/audit`);
      }));
      rows.forEach((r, i) => {
        const a = audits[i];
        for (const dd of r.querySelectorAll('dd')) dd.textContent = a[dd.dataset.field] ?? 0;
        r.classList.toggle('draining', a.pending_orders > 0);
        draining = draining || a.pending_orders > 0;
      });
      box.dataset.ready = '1';
    } catch { /* the dashboard reports the fleet's health */ }
    setTimeout(tick, draining ? 250 : 1000);
  }
  tick();
})();
