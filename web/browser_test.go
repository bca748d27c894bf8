package web_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
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

// tab is one page in the browser, with what it wrote to its console and
// the requests and WebSockets it opened.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex // guards console, expected, requests, sent and sockets
	console  []chromedp.ConsoleMessage
	expected []string // console errors that hold one of these are a test's own
	requests []request
	sent     map[network.RequestID]network.Headers // the headers on the wire, by request
	sockets  []string                              // the URLs of the WebSockets it created
}

// request is one request a tab sent.
type request struct {
	id  network.RequestID
	typ network.ResourceType
	url string
}

// open opens url in a new tab with a viewport of width x height. When the
// test ends the tab is closed and any console error or uncaught exception
// it logged fails the test.
func (b *chrome) open(t *testing.T, url string, width, height int64) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	tb := &tab{t: t, ctx: ctx, sent: map[network.RequestID]network.Headers{}}
	// Subscribed before the page loads: Console opens the tab.
	msgs := chromedp.Console(ctx)
	reqs := chromedp.Events(ctx, network.RequestWillBeSent)
	wire := chromedp.Events(ctx, network.RequestWillBeSentExtraInfo)
	socks := chromedp.Events(ctx, network.WebSocketCreated)
	var readers sync.WaitGroup
	readers.Add(4)
	go func() {
		defer readers.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m)
			tb.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		for ev, err := range reqs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.requests = append(tb.requests, request{id: ev.RequestID, typ: ev.Type, url: ev.Request.URL})
			tb.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		for ev, err := range wire {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.sent[ev.RequestID] = ev.Headers
			tb.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		for ev, err := range socks {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.sockets = append(tb.sockets, ev.URL)
			tb.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		readers.Wait()
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

// requested returns the URLs of the requests of resource type typ so far
// whose URL holds substr.
func (tb *tab) requested(typ network.ResourceType, substr string) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for _, r := range tb.requests {
		if r.typ == typ && strings.Contains(r.url, substr) {
			out = append(out, r.url)
		}
	}
	return out
}

// sentHeaders returns the headers on the wire of the requests that
// requested(typ, substr) lists (nil for one not sent yet).
func (tb *tab) sentHeaders(typ network.ResourceType, substr string) []network.Headers {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []network.Headers
	for _, r := range tb.requests {
		if r.typ == typ && strings.Contains(r.url, substr) {
			out = append(out, tb.sent[r.id])
		}
	}
	return out
}

// webSockets returns the URLs of the WebSockets the page created so far.
func (tb *tab) webSockets() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.sockets...)
}

// expect makes console errors from now on whose text holds substr not
// count: errors a test causes on purpose that arrive when they will (a
// refused request's "Failed to load resource").
func (tb *tab) expect(substr string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.expected = append(tb.expected, substr)
}

// errors returns the console errors and uncaught exceptions so far.
func (tb *tab) errors() []chromedp.ConsoleMessage {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []chromedp.ConsoleMessage
	for _, m := range tb.console {
		if (m.Type == chromedp.ConsoleError || m.IsException()) &&
			!slices.ContainsFunc(tb.expected, func(s string) bool { return strings.Contains(m.Text, s) }) {
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

// holdStream makes the browser hold the first request whose URL matches
// pattern and that trigger causes, until release is called.
func (tb *tab) holdStream(pattern string, trigger func()) (release func()) {
	tb.t.Helper()
	if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: pattern, RequestStage: fetch.RequestStageRequest}}}); err != nil {
		tb.t.Fatalf("intercepting %s: %v", pattern, err)
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	paused := chromedp.Events(ctx, fetch.RequestPaused) // subscribed before the trigger
	trigger()
	var held *fetch.EventRequestPaused
	for ev, err := range paused {
		if err != nil {
			tb.t.Fatalf("no request of %s held: %v", pattern, err)
		}
		held = &ev
		break
	}
	if held == nil {
		tb.t.Fatalf("no request of %s held", pattern)
	}
	return func() {
		tb.t.Helper()
		if _, err := chromedp.Call(tb.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: held.RequestID}); err != nil {
			tb.t.Fatalf("releasing %s: %v", held.Request.URL, err)
		}
		if _, err := chromedp.Call(tb.ctx, fetch.Disable, cdp.Empty{}); err != nil {
			tb.t.Fatalf("ending the interception: %v", err)
		}
	}
}
