package web_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-io/sluice/internal/testsvc"
)

// envScreenshots, when set to a directory, makes the dashboard test also
// write its screenshots there under stable names (docs/screenshots).
const envScreenshots = "SLUICE_SCREENSHOTS"

// chrome is one headless Chromium for a whole test; each page gets a tab.
type chrome struct {
	ctx context.Context // the browser's chromedp context
}

// newBrowser starts Chromium (from scripts/services.sh) with a fresh
// profile; it is stopped when the test ends.
func newBrowser(t *testing.T) *chrome {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testsvc.Chromium(t)),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	// The first run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &chrome{ctx: bctx}
}

// tab is one page in the browser, with what it wrote to its console.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex // guards console
	console []chromedp.ConsoleMessage
}

// open opens url in a new tab with a viewport of width x height. When the
// test ends the tab is closed and any console error or uncaught exception
// it logged fails the test.
func (b *chrome) open(t *testing.T, url string, width, height int64) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	tb := &tab{t: t, ctx: ctx}
	msgs := chromedp.Console(ctx) // opens the tab and subscribes before the page loads
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m)
			tb.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		for _, m := range tb.errors() {
			t.Errorf("console %s at %s:%d: %s", m.Type, m.URL, m.Line, m.Text)
		}
	})
	tb.do(30*time.Second, chromedp.EmulateViewport(width, height), chromedp.Navigate(url))
	return tb
}

// forget drops the console errors so far whose text holds substr: errors a
// test caused on purpose (a refused sign-in's 401).
func (tb *tab) forget(substr string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	kept := tb.console[:0]
	for _, m := range tb.console {
		if !strings.Contains(m.Text, substr) {
			kept = append(kept, m)
		}
	}
	tb.console = kept
}

// errors returns the console errors and uncaught exceptions so far.
func (tb *tab) errors() []chromedp.ConsoleMessage {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []chromedp.ConsoleMessage
	for _, m := range tb.console {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			out = append(out, m)
		}
	}
	return out
}

// do runs actions with a timeout, failing the test on an error.
func (tb *tab) do(timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate in the page until it is true or
// timeout passes; what says why fails the test then.
func (tb *tab) waitFor(timeout time.Duration, predicate, what string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		tb.t.Fatalf("%s: not within %s (%v)", what, timeout, err)
	}
}

// go navigates the page to another route of the dashboard.
func (tb *tab) route(hash string) {
	tb.t.Helper()
	eval[any](tb, `location.hash = `+jsString(hash))
}

// screenshot saves a full-page PNG as an artifact of the test and, when
// SLUICE_SCREENSHOTS names a directory, there too.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{tb.t.ArtifactDir()}
	if d := os.Getenv(envScreenshots); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			tb.t.Fatalf("screenshot %s: %v", name, err)
		}
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "\u2028", `\u2028`, "\u2029", `\u2029`)
	return "'" + r.Replace(s) + "'"
}

// set gives the form control with id a value and fires its input and change
// events, as a user's edit would.
func (tb *tab) set(id, value string) {
	tb.t.Helper()
	eval[any](tb, fmt.Sprintf(`(() => { const el = document.getElementById(%s); el.value = %s;
		el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); })()`,
		jsString(id), jsString(value)))
}
