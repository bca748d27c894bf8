package faulttest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// pushEndpoint records the requests a push subscription sends and
// answers 422 for the poison offset, 200 for the rest.
type pushEndpoint struct {
	srv    *httptest.Server
	poison int64

	mu       sync.Mutex
	ok       map[int64]int // offset → 2xx answers
	attempts []int         // sluice-attempt of each try of the poison record
	changed  chan struct{}
}

func newPushEndpoint(t *testing.T, poison int64) *pushEndpoint {
	e := &pushEndpoint{poison: poison, ok: map[int64]int{}, changed: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		off, _ := strconv.ParseInt(r.Header.Get("sluice-offset"), 10, 64)
		att, _ := strconv.Atoi(r.Header.Get("sluice-attempt"))
		e.mu.Lock()
		status := http.StatusOK
		if off == e.poison {
			e.attempts = append(e.attempts, att)
			status = http.StatusUnprocessableEntity
		} else {
			e.ok[off]++
		}
		close(e.changed)
		e.changed = make(chan struct{})
		e.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// waitFor waits until cond holds of the endpoint's state.
func (e *pushEndpoint) waitFor(c *Cluster, what string, timeout time.Duration, cond func(ok map[int64]int, attempts []int) (bool, string)) {
	c.T.Helper()
	c.WaitFor(what, timeout, func() (bool, string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return cond(e.ok, e.attempts)
	})
}

// The gateway delivering a partition is SIGKILLed while it retries a
// poison record: another gateway takes the partition over, continues the
// record's attempt count from the commit metadata (it does not start
// again at 1), dead-letters it after max_attempts, and delivers everything
// else; nothing is lost.
func TestPushGatewayKilledWhileRetrying(t *testing.T) {
	c := Start(t, Options{OffsetsTopicPartitions: 4, GatewayArgs: []string{"--push-allow-private"}})
	gwB := c.AddGateway()
	c.CreateTopic("events", 1, 3, 2)
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n, poison, maxAttempts = 40, 10, 6
	var recs []client.Record
	for i := range n {
		recs = append(recs, client.Record{Value: []byte(fmt.Sprintf("v%d", i))})
	}
	if _, err := cl.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	ep := newPushEndpoint(t, poison)
	_, err = cl.CreatePush(ctx, api.PushConfig{Name: "kill", Topics: []string{"events"}, Endpoint: ep.srv.URL,
		Retry: api.PushRetry{MinBackoffMs: 400, MaxBackoffMs: 400, MaxAttempts: maxAttempts}})
	if err != nil {
		t.Fatal(err)
	}
	ep.waitFor(c, "two tries of the poison record", time.Minute, func(_ map[int64]int, a []int) (bool, string) {
		return len(a) >= 2, fmt.Sprint(a)
	})
	// Which gateway delivers the partition: its pusher's instance id
	// carries its address.
	var st api.PushStatus
	owner := ""
	c.WaitFor("the partition's owner", 30*time.Second, func() (bool, string) {
		var err error
		if st, err = cl.GetPush(ctx, "kill"); err != nil || len(st.Partitions) == 0 || st.Partitions[0].Owner == "" {
			return false, fmt.Sprint(st.Partitions, err)
		}
		var d api.GroupDescription
		if err := c.getJSON(c.URL+"/v1/groups/push.kill", &d, 10*time.Second); err != nil {
			return false, err.Error()
		}
		for _, m := range d.Members {
			if m.MemberID == st.Partitions[0].Owner {
				owner = m.InstanceID
			}
		}
		return owner != "", owner
	})
	victim, survivor := c.URL, gwB
	if strings.HasSuffix(owner, strings.TrimPrefix(gwB, "http://")) {
		victim, survivor = gwB, c.URL
	}
	// The gateway that does not deliver the partition shows what the
	// owner's pusher is doing: the poison record's last refusal.
	sc, err := client.New(survivor)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the owner's last error through the other gateway", 30*time.Second, func() (bool, string) {
		st, err := sc.GetPush(ctx, "kill")
		if err != nil || len(st.Partitions) != 1 || st.Partitions[0].LastError == nil {
			return false, fmt.Sprint(st.Partitions, err)
		}
		e := st.Partitions[0].LastError
		return e.Offset == poison && e.Status == http.StatusUnprocessableEntity, fmt.Sprintf("%+v", *e)
	})
	ep.mu.Lock()
	before := append([]int(nil), ep.attempts...)
	ep.mu.Unlock()
	c.KillGateway(victim)
	c.Logf("killed %s (owner %s) after tries %v of the poison record", victim, owner, before)

	ep.waitFor(c, "every other record delivered", 2*time.Minute, func(ok map[int64]int, _ []int) (bool, string) {
		return len(ok) == n-1, fmt.Sprintf("%d of %d", len(ok), n-1)
	})
	ep.mu.Lock()
	tries := append([]int(nil), ep.attempts...)
	ep.mu.Unlock()
	c.Logf("tries of the poison record, by sluice-attempt: %v", tries)
	after := tries[len(before):]
	if len(after) == 0 || after[0] < 2 {
		t.Fatalf("after the takeover the poison record was tried with attempts %v (before: %v): the count started again", after, before)
	}
	// At most one counted attempt is lost to the kill (one made after the
	// last commit): a count that started again would try it maxAttempts
	// more times.
	if len(tries) > maxAttempts+1 {
		t.Fatalf("the poison record was tried %d times (%v), want at most %d", len(tries), tries, maxAttempts+1)
	}
	c.WaitFor("the subscription committed to the end", time.Minute, func() (bool, string) {
		st, err := sc.GetPush(ctx, "kill")
		if err != nil || len(st.Partitions) != 1 {
			return false, fmt.Sprint(err)
		}
		p := st.Partitions[0]
		return p.CommittedOffset == n && p.HighWatermark == n, fmt.Sprintf("committed %d of %d", p.CommittedOffset, p.HighWatermark)
	})
	dlt, err := sc.Fetch(ctx, "kill.dlt", 0, client.Earliest, client.FetchOptions{MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dlt.Records) != 1 || dlt.Records[0].Headers[api.DLTHeaderOffset] != strconv.Itoa(poison) {
		t.Fatalf("dead-letter topic: %+v", dlt.Records)
	}
	if got := dlt.Records[0].Headers[api.DLTHeaderAttempts]; got != strconv.Itoa(maxAttempts) {
		t.Fatalf("dead-lettered after %s counted attempts, want %d", got, maxAttempts)
	}
}

// A gateway started without --push-allow-private refuses endpoints on
// loopback, by address or by a name that resolves there.
func TestPushGatewayRefusesLoopbackEndpoints(t *testing.T) {
	c := Start(t, Options{Brokers: 1, OffsetsTopicPartitions: 1})
	c.CreateTopic("events", 1, 1, 1)
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, endpoint := range []string{"http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://localhost:9/hook", "http://127.1.2.3:9/"} {
		_, err := cl.CreatePush(ctx, api.PushConfig{Name: "s" + strconv.Itoa(i), Topics: []string{"events"}, Endpoint: endpoint})
		if api.Classify(err).Code != api.CodeEndpointNotAllowed {
			t.Errorf("%s: %v, want ENDPOINT_NOT_ALLOWED", endpoint, err)
		}
	}
	if subs, err := cl.ListPush(ctx); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions after the refusals: %v %v", subs, err)
	}
}
