package web_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill-lab/seckill/internal/testenv"
)

const adminToken = "browser-test-token"

// TestDashboardInBrowser drives Debian's chromium against `seckill demo` as
// a workshop would: buy one, watch stock drop; burst under unlocked and see
// the oversell; switch to redis-lock, reset, burst again and see none; read
// a workshop page in both languages. Screenshots go to
// test-artifacts/web/ at the repository root.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser and the demo; skipped with -short")
	}
	browser := findChromium()
	if browser == "" {
		testenv.Unavailable(t, "chromium is not installed (run .ci/setup-browser.sh, or apt-get install chromium)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	shots := filepath.Join(root, "test-artifacts", "web")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	front := startDemo(t, root)
	t.Logf("%5.1fs demo ready at %s", time.Since(began).Seconds(), front)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
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
		chromedp.WindowSize(1600, 1000),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(shots, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%5.1fs screenshot %s", time.Since(began).Seconds(), path)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			shot("failed.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	// until polls a JavaScript expression until it is true.
	until := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
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
	number := func(expr string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int]("Number("+expr+")"))
		if err != nil {
			t.Fatalf("read %s: %v", expr, err)
		}
		return n
	}
	const phone = `document.querySelector('[data-item="product-1"]')`

	// 1. The dashboard; Buy drops the stock by one.
	run("open the dashboard", chromedp.Navigate(front+"/"))
	until("the first poll", `document.body.dataset.ready === '1' && !!`+phone+` && `+phone+`.dataset.stock !== undefined`)
	stock := number(phone + `.dataset.stock`)
	run("click Buy", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="buy"]`)))
	until("stock to drop after Buy", fmt.Sprintf(`Number(%s.dataset.stock) === %d`, phone, stock-1))
	until("the buy to be reported", `document.getElementById('status').textContent.includes('bought 1')`)
	shot("01-dashboard-after-buy.png")

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
			chromedp.Evaluate[chromedp.Void](`delete document.getElementById('burst-out').dataset.oversold`),
			chromedp.SetValue(chromedp.CSS(`#burst-n`), "200"),
			chromedp.Click(chromedp.CSS(`#burst-run`)))
		until("the burst's outcome", `(document.getElementById('burst-out').dataset.oversold || '') !== ''`)
		return number(`document.getElementById('burst-out').dataset.oversold`)
	}
	switchStage("unlocked", true)
	if over := burst(); over <= 0 {
		t.Errorf("unlocked burst: oversold = %d, want > 0", over)
	}
	until("the card to say OVERSOLD", phone+`.innerText.includes('OVERSOLD')`)
	shot("02-unlocked-oversold.png")

	// 3. redis-lock: reset, burst, nothing oversold.
	switchStage("redis-lock", false)
	run("reset the phone", chromedp.Click(chromedp.CSS(`[data-item="product-1"] [data-action="reset"]`)))
	until("the reset", `Number(`+phone+`.dataset.oversold) === 0 && `+phone+`.innerText.includes('Conserved')`)
	if over := burst(); over != 0 {
		t.Errorf("redis-lock burst: oversold = %d, want 0", over)
	}
	until("the card to show no oversell", `Number(`+phone+`.dataset.oversold) === 0`)
	shot("03-redis-lock-no-oversell.png")
	run("large type", chromedp.Click(chromedp.CSS(`#large`)))
	until("large type", `document.documentElement.classList.contains('large')`)
	shot("04-large-type.png")

	// 4. A workshop page in both languages.
	for _, c := range []struct{ lang, want string }{{"en", "Stage 1"}, {"zh", "阶段 1"}} {
		run("open the workshop in "+c.lang,
			chromedp.Navigate(front+"/workshop/stage-unlocked.html?lang="+c.lang),
			chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		h1, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('main h1').innerText`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(h1, c.want) {
			t.Errorf("workshop heading in %s = %q, want it to contain %q", c.lang, h1, c.want)
		}
		shot("05-workshop-" + c.lang + ".png")
	}
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

// startDemo builds the binary and runs `seckill demo` on free loopback
// ports; it returns the front page's URL and stops the demo at cleanup.
func startDemo(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "seckill")
	build := exec.Command("go", "build", "-o", bin, "./cmd/seckill")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ports := freePorts(t, 4)
	front := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var inst []string
	for _, p := range ports[1:] {
		inst = append(inst, fmt.Sprintf("127.0.0.1:%d", p))
	}
	var logs syncBuffer
	cmd := exec.Command(bin, "demo", "-addr", front, "-instances", strings.Join(inst, ","))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SECKILL_DEMO_DB="+filepath.Join(dir, "demo.db"),
		"SECKILL_ADMIN_TOKEN="+adminToken,
		"SECKILL_LAB_REPORTS="+filepath.Join(dir, "reports"),
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // graceful shutdown; the demo's exit status is checked below
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("demo output:\n%s", logs.String())
		}
	})
	url := "http://" + front
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case err := <-done:
			t.Fatalf("demo exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not ready within 20s\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close() // freed for the demo to bind
	}
	return ports
}

// syncBuffer collects the demo's output; the test may read it while the
// demo still writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
