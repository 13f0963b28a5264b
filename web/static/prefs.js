// Display preferences shared by every page, applied before the body is drawn:
// large type (?large=1 or the Large type button) and the walkthrough's
// language (?lang=en|zh or the language links). Both are remembered.
(function () {
  var q = new URLSearchParams(location.search);
  var root = document.documentElement;
  function stored(k) { try { return localStorage.getItem(k); } catch (e) { return null; } }
  function store(k, v) { try { localStorage.setItem(k, v); } catch (e) { /* private mode */ } }

  var large = q.has('large') ? q.get('large') !== '0' : stored('seckill.large') === '1';
  if (q.has('large')) store('seckill.large', large ? '1' : '0');
  root.classList.toggle('large', large);

  var lang = q.get('lang') || stored('seckill.lang') || (navigator.language || 'en').slice(0, 2);
  lang = lang === 'zh' ? 'zh' : 'en';
  if (q.has('lang')) store('seckill.lang', lang);
  root.dataset.lang = lang;

  window.seckillPrefs = {
    toggleLarge: function () {
      var on = !root.classList.contains('large');
      root.classList.toggle('large', on);
      store('seckill.large', on ? '1' : '0');
      return on;
    }
  };
  document.addEventListener('DOMContentLoaded', function () {
    var b = document.getElementById('large');
    if (b) {
      b.setAttribute('aria-pressed', String(root.classList.contains('large')));
      b.addEventListener('click', function () { b.setAttribute('aria-pressed', String(window.seckillPrefs.toggleLarge())); });
    }
    if (lang === 'zh') root.lang = 'zh-Hans';
    document.querySelectorAll('.langs a[data-lang]').forEach(function (a) {
      a.setAttribute('aria-current', String(a.dataset.lang === lang));
    });
  });
})();
