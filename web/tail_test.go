package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/tcpproxy"
)

// testTail drives the live tail over Server-Sent Events. One partition:
// its stream from its high watermark at the click, every record produced
// while it is open shown in order. Every partition: the topic's one
// stream, with the records produced between the click and the stream's
// start (the browser holds the stream's request while they are produced)
// read from the log, so each partition shows each record once, in order.
// A stream whose topic is deleted shows the gateway's error. A dropped
// connection is resumed by EventSource itself, after the last record shown.
func testTail(t *testing.T, b *chrome, base string, a apiClient) {
	const topic, partitions = "tail", 8
	a.createTopic(topic, partitions)
	tb := b.open(t, base+"/ui/#/messages?topic=tail&partition=all", 1280, 900)
	tb.waitFor(20*time.Second, `document.querySelector('#msg-topic').value === 'tail'`, "the tail topic selected")

	// rows are the records shown, newest first, as partition/offset.
	rows := func() []string {
		return eval[[]string](tb, `[...document.querySelectorAll('#records .rec[data-offset]')].map(r => r.dataset.partition + '/' + r.dataset.offset)`)
	}
	produceTo := func(p int32, n int) []api.RecordOffset {
		recs := make([]api.ProduceRecord, n)
		for i := range recs {
			recs[i] = api.ProduceRecord{Partition: ptr(p), Value: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}
		return a.produce(topic, recs)
	}
	tailOpen := func(want int) {
		t.Helper()
		tb.waitFor(20*time.Second, fmt.Sprintf(`(() => { const s = document.getElementById('tail-state');
			return !!s && s.dataset.open === '%d' && s.dataset.want === '%d' && s.dataset.transport === 'sse'; })()`, want, want),
			fmt.Sprintf("%d partitions streaming", want))
	}

	// One partition, which already holds five records.
	produceTo(3, 5)
	tb.set("msg-partition", "3")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
	tailOpen(1)
	var want []string
	for range 10 {
		for _, o := range produceTo(3, 5) {
			want = append(want, fmt.Sprintf("%d/%d", o.Partition, o.Offset))
		}
	}
	tb.waitFor(20*time.Second, `document.getElementById('tail-received').textContent === '50'`, "the 50 records received")
	slices.Reverse(want)
	if got := rows(); !slices.Equal(got, want) {
		t.Errorf("partition 3's tail shows %q, want %q", got, want)
	}
	if got := tb.requested(network.ResourceTypeEventSource, "/v1/topics/tail/partitions/3/sse?offset=5"); len(got) != 1 {
		t.Errorf("the partition's EventSource requests: %q, want one from offset 5", got)
	}
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))

	// Every partition: the stream's request is held until records were
	// produced after the click.
	tb.set("msg-partition", "all")
	release := tb.holdStream("*/v1/topics/tail/sse*", func() { tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail"))) })
	produced := map[int32][]int64{}
	keyed := func(from, n int) {
		recs := make([]api.ProduceRecord, n)
		for i := range recs {
			recs[i] = api.ProduceRecord{Key: json.RawMessage(fmt.Sprintf(`"k%d"`, from+i)), Value: json.RawMessage(fmt.Sprintf(`{"n":%d}`, from+i))}
		}
		for _, o := range a.produce(topic, recs) {
			produced[o.Partition] = append(produced[o.Partition], o.Offset)
		}
	}
	keyed(0, 80) // after the click, before the stream starts
	release()
	tailOpen(partitions)
	keyed(80, 80) // while it streams
	tb.waitFor(20*time.Second, `document.getElementById('tail-received').textContent === '160'`, "the 160 records received")
	shown := map[int32][]int64{}
	for _, r := range rows() {
		var p int32
		var o int64
		if _, err := fmt.Sscanf(r, "%d/%d", &p, &o); err != nil {
			t.Fatalf("row %q: %v", r, err)
		}
		shown[p] = append(shown[p], o)
	}
	for p := range int32(partitions) {
		w := append([]int64(nil), produced[p]...)
		slices.Reverse(w)
		if !slices.Equal(shown[p], w) {
			t.Errorf("partition %d shows offsets %v, want %v (newest first, each once)", p, shown[p], w)
		}
	}
	if got := tb.requested(network.ResourceTypeEventSource, "/v1/topics/tail/sse?offset=latest"); len(got) != 1 {
		t.Errorf("the topic's EventSource requests: %q, want one", got)
	}
	if got := tb.requested(network.ResourceTypeEventSource, "/partitions/"); len(got) != 1 {
		t.Errorf("partition streams requested: %q, want only the one of partition 3", got)
	}
	if ws := tb.webSockets(); len(ws) != 0 {
		t.Errorf("the tail opened WebSockets: %q", ws)
	}
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))

	// A stream that fails once open: the error event's envelope is shown.
	a.createTopic("tail-doomed", 1)
	tb.waitFor(20*time.Second, `[...document.querySelectorAll('#msg-topic option')].some(o => o.value === 'tail-doomed')`, "tail-doomed listed")
	tb.set("msg-topic", "tail-doomed")
	tb.set("msg-partition", "0")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
	tailOpen(1)
	a.must(http.MethodDelete, "/v1/topics/tail-doomed", nil, nil)
	tb.waitFor(30*time.Second, `(document.getElementById('msg-status') || {textContent: ''}).textContent.startsWith('UNKNOWN_TOPIC: ')`,
		"the stream's UNKNOWN_TOPIC shown")
	if open := eval[string](tb, `document.getElementById('tail-state').dataset.open`); open != "0" {
		t.Errorf("%s partitions streaming after the topic was deleted, want 0", open)
	}
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))

	// A stream the gateway refuses (its topic deleted while the request is
	// held): EventSource gives up without the answer, which the page asks
	// for again to show its envelope.
	a.createTopic("tail-refused", 1)
	tb.waitFor(20*time.Second, `[...document.querySelectorAll('#msg-topic option')].some(o => o.value === 'tail-refused')`, "tail-refused listed")
	tb.set("msg-topic", "tail-refused")
	tb.set("msg-partition", "0")
	tb.expect("the server responded with a status of 404") // the refused stream, then the page's second look
	release = tb.holdStream("*/v1/topics/tail-refused/partitions/0/sse*", func() { tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail"))) })
	a.must(http.MethodDelete, "/v1/topics/tail-refused", nil, nil)
	release()
	tb.waitFor(30*time.Second, `(document.getElementById('msg-status') || {textContent: ''}).textContent.startsWith('UNKNOWN_TOPIC: ')`,
		"the refused stream's UNKNOWN_TOPIC shown")
	if got := tb.requested(network.ResourceTypeFetch, "/v1/topics/tail-refused/partitions/0/sse?offset=0"); len(got) != 1 {
		t.Errorf("the refused stream asked again: %q, want once", got)
	}

	testTailResumes(t, b, base, a)
}

// testTailResumes cuts the dashboard's connections (it is loaded through a
// TCP proxy) while a partition is tailed; EventSource reconnects with the
// id of the last event, its request held until more records were produced,
// and the tail goes on right after the last record shown: each record once,
// in order.
func testTailResumes(t *testing.T, b *chrome, base string, a apiClient) {
	a.createTopic("tail-resume", 1)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.New("dashboard", u.Host, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	tb := b.open(t, "http://"+px.Addr()+"/ui/#/messages?topic=tail-resume&partition=0", 1280, 900)
	tb.expect("net::ERR_") // the page's calls caught by the cut
	tb.waitFor(20*time.Second, `document.querySelector('#msg-topic').value === 'tail-resume' && document.querySelector('#msg-partition').value === '0'`,
		"tail-resume/0 selected")
	tb.do(30*time.Second, chromedp.Click(chromedp.ID("msg-tail")))
	tb.waitFor(20*time.Second, `(document.getElementById('tail-state') || {dataset: {}}).dataset.open === '1'`, "the stream open")
	produce := func(n int) {
		recs := make([]api.ProduceRecord, n)
		for i := range recs {
			recs[i] = api.ProduceRecord{Value: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}
		a.produce("tail-resume", recs)
	}
	produce(20)
	tb.waitFor(20*time.Second, `document.getElementById('tail-received').textContent === '20'`, "20 records before the cut")

	release := tb.holdStream("*/v1/topics/tail-resume/partitions/0/sse*", func() {
		px.CutReset()
		px.Restore()
	})
	tb.waitFor(10*time.Second, `(document.getElementById('tail-state') || {dataset: {}}).dataset.open === '0'`, "the stream seen down")
	produce(20) // while the reconnect is held
	release()
	tb.waitFor(20*time.Second, `document.getElementById('tail-received').textContent === '40'`, "40 records after the reconnect")
	tb.waitFor(10*time.Second, `document.getElementById('tail-state').dataset.open === '1' && !document.getElementById('msg-status')`, "the stream open again, no error shown")
	got := eval[[]string](tb, `[...document.querySelectorAll('#records .rec[data-offset]')].map(r => r.dataset.offset)`)
	want := make([]string, 40)
	for i := range want {
		want[i] = strconv.Itoa(39 - i)
	}
	if !slices.Equal(got, want) {
		t.Errorf("after the reconnect the tail shows offsets %q, want 39 down to 0, each once", got)
	}
	sent := tb.sentHeaders(network.ResourceTypeEventSource, "/v1/topics/tail-resume/partitions/0/sse?offset=0")
	if len(sent) != 2 {
		t.Fatalf("the stream was requested %d times, want twice: the first time and the reconnect", len(sent))
	}
	if id, _ := sent[1]["Last-Event-ID"].(string); id != "20" {
		t.Errorf("the reconnect sent Last-Event-ID %q, want 20 (after offset 19); headers %v", id, sent[1])
	}
}
