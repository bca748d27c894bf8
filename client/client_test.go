package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/client"
)

func TestNewValidatesBaseURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		ok   bool
	}{
		{"http", "http://127.0.0.1:8080", true},
		{"https with prefix", "https://example.com/sluice/", true},
		{"no scheme", "127.0.0.1:8080", false},
		{"ws scheme", "ws://127.0.0.1:8080", false},
		{"query", "http://h/?x=1", false},
		{"garbage", "http://[::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.New(tt.url)
			if (err == nil) != tt.ok {
				t.Fatalf("New(%q) = %v, want ok=%v", tt.url, err, tt.ok)
			}
			if c != nil && strings.HasSuffix(c.BaseURL(), "/") {
				t.Fatalf("BaseURL %q keeps a trailing slash", c.BaseURL())
			}
		})
	}
}

func TestTopicsAndCluster(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	if err := cl.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	ci, err := cl.Cluster(ctx)
	if err != nil || len(ci.Brokers) != 1 || ci.Controller != 1 {
		t.Fatalf("cluster %+v, %v", ci, err)
	}
	created, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: 3, Configs: map[string]string{"retention.ms": "86400000"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Partitions) != 3 || created.ReplicationFactor != 1 || created.Configs["retention.ms"] != "86400000" {
		t.Fatalf("created %+v", created)
	}
	got, err := cl.GetTopic(ctx, "orders")
	if err != nil || got.Name != "orders" || len(got.Partitions) != 3 {
		t.Fatalf("get %+v, %v", got, err)
	}
	createTopic(t, cl, "audit", 1)
	list, err := cl.ListTopics(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "audit" || list[1].Name != "orders" {
		t.Fatalf("list %+v, %v", list, err)
	}
	if err := cl.DeleteTopic(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetTopic(ctx, "audit"); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestErrorsMapToCodes checks that the server's error answers come back as
// errors the api sentinels match, with the server's status and retriable flag.
func TestErrorsMapToCodes(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "t", 1)
	if _, err := cl.Produce(ctx, "t", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		call   func() error
		code   api.Code
		status int
	}{
		{"unknown topic on get", func() error { _, err := cl.GetTopic(ctx, "nope"); return err }, api.CodeUnknownTopic, 404},
		{"unknown topic on produce", func() error {
			_, err := cl.Produce(ctx, "nope", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{})
			return err
		}, api.CodeUnknownTopic, 404},
		{"unknown partition", func() error { _, err := cl.Fetch(ctx, "t", 7, client.Earliest, client.FetchOptions{}); return err }, api.CodeUnknownPartition, 404},
		{"topic exists", func() error { _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "t"}); return err }, api.CodeTopicAlreadyExists, 409},
		{"bad topic name", func() error { _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "a/b"}); return err }, api.CodeInvalidTopicName, 400},
		{"bad offset", func() error {
			_, err := cl.Fetch(ctx, "t", 0, client.Offset("soon"), client.FetchOptions{})
			return err
		}, api.CodeInvalidOffset, 400},
		{"offset out of range", func() error { _, err := cl.Fetch(ctx, "t", 0, client.At(99), client.FetchOptions{}); return err }, api.CodeOffsetOutOfRange, 416},
		{"explicit partition out of range", func() error {
			_, err := cl.Produce(ctx, "t", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{Partition: client.Partition(5)})
			return err
		}, api.CodeUnknownPartition, 404},
		{"unknown producer", func() error { _, err := cl.ResumeProducer(ctx, 1<<40); return err }, api.CodeUnknownProducer, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantCode(t, err, tt.code)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != tt.status || ce.Retriable != api.Lookup(tt.code).Retriable {
				t.Fatalf("error %#v: want status %d", ce, tt.status)
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != tt.code || api.Classify(err).Code != tt.code {
				t.Fatalf("errors.As(*api.Error) = %v", ae)
			}
			if client.IsRetriable(err) {
				t.Fatalf("%s is not retriable", tt.code)
			}
		})
	}
}

func TestProduceFetchRoundTrip(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "rt", 2)
	// Later than the gateway's clock, which stamps the other records.
	ts := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	recs := []client.Record{
		{Key: []byte("user-1"), JSON: json.RawMessage(`{"total": 42}`), Headers: map[string]string{"src": "test"}},
		{Value: []byte{0xde, 0xad, 0xbe, 0xef}, Key: []byte{0xff, 0x00}, Timestamp: ts},
		{Value: []byte(`"json bytes"`)},       // bytes that happen to be JSON come back inline
		{JSON: json.RawMessage(`"a string"`)}, // a JSON string value keeps its quotes
		{Value: []byte{}},                     // empty, not null
		{},                                    // null key and value
	}
	offs, err := cl.Produce(ctx, "rt", recs, client.ProduceOptions{Partition: client.Partition(1), Acks: client.AcksAll})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range offs {
		if o.Partition != 1 || o.Offset != int64(i) {
			t.Fatalf("offsets %+v", offs)
		}
	}
	got := fetchAll(t, cl, "rt", 1)
	if len(got) != len(recs) {
		t.Fatalf("fetched %d records, want %d", len(got), len(recs))
	}
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"json value", string(got[0].Value) == `{"total":42}` && str(got[0].Key) == "user-1" && got[0].Headers["src"] == "test"},
		{"binary value", str(got[1].ValueB64) == base64.StdEncoding.EncodeToString([]byte{0xde, 0xad, 0xbe, 0xef})},
		{"binary key", str(got[1].KeyB64) == base64.StdEncoding.EncodeToString([]byte{0xff, 0x00})},
		{"timestamp", got[1].Timestamp == ts.UnixMilli()},
		{"json bytes", string(got[2].Value) == `"json bytes"`},
		{"json string", string(got[3].Value) == `"a string"`},
		{"empty value", got[4].Value == nil && str(got[4].ValueB64) == ""},
		{"null value", got[5].Value == nil && got[5].ValueB64 == nil && got[5].Key == nil},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: got %+v", c.name, got)
		}
	}

	// The same records, raw.
	b, err := cl.FetchBatches(ctx, "rt", 1, client.At(2), client.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.NextOffset != 6 || b.HighWatermark != 6 || b.LogStartOffset != 0 {
		t.Fatalf("batch positions %+v", b)
	}
	raw, err := b.Records(2)
	if err != nil || len(raw) != 4 || raw[0].Offset != 2 || !bytes.Equal(raw[0].Value, []byte(`"json bytes"`)) || raw[3].Value != nil {
		t.Fatalf("raw records %+v, %v", raw, err)
	}

	// Offsets.
	if o, err := cl.ListOffsets(ctx, "rt", 1, client.Earliest); err != nil || o.Offset != 0 || o.HighWatermark != 6 {
		t.Fatalf("earliest %+v, %v", o, err)
	}
	if o, err := cl.ListOffsets(ctx, "rt", 1, client.Latest); err != nil || o.Offset != 6 || o.LogEndOffset != 6 {
		t.Fatalf("latest %+v, %v", o, err)
	}
	if o, err := cl.OffsetForTime(ctx, "rt", 1, ts); err != nil || o.Offset != 1 {
		t.Fatalf("offset for time %+v, %v", o, err)
	}
	if o, err := cl.OffsetForTime(ctx, "rt", 1, ts.Add(time.Hour)); err != nil || o.Offset != -1 {
		t.Fatalf("offset for a future time %+v, %v", o, err)
	}

	// A long poll returns as soon as a record arrives.
	done := make(chan api.FetchResponse, 1)
	go func() {
		fr, err := cl.Fetch(ctx, "rt", 0, client.Latest, client.FetchOptions{MaxWait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- fr
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := cl.Produce(ctx, "rt", []client.Record{{JSON: json.RawMessage(`"late"`)}}, client.ProduceOptions{Partition: client.Partition(0)}); err != nil {
		t.Fatal(err)
	}
	select {
	case fr := <-done:
		if len(fr.Records) != 1 || string(fr.Records[0].Value) != `"late"` {
			t.Fatalf("long poll %+v", fr)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the long poll did not return when a record arrived")
	}
}

func TestRecordValidation(t *testing.T) {
	cl, err := client.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for name, recs := range map[string][]client.Record{
		"no records":        nil,
		"value and json":    {{Value: []byte("x"), JSON: json.RawMessage(`1`)}},
		"invalid json":      {{JSON: json.RawMessage(`{`)}},
		"negative partiton": {{JSON: json.RawMessage(`1`), Partition: client.Partition(-1)}},
	} {
		if _, err := cl.Produce(ctx, "t", recs, client.ProduceOptions{}); err == nil {
			t.Errorf("%s: produced", name)
		}
	}
	if _, err := cl.Produce(ctx, "t", []client.Record{{}}, client.ProduceOptions{Acks: "2"}); err == nil {
		t.Error("acks=2 accepted")
	}
}

// TestRetries checks which failures each kind of call sends again, against
// a server that fails the first attempts.
func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		fail     api.Code // answered to the first two attempts
		call     func(*client.Client) error
		attempts int32
	}{
		{"read retried on a retriable error", api.CodeBrokerUnavailable, func(c *client.Client) error {
			_, err := c.GetTopic(testCtx(t), "t")
			return err
		}, 3},
		{"read not retried on a final error", api.CodeUnknownTopic, func(c *client.Client) error {
			_, err := c.GetTopic(testCtx(t), "t")
			return err
		}, 1},
		{"plain produce retried when nothing was written", api.CodeNotLeader, func(c *client.Client) error {
			_, err := c.Produce(testCtx(t), "t", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{})
			return err
		}, 3},
		{"plain produce not retried when it may have been written", api.CodeRequestTimedOut, func(c *client.Client) error {
			_, err := c.Produce(testCtx(t), "t", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{})
			return err
		}, 1},
		{"create topic retried without a controller", api.CodeNotController, func(c *client.Client) error {
			_, err := c.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "t"})
			return err
		}, 3},
		{"create topic not retried after a lost answer", api.CodeBrokerUnavailable, func(c *client.Client) error {
			_, err := c.CreateTopic(testCtx(t), api.CreateTopicRequest{Name: "t"})
			return err
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) <= 2 {
					apihttp.WriteError(w, api.Errorf(tt.fail, "injected"))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				switch {
				case strings.HasSuffix(r.URL.Path, "/records"):
					_, _ = w.Write([]byte(`{"offsets":[{"partition":0,"offset":0}]}`))
				default:
					_, _ = w.Write([]byte(`{"name":"t","partitions":[]}`))
				}
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, client.WithRetry(fastRetry))
			if err != nil {
				t.Fatal(err)
			}
			err = tt.call(c)
			if got := n.Load(); got != tt.attempts {
				t.Fatalf("%d attempts (err %v), want %d", got, err, tt.attempts)
			}
			if (err == nil) != (tt.attempts == 3) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// TestRetryAfterAndAttempts checks that MaxAttempts bounds the attempts and
// the server's Retry-After raises the wait up to MaxBackoff.
func TestRetryAfterAndAttempts(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		apihttp.WriteError(w, api.Errorf(api.CodeTooManyRequests, "shedding")) // carries Retry-After: 1
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithRetry(client.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Cluster(testCtx(t))
	took := time.Since(start)
	wantCode(t, err, api.CodeTooManyRequests)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.RetryAfter != time.Second || !client.IsRetriable(err) {
		t.Fatalf("error %#v", ce)
	}
	if n.Load() != 3 || took < 200*time.Millisecond || took > 2*time.Second {
		t.Fatalf("%d attempts in %s: want 3, each wait raised to the 100 ms cap", n.Load(), took)
	}
}

func TestTransportErrors(t *testing.T) {
	// A port nothing listens on: the request is never sent, so even a
	// produce is retried, and the error says it was not sent.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := client.New(url, client.WithRetry(client.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Produce(testCtx(t), "t", []client.Record{{JSON: json.RawMessage(`1`)}}, client.ProduceOptions{})
	var te *client.TransportError
	if !errors.As(err, &te) || te.Sent || !client.IsRetriable(err) {
		t.Fatalf("error %v: want an unsent TransportError", err)
	}

	// A server slower than the per-attempt timeout: each attempt is a
	// retriable TransportError; the caller's own deadline is not.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	c, err = client.New(slow.URL, client.WithTimeout(50*time.Millisecond), client.WithRetry(client.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cluster(testCtx(t)); !errors.As(err, &te) || !te.Sent || !client.IsRetriable(err) {
		t.Fatalf("attempt timeout: %v", err)
	}
	c, _ = client.New(slow.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Cluster(ctx); client.IsRetriable(err) || !errors.Is(err, ctx.Err()) {
		t.Fatalf("caller's deadline: %v", err)
	}
}
