package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/tier"
)

// TestDashboard drives the dashboard in one headless Chromium against an
// in-process cluster of three brokers: every page loads without console
// errors and shows the numbers the API gives, the live tail (one event
// stream, no WebSocket) shows a record within 5 s and every record of a
// burst of 500, the produce form writes a record the API reads back, a
// topic created in the UI appears in the API; the tail's and the Push
// pages' own tests run in it too (testTail, testPushPages).
// Each page is saved as a full-page screenshot under the test's artifact
// directory (go test -artifacts), and also in $SLUICE_SCREENSHOTS when set.
func TestDashboard(t *testing.T) {
	b := newBrowser(t)
	// A bucket in memory is enough here: the page shows what the brokers
	// report of tiered partitions; the S3 path is tested elsewhere.
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, GroupLagInterval: time.Second,
		Bucket: tier.NewMemory(), TierInterval: 200 * time.Millisecond})
	a := apiClient{t: t, base: c.URL}
	seed(t, a)
	// Records flow into clicks (and are read back) for the whole test, so
	// rates and charts have something to show; the checks of exact numbers
	// look at orders, which holds still.
	stop := traffic(a, "clicks", 6)
	defer stop()
	// Screenshots for the docs wait longer, so the charts have a history.
	chartWait, settle := 5*time.Second, time.Duration(0)
	if os.Getenv(envScreenshots) != "" {
		chartWait, settle = 45*time.Second, 4*time.Second
	}

	t.Run("overview", func(t *testing.T) {
		tb := b.open(t, c.URL+"/", 1280, 900) // GET / redirects to /ui/
		if got := eval[string](tb, `location.pathname`); got != "/ui/" {
			t.Fatalf("GET / led to %q, want /ui/", got)
		}
		tb.waitFor(20*time.Second, `document.querySelectorAll('#brokers tr[data-broker]').length === 3`, "three broker rows")
		// Rates need two samples of the counters while records flow.
		tb.waitFor(20*time.Second, `(() => { const v = document.querySelector('#tile-produce .value');
			return v && v.firstChild && parseFloat(v.firstChild.textContent) > 0; })()`, "a produce rate above zero")
		time.Sleep(chartWait) // let the charts draw a few points for the screenshot
		ci := a.cluster()
		for _, br := range ci.Brokers {
			row := fmt.Sprintf(`#brokers tr[data-broker="%d"]`, br.ID)
			if got := cellNum(t, tb, row, "partitions_led"); got != int64(br.PartitionsLed) {
				t.Errorf("broker %d leads %d partitions on the page, %d in the API", br.ID, got, br.PartitionsLed)
			}
			if got := cellNum(t, tb, row, "replicas"); got != int64(br.Replicas) {
				t.Errorf("broker %d holds %d replicas on the page, %d in the API", br.ID, got, br.Replicas)
			}
			if got := cellText(t, tb, row, "local_bytes"); got == "—" || got == "" {
				t.Errorf("broker %d local bytes: %q", br.ID, got)
			}
		}
		for id, want := range map[string]int{"tile-under-replicated": ci.Partitions.UnderReplicated,
			"tile-under-min-isr": ci.Partitions.UnderMinISR, "tile-offline": ci.Partitions.Offline, "tile-topics": ci.Topics} {
			if got := tileNum(t, tb, id); got != int64(want) {
				t.Errorf("%s shows %d, the API says %d", id, got, want)
			}
		}
		if got := eval[string](tb, `document.querySelector('#tile-brokers .value').textContent`); got != "3/3" {
			t.Errorf("brokers alive tile: %q, want 3/3", got)
		}
		if n := eval[int](tb, `document.querySelectorAll('.uplot canvas').length`); n < 2 {
			t.Errorf("%d charts drawn, want 2", n)
		}
		tb.screenshot("overview")
	})

	t.Run("topics", func(t *testing.T) {
		tb := b.open(t, c.URL+"/ui/#/topics", 1280, 900)
		tb.waitFor(20*time.Second, `!!document.querySelector('#topics-table tr[data-topic="orders"]')`, "the orders row")
		tb.waitFor(20*time.Second, `document.querySelector('#topics-table tr[data-topic="orders"] [data-field=lag]').textContent !== 'no groups'`, "the worst group lag of orders")
		for _, name := range []string{"orders", "clicks"} {
			top := a.topic(name)
			row := fmt.Sprintf(`#topics-table tr[data-topic="%s"]`, name)
			if got := cellNum(t, tb, row, "partitions"); got != int64(len(top.Partitions)) {
				t.Errorf("%s: %d partitions on the page, %d in the API", name, got, len(top.Partitions))
			}
			if got := cellNum(t, tb, row, "replication"); got != int64(top.ReplicationFactor) {
				t.Errorf("%s: replication %d on the page, %d in the API", name, got, top.ReplicationFactor)
			}
			if name == "orders" { // clicks may still be moving
				if got, want := cellNum(t, tb, row, "records"), records(top); got != want {
					t.Errorf("%s: %d records on the page, %d in the API", name, got, want)
				}
			}
		}
		d := a.group("billing")
		var lag int64
		for _, p := range d.Partitions {
			lag += p.Lag
		}
		tb.waitFor(20*time.Second, fmt.Sprintf(`document.querySelector('#topics-table tr[data-topic="orders"] [data-field=lag]').textContent.replace(/,/g, '').startsWith('%d ')`, lag),
			fmt.Sprintf("orders' worst group lag %d (billing)", lag))
		time.Sleep(settle) // rates need two looks
		tb.screenshot("topics")

		// Create a topic through the dialog; the API then has it.
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("new-topic")),
			chromedp.SendKeys(chromedp.CSS(`#create-topic input[name=name]`), "from-ui"),
			chromedp.SetValue(chromedp.CSS(`#create-topic input[name=partitions]`), "2"),
			chromedp.SetValue(chromedp.CSS(`#create-topic textarea[name=configs]`), "retention.ms=3600000"))
		tb.screenshot("topics-create")
		tb.do(30*time.Second, chromedp.Click(chromedp.CSS(`#create-topic button[type=submit]`)))
		tb.waitFor(15*time.Second, `!!document.querySelector('#topics-table tr[data-topic="from-ui"]')`, "the from-ui row")
		created := a.topic("from-ui")
		if len(created.Partitions) != 2 || created.Configs["retention.ms"] != "3600000" {
			t.Errorf("topic created in the UI: %d partitions, configs %v; want 2 and retention.ms=3600000", len(created.Partitions), created.Configs)
		}

		// Delete one: the dialog wants the name typed first.
		a.createTopic("doomed", 1)
		tb.waitFor(20*time.Second, `!!document.querySelector('button[data-delete="doomed"]')`, "the doomed row")
		tb.do(30*time.Second, chromedp.Click(chromedp.CSS(`button[data-delete="doomed"]`)))
		if !eval[bool](tb, `document.querySelector('dialog.confirm button.danger').disabled`) {
			t.Error("the delete button is enabled before the name is typed")
		}
		tb.do(30*time.Second, chromedp.SendKeys(chromedp.CSS(`dialog.confirm input`), "doomed"),
			chromedp.Click(chromedp.CSS(`dialog.confirm button.danger`)))
		tb.waitFor(15*time.Second, `!document.querySelector('#topics-table tr[data-topic="doomed"]')`, "the doomed row to go")
		if st := a.do(http.MethodGet, "/v1/topics/doomed", nil, nil); st != http.StatusNotFound {
			t.Errorf("GET /v1/topics/doomed after the delete: HTTP %d, want 404", st)
		}
	})

	t.Run("topic", func(t *testing.T) {
		tb := b.open(t, c.URL+"/ui/#/topics/orders", 1280, 900)
		tb.waitFor(20*time.Second, `document.querySelectorAll('#partitions-table tr[data-partition]').length === 3`, "three partition rows")
		top := a.topic("orders")
		for _, p := range top.Partitions {
			row := fmt.Sprintf(`#partitions-table tr[data-partition="%d"]`, p.Partition)
			for field, want := range map[string]int64{"leader": int64(p.Leader), "high_watermark": p.HighWatermark,
				"log_end_offset": p.LogEndOffset, "log_start_offset": p.LogStartOffset, "local_start_offset": p.LocalStartOffset} {
				if got := cellNum(t, tb, row, field); got != want {
					t.Errorf("partition %d: %s %d on the page, %d in the API", p.Partition, field, got, want)
				}
			}
			if got := eval[int](tb, `document.querySelectorAll('`+row+` [data-field=replicas] .badge').length`); got != len(p.Replicas) {
				t.Errorf("partition %d: %d replica badges, %d replicas", p.Partition, got, len(p.Replicas))
			}
			isr := make([]string, len(p.ISR))
			for i, id := range p.ISR {
				isr[i] = strconv.Itoa(int(id))
			}
			if got := cellText(t, tb, row, "isr"); got != strings.Join(isr, ", ") {
				t.Errorf("partition %d: ISR %q on the page, %v in the API", p.Partition, got, p.ISR)
			}
		}
		if got, want := tileNum(t, tb, "tile-records"), records(top); got != want {
			t.Errorf("records tile %d, API %d", got, want)
		}
		time.Sleep(settle)
		tb.screenshot("topic")

		// A tiered topic: its partitions' remote end, local start and
		// sizes on disk and in the object store, as the leaders report
		// them once tiering has settled.
		hist := settledTopic(t, a, "history")
		tb.route("#/topics/history")
		for _, p := range hist.Partitions {
			row := fmt.Sprintf(`#partitions-table tr[data-partition="%d"]`, p.Partition)
			q := func(f string) string { return jsString(row + ` [data-field=` + f + `]`) }
			tb.waitFor(20*time.Second, fmt.Sprintf(`(() => { const c = f => document.querySelector(f);
				return c(%s) && c(%s).textContent.replace(/,/g, '') === '%d' && c(%s).textContent.replace(/,/g, '') === '%d'
					&& c(%s).textContent.replace(/,/g, '') === '%d'
					&& c(%s).dataset.bytes === '%d' && c(%s).dataset.bytes === '%d'; })()`,
				q("remote_end_offset"), q("remote_end_offset"), p.RemoteEndOffset, q("local_start_offset"), p.LocalStartOffset,
				q("log_start_offset"), p.LogStartOffset, q("local_bytes"), p.LocalBytes, q("remote_bytes"), p.RemoteBytes),
				fmt.Sprintf("history/%d as the API has it: %+v", p.Partition, p))
		}
		tb.screenshot("topic-tiered")
	})

	t.Run("messages", func(t *testing.T) {
		downloads := t.TempDir()
		tb := b.open(t, c.URL+"/ui/#/messages?topic=orders&partition=all", 1280, 900)
		tb.do(30*time.Second, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
				Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads})
			return err
		}))
		tb.waitFor(20*time.Second, `document.querySelector('#msg-topic').value === 'orders'`, "the orders topic selected")

		// Browse from earliest: every record of the three partitions.
		want := records(a.topic("orders"))
		tb.set("msg-from", "earliest")
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-load")))
		tb.waitFor(20*time.Second, fmt.Sprintf(`document.querySelectorAll('#records .rec[data-offset]').length === %d`, want),
			fmt.Sprintf("%d records browsed from earliest", want))
		// JSON values are indented, short parts kept on one line.
		if n := eval[int](tb, `[...document.querySelectorAll('#records .rec .val pre')].filter(p => p.textContent.includes('\n  "customer": {\n    "id": "c-77",')).length`); n != 1 {
			t.Errorf("%d values pretty-printed as the nested order, want 1", n)
		}
		if n := eval[int](tb, `[...document.querySelectorAll('#records .rec .val pre')].filter(p => p.textContent === '{"total": 49, "items": ["book", "pen"]}').length`); n != 1 {
			t.Errorf("%d short JSON values on one line, want user-7's", n)
		}
		if n := eval[int](tb, `[...document.querySelectorAll('#records .rec .val .tag')].filter(s => s.textContent === 'base64').length`); n != 1 {
			t.Errorf("%d values shown as base64, want the one binary record", n)
		}
		// Filters: key, header, value.
		// seed wrote user-1..user-20 with header src=curl, and ten "plain text" values.
		for _, f := range []struct {
			input, text string
			expect      int
		}{{"filter-key", "user-7", 1}, {"filter-header", "src=curl", 20}, {"filter-value", "plain", 10}} {
			expect := f.expect
			tb.do(30*time.Second, chromedp.SendKeys(chromedp.ID(f.input), f.text))
			tb.waitFor(10*time.Second, fmt.Sprintf(`document.querySelectorAll('#records .rec[data-offset]').length === %d`, expect),
				fmt.Sprintf("%d records matching %s %q", expect, f.input, f.text))
			if f.input == "filter-header" {
				// Download what the filter shows, as NDJSON.
				tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-download")))
				lines := waitDownload(t, downloads, expect)
				if len(lines) != expect {
					t.Errorf("NDJSON download: %d lines, want %d", len(lines), expect)
				}
				for _, l := range lines {
					if l.Topic != "orders" || l.Headers["src"] != "curl" || len(l.Value) == 0 {
						t.Errorf("NDJSON line %+v: want topic orders, header src=curl and a value", l)
					}
				}
			}
			tb.set(f.input, "")
		}
		tb.waitFor(10*time.Second, fmt.Sprintf(`document.querySelectorAll('#records .rec[data-offset]').length === %d`, want), "the filters cleared")
		tb.screenshot("messages-browse")

		// The live tail of every partition of a fresh topic.
		a.createTopic("live", 3)
		// The page lists topics again every few seconds.
		tb.waitFor(20*time.Second, `[...document.querySelectorAll('#msg-topic option')].some(o => o.value === 'live')`, "the live topic listed")
		tb.set("msg-topic", "live")
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
		tb.waitFor(20*time.Second, `(() => { const s = document.getElementById('tail-state'); return s && s.dataset.open === '3'; })()`, "three partition streams open")

		one := a.produce("live", []api.ProduceRecord{{Key: json.RawMessage(`"first"`), Value: json.RawMessage(`{"hello":"tail"}`)}})
		tb.waitFor(5*time.Second, fmt.Sprintf(`!!document.querySelector('#records .rec[data-partition="%d"][data-offset="%d"]')`, one[0].Partition, one[0].Offset),
			"the produced record in the live tail")

		burst := make([]api.ProduceRecord, 500)
		for i := range burst {
			burst[i] = api.ProduceRecord{Key: json.RawMessage(fmt.Sprintf(`"k%d"`, i)), Value: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		}
		offs := a.produce("live", burst)
		tb.waitFor(20*time.Second, `document.getElementById('tail-received').textContent === '501'`, "all 501 records received")
		tb.waitFor(10*time.Second, `document.querySelectorAll('#records .rec[data-offset]').length === 501`, "all 501 records shown")
		shown := eval[[]string](tb, `[...document.querySelectorAll('#records .rec[data-offset]')].map(r => r.dataset.partition + '/' + r.dataset.offset)`)
		seen := map[string]bool{}
		for _, s := range shown {
			seen[s] = true
		}
		for i, o := range offs {
			if !seen[fmt.Sprintf("%d/%d", o.Partition, o.Offset)] {
				t.Fatalf("record %d of the burst (partition %d offset %d) is not in the tail", i, o.Partition, o.Offset)
			}
		}
		// Over one event stream of the topic (EventSource), no WebSocket.
		if got := tb.requested(network.ResourceTypeEventSource, "/v1/topics/live/sse?offset=latest"); len(got) != 1 {
			t.Errorf("the live tail's EventSource requests: %q, want one of /v1/topics/live/sse?offset=latest", got)
		}
		if ws := tb.webSockets(); len(ws) != 0 {
			t.Errorf("the live tail opened WebSockets: %q", ws)
		}
		tb.screenshot("messages")

		// The produce form writes a record that the API reads back.
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
		tb.set("produce-key", "from-form")
		tb.set("produce-headers", "origin=dashboard")
		tb.set("produce-value", `{"made":"in the browser","n":7}`)
		tb.do(30*time.Second, chromedp.Click(chromedp.ID("produce-send")))
		tb.waitFor(20*time.Second, `!!document.querySelector('#produce-result [data-offset]')`, "the produce result")
		p := eval[int32](tb, `Number(document.querySelector('#produce-result [data-offset]').dataset.partition)`)
		o := eval[int64](tb, `Number(document.querySelector('#produce-result [data-offset]').dataset.offset)`)
		var fr api.FetchResponse
		a.must(http.MethodGet, fmt.Sprintf("/v1/topics/live/partitions/%d/records?offset=%d&max_records=1", p, o), nil, &fr)
		if len(fr.Records) != 1 {
			t.Fatalf("the API has no record at partition %d offset %d", p, o)
		}
		r := fr.Records[0]
		if r.Key == nil || *r.Key != "from-form" || r.Headers["origin"] != "dashboard" || string(r.Value) != `{"made":"in the browser","n":7}` {
			t.Errorf("record written by the form: key %v headers %v value %s", r.Key, r.Headers, r.Value)
		}
	})

	t.Run("groups", func(t *testing.T) {
		tb := b.open(t, c.URL+"/ui/#/groups", 1280, 900)
		tb.waitFor(20*time.Second, `!!document.querySelector('#groups-table tr[data-group="billing"]')`, "the billing row")
		d := a.group("billing")
		var lag int64
		for _, p := range d.Partitions {
			lag += p.Lag
		}
		tb.waitFor(20*time.Second, fmt.Sprintf(`document.querySelector('#groups-table tr[data-group="billing"] [data-field=lag]').textContent.replace(/,/g, '') === '%d'`, lag),
			fmt.Sprintf("billing's lag %d", lag))
		if got := cellNum(t, tb, `#groups-table tr[data-group="billing"]`, "members"); got != int64(len(d.Members)) {
			t.Errorf("billing: %d members on the page, %d in the API", got, len(d.Members))
		}
		tb.screenshot("groups")

		tb.route("#/groups/billing")
		tb.waitFor(20*time.Second, fmt.Sprintf(`document.querySelectorAll('#group-partitions tr[data-partition]').length === %d`, len(d.Partitions)), "the group's partitions")
		time.Sleep(min(chartWait, 10*time.Second)) // a few lag samples for the chart
		d = a.group("billing")
		for _, p := range d.Partitions {
			row := fmt.Sprintf(`#group-partitions tr[data-topic="%s"][data-partition="%d"]`, p.Topic, p.Partition)
			if got := cellNum(t, tb, row, "lag"); got != p.Lag {
				t.Errorf("%s/%d: lag %d on the page, %d in the API", p.Topic, p.Partition, got, p.Lag)
			}
			if got := cellNum(t, tb, row, "committed"); got != p.CommittedOffset {
				t.Errorf("%s/%d: committed %d on the page, %d in the API", p.Topic, p.Partition, got, p.CommittedOffset)
			}
		}
		if got := eval[string](tb, `document.querySelector('#members-table tr[data-member] [data-field=assignment]').textContent`); got != "orders/0, orders/1, orders/2" {
			t.Errorf("member assignment %q", got)
		}
		if n := eval[int](tb, `document.querySelectorAll('.uplot canvas').length`); n != 1 {
			t.Errorf("%d lag charts, want 1", n)
		}
		tb.screenshot("group")
	})

	t.Run("tail", func(t *testing.T) { testTail(t, b, c.URL, a) })

	t.Run("push", func(t *testing.T) { testPushPages(t, b, c.URL, a) })

	t.Run("phone", func(t *testing.T) {
		for _, pg := range []struct{ name, hash, ready string }{
			{"overview-phone", "#/overview", `document.querySelectorAll('#brokers tr[data-broker]').length === 3`},
			{"topic-phone", "#/topics/orders", `document.querySelectorAll('#partitions-table tr[data-partition]').length === 3`},
			{"messages-phone", "#/messages?topic=orders&partition=0", `document.querySelector('#msg-topic').value === 'orders'`},
		} {
			tb := b.open(t, c.URL+"/ui/"+pg.hash, 390, 844)
			tb.waitFor(20*time.Second, pg.ready, pg.name+" loaded")
			if pg.name == "messages-phone" {
				tb.set("msg-from", "earliest")
				tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-load")))
				tb.waitFor(20*time.Second, `document.querySelectorAll('#records .rec[data-offset]').length > 0`, "records on a phone")
			}
			// Wide tables scroll inside their panels; the page itself must not.
			if w := eval[int](tb, `document.documentElement.scrollWidth`); w > 390 {
				t.Errorf("%s is %d px wide at a 390 px viewport", pg.name, w)
			}
			tb.screenshot(pg.name)
		}
	})
}

// seed creates the data the pages show: a topic with JSON, text and binary
// records, a busy topic, and a group that is behind.
func seed(t *testing.T, a apiClient) {
	t.Helper()
	a.createTopic("orders", 3)
	a.createTopic("clicks", 6)
	for i := 1; i <= 20; i++ {
		a.produce("orders", []api.ProduceRecord{
			{Key: json.RawMessage(fmt.Sprintf(`"user-%d"`, i)), Value: json.RawMessage(fmt.Sprintf(`{"total":%d,"items":["book","pen"]}`, i*7)),
				Headers: map[string]string{"src": "curl"}},
		})
		if i%2 == 0 {
			a.produce("orders", []api.ProduceRecord{{Value: json.RawMessage(fmt.Sprintf(`"plain text %d"`, i))}})
		}
	}
	a.produceRaw("orders", 0, "photo", []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 0xff})
	a.produce("orders", []api.ProduceRecord{{Key: json.RawMessage(`"A-1042"`), Headers: map[string]string{"trace": "4bf92f35"},
		Value: json.RawMessage(`{"order":"A-1042","customer":{"id":"c-77","name":"Ada Lovelace","email":"ada@example.com","tier":"gold"},` +
			`"lines":[{"sku":"BOOK-1","qty":1,"price":12.5},{"sku":"PEN-9","qty":3,"price":1.2}],"total":16.1,"paid":true}`)}})

	// A tiered topic whose small segments go to the object store and
	// leave the brokers' disks.
	a.must(http.MethodPost, "/v1/topics", api.CreateTopicRequest{Name: "history", Partitions: 2, Configs: map[string]string{
		"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "8192"}}, nil)
	for i := range 20 {
		recs := make([]api.ProduceRecord, 20)
		for k := range recs {
			recs[k] = api.ProduceRecord{Value: json.RawMessage(fmt.Sprintf(`{"event":"archived","batch":%d,"n":%d,"pad":"%s"}`, i, k, strings.Repeat("x", 60)))}
		}
		a.produce("history", recs)
	}

	var j api.JoinGroupResponse
	a.must(http.MethodPost, "/v1/groups/billing/members", api.JoinGroupRequest{Topics: []string{"orders"}, SessionTimeoutMs: 300000}, &j)
	var poll api.GroupPollResponse
	a.must(http.MethodGet, "/v1/groups/billing/members/"+j.MemberID+"/records?max_records=12&max_wait_ms=2000", nil, &poll)
	a.must(http.MethodPost, "/v1/groups/billing/offsets", api.CommitRequest{MemberID: j.MemberID, Cursor: poll.Cursor}, nil)
}

// traffic produces to topic and reads it back until stopped, so the
// overview has rates to chart.
func traffic(a apiClient, topic string, partitions int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		next := make([]int64, partitions)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			recs := make([]api.ProduceRecord, 5+i%20)
			for k := range recs {
				recs[k] = api.ProduceRecord{Value: json.RawMessage(fmt.Sprintf(`{"page":"/p/%d","n":%d}`, i, k))}
			}
			body, _ := json.Marshal(api.ProduceRequest{Records: recs})
			if resp, err := http.Post(a.base+"/v1/topics/"+topic+"/records", "application/json", strings.NewReader(string(body))); err == nil {
				resp.Body.Close()
			}
			// Read one partition on from where the last read of it ended,
			// as a consumer would.
			p := i % len(next)
			if resp, err := http.Get(fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%d", a.base, topic, p, next[p])); err == nil {
				var fr api.FetchResponse
				if json.NewDecoder(resp.Body).Decode(&fr) == nil && fr.NextOffset > next[p] {
					next[p] = fr.NextOffset
				}
				resp.Body.Close()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// settledTopic waits until some of the topic's segments are in the object
// store and its positions and sizes hold still for a second, and returns it.
func settledTopic(t *testing.T, a apiClient, name string) api.Topic {
	t.Helper()
	prev := a.topic(name)
	var cur api.Topic
	testwait.Check(t, 60*time.Second, name+" to be tiered and settled", func() error {
		time.Sleep(time.Second) // settled: the same a second apart
		cur = a.topic(name)
		tiered := true
		for _, p := range cur.Partitions {
			if p.RemoteEndOffset <= 0 || p.RemoteBytes <= 0 || p.LocalStartOffset <= 0 {
				tiered = false
			}
		}
		same, _ := json.Marshal(cur)
		before, _ := json.Marshal(prev)
		if tiered && string(same) == string(before) {
			return nil
		}
		prev = cur
		return fmt.Errorf("%s not tiered and settled: %s", name, same)
	})
	return cur
}

// records counts a topic's readable records as the pages do.
func records(t api.Topic) int64 {
	var n int64
	for _, p := range t.Partitions {
		n += p.HighWatermark - max(0, p.LogStartOffset)
	}
	return n
}

// cellText is the text of the [data-field=field] element in row.
func cellText(t *testing.T, tb *tab, row, field string) string {
	t.Helper()
	return eval[string](tb, fmt.Sprintf(`(document.querySelector(%s) || {textContent: ''}).textContent`, jsString(row+` [data-field=`+field+`]`)))
}

// cellNum reads a number shown with thousands separators.
func cellNum(t *testing.T, tb *tab, row, field string) int64 {
	t.Helper()
	s := cellText(t, tb, row, field)
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("%s %s: %q is not a number", row, field, s)
	}
	return n
}

// tileNum reads the number of a tile.
func tileNum(t *testing.T, tb *tab, id string) int64 {
	t.Helper()
	s := eval[string](tb, fmt.Sprintf(`document.querySelector('#%s .value').firstChild.textContent`, id))
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("tile %s: %q is not a number", id, s)
	}
	return n
}

// ndjsonLine is one line of the dashboard's NDJSON download.
type ndjsonLine struct {
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Value     json.RawMessage   `json:"value"`
	Headers   map[string]string `json:"headers"`
}

// waitDownload waits for one .ndjson file in dir holding want lines, and
// parses it. Chromium may show the file under its final name before the
// last bytes are in it, so a short or empty file is read again until it
// holds want lines or the wait ends (a failure naming what it held).
func waitDownload(t *testing.T, dir string, want int) []ndjsonLine {
	t.Helper()
	var out []ndjsonLine
	testwait.Check(t, 10*time.Second, fmt.Sprintf("an NDJSON download of %d lines", want), func() error {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.ndjson"))
		if len(matches) != 1 {
			return fmt.Errorf("no single NDJSON download in %s (found %v)", dir, matches)
		}
		b, err := os.ReadFile(matches[0])
		if err != nil {
			return err
		}
		out = out[:0]
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l ndjsonLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				return fmt.Errorf("NDJSON line %q: %v", sc.Text(), err)
			}
			out = append(out, l)
		}
		if len(out) != want {
			return fmt.Errorf("NDJSON download: %d lines, want %d", len(out), want)
		}
		return nil
	})
	return out
}
