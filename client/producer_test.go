package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

func values(n int, prefix string) []client.Record {
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{JSON: json.RawMessage(fmt.Sprintf("%q", fmt.Sprintf("%s-%d", prefix, i)))}
	}
	return recs
}

func offsetList(offs []api.RecordOffset) string {
	var s []string
	for _, o := range offs {
		s = append(s, fmt.Sprintf("%d/%d", o.Partition, o.Offset))
	}
	return strings.Join(s, " ")
}

// TestProducerBatchSentTwiceWrittenOnce sends one prepared batch twice: the
// second answer repeats the first offsets and the log holds the records once.
func TestProducerBatchSentTwiceWrittenOnce(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "idem", 2)
	p, err := cl.NewProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id := p.Identity(); id.ProducerID <= 0 || id.ProducerEpoch != 0 {
		t.Fatalf("identity %+v", id)
	}
	b, err := p.Prepare(ctx, "idem", values(3, "a"), client.ProduceOptions{Partition: client.Partition(1)})
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Sequences(); len(s) != 1 || s[1] != 0 || b.Len() != 3 {
		t.Fatalf("sequences %v", s)
	}
	first, err := p.SendBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.SendBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if offsetList(first) != "1/0 1/1 1/2" || offsetList(again) != offsetList(first) {
		t.Fatalf("first %s, again %s", offsetList(first), offsetList(again))
	}
	// The next batch continues the sequence.
	next, err := p.Send(ctx, "idem", values(2, "b"), client.ProduceOptions{Partition: client.Partition(1)})
	if err != nil || offsetList(next) != "1/3 1/4" {
		t.Fatalf("next %s, %v", offsetList(next), err)
	}
	if got := fetchAll(t, cl, "idem", 1); len(got) != 5 {
		t.Fatalf("partition holds %d records, want 5", len(got))
	}
	// Once a later batch was prepared, an earlier one is not sent again.
	if _, err := p.SendBatch(ctx, b); !errors.Is(err, client.ErrBatchAbandoned) {
		t.Fatalf("an earlier batch sent again: %v", err)
	}
}

// TestProducerRetriesLostAnswers loses the answers of the first produce
// requests: the gateway wrote the records, the client saw its connection
// end. The Producer sends the batch again with the same sequences and the
// records are in the log once; a plain Produce does not retry.
func TestProducerRetriesLostAnswers(t *testing.T) {
	c, _ := startCluster(t)
	isProduce := func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/records") && r.Method == http.MethodPost
	}
	drop := newAnswerDropper(t, c.URL, 2, isProduce)
	cl, err := client.New(drop.srv.URL, client.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	createTopic(t, cl, "lost", 3)
	p, err := cl.NewProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Keyed records spread over the partitions, as the gateway would put them.
	var recs []client.Record
	for i := range 30 {
		recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), JSON: json.RawMessage(fmt.Sprint(i))})
	}
	offs, err := p.Send(ctx, "lost", recs, client.ProduceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if drop.dropped.Load() != 2 {
		t.Fatalf("%d answers dropped, want 2", drop.dropped.Load())
	}
	total := 0
	for part := range int32(3) {
		got := fetchAll(t, cl, "lost", part)
		total += len(got)
		for _, r := range got {
			var i int
			_ = json.Unmarshal(r.Value, &i)
			want := int32(api.KeyPartition([]byte(fmt.Sprintf("k%d", i)), 3))
			if want != part || offs[i].Partition != part || offs[i].Offset != r.Offset {
				t.Fatalf("record %d at %d/%d, answered %+v, key hashes to %d", i, part, r.Offset, offs[i], want)
			}
		}
	}
	if total != 30 {
		t.Fatalf("the log holds %d records, want 30 (written once)", total)
	}

	// Without a producer id, a lost answer is not retried: the error says
	// the request was sent, and the records are in the log.
	drop.left.Store(1)
	_, err = cl.Produce(ctx, "lost", values(1, "plain"), client.ProduceOptions{Partition: client.Partition(0)})
	var te *client.TransportError
	if !errors.As(err, &te) || !te.Sent {
		t.Fatalf("plain produce after a lost answer: %v", err)
	}
}

// TestProducerSettlesFailedBatches checks what happens to a batch that
// failed: re-sent, it is written once; given up, the next batch reuses its
// sequences when it was certainly not written, and starts a new epoch when
// it may have been.
func TestProducerSettlesFailedBatches(t *testing.T) {
	c, _ := startCluster(t)
	isProduce := func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/records") && r.Method == http.MethodPost
	}
	drop := newAnswerDropper(t, c.URL, 0, isProduce)
	cl, err := client.New(drop.srv.URL, client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	createTopic(t, cl, "settle", 1)
	p, err := cl.NewProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := client.ProduceOptions{Partition: client.Partition(0)}

	// A lost answer with no retries left: the batch stays pending and
	// sending it again writes it once.
	drop.left.Store(1)
	if _, err := p.Send(ctx, "settle", values(2, "a"), opts); !client.IsRetriable(err) {
		t.Fatalf("send with a lost answer: %v", err)
	}
	b := p.Pending()
	if b == nil {
		t.Fatal("no pending batch after a failed send")
	}
	if offs, err := p.SendBatch(ctx, b); err != nil || offsetList(offs) != "0/0 0/1" {
		t.Fatalf("re-send %s, %v", offsetList(offs), err)
	}
	if p.Pending() != nil {
		t.Fatal("an acknowledged batch is still pending")
	}

	// A lost answer, then giving the batch up: it may have been written,
	// so the next batch comes in a new epoch, from sequence 0.
	drop.left.Store(1)
	if _, err := p.Send(ctx, "settle", values(1, "b"), opts); err == nil {
		t.Fatal("send with a lost answer succeeded")
	}
	lost := p.Pending()
	offs, err := p.Send(ctx, "settle", values(1, "c"), opts)
	if err != nil || offsetList(offs) != "0/3" {
		t.Fatalf("after giving up: %s, %v", offsetList(offs), err)
	}
	if id := p.Identity(); id.ProducerEpoch != 1 {
		t.Fatalf("identity %+v: want epoch 1", id)
	}
	if _, err := p.SendBatch(ctx, lost); !errors.Is(err, client.ErrBatchAbandoned) {
		t.Fatalf("sending a given-up batch: %v", err)
	}

	// A batch refused before anything was written (a partition the topic
	// lacks) gives its sequences back: no epoch bump.
	if _, err := p.Send(ctx, "settle", values(1, "d"), client.ProduceOptions{Partition: client.Partition(9)}); !errors.Is(err, api.ErrUnknownPartition) {
		t.Fatalf("send to a missing partition: %v", err)
	}
	if offs, err := p.Send(ctx, "settle", values(1, "e"), opts); err != nil || offsetList(offs) != "0/4" {
		t.Fatalf("after a refused batch: %s, %v", offsetList(offs), err)
	}
	if id := p.Identity(); id.ProducerEpoch != 1 {
		t.Fatalf("identity %+v: want epoch 1 still", id)
	}
	if got := fetchAll(t, cl, "settle", 0); len(got) != 5 {
		t.Fatalf("the log holds %d records, want 5", len(got))
	}
}

// TestProducerFenced: a second instance of the same producer id fences the
// first, whose sends then fail for good.
func TestProducerFenced(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "fence", 1)
	old, err := cl.NewProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Send(ctx, "fence", values(1, "old"), client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, err := cl.ResumeProducer(ctx, old.Identity().ProducerID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Identity().ProducerEpoch != 1 {
		t.Fatalf("resumed %+v", cur.Identity())
	}
	if offs, err := cur.Send(ctx, "fence", values(1, "new"), client.ProduceOptions{}); err != nil || offsetList(offs) != "0/1" {
		t.Fatalf("new instance: %s, %v", offsetList(offs), err)
	}
	for i := range 2 {
		if _, err := old.Send(ctx, "fence", values(1, "old"), client.ProduceOptions{}); !errors.Is(err, api.ErrProducerFenced) {
			t.Fatalf("old instance, send %d: %v", i, err)
		}
	}
	if _, err := old.Prepare(ctx, "fence", values(1, "x"), client.ProduceOptions{Acks: client.AcksNone}); err == nil {
		t.Fatal("acks=0 accepted for an idempotent producer")
	}
}
