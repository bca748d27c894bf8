package push_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// syncBuffer collects the cluster's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.b.Bytes(), []byte(sub))
}

// With the dead-letter topic unwritable (its only replica's broker down),
// a record out of attempts stops its partition: nothing is committed past
// it and nothing after it is sent. Once the topic is back it is
// dead-lettered and the rest is delivered.
func TestPushDeadLetterTopicUnwritable(t *testing.T) {
	logs := &syncBuffer{}
	tc := embedtest.Start(t, embedtest.Options{Brokers: 3, LogTo: logs})
	c, err := client.New(tc.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctxShort(t), api.CreateTopicRequest{Name: "t", Partitions: 1, ReplicationFactor: 3,
		Configs: map[string]string{api.ConfigMinInsyncReplicas: "1"}}); err != nil {
		t.Fatal(err)
	}
	dlt, err := c.CreateTopic(ctxShort(t), api.CreateTopicRequest{Name: "dl.dlt", Partitions: 1, ReplicationFactor: 1})
	if err != nil {
		t.Fatal(err)
	}
	down := int(dlt.Partitions[0].Leader)
	ep := newEndpoint(t)
	ep.setRespond(func(_ *http.Request, body []byte) (int, http.Header) {
		if string(body) == "v5" {
			return http.StatusUnprocessableEntity, nil
		}
		return http.StatusOK, nil
	})
	produce(t, c, "t", 0, 10, 0, nil)
	tc.StopBroker(down)
	t.Logf("stopped broker %d, the dead-letter topic's only replica", down)
	createPush(t, c, api.PushConfig{Name: "dl", Topics: []string{"t"}, Endpoint: ep.srv.URL,
		Retry: api.PushRetry{MinBackoffMs: 50, MaxBackoffMs: 100, MaxAttempts: 2}})
	testwait.For(t, 60*time.Second, "a failed dead-letter write", func() bool {
		return logs.contains("could not be written to the dead-letter topic")
	})
	st := waitStatus(t, c, "dl", 30*time.Second, "the commit at the poison record", func(st api.PushStatus) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].CommittedOffset == 5
	})
	if st.Partitions[0].HeadAttempts != 2 {
		t.Fatalf("head attempts %d, want 2", st.Partitions[0].HeadAttempts)
	}
	for _, r := range ep.requests() {
		if r.offset > 5 {
			t.Fatalf("offset %d was sent while the record before it was not dead-lettered", r.offset)
		}
	}
	if n := metric(t, tc.URL, `sluice_push_dead_lettered_total{subscription="dl"}`); n != 0 {
		t.Fatalf("%.0f dead-lettered while the topic was down", n)
	}
	tc.StartBroker(down)
	ep.waitFor(60*time.Second, "the rest, once the topic is back", func(r []request) bool { return len(delivered(r)) == 9 })
	waitStatus(t, c, "dl", 30*time.Second, "committed to the end", caughtUp)
	got, err := c.Fetch(ctxShort(t), "dl.dlt", 0, client.Earliest, client.FetchOptions{})
	if err != nil || len(got.Records) != 1 || got.Records[0].Headers[api.DLTHeaderOffset] != "5" {
		t.Fatalf("dead-letter topic: %+v %v", got.Records, err)
	}
}
