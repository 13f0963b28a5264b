package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

const adminToken = "browser-test-token"

// TestDashboardInBrowser drives Debian's chromium against `seckill demo` as
// a workshop would: buy one, watch stock drop; burst under unlocked and see
// the oversell; switch to redis-lock, reset, burst again and see none; read
// the dashboard in large type, on a 390 px phone and in Chinese, and every
// workshop page in both languages. At each width it asserts that nothing
// scrolls sideways (document.documentElement.scrollWidth <= innerWidth),
// and on the dashboard that the big numbers line up, no instance cell
// breaks inside a word, the latency chart's percentile labels do not
// overlap, and (in Chinese) no English word is left outside code and data.
// Screenshots go to test-artifacts/web/ at the repository root.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser and the demo; skipped with -short")
	}
	b := startBrowser(t, 4*time.Minute)
	bctx, shot := b.ctx, b.shot
	// A shop, not two products: the demo runs on a catalogue of
	// browserCatalogue items, and every step below waits as long as it
	// would on the seed catalogue.
	front := startDemo(t, demoCatalogue(browserCatalogue))
	t.Logf("%5.1fs demo ready at %s", time.Since(b.began).Seconds(), front)

	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute) // a missing element fails the step, not the whole test's time
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			shot("failed.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	// untilWithin polls a JavaScript expression until it is true, for at
	// most d; until waits 30 s, long enough for any page update.
	untilWithin := func(d time.Duration, what, expr string) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				shot("failed.png")
				t.Fatalf("timed out waiting for %s (%s)", what, expr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until := func(what, expr string) {
		t.Helper()
		untilWithin(30*time.Second, what, expr)
	}
	number := func(expr string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int]("Number("+expr+")"))
		if err != nil {
			t.Fatalf("read %s: %v", expr, err)
		}
		return n
	}
	const phone = `document.querySelector('[data-item="product-1"]')`
	width := func(w int) {
		t.Helper()
		run(fmt.Sprintf("set the viewport to %d px", w), chromedp.EmulateViewport(int64(w), 1000))
	}
	// openDashboard loads the dashboard in a language and waits for its
	// first poll.
	openDashboard := func(lang string) {
		t.Helper()
		run("open the dashboard in "+lang, chromedp.Navigate(front+"/?lang="+lang))
		until("the first poll", `document.body.dataset.ready === '1' && !!`+phone+` && `+phone+`.dataset.stock !== undefined`)
	}
	// check measures the page as it is drawn now and reports what is wrong
	// with it; name says where (viewport, language, type size).
	check := func(name string, dashboard bool) {
		t.Helper()
		l, err := chromedp.Run(bctx, chromedp.Evaluate[pageLayout](measureLayout))
		if err != nil {
			t.Fatalf("%s: measure the page: %v", name, err)
		}
		if l.PageWidth > l.ViewportWidth {
			t.Errorf("%s: the page scrolls sideways: %d px wide in a %d px viewport; sticking out: %q",
				name, l.PageWidth, l.ViewportWidth, l.Overflowing)
		}
		if !dashboard {
			return
		}
		if len(l.Misaligned) > 0 {
			t.Errorf("%s: a card's big numbers do not line up (bottoms or right edges, px): %q", name, l.Misaligned)
		}
		if len(l.BrokenWords) > 0 {
			t.Errorf("%s: instances table cells break inside a word: %q", name, l.BrokenWords)
		}
		if len(l.ChartLabels) > 0 && len(l.OverlappingLabels) > 0 {
			t.Errorf("%s: latency chart labels overlap: %q (labels %q)", name, l.OverlappingLabels, l.ChartLabels)
		}
	}

	// 1. The dashboard; Buy drops the stock by one.
	width(1400)
	openDashboard("en")
	// What the first poll drew stays where it is: the order queue's panel,
	// above the burst form, fills in without moving the form down. It
	// gained its rows one by one a second after the page said it was
	// ready, and the form slid 546 px down under a click on "Run a burst"
	// (the click landed elsewhere; CI waited a minute for a burst that
	// never started).
	const burstTop = `Math.round(document.getElementById('burst-run').getBoundingClientRect().top + scrollY)`
	top := number(burstTop)
	until("the order queue's first figures", `(() => { const rows = document.querySelectorAll('#stream-panel [data-stream]'); return rows.length > 0 && rows.length === document.querySelectorAll('#items [data-item]').length && [...rows].every(r => r.querySelector('[data-field="orders"]').textContent !== '–'); })()`)
	if now := number(burstTop); now != top {
		t.Errorf("the burst form moved from %d px to %d px down the page after the dashboard was ready", top, now)
	}
	stock := number(phone + `.dataset.stock`)
	run("click Buy", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="buy"]`)))
	until("stock to drop after Buy", fmt.Sprintf(`Number(%s.dataset.stock) === %d`, phone, stock-1))
	until("the buy to be reported", `document.getElementById('status').textContent.includes('bought 1')`)
	check("1,400 px, English", true)
	shot("dashboard-1400-en-after-buy.png")

	// 2. unlocked: the token dialog, then a burst that oversells.
	switchStage := func(stage string, askToken bool) {
		t.Helper()
		run("find the "+stage+" button", chromedp.WaitVisible(chromedp.CSS(`[data-stage="`+stage+`"]`)))
		run("switch to "+stage, chromedp.Click(chromedp.CSS(`[data-stage="`+stage+`"]`)))
		if askToken {
			run("enter the admin token",
				chromedp.WaitVisible(chromedp.CSS(`#token-input`)),
				chromedp.SendKeys(chromedp.CSS(`#token-input`), adminToken),
				chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
		}
		until("every instance on "+stage, `document.body.dataset.stage === '`+stage+`'`)
	}
	burst := func() int {
		t.Helper()
		run("run a burst",
			chromedp.Evaluate[chromedp.Void](`delete document.getElementById('burst-out').dataset.oversold; delete document.getElementById('burst-out').dataset.state`),
			chromedp.SetValue(chromedp.CSS(`#burst-n`), "200"),
			chromedp.Click(chromedp.CSS(`#burst-run`)))
		// A click the form did not get (the page moved under it) starts
		// nothing: say so, rather than wait for a burst's end.
		until("the burst to start", `!!document.getElementById('burst-out').dataset.state`)
		// The burst ends done, refused or failed; only done carries a
		// verdict, and the others say why on the page.
		// A burst's 200 buys are bounded by 10 s each and its audit by
		// 15 s (burst.Options): a minute covers both on a busy machine.
		untilWithin(time.Minute, "the burst to end", `['done', 'refused', 'failed'].includes(document.getElementById('burst-out').dataset.state)`)
		if st, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('burst-out').dataset.state + ': ' + document.getElementById('burst-out').innerText`)); err != nil || !strings.HasPrefix(st, "done: ") {
			shot("failed.png")
			t.Fatalf("the burst did not end with a verdict: %q (%v)", st, err)
		}
		return number(`document.getElementById('burst-out').dataset.oversold`)
	}
	switchStage("unlocked", true)
	if over := burst(); over <= 0 {
		t.Errorf("unlocked burst: oversold = %d, want > 0", over)
	}
	until("the card to say OVERSOLD", phone+`.innerText.includes('OVERSOLD')`)
	check("1,400 px, English, unlocked oversold", true)
	shot("dashboard-1400-en-unlocked-oversold.png")

	// 3. redis-lock: reset, burst, nothing oversold.
	switchStage("redis-lock", false)
	run("reset the phone", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="reset"]`)))
	until("the reset", `Number(`+phone+`.dataset.oversold) === 0 && `+phone+`.dataset.stock === `+phone+`.dataset.initial && `+phone+`.innerText.includes('Conserved')`)
	if over := burst(); over != 0 {
		t.Errorf("redis-lock burst: oversold = %d, want 0", over)
	}
	until("the card to show no oversell", `Number(`+phone+`.dataset.oversold) === 0`)
	// The reset took the unlocked orders away, not the verdict: the burst
	// record shows the redis-lock burst on top and the unlocked oversell
	// below it.
	until("the burst record to keep both verdicts",
		`(() => { const r = [...document.querySelectorAll('#record tbody tr')]; return r.length >= 2 && r[0].dataset.stage === 'redis-lock' && r[0].dataset.oversold === '0' && r[1].dataset.stage === 'unlocked' && Number(r[1].dataset.oversold) > 0; })()`)
	check("1,400 px, English, after a redis-lock burst", true)
	shot("dashboard-1400-en-redis-lock.png")

	// 3b. redis-stream: buys are accepted at once and the orders panel
	// watches the queue drain until every unit sold is a confirmed order.
	switchStage("redis-stream", false)
	run("reset the phone", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="reset"]`)))
	until("the reset", `Number(`+phone+`.dataset.oversold) === 0 && `+phone+`.dataset.stock === `+phone+`.dataset.initial && `+phone+`.innerText.includes('Conserved')`)
	initial := number(phone + `.dataset.stock`)
	if over := burst(); over != 0 {
		t.Errorf("redis-stream burst: oversold = %d, want 0", over)
	}
	const queue = `document.querySelector('[data-stream="product-1"]')`
	field := func(f string) string { return queue + `.querySelector('[data-field="` + f + `"]').textContent` }
	until("the order queue to drain", `!!`+queue+` && `+field("pending_orders")+` === '0' && Number(`+field("orders")+`) > 0 && Number(`+field("orders")+`) === `+fmt.Sprint(initial)+` - Number(`+phone+`.dataset.stock)`)
	check("1,400 px, English, after a redis-stream burst", true)
	shot("dashboard-1400-en-redis-stream.png")
	switchStage("redis-lock", false)

	// 3c. The sale window: "Open in N s" restocks the phone with its sale
	// a minute ahead on the server's clock; the card counts down and a buy
	// is refused sale-not-open; Reset stock puts it on sale at once again.
	run("open the phone's sale in 60 s",
		chromedp.SetValue(chromedp.CSS(`[data-item="product-1"] [data-field="open-in"]`), "60"),
		chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="open-in"]`)))
	// The countdown can show from the live poll before the reset's own
	// answer is handled; that answer then writes the status line, and
	// would overwrite the refusal below: wait for it first.
	until("the countdown", phone+`.dataset.window === 'soon' && /Opens in \d+ s/.test(`+phone+`.innerText) && document.getElementById('status').textContent.includes('its sale opens in')`)
	run("click Buy before the opening", chromedp.Evaluate[chromedp.Void](`document.getElementById('status').textContent = ''`),
		chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="buy"]`)))
	until("the refusal", `document.getElementById('status').textContent.includes('Sale not open yet')`)
	check("1,400 px, English, a sale not open yet", true)
	shot("dashboard-1400-en-sale-not-open.png")
	run("reset the phone", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="reset"]`)))
	until("the sale on again", phone+`.dataset.window === 'open'`)

	// 3d. The catalogue a page at a time (12 a page): products 3 to 14,
	// replaced through the admin API, fill the first page and start the
	// second; Next shows it and Previous the first again; a state with no
	// item (every item of the catalogue is on sale) empties the page and
	// says so. Archiving the twelve takes their cards away, and the
	// catalogue's next items take their places.
	adminCall := func(method, path, body string) {
		t.Helper()
		req, err := http.NewRequest(method, front+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	for id := 3; id <= 14; id++ {
		adminCall("PUT", fmt.Sprintf("/api/v1/admin/products/%d", id), fmt.Sprintf(`{"name":"Item %d","price_cents":100,"stock":5}`, id))
	}
	if resp, err := http.Get(fmt.Sprintf("%s/api/v1/products/%d", front, browserCatalogue)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the catalogue's last product, %d: %v %v", browserCatalogue, resp, err)
	} else {
		resp.Body.Close()
	}
	const card = `!!document.querySelector('[data-item="product-%d"]')`
	until("a second page", `!document.getElementById('page-next').disabled && `+fmt.Sprintf(card, 12))
	run("next page", chromedp.Click(chromedp.CSS(`#page-next`)))
	until("the second page", fmt.Sprintf(card, 13)+` && `+fmt.Sprintf(card, 14)+` && !`+fmt.Sprintf(card, 1)+` && document.getElementById('page-n').textContent === 'Page 2'`)
	check("1,400 px, English, the second page", true)
	run("previous page", chromedp.Click(chromedp.CSS(`#page-prev`)))
	until("the first page again", fmt.Sprintf(card, 1)+` && !`+fmt.Sprintf(card, 13)+` && document.getElementById('page-prev').disabled`)
	run("only the scheduled sales", chromedp.SetValue(chromedp.CSS(`#page-state`), "scheduled"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('page-state').dispatchEvent(new Event('change'))`))
	until("an empty page that says so", `!`+fmt.Sprintf(card, 1)+` && !document.getElementById('items-empty').hidden`)
	run("every sale", chromedp.SetValue(chromedp.CSS(`#page-state`), ""),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('page-state').dispatchEvent(new Event('change'))`))
	until("the phone back", `!!`+phone+` && document.getElementById('items-empty').hidden`)
	for id := 3; id <= 14; id++ {
		adminCall("POST", fmt.Sprintf("/api/v1/admin/products/%d/archive", id), "")
	}
	until("the archived cards gone", `!`+fmt.Sprintf(card, 3)+` && !`+fmt.Sprintf(card, 12)+` && `+fmt.Sprintf(card, 15)+` && `+fmt.Sprintf(card, 24)+
		` && !document.getElementById('page-next').disabled`)

	// 3e. A waiting room on product 2: three buyers join, at most two
	// passes out at once; the panel shows the room and what a buyer
	// joining now is told. It stays for the layout checks below.
	adminCall("PUT", "/api/v1/admin/products/2/room", `{"passes_per_second":5,"max_inside":2}`)
	for _, u := range []string{"room-a", "room-b", "room-c"} {
		resp, err := http.Post(front+"/api/v1/products/2/room/join", "application/json", strings.NewReader(`{"user_id":"`+u+`"}`))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("join the room as %s: %v %v", u, resp, err)
		}
		resp.Body.Close()
	}
	const roomRow = `document.querySelector('#rooms [data-room="2"]')`
	until("the waiting room's row", `!document.getElementById('rooms-panel').hidden && !!`+roomRow+
		` && `+roomRow+`.querySelector('[data-field="waiting"]').textContent === '1' && /position 2, about/.test(`+roomRow+`.querySelector('[data-field="told"]').textContent)`)
	check("1,400 px, English, a waiting room", true)
	shot("dashboard-1400-en-room.png")

	// 4. The same page on a phone, then in large type at both widths.
	width(390)
	check("390 px, English", true)
	shot("dashboard-390-en.png")
	run("large type", chromedp.Click(chromedp.CSS(`#large`)))
	until("large type", `document.documentElement.classList.contains('large')`)
	check("390 px, English, large type", true)
	shot("dashboard-390-en-large.png")
	width(1400)
	check("1,400 px, English, large type", true)
	shot("dashboard-1400-en-large.png")
	run("normal type", chromedp.Click(chromedp.CSS(`#large`)))
	until("normal type", `!document.documentElement.classList.contains('large')`)

	// 5. 中文: the switch reloads the page in Chinese; a burst and a buy
	// draw the strings that only appear after them.
	run("switch to 中文", chromedp.Click(chromedp.CSS(`.langs a[data-lang="zh"]`)))
	until("the Chinese dashboard", `document.documentElement.dataset.lang === 'zh' && document.body.dataset.ready === '1' && !!`+phone+` && `+phone+`.dataset.stock !== undefined`)
	if over := burst(); over != 0 {
		t.Errorf("redis-lock burst (中文): oversold = %d, want 0", over)
	}
	run("click 购买", chromedp.Evaluate[chromedp.Void](`document.getElementById('status').textContent = ''`),
		chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="buy"]`)))
	until("the buy to be reported", `document.getElementById('status').textContent !== ''`)
	for _, w := range []int{1400, 390} {
		width(w)
		name := fmt.Sprintf("%d px, 中文", w)
		check(name, true)
		english, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](untranslated))
		if err != nil {
			t.Fatalf("%s: look for English: %v", name, err)
		}
		if len(english) > 0 {
			t.Errorf("%s: English left on the Chinese dashboard: %q", name, english)
		}
		shot(fmt.Sprintf("dashboard-%d-zh.png", w))
	}
	run("switch back to English", chromedp.Click(chromedp.CSS(`.langs a[data-lang="en"]`)))
	until("the English dashboard", `document.documentElement.dataset.lang === 'en' && document.body.dataset.ready === '1'`)
	chinese, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.body.querySelectorAll('*')].filter(e =>
		!e.closest('.langs') && e.checkVisibility() && [...e.childNodes].some(n => n.nodeType === 3 && /[\u4e00-\u9fff]/.test(n.textContent))).map(e => e.textContent.trim().slice(0, 60))`))
	if err != nil || len(chinese) > 0 {
		t.Errorf("Chinese left on the English dashboard: %q (%v)", chinese, err)
	}

	// 6. Every workshop page in both languages fits a phone; one page is
	// photographed at both widths in each language.
	pages := []string{"index.html"}
	if err := chromedp.Do(bctx, chromedp.Navigate(front+"/workshop/?lang=en")); err != nil {
		t.Fatal(err)
	}
	links, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('ol.toc a')].map(a => a.getAttribute('href'))`))
	if err != nil || len(links) < 11 {
		t.Fatalf("the workshop index lists %q (%v), want every stage and pitfall page", links, err)
	}
	pages = append(pages, links...)
	for _, c := range []struct{ lang, attr, want string }{{"en", "en", "Stage 3"}, {"zh", "zh-Hans", "阶段 3"}} {
		for _, w := range []int{1400, 390} {
			width(w)
			experiments := 0
			for _, page := range pages {
				run("open "+page+" in "+c.lang, chromedp.Navigate(front+"/workshop/"+page+"?lang="+c.lang),
					chromedp.WaitVisible(chromedp.CSS(`main h1`)))
				where := fmt.Sprintf("%s, %d px, %s", page, w, c.lang)
				check(where, false)
				if stage, ok := strings.CutPrefix(strings.TrimSuffix(page, ".html"), "stage-"); ok {
					checkExperiment(t, bctx, where, stage, c.attr, api.StageHeader)
					experiments++
				}
				if page != "stage-redis-lock.html" {
					continue
				}
				h1, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('main h1').innerText`))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(h1, c.want) {
					t.Errorf("workshop heading in %s = %q, want it to contain %q", c.lang, h1, c.want)
				}
				shot(fmt.Sprintf("workshop-%d-%s.png", w, c.lang))
			}
			if experiments != len(inventory.Stages) {
				t.Errorf("%d px, %s: the workshop index links %d stage pages, want %d (one per stage)", w, c.lang, experiments, len(inventory.Stages))
			}
		}
	}
}

// experimentShown is what a reader sees of a stage page's experiment
// block (stage-experiment.html.tmpl), as the browser draws it.
type experimentShown struct {
	Found bool     `json:"found"`
	Stage string   `json:"stage"`
	Langs []string `json:"langs"` // the lang of each paragraph shown
	Text  string   `json:"text"`  // the paragraphs shown
	Code  string   `json:"code"`  // the commands, as shown
}

const measureExperiment = `(() => {
	const s = document.querySelector('main section.experiment');
	if (!s || !s.checkVisibility()) return {found: false};
	const shown = [...s.querySelectorAll('p[lang]')].filter(p => p.checkVisibility());
	const pre = s.querySelector('pre');
	return {found: true, stage: s.dataset.stage, langs: shown.map(p => p.lang),
		text: shown.map(p => p.innerText).join(' '), code: pre ? pre.innerText : ''};
})()`

// checkExperiment checks the rendered experiment block of a stage page in
// one language: it is there, for this stage, its two paragraphs are in
// the page's language only, and its commands switch the fleet to the
// stage, restock, burst, and buy once under the stage by its header.
func checkExperiment(t *testing.T, ctx context.Context, where, stage, lang, header string) {
	t.Helper()
	e, err := chromedp.Run(ctx, chromedp.Evaluate[experimentShown](measureExperiment))
	if err != nil {
		t.Fatalf("%s: read the experiment block: %v", where, err)
	}
	if !e.Found {
		t.Errorf("%s: no experiment block is shown", where)
		return
	}
	if e.Stage != stage {
		t.Errorf("%s: the experiment block is rendered for %q", where, e.Stage)
	}
	if len(e.Langs) != 2 || e.Langs[0] != lang || e.Langs[1] != lang {
		t.Errorf("%s: the experiment block shows paragraphs in %q, want two in %s", where, e.Langs, lang)
	}
	if !strings.Contains(e.Text, header) || !strings.Contains(e.Text, stage) {
		t.Errorf("%s: the experiment text does not name %s and %s: %q", where, header, stage, e.Text)
	}
	for _, want := range []string{
		`":"` + stage + `"}'`, // the fleet switch
		"/api/v1/admin/products/1/reset",
		"/api/v1/admin/burst",
		"-H '" + header + ": " + stage + "'",
	} {
		if !strings.Contains(e.Code, want) {
			t.Errorf("%s: the experiment commands lack %q:\n%s", where, want, e.Code)
		}
	}
}

// pageLayout is what a reader sees of a page at one viewport width.
type pageLayout struct {
	ViewportWidth     int      `json:"viewportWidth"`
	PageWidth         int      `json:"pageWidth"`
	Overflowing       []string `json:"overflowing"`
	Misaligned        []string `json:"misaligned"`
	BrokenWords       []string `json:"brokenWords"`
	ChartLabels       []string `json:"chartLabels"`
	OverlappingLabels []string `json:"overlappingLabels"`
}

// measureLayout returns a pageLayout. Overflowing names the outermost
// elements whose right edge is past the viewport (outside any box that
// scrolls on its own), for the failure message.
const measureLayout = `(() => {
	const vw = window.innerWidth;
	const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\s+/).join('.') : '');
	const scrolls = e => { for (let p = e.parentElement; p; p = p.parentElement) { const o = getComputedStyle(p).overflowX; if (o !== 'visible' && p !== document.documentElement && p !== document.body) return true; } return false; };
	const overflowing = [];
	for (const e of document.body.querySelectorAll('*')) {
		const r = e.getBoundingClientRect();
		if (r.width > 0 && r.right > vw + 0.5 && !scrolls(e) && !(e.parentElement && e.parentElement.getBoundingClientRect().right > vw + 0.5)) {
			overflowing.push(name(e) + ' right=' + Math.round(r.right) + ' "' + e.textContent.trim().slice(0, 40) + '"');
		}
	}
	// Lines a node's text takes: distinct tops of its line boxes.
	const lines = node => { const r = document.createRange(); r.selectNodeContents(node);
		return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; };
	const misaligned = [];
	for (const card of document.querySelectorAll('[data-item]')) {
		const dds = [...card.querySelectorAll('.nums dd')].map(d => d.getBoundingClientRect());
		const same = f => Math.max(...dds.map(f)) - Math.min(...dds.map(f)) <= 1;
		if (dds.length && !same(r => r.bottom) && !same(r => r.right)) {
			misaligned.push(card.dataset.item + ' bottoms ' + dds.map(r => Math.round(r.bottom)).join('/') + ', rights ' + dds.map(r => Math.round(r.right)).join('/'));
		}
	}
	const brokenWords = [...document.querySelectorAll('#fleet tbody td')].filter(td => lines(td) > 1).map(td => td.textContent.trim());
	const labels = [...document.querySelectorAll('svg.chart text')].filter(x => /^p(50|95|99) /.test(x.textContent));
	const overlapping = [];
	labels.forEach((a, i) => labels.slice(i + 1).forEach(b => {
		const p = a.getBoundingClientRect(), q = b.getBoundingClientRect();
		if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) overlapping.push(a.textContent + ' × ' + b.textContent);
	}));
	if (!overflowing.length) { // nothing outermost: name the widest of any
		const all = [...document.body.querySelectorAll('*')].map(e => [e, e.getBoundingClientRect().right]).filter(([, r]) => r > vw + 0.5).sort((a, b) => b[1] - a[1]);
		for (const [e, r] of all.slice(0, 8)) overflowing.push(name(e) + ' right=' + Math.round(r));
		const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT); // text that runs out of its box
		for (let n; (n = walk.nextNode()) && overflowing.length < 8;) {
			const r = document.createRange(); r.selectNodeContents(n);
			if ([...r.getClientRects()].some(x => x.right > vw + 0.5) && !scrolls(n)) overflowing.push('text in ' + name(n.parentElement) + ' "' + n.textContent.trim().slice(0, 40) + '"');
		}
	}
	return {
		viewportWidth: vw, pageWidth: document.documentElement.scrollWidth, overflowing: overflowing.slice(0, 8),
		misaligned, brokenWords, chartLabels: labels.map(x => x.textContent), overlappingLabels: overlapping,
	};
})()`

// untranslated lists the English words visible on the Chinese dashboard,
// outside what stays English in both languages: code, keys, stage and
// item names, instance names, user ids, paths and units.
const untranslated = `(() => {
	const keep = new Set(['seckill', 'N', 'ms', 'p50', 'p95', 'p99', 'xx', 'English', 'HTTP', 'Redis']); // names stay in English
	const data = [...document.querySelectorAll('[data-field="name"], #fleet td:first-child')].map(e => e.textContent.trim()).filter(Boolean);
	const stages = [...document.querySelectorAll('#stage-buttons [data-stage]')].map(b => b.dataset.stage);
	const found = [];
	const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n; (n = walk.nextNode());) {
		const p = n.parentElement;
		if (!p || p.closest('code, kbd, option, script, style, .langs') || !p.checkVisibility()) continue;
		let text = n.textContent;
		for (const d of [...data, ...stages].sort((a, b) => b.length - a.length)) text = text.split(d).join(' ');
		text = text.replace(/\S*\/\S*/g, ' ').replace(/web-[a-z0-9]+-\d+/g, ' ');
		for (const w of text.match(/[A-Za-z][A-Za-z0-9]*/g) || []) if (!keep.has(w)) found.push(w + ' in "' + n.textContent.trim().slice(0, 50) + '"');
	}
	return found;
})()`

// browserSession is one headless chromium for one test, and the folder
// its screenshots go to (test-artifacts/web/ at the repository root).
type browserSession struct {
	t     *testing.T
	ctx   context.Context
	shots string
	began time.Time
}

// startBrowser starts Debian's chromium at 1,400 × 1,000 px for at most
// timeout; it is closed when the test ends. Without chromium the test is
// skipped (failed under CI=true).
func startBrowser(t *testing.T, timeout time.Duration) *browserSession {
	t.Helper()
	path := findChromium()
	if path == "" {
		testenv.Unavailable(t, "chromium is not installed (run .ci/setup-browser.sh, or apt-get install chromium)")
	}
	shots, err := filepath.Abs(filepath.Join("..", "test-artifacts", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	// The first action starts the browser, which lives as long as the
	// context of that action: this one, not a step's shorter one.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1400, 1000)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browserSession{t: t, ctx: bctx, shots: shots, began: time.Now()}
}

// shot saves a screenshot of the whole page as name (a PNG).
func (b *browserSession) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("%5.1fs screenshot %s", time.Since(b.began).Seconds(), path)
}

// findChromium returns Debian's chromium, never a downloaded browser.
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserCatalogue is how many products the dashboard's browser test
// sells among: issue 60 asks for a list that renders within its usual
// waits on a catalogue of at least 10,000 items.
const browserCatalogue = 10_000

// demoCatalogueEnv is the environment entry through which demoCatalogue
// asks startDemo for a catalogue; it is not the demo's own setting.
const demoCatalogueEnv = "SECKILL_TEST_DEMO_CATALOGUE="

// demoCatalogue asks startDemo to load a catalogue of n products
// (`seckill catalogue -items n`, ids 1 to n) before the demo starts.
func demoCatalogue(n int) string { return demoCatalogueEnv + strconv.Itoa(n) }

// startDemo runs `seckill demo` (built once per test binary) on free
// loopback ports and returns the front page's URL. testkit stops it at
// cleanup with SIGINT and fails the test unless it exits cleanly. env
// entries (KEY=value) override the demo's environment; a demoCatalogue
// entry first loads that many products into the demo's database.
func startDemo(t *testing.T, env ...string) string {
	t.Helper()
	bin := testkit.BuildSeckill(t)
	dir := t.TempDir()
	addrs := testkit.FreeAddrs(t, 4)
	var urls []string
	for _, a := range addrs {
		urls = append(urls, "http://"+a)
	}
	e := append(os.Environ(),
		"SECKILL_DEMO_DB="+filepath.Join(dir, "demo.db"),
		"SECKILL_ADMIN_TOKEN="+adminToken,
		"SECKILL_LAB_REPORTS="+filepath.Join(dir, "reports"),
	)
	e = append(e, env...) // os/exec keeps the last value of a key
	for _, kv := range env {
		if n, ok := strings.CutPrefix(kv, demoCatalogueEnv); ok {
			cmd := exec.Command(bin, "catalogue", "-items", n)
			cmd.Env = e
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("seckill catalogue -items %s: %v\n%s", n, err, out)
			}
		}
	}
	testkit.StartProcess(t, bin, e, urls, "demo", "-addr", addrs[0], "-instances", strings.Join(addrs[1:], ","))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testkit.WaitHealthy(ctx, urls[0]+"/readyz", nil); err != nil {
		t.Fatal(err)
	}
	return urls[0]
}

// TestLabPageInBrowser runs the real lab against `seckill demo` with small
// numbers and opens its report at 1,400 × 1,000 px, as a workshop projector
// shows it: the summary chart comes first, the table fits without sideways
// scrolling, every verdict is one line, a row's details open, and a sweep
// adds its charts and knees. Screenshots go to test-artifacts/web/.
func TestLabPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser, the demo and the lab; skipped with -short")
	}
	b := startBrowser(t, 3*time.Minute)
	bctx, shot := b.ctx, b.shot
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	reports := t.TempDir()
	front := startDemo(t, "SECKILL_LAB_REPORTS="+reports)
	instances := demoInstances(t, front)

	lab := filepath.Join(t.TempDir(), "lab")
	build := exec.Command("go", "build", "-o", lab, "./loadtest")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./loadtest: %v\n%s", err, out)
	}
	// runLab runs the lab into the demo's reports folder. A failed verdict
	// (exit status 1) still writes a report, which is what the page shows;
	// anything else is a broken run.
	runLab := func(args ...string) {
		t.Helper()
		cmd := exec.Command(lab, append([]string{"--targets", strings.Join(instances, ","), "--report-dir", reports,
			"--stock", "20", "--buyers", "100", "--workers", "16", "--max-duration", "3s", "--timeout", "5s"}, args...)...)
		cmd.Env = append(os.Environ(), "SECKILL_ADMIN_TOKEN="+adminToken, "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
			t.Fatalf("the lab: %v\n%s", err, out)
		}
		t.Logf("lab output:\n%s", out)
	}

	open := func() {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.EmulateViewport(1400, 1000), chromedp.Navigate(front+"/lab.html")); err != nil {
			t.Fatalf("open the lab page: %v", err)
		}
		const ready = `document.body.dataset.ready === '1' && [...document.images].every(i => i.complete && i.naturalWidth > 0)`
		deadline := time.Now().Add(20 * time.Second)
		for {
			if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](ready)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				shot("failed-lab.png")
				t.Fatalf("the lab page did not render with every chart loaded (%s)", ready)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// layout is what the page looks like to a reader at 1,400 px.
	type layout struct {
		ViewportWidth   int      `json:"viewportWidth"`
		PageWidth       int      `json:"pageWidth"`
		TableWidth      int      `json:"tableWidth"`
		TableBoxWidth   int      `json:"tableBoxWidth"`
		ChartFirst      bool     `json:"chartFirst"`
		ChartWidth      int      `json:"chartWidth"`
		Rows            int      `json:"rows"`
		WrappedVerdicts []string `json:"wrappedVerdicts"`
		SweepCharts     int      `json:"sweepCharts"`
		Knees           int      `json:"knees"`
	}
	const measure = `(() => {
		const box = document.querySelector('.lab-scroll'), table = document.getElementById('lab-table');
		const chart = document.querySelector('#lab-summary img');
		const wrapped = [...document.querySelectorAll('td.lab-verdict')].filter(td =>
			td.getBoundingClientRect().height >= 2 * parseFloat(getComputedStyle(td).lineHeight)).map(td => td.innerText);
		return {
			viewportWidth: document.documentElement.clientWidth, pageWidth: document.documentElement.scrollWidth,
			tableWidth: box.scrollWidth, tableBoxWidth: box.clientWidth,
			chartFirst: !!chart && chart.getBoundingClientRect().bottom <= table.getBoundingClientRect().top,
			chartWidth: chart ? chart.getBoundingClientRect().width : 0,
			rows: document.querySelectorAll('#lab-table tr[data-stage]').length,
			wrappedVerdicts: wrapped,
			sweepCharts: document.querySelectorAll('#lab-sweep img').length,
			knees: document.querySelectorAll('#lab-sweep .knees li').length,
		};
	})()`
	check := func(wantRows int) layout {
		t.Helper()
		l, err := chromedp.Run(bctx, chromedp.Evaluate[layout](measure))
		if err != nil {
			t.Fatalf("measure the page: %v", err)
		}
		if l.TableWidth > l.TableBoxWidth || l.PageWidth > l.ViewportWidth {
			t.Errorf("sideways scrolling at 1,400 px: table %d px in a %d px box, page %d px in a %d px viewport",
				l.TableWidth, l.TableBoxWidth, l.PageWidth, l.ViewportWidth)
		}
		if !l.ChartFirst || l.ChartWidth < 1000 {
			t.Errorf("the summary chart must come first, across the page: first=%v, %d px wide", l.ChartFirst, l.ChartWidth)
		}
		if l.Rows != wantRows {
			t.Errorf("the table has %d stage rows, want %d", l.Rows, wantRows)
		}
		if len(l.WrappedVerdicts) > 0 {
			t.Errorf("verdicts wrap onto a second line: %q", l.WrappedVerdicts)
		}
		return l
	}

	// The report of the three attack scenarios, every stage (the T-0 and
	// paced scenarios of the default set add rows of their own, and need
	// a pace this busy test machine may not keep).
	stages := len(inventory.Stages)
	runLab("--scenarios", "buy,grab,retry-storm")
	open()
	check(3 * stages)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#lab-table tr[data-stage] button.details`))); err != nil {
		t.Fatalf("open a row's details: %v", err)
	}
	detail, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => { const d = document.querySelector('#lab-table tr.detail:not([hidden])'); return d ? d.innerText : ''; })()`))
	if err != nil || !strings.Contains(detail, "p99.9") || !strings.Contains(detail, "HDR histogram") ||
		!strings.Contains(detail, "buyer p99") || !strings.Contains(detail, "lab queue p99") || !strings.Contains(detail, "HDR histogram, buyer time") {
		t.Errorf("the opened details read %q (%v), want the percentiles of both clocks and both HDR files", detail, err)
	}
	shot("06-lab-1400.png")
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`#lab-table tr[data-stage] button.details`))); err != nil {
		t.Fatalf("close a row's details: %v", err)
	}

	// A sweep: two levels of one scenario, with the scaling charts.
	runLab("--scenarios", "buy", "--sweep", "8,32")
	open()
	if l := check(2 * stages); l.SweepCharts != 3 || l.Knees != stages {
		t.Errorf("the sweep shows %d charts and %d knees, want 3 and %d", l.SweepCharts, l.Knees, stages)
	}
	shot("07-lab-sweep-1400.png")
}

// demoInstances asks the demo's front page for its instances' URLs.
func demoInstances(t *testing.T, front string) []string {
	t.Helper()
	resp, err := http.Get(front + "/demo/instances")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body api.DemoInstances
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Instances) == 0 {
		t.Fatalf("GET /demo/instances: %v %+v", err, body)
	}
	return body.Instances
}
