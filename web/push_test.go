package web_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
)

// hook is a push endpoint on 127.0.0.1: it keeps every request and answers
// 200, or 400 (a refusal that counts an attempt) to a body holding
// "poison" while refusing is on, or 503 to everything while it is down.
type hook struct {
	srv    *httptest.Server
	refuse atomic.Bool
	down   atomic.Bool

	mu   sync.Mutex // guards reqs
	reqs []hookRequest
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHook(t *testing.T) *hook {
	hk := &hook{}
	hk.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hk.mu.Lock()
		hk.reqs = append(hk.reqs, hookRequest{header: r.Header.Clone(), body: body})
		hk.mu.Unlock()
		if hk.down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		if hk.refuse.Load() && strings.Contains(string(body), "poison") {
			http.Error(w, "poison refused", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(hk.srv.Close)
	return hk
}

// tests are the test events received, in order.
func (hk *hook) tests() []hookRequest {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	var out []hookRequest
	for _, r := range hk.reqs {
		if strings.HasPrefix(r.header.Get("webhook-id"), "web-hook.test.") {
			out = append(out, r)
		}
	}
	return out
}

// delivered is the set of partition/offset a record delivery carried.
func (hk *hook) delivered() map[string]bool {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	out := map[string]bool{}
	for _, r := range hk.reqs {
		if p := r.header.Get("sluice-partition"); p != "" && p != "-1" {
			out[p+"/"+r.header.Get("sluice-offset")] = true
		}
	}
	return out
}

// verifyWebhook checks a request's Standard Webhooks signature against a
// secret (whsec_ and base64).
func verifyWebhook(secret string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing webhook headers in %v", h)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("secret %q: %v", secret, err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" {
			if got, err := base64.StdEncoding.DecodeString(sig); err == nil && subtle.ConstantTimeCompare(got, want) == 1 {
				return nil
			}
		}
	}
	return fmt.Errorf("no signature in %q is the secret's", sigs)
}

// testPushPages drives the Push pages against a subscription created
// through the API: the list shows it; its page shows the committed offsets
// reaching the high watermarks as records are delivered; pause, resume, a
// test event, a secret rotation, a refused record among the failures, both
// seeks and the delete each do what the API then reports.
func testPushPages(t *testing.T, b *chrome, base string, a apiClient) {
	hk := newHook(t)
	hk.refuse.Store(true)
	a.createTopic("hooks", 2)
	for i := range 10 {
		a.produce("hooks", []api.ProduceRecord{{Key: json.RawMessage(fmt.Sprintf(`"h%d"`, i)), Value: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}})
	}
	// The query string is markup: the pages must show it as text.
	endpoint := hk.srv.URL + "/in?tag=<b>bold</b>"
	var created api.PushSubscription
	a.must(http.MethodPost, "/v1/push", api.PushConfig{Name: "web-hook", Topics: []string{"hooks"}, Endpoint: endpoint,
		Retry: api.PushRetry{MinBackoffMs: 100, MaxBackoffMs: 500, MaxAttempts: 1000}}, &created)
	if created.Secret == "" {
		t.Fatal("the created subscription has no secret")
	}
	status := func() api.PushStatus {
		t.Helper()
		var st api.PushStatus
		a.must(http.MethodGet, "/v1/push/web-hook", nil, &st)
		return st
	}

	tb := b.open(t, base+"/ui/#/push", 1280, 900)
	row := `#push-table tr[data-push="web-hook"]`
	tb.waitFor(20*time.Second, `!!document.querySelector('`+row+`')`, "the web-hook row")
	for field, want := range map[string]string{"state": "active", "topics": "hooks", "endpoint": endpoint, "format": "binary", "ordering": "partition"} {
		if got := cellText(t, tb, row, field); got != want {
			t.Errorf("list: %s %q, want %q", field, got, want)
		}
	}
	if n := eval[int](tb, `document.querySelectorAll('#push-table b').length`); n != 0 {
		t.Errorf("the endpoint's markup became %d elements", n)
	}
	tb.screenshot("push-list")

	// Its page: two partitions, each committed up to its high watermark,
	// before and after more records.
	tb.route("#/push/web-hook")
	caughtUp := func(what string) {
		t.Helper()
		top := a.topic("hooks")
		conds := make([]string, 0, len(top.Partitions))
		for _, p := range top.Partitions {
			r := fmt.Sprintf(`#push-partitions tr[data-topic="hooks"][data-partition="%d"]`, p.Partition)
			conds = append(conds, fmt.Sprintf(`num(%s, 'committed') === %d && num(%s, 'hw') === %d`, jsString(r), p.HighWatermark, jsString(r), p.HighWatermark))
		}
		tb.waitFor(30*time.Second, `(() => { const num = (r, f) => { const c = document.querySelector(r + ' [data-field=' + f + ']');
			return c ? Number(c.textContent.replace(/,/g, '')) : -1; }; return `+strings.Join(conds, " && ")+`; })()`, what)
		st := status()
		for _, p := range st.Partitions {
			if p.CommittedOffset != p.HighWatermark {
				t.Errorf("%s: the API has hooks/%d committed at %d, HW %d", what, p.Partition, p.CommittedOffset, p.HighWatermark)
			}
		}
	}
	tb.waitFor(20*time.Second, `document.querySelectorAll('#push-partitions tr[data-partition]').length === 2`, "two partition rows")
	caughtUp("the first ten records committed")
	for i := range 20 {
		a.produce("hooks", []api.ProduceRecord{{Value: json.RawMessage(fmt.Sprintf(`{"more":%d}`, i))}})
	}
	caughtUp("thirty records committed")
	got := hk.delivered()
	for _, p := range a.topic("hooks").Partitions {
		for o := int64(0); o < p.HighWatermark; o++ {
			if !got[fmt.Sprintf("%d/%d", p.Partition, o)] {
				t.Errorf("hooks/%d offset %d was committed but never reached the endpoint", p.Partition, o)
			}
		}
	}
	if s := cellText(t, tb, "#push-settings", "endpoint"); s != endpoint {
		t.Errorf("settings: endpoint %q, want %q", s, endpoint)
	}
	if n := eval[int](tb, `document.querySelectorAll('#push-settings b').length`); n != 0 {
		t.Errorf("the endpoint's markup became %d elements on the subscription's page", n)
	}

	// Pause, then resume: the page and the API agree.
	stateIs := func(want string) {
		t.Helper()
		tb.waitFor(15*time.Second, `document.getElementById('tile-push-state').dataset.state === '`+want+`'`, "state "+want)
		if st := status(); st.State != want {
			t.Errorf("the page shows %s, the API %s", want, st.State)
		}
	}
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-pause")))
	stateIs(api.PushPaused)
	tb.waitFor(10*time.Second, `(document.querySelector('#push-failures [data-failure=state] [data-field=reason]') || {}).textContent === 'paused by User:ANONYMOUS'`,
		"the reason of the pause among the failures")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-resume")))
	stateIs(api.PushActive)
	tb.waitFor(10*time.Second, `!!document.querySelector('#push-failures [data-failure=none]')`, "no failures once resumed")

	// A test event: the page shows the endpoint's 2xx, and the endpoint got
	// an event signed with the subscription's secret.
	sendTest := func(secret string) {
		t.Helper()
		before := len(hk.tests())
		eval[any](tb, `document.getElementById('push-result').replaceChildren()`)
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-test")))
		tb.waitFor(20*time.Second, `!!document.querySelector('#push-test-result[data-status]')`, "the test event's result")
		st := eval[int](tb, `Number(document.getElementById('push-test-result').dataset.status)`)
		verdict := eval[string](tb, `document.getElementById('push-test-result').dataset.verdict`)
		if st < 200 || st > 299 || verdict != "delivered" {
			t.Errorf("test event: status %d verdict %q, want 2xx delivered", st, verdict)
		}
		if resp := cellText(t, tb, "#push-test-result", "response"); resp != "ok" {
			t.Errorf("test event: response %q, want the endpoint's ok", resp)
		}
		reqs := hk.tests()
		if len(reqs) != before+1 {
			t.Fatalf("the endpoint got %d test events, want %d", len(reqs), before+1)
		}
		if err := verifyWebhook(secret, reqs[len(reqs)-1].header, reqs[len(reqs)-1].body); err != nil {
			t.Errorf("test event: %v", err)
		}
	}
	sendTest(created.Secret)

	// Rotate: the new secret is shown once, and signs what follows.
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-rotate")))
	tb.do(30*time.Second, chromedp.WaitVisible(chromedp.ID("push-grace")))
	tb.set("push-grace", "3600")
	tb.do(30*time.Second, chromedp.Click(chromedp.CSS(`dialog.confirm .buttons button:last-child`)))
	tb.do(30*time.Second, chromedp.WaitVisible(chromedp.ID("push-secret-value")))
	secret := eval[string](tb, `document.getElementById('push-secret-value').value`)
	if secret == "" || secret == created.Secret {
		t.Fatalf("rotated secret %q (the created one was %q)", secret, created.Secret)
	}
	if !strings.Contains(eval[string](tb, `document.getElementById('push-secret').textContent`), "only time") {
		t.Error("the new secret is shown without the warning that it is shown once")
	}
	tb.screenshot("push-secret")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-secret-done")))
	tb.waitFor(5*time.Second, `!document.getElementById('push-secret-value') && !document.body.textContent.includes(`+jsString(secret)+`)`, "the secret gone from the page")
	sendTest(secret)

	// A record the endpoint refuses: its partition is among the failures,
	// with the attempts counted against it.
	offs := a.produce("hooks", []api.ProduceRecord{{Partition: ptr(int32(0)), Value: json.RawMessage(`{"poison":true}`)}})
	fail := fmt.Sprintf(`#push-failures [data-failure="hooks/%d"]`, offs[0].Partition)
	tb.waitFor(30*time.Second, fmt.Sprintf(`(() => { const f = document.querySelector(%s); return !!f && Number(f.querySelector('[data-field=head_attempts]').textContent) >= 1
		&& f.querySelector('[data-field=offset]').textContent.replace(/,/g, '') === '%d'; })()`, jsString(fail), offs[0].Offset),
		"the refused record among the failures")
	// The pusher's last error, in the failure and in the partition's row.
	lastErr := fmt.Sprintf(`#push-partitions tr[data-topic="hooks"][data-partition="%d"] [data-field=last_error]`, offs[0].Partition)
	tb.waitFor(30*time.Second, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.includes('offset %d attempt ') && e.textContent.includes('HTTP 400'); })()`,
		jsString(lastErr), offs[0].Offset), "the refusal as the partition's last error")
	if got := tileNum(t, tb, "tile-push-failing"); got != 1 {
		t.Errorf("failing tile %d, want 1", got)
	}
	var stuck bool
	for _, p := range status().Partitions {
		stuck = stuck || (p.Partition == offs[0].Partition && p.HeadAttempts > 0 && p.CommittedOffset == offs[0].Offset)
	}
	if !stuck {
		t.Errorf("the API has no attempts against hooks/%d offset %d: %+v", offs[0].Partition, offs[0].Offset, status().Partitions)
	}
	tb.screenshot("push")

	// Seek to latest skips it.
	seek := func(to string) {
		t.Helper()
		eval[any](tb, `document.getElementById('push-result').replaceChildren()`)
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-seek-"+to)))
		tb.do(30*time.Second, chromedp.Click(chromedp.CSS(`dialog.confirm button.danger`)))
		tb.waitFor(20*time.Second, `(document.getElementById('push-seeked') || {dataset: {}}).dataset.to === '`+to+`'`, "the seek to "+to)
	}
	seek("latest")
	caughtUp("committed at the high watermarks after the seek to latest")
	tb.waitFor(10*time.Second, `!!document.querySelector('#push-failures [data-failure=none]')`, "no failures after the seek")

	// An endpoint that is down: the subscription backs off, and says why.
	hk.down.Store(true)
	a.produce("hooks", []api.ProduceRecord{{Value: json.RawMessage(`{"while":"down"}`)}})
	stateIs(api.PushBackingOff)
	tb.waitFor(10*time.Second, `(document.querySelector('#push-failures [data-failure=state] [data-field=reason]') || {textContent: ''}).textContent.startsWith('HTTP 503: down for maintenance')`,
		"the endpoint's 503 among the failures")
	if hidden := eval[bool](tb, `document.getElementById('push-pause').hidden`); hidden {
		t.Error("a subscription backing off offers no Pause")
	}
	tb.screenshot("push-backing-off")
	hk.down.Store(false)
	stateIs(api.PushActive)
	caughtUp("delivered once the endpoint is back")

	// Paused, a seek to earliest holds at the log start; resumed, every
	// record is delivered again.
	hk.refuse.Store(false)
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-pause")))
	stateIs(api.PushPaused)
	seek("earliest")
	tb.waitFor(20*time.Second, `[...document.querySelectorAll('#push-partitions [data-field=committed]')].every(c => c.textContent === '0')`,
		"committed offsets at the log start")
	for _, p := range status().Partitions {
		if p.CommittedOffset != 0 {
			t.Errorf("after the seek to earliest the API has hooks/%d committed at %d", p.Partition, p.CommittedOffset)
		}
	}
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-resume")))
	stateIs(api.PushActive)
	caughtUp("every record delivered again after the seek to earliest")

	// At phone width the page does not scroll sideways.
	for _, pg := range []struct{ hash, ready string }{
		{"#/push", `!!document.querySelector('` + row + `')`},
		{"#/push/web-hook", `document.querySelectorAll('#push-partitions tr[data-partition]').length === 2`},
	} {
		phone := b.open(t, base+"/ui/"+pg.hash, 390, 844)
		phone.waitFor(20*time.Second, pg.ready, pg.hash+" loaded at phone width")
		if w := eval[int](phone, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("%s is %d px wide at a 390 px viewport", pg.hash, w)
		}
	}

	// Delete: the name typed first; the list no longer has it. A refresh
	// of the subscription's page already on its way gets 404.
	tb.expect("status of 404")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("push-delete")))
	tb.do(30*time.Second, chromedp.SendKeys(chromedp.CSS(`dialog.confirm input`), "web-hook"),
		chromedp.Click(chromedp.CSS(`dialog.confirm button.danger`)))
	tb.waitFor(30*time.Second, `location.hash === '#/push' && !!document.querySelector('#push-table table') && !document.querySelector('`+row+`')`, "the list without web-hook")
	if st := a.do(http.MethodGet, "/v1/push/web-hook", nil, nil); st != http.StatusNotFound {
		t.Errorf("GET /v1/push/web-hook after the delete: HTTP %d, want 404", st)
	}
	testwait.Check(t, 10*time.Second, "the list without web-hook", func() error {
		var l api.PushList
		a.must(http.MethodGet, "/v1/push", nil, &l)
		for _, s := range l.Subscriptions {
			if s.Name == "web-hook" {
				return fmt.Errorf("GET /v1/push lists web-hook: %+v", s)
			}
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }
