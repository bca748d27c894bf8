package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-io/sluice/gateway"
	"github.com/sluice-io/sluice/internal/embedtest"
)

const crossOriginToken = "slc_00000000000000dd_4444444444444444444444444444444444444444444444444444444444444444"

// crossOriginPage is a page of another site that produces to the gateway
// with a token, reads the record back as JSON, reads a raw fetch's
// X-Sluice-Next-Offset header, and reads the error of a call without a
// token, leaving what it saw in window.result.
const crossOriginPage = `<!doctype html><meta charset="utf-8"><title>another site</title><script>
const gw = %s, auth = {'Authorization': 'Bearer ' + %s};
(async () => {
  const r = {};
  try {
    let res = await fetch(gw + '/v1/topics/xorigin/records', {method: 'POST',
      headers: {...auth, 'Content-Type': 'application/json', 'X-Client-Id': 'page'},
      body: JSON.stringify({records: [{key: 'k', value: 'from the page'}]})});
    r.produce = res.status;
    res = await fetch(gw + '/v1/topics/xorigin/partitions/0/records?offset=0', {headers: auth});
    r.fetch = res.status;
    r.values = (await res.json()).records.map(x => x.value);
    res = await fetch(gw + '/v1/topics/xorigin/partitions/0/batches?offset=0', {headers: auth});
    r.next = res.headers.get('X-Sluice-Next-Offset');
    res = await fetch(gw + '/v1/topics');
    r.anonymous = res.status + ' ' + res.headers.get('X-Sluice-Error-Code');
  } catch (e) {
    r.error = String(e);
  }
  window.result = r;
})();
</script>`

// TestCrossOriginPage runs pages of two other sites in Chromium against a
// gateway that requires tokens and allows one of them: the allowed page
// produces, reads records and headers and sees errors; the other page's
// write is stopped by the browser at the refused preflight, so nothing of
// it reaches the topic.
func TestCrossOriginPage(t *testing.T) {
	b := newBrowser(t)
	var gwURL string
	serve := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gw, _ := json.Marshal(gwURL)
			tok, _ := json.Marshal(crossOriginToken)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = fmt.Fprintf(w, crossOriginPage, gw, tok)
		}))
		t.Cleanup(s.Close)
		return s
	}
	allowed, other := serve(), serve()
	c := embedtest.Start(t, embedtest.Options{GatewayAuth: gateway.AuthOptions{Required: true, BootstrapToken: crossOriginToken},
		TuneGateway: func(o *gateway.Options) { o.AllowedOrigins = []string{allowed.URL} }})
	gwURL = c.URL
	a := apiClient{t: t, base: c.URL, token: crossOriginToken}
	a.createTopic("xorigin", 1)

	type result struct {
		Produce, Fetch  int
		Values          []string
		Next, Anonymous string
		Error           string
	}
	run := func(page string) (*tab, result) {
		tb := b.open(t, page, 800, 600)
		tb.waitFor(20*time.Second, `window.result !== undefined`, "the page's calls")
		var r result
		if err := json.Unmarshal([]byte(eval[string](tb, `JSON.stringify(window.result)`)), &r); err != nil {
			t.Fatal(err)
		}
		return tb, r
	}

	tb, r := run(allowed.URL)
	tb.forget("status of 401") // the call without a token, on purpose
	if r.Error != "" || r.Produce != 200 || r.Fetch != 200 || len(r.Values) != 1 || r.Values[0] != "from the page" ||
		r.Next != "1" || r.Anonymous != "401 UNAUTHENTICATED" {
		t.Errorf("the allowed page saw %+v", r)
	}

	tb, r = run(other.URL)
	tb.forget("CORS policy") // the refused preflight and the reads without a grant
	tb.forget("net::ERR_FAILED")
	if r.Error == "" || r.Produce != 0 {
		t.Errorf("the other page's write was not stopped: %+v", r)
	}
	if got := a.topic("xorigin").Partitions[0].HighWatermark; got != 1 {
		t.Errorf("the topic holds %d records after both pages, want the allowed page's 1", got)
	}
}
