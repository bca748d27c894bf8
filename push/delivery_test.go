package push_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/tcpproxy"
	"github.com/sluice-io/sluice/internal/testwait"
)

// Every record reaches the endpoint, in order per partition, signed as
// Standard Webhooks says, and a CloudEvents receiver (the official Go
// SDK) reads every request as a valid event.
func TestPushDeliversEveryRecordInOrder(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "orders", 3)
	ep := newEndpoint(t)
	counts := produce(t, c, "orders", 0, 5000, 50, nil)
	sub := createPush(t, c, api.PushConfig{Name: "fn", Topics: []string{"orders"}, Endpoint: ep.srv.URL + "/hook"})

	reqs := ep.waitFor(2*time.Minute, "all 5,000 records", func(r []request) bool { return len(delivered(r)) == 5000 })
	next := map[int32]int64{}
	for _, r := range reqs {
		if err := verifyWebhook(sub.Secret, r.header, r.body); err != nil {
			t.Fatalf("partition %d offset %d: %v", r.part, r.offset, err)
		}
		hr, _ := http.NewRequest(http.MethodPost, "http://x/", bytes.NewReader(r.body))
		hr.Header = r.header
		ev, err := cehttp.NewEventFromHTTPRequest(hr)
		if err != nil {
			t.Fatalf("offset %d: not a CloudEvent: %v", r.offset, err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("offset %d: invalid CloudEvent: %v", r.offset, err)
		}
		if want := "sluice://sluice/topics/orders"; ev.Source() != want || ev.Type() != "sluice.record" {
			t.Fatalf("event source %q type %q", ev.Source(), ev.Type())
		}
		if r.header.Get("webhook-id") != "fn.orders."+strconv.Itoa(int(r.part))+"."+strconv.FormatInt(r.offset, 10) {
			t.Fatalf("webhook-id %q for %d/%d", r.header.Get("webhook-id"), r.part, r.offset)
		}
		// Order per partition: each request carries the next offset (no
		// request failed, so none is sent twice).
		if r.offset != next[r.part] {
			t.Fatalf("partition %d: offset %d arrived, want %d", r.part, r.offset, next[r.part])
		}
		next[r.part]++
		if !bytes.Equal(r.body, ev.Data()) || !bytes.HasPrefix(r.body, []byte("v")) {
			t.Fatalf("offset %d: body %q, event data %q", r.offset, r.body, ev.Data())
		}
	}
	for p, n := range counts {
		if next[p] != int64(n) {
			t.Fatalf("partition %d: %d delivered, %d produced", p, next[p], n)
		}
	}
	st := waitStatus(t, c, "fn", 30*time.Second, "committed to the end", caughtUp)
	if st.State != api.PushActive || st.Group != "push.fn" {
		t.Fatalf("status %+v", st.PushSubscription)
	}
	groups, err := c.ListGroups(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups {
		if g.Group == "push.fn" {
			found = g.Kind == api.GroupKindPush
		}
	}
	if !found {
		t.Fatalf("GET /v1/groups does not list push.fn as a push group: %+v", groups)
	}
	// A pull member may not join the subscription's group.
	_, err = c.JoinGroup(ctxT(t, 10*time.Second), "push.fn", api.JoinGroupRequest{Topics: []string{"orders"}})
	if code := api.Classify(err).Code; code != api.CodeGroupManaged {
		t.Fatalf("a pull join of push.fn: %v", err)
	}
}

// 429 with Retry-After: 2: nothing is sent for two seconds, and no attempt
// is counted against the record.
func TestPushRetryAfter(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "t", 1)
	ep := newEndpoint(t)
	first := true
	ep.setRespond(func(*http.Request, []byte) (int, http.Header) {
		if first {
			first = false
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"2"}}
		}
		return http.StatusOK, nil
	})
	produce(t, c, "t", 0, 3, 0, nil)
	createPush(t, c, api.PushConfig{Name: "ra", Topics: []string{"t"}, Endpoint: ep.srv.URL, Retry: api.PushRetry{MinBackoffMs: 10, MaxAttempts: 2}})
	reqs := ep.waitFor(30*time.Second, "three records", func(r []request) bool { return len(delivered(r)) == 3 })
	if reqs[0].status != http.StatusTooManyRequests {
		t.Fatalf("first answer %d", reqs[0].status)
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 2*time.Second {
		t.Fatalf("the next request came %s after the 429 with Retry-After: 2", gap)
	}
	if reqs[1].offset != 0 || reqs[1].attempt != 1 {
		t.Fatalf("after the 429: offset %d attempt %d, want offset 0 attempt 1 (no attempt counted)", reqs[1].offset, reqs[1].attempt)
	}
}

// A record the endpoint refuses (422) is dead-lettered after max_attempts,
// with its headers; the records after it are delivered in order; the
// committed offset never passes it before that.
func TestPushPoisonRecordIsDeadLettered(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "t", 1)
	ep := newEndpoint(t)
	ep.setRespond(func(_ *http.Request, body []byte) (int, http.Header) {
		if string(body) == "v5" {
			return http.StatusUnprocessableEntity, nil
		}
		return http.StatusOK, nil
	})
	produce(t, c, "t", 0, 10, 0, nil)
	createPush(t, c, api.PushConfig{Name: "poison", Topics: []string{"t"}, Endpoint: ep.srv.URL,
		Retry: api.PushRetry{MinBackoffMs: 200, MaxBackoffMs: 400, MaxAttempts: 3}})

	// While the poison record is retried, the commit stays at it.
	ep.waitFor(30*time.Second, "the second try of offset 5", func(r []request) bool {
		n := 0
		for _, q := range r {
			if q.offset == 5 {
				n++
			}
		}
		return n >= 2
	})
	// The attempts counted so far are committed with the offset.
	st := waitStatus(t, c, "poison", 10*time.Second, "the head's attempts committed", func(st api.PushStatus) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].HeadAttempts >= 1
	})
	if p := st.Partitions[0]; p.CommittedOffset != 5 {
		t.Fatalf("committed %d while offset 5 was being retried", p.CommittedOffset)
	}
	// The pusher's last error is shown, for the partition and the
	// subscription: the 422 of offset 5.
	st = waitStatus(t, c, "poison", 10*time.Second, "the last error", func(st api.PushStatus) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].LastError != nil
	})
	if e := st.Partitions[0].LastError; e.Offset != 5 || e.Status != http.StatusUnprocessableEntity || e.Attempt < 1 || e.AtMs == 0 {
		t.Fatalf("last error %+v, want the 422 of offset 5", e)
	}
	if st.LastError == nil || *st.LastError != *st.Partitions[0].LastError {
		t.Fatalf("subscription's last error %+v, partition's %+v", st.LastError, st.Partitions[0].LastError)
	}
	reqs := ep.waitFor(30*time.Second, "the other nine records", func(r []request) bool { return len(delivered(r)) == 9 })
	var order []int64
	tries := 0
	for _, r := range reqs {
		if r.offset == 5 {
			tries++
			if r.attempt != tries {
				t.Fatalf("try %d of offset 5 carried sluice-attempt %d", tries, r.attempt)
			}
			continue
		}
		order = append(order, r.offset)
	}
	if tries != 3 {
		t.Fatalf("offset 5 was tried %d times, want max_attempts 3", tries)
	}
	for i, o := range order {
		if want := int64(i); (i < 5 && o != want) || (i >= 5 && o != want+1) {
			t.Fatalf("delivery order %v", order)
		}
	}
	waitStatus(t, c, "poison", 30*time.Second, "committed to the end", caughtUp)

	dlt, err := c.Fetch(ctxT(t, 10*time.Second), "poison.dlt", 0, client.Earliest, client.FetchOptions{MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dlt.Records) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want 1", len(dlt.Records))
	}
	h := dlt.Records[0].Headers
	want := map[string]string{api.DLTHeaderTopic: "t", api.DLTHeaderPartition: "0", api.DLTHeaderOffset: "5",
		api.DLTHeaderSubscription: "poison", api.DLTHeaderAttempts: "3", api.DLTHeaderStatus: "422"}
	for k, v := range want {
		if h[k] != v {
			t.Fatalf("dead-letter header %s=%q, want %q (all: %v)", k, h[k], v, h)
		}
	}
	if dlt.Records[0].ValueB64 == nil && string(dlt.Records[0].Value) == "" {
		t.Fatalf("dead-lettered record lost its value: %+v", dlt.Records[0])
	}
	// The delivery log shows the three refusals and the dead-lettering,
	// newest first.
	var log []api.PushDelivery
	testwait.For(t, 30*time.Second, "the delivery log", func() bool {
		log, err = c.PushDeliveries(ctxShort(t), "poison", "", 0)
		return err == nil && len(log) >= 4
	})
	if log[0].Status != api.DeliveryDead || log[0].Offset != 5 || log[0].Attempt != 3 {
		t.Fatalf("newest entry %+v, want the dead-lettering of offset 5", log[0])
	}
	for _, e := range log[1:4] {
		if e.Status != api.DeliveryFailed || e.Offset != 5 || e.HTTPStatus != 422 || e.Gateway == "" {
			t.Fatalf("entry %+v, want a 422 of offset 5", e)
		}
	}
	if failed, err := c.PushDeliveries(ctxShort(t), "poison", api.DeliveryFailed, 2); err != nil || len(failed) != 2 || failed[0].Attempt != 3 {
		t.Fatalf("status=failed&limit=2: %+v %v", failed, err)
	}
}

// An endpoint that is down for a minute (connections reset for half of
// it, then 503 without Retry-After) is an outage: the subscription backs
// off, sends few requests, dead-letters nothing (max_attempts is 2), then
// delivers all. The short lane takes 5 s of it.
func TestPushOutageDeadLettersNothing(t *testing.T) {
	down := 30 * time.Second
	if testing.Short() {
		down = 2500 * time.Millisecond
	}
	tc, c := testCluster(t, 1)
	createTopic(t, c, "t", 2)
	ep := newEndpoint(t)
	link, err := tcpproxy.New("endpoint", ep.srv.Listener.Addr().String(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	link.CutReset()
	produce(t, c, "t", 0, 20, 4, nil)
	createPush(t, c, api.PushConfig{Name: "out", Topics: []string{"t"}, Endpoint: "http://" + link.Addr(),
		Retry: api.PushRetry{MinBackoffMs: 100, MaxBackoffMs: 2000, MaxAttempts: 2}})
	failed := func() float64 {
		return metric(t, tc.URL, `sluice_push_requests_total{class="error",subscription="out"}`)
	}
	waitStatus(t, c, "out", 30*time.Second, "backing off", func(st api.PushStatus) bool { return st.State == api.PushBackingOff })
	testwait.For(t, 30*time.Second, "three reset requests", func() bool { return failed() >= 3 })
	t0, f0 := time.Now(), failed()
	time.Sleep(down) // the outage goes on: how often is it probed?
	resets := failed() - f0
	// Then the endpoint answers, 503 without Retry-After.
	ep.setRespond(func(*http.Request, []byte) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	link.Restore()
	ep.waitFor(30*time.Second, "three 503s", func(r []request) bool { return len(r) >= 3 })
	time.Sleep(down)
	answered := len(ep.requests())
	ep.setRespond(nil)
	ep.waitFor(60*time.Second, "all 20 records", func(r []request) bool { return len(delivered(r)) == 20 })
	t.Logf("while down: %.0f reset requests in %s, then %d answered 503", resets, time.Since(t0).Round(time.Second), answered)
	// Full-jitter backoff from 100 ms up to 2 s, one probe at a time: about
	// one request a second once it has grown, never below 10 ms apart; a
	// pusher without backoff would send thousands.
	if limit := 10 + down.Seconds()*2; resets > limit || float64(answered) > limit+5 {
		t.Fatalf("%.0f reset requests and %d 503s in %s each: the outage was not backed off", resets, answered, down)
	}
	waitStatus(t, c, "out", 30*time.Second, "committed to the end", caughtUp)
	if dead := metric(t, tc.URL, `sluice_push_dead_lettered_total{subscription="out"}`); dead != 0 {
		t.Fatalf("the outage dead-lettered %.0f records", dead)
	}
	dlt, err := c.Fetch(ctxShort(t), "out.dlt", 0, client.Earliest, client.FetchOptions{})
	if err != nil || len(dlt.Records) > 0 {
		t.Fatalf("dead-letter topic: %d records, err %v", len(dlt.Records), err)
	}
}

// 410 disables the subscription; resuming it delivers the rest, from the
// committed offset, with nothing lost.
func TestPushGoneDisables(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "t", 1)
	ep := newEndpoint(t)
	ep.setRespond(func(_ *http.Request, body []byte) (int, http.Header) {
		if string(body) == "v3" {
			return http.StatusGone, nil
		}
		return http.StatusOK, nil
	})
	produce(t, c, "t", 0, 6, 0, nil)
	createPush(t, c, api.PushConfig{Name: "gone", Topics: []string{"t"}, Endpoint: ep.srv.URL})
	st := waitStatus(t, c, "gone", 30*time.Second, "disabled", func(st api.PushStatus) bool { return st.State == api.PushDisabled })
	if st.Reason == "" || st.Partitions[0].CommittedOffset > 3 {
		t.Fatalf("disabled: reason %q, committed %d", st.Reason, st.Partitions[0].CommittedOffset)
	}
	n := len(ep.requests())
	time.Sleep(time.Second)
	if m := len(ep.requests()); m != n {
		t.Fatalf("%d requests after the subscription was disabled", m-n)
	}
	ep.setRespond(nil)
	if _, err := c.SetPushState(ctxT(t, 10*time.Second), "gone", api.PushActive); err != nil {
		t.Fatal(err)
	}
	reqs := ep.waitFor(30*time.Second, "all six", func(r []request) bool { return len(delivered(r)) == 6 })
	for _, r := range reqs {
		if r.status == http.StatusGone && r.offset != 3 {
			t.Fatalf("410 for offset %d", r.offset)
		}
	}
	waitStatus(t, c, "gone", 30*time.Second, "committed to the end", caughtUp)
}

// ctxShort is for calls that must not outlive a test step.
func ctxShort(t *testing.T) context.Context { return ctxT(t, 10*time.Second) }

// With ordering=key a slow endpoint gets one request per key at a time,
// as many keys at once as max_in_flight allows, and each key's records
// in order. A secret rotated meanwhile signs with both secrets during its
// grace.
func TestPushOrderingByKeyWithASlowEndpoint(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "t", 1)
	ep := newEndpoint(t)
	var mu sync.Mutex
	inFlight, most := map[string]int{}, 0
	total := 0
	release := make(chan struct{})
	ep.setRespond(func(r *http.Request, body []byte) (int, http.Header) {
		key := r.Header.Get("ce-partitionkey")
		mu.Lock()
		inFlight[key]++
		total++
		if inFlight[key] > 1 {
			t.Errorf("two requests of key %s at once", key)
		}
		most = max(most, total)
		mu.Unlock()
		select { // slow: held until the test has seen the concurrency it expects, or 5 s
		case <-release:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inFlight[key]--
		total--
		mu.Unlock()
		return http.StatusOK, nil
	})
	const keys, perKey = 6, 3
	produce(t, c, "t", 0, keys*perKey, keys, nil)
	sub := createPush(t, c, api.PushConfig{Name: "bykey", Topics: []string{"t"}, Endpoint: ep.srv.URL, Ordering: api.PushOrderKey, MaxInFlight: 4})
	testwait.For(t, 30*time.Second, "four keys in flight at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return most >= 4
	})
	// While they are held, the status shows them in flight.
	waitStatus(t, c, "bykey", 10*time.Second, "four requests in flight", func(st api.PushStatus) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].InFlight == 4 && st.Partitions[0].Owner != ""
	})
	close(release)
	reqs := ep.waitFor(60*time.Second, "every record", func(r []request) bool { return len(delivered(r)) == keys*perKey })
	waitStatus(t, c, "bykey", 10*time.Second, "nothing in flight once all is delivered", func(st api.PushStatus) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].InFlight == 0 && st.LastError == nil
	})
	if most != 4 {
		t.Fatalf("at most %d requests at once, want max_in_flight 4", most)
	}
	last := map[string]int64{}
	for _, r := range reqs {
		k := r.header.Get("ce-partitionkey")
		if prev, ok := last[k]; ok && r.offset <= prev {
			t.Fatalf("key %s: offset %d after %d", k, r.offset, prev)
		}
		last[k] = r.offset
	}

	// Rotation: during the grace both secrets sign each delivery.
	rot, err := c.RotatePushSecret(ctxShort(t), "bykey", 3600)
	if err != nil {
		t.Fatal(err)
	}
	if rot.Secret == sub.Secret || !strings.HasPrefix(rot.Secret, "whsec_") {
		t.Fatalf("rotation answered secret %q", rot.Secret)
	}
	n := len(ep.requests())
	produce(t, c, "t", keys*perKey, 2, keys, nil)
	reqs = ep.waitFor(60*time.Second, "the records after the rotation", func(r []request) bool { return len(delivered(r)) == keys*perKey+2 })
	for _, r := range reqs[n:] {
		if got := len(strings.Fields(r.header.Get("webhook-signature"))); got != 2 {
			t.Fatalf("%d signatures during the grace, want 2", got)
		}
		if err := verifyWebhook(sub.Secret, r.header, r.body); err != nil {
			t.Fatalf("the old secret does not verify: %v", err)
		}
		if err := verifyWebhook(rot.Secret, r.header, r.body); err != nil {
			t.Fatalf("the new secret does not verify: %v", err)
		}
	}
}

// Batches: a request carries up to batch.max_records records as a JSON
// array; the endpoint refuses one item with Lambda's batchItemFailures, and
// only that record is sent again. A seek to earliest sends everything
// again.
func TestPushBatchesAndSeek(t *testing.T) {
	_, c := testCluster(t, 1)
	createTopic(t, c, "t", 1)
	ep := newEndpoint(t)
	var mu sync.Mutex
	refusedOnce := false
	ep.setRespond(func(r *http.Request, body []byte) (int, http.Header) {
		var recs []api.GroupRecord
		if err := json.Unmarshal(body, &recs); err != nil {
			t.Errorf("a batch body that is not a JSON array of records: %v", err)
			return http.StatusBadRequest, nil
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rec := range recs {
			if rec.Offset == 13 && !refusedOnce {
				refusedOnce = true
				return http.StatusOK, http.Header{bodyHeader: {`{"batchItemFailures":[{"itemIdentifier":"13"}]}`}}
			}
		}
		return http.StatusNoContent, nil
	})
	produce(t, c, "t", 0, 40, 0, nil)
	createPush(t, c, api.PushConfig{Name: "batch", Topics: []string{"t"}, Endpoint: ep.srv.URL, Format: api.PushFormatJSON,
		Batch: api.PushBatch{MaxRecords: 10}, Retry: api.PushRetry{MinBackoffMs: 20}})
	waitStatus(t, c, "batch", 30*time.Second, "committed to the end", caughtUp)
	reqs := ep.requests()
	seen := map[int64]int{}
	for _, r := range reqs {
		var recs []api.GroupRecord
		_ = json.Unmarshal(r.body, &recs)
		if len(recs) > 10 {
			t.Fatalf("a batch of %d records", len(recs))
		}
		last := ""
		if len(recs) > 1 {
			last = strconv.FormatInt(recs[len(recs)-1].Offset, 10)
		}
		if first := recs[0].Offset; r.offset != first || r.header.Get("sluice-offset-last") != last {
			t.Fatalf("batch headers %s..%s for %d..%d", r.header.Get("sluice-offset"), r.header.Get("sluice-offset-last"), first, recs[len(recs)-1].Offset)
		}
		for _, rec := range recs {
			seen[rec.Offset]++
		}
	}
	for o := range int64(40) {
		want := 1
		if o == 13 {
			want = 2
		}
		if seen[o] != want {
			t.Fatalf("offset %d sent %d times, want %d (batches: %d)", o, seen[o], want, len(reqs))
		}
	}
	if len(reqs) > 8 {
		t.Fatalf("%d requests for 40 records in batches of 10", len(reqs))
	}
	// Seek back: the committed offset moves at once, and everything comes again.
	n := len(reqs)
	if _, err := c.SeekPush(ctxShort(t), "batch", "earliest"); err != nil {
		t.Fatal(err)
	}
	ep.waitFor(30*time.Second, "everything again after the seek", func(r []request) bool {
		again := map[int64]bool{}
		for _, q := range r[n:] {
			var recs []api.GroupRecord
			_ = json.Unmarshal(q.body, &recs)
			for _, rec := range recs {
				again[rec.Offset] = true
			}
		}
		return len(again) == 40
	})
}
