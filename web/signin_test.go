package web_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

const signInToken = "slc_00000000000000bb_2222222222222222222222222222222222222222222222222222222222222222"

// TestDashboardSignIn opens the dashboard of a gateway that requires a
// token: it offers sign-in, refuses a wrong token, and after the right one
// shows the cluster and tails a partition over a WebSocket that the session
// cookie authenticates (a browser cannot add an Authorization header to a
// WebSocket). The gateway has Origin and Host allow-lists, which the
// dashboard, served by the gateway itself, passes as its own origin.
func TestDashboardSignIn(t *testing.T) {
	b := newBrowser(t)
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: signInToken},
		TuneGateway: func(o *gateway.Options) { o.AllowedOrigins = []string{"https://dash.example.com"} }})
	post := func(path string, body any) []byte {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, c.URL+path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+signInToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, out.String())
		}
		return out.Bytes()
	}
	post("/v1/topics", api.CreateTopicRequest{Name: "secured"})

	tb := b.open(t, c.URL+"/ui/", 1280, 900)
	tb.waitFor(20*time.Second, `!!document.getElementById('signin')`, "the sign-in form")
	tb.set("signin-token", "slc_0123456789abcdef_"+"0000000000000000000000000000000000000000000000000000000000000000")
	tb.do(10*time.Second, chromedp.Click(chromedp.CSS("#signin button")))
	tb.waitFor(10*time.Second, `document.getElementById('signin-error').textContent.includes('UNAUTHENTICATED')`, "a wrong token refused")
	tb.screenshot("signin")

	tb.set("signin-token", signInToken)
	tb.do(10*time.Second, chromedp.Click(chromedp.CSS("#signin button")))
	tb.waitFor(20*time.Second, `!document.getElementById('signin') && document.querySelectorAll('#brokers tr[data-broker]').length === 1`, "the overview after signing in")
	// The pages' requests from before the sign-in were refused; from here
	// on a 401 is a failure.
	tb.forget("status of 401")

	tb.route("#/messages")
	tb.waitFor(20*time.Second, `[...document.querySelectorAll('#msg-topic option')].some(o => o.value === 'secured')`, "the topic listed")
	tb.set("msg-topic", "secured")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
	tb.waitFor(20*time.Second, `(() => { const s = document.getElementById('tail-state'); return s && s.dataset.open === '1'; })()`, "the partition stream open")
	var res api.ProduceResponse
	if err := json.Unmarshal(post("/v1/topics/secured/records", map[string]any{"records": []map[string]any{{"value": "hello"}}}), &res); err != nil {
		t.Fatal(err)
	}
	tb.waitFor(10*time.Second, `!!document.querySelector('#records .rec[data-partition="0"][data-offset="0"]')`, "the record in the live tail")
}
