package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// The consumer-group client against the real gateway and coordinator.

func recordKeys(recs []api.GroupRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset))
	}
	return out
}

// pollUntil polls until n records came (each once), or fails the test.
func pollUntil(t *testing.T, g *client.GroupConsumer, n int) client.GroupBatch {
	t.Helper()
	seen := map[string]bool{}
	var last client.GroupBatch
	testwait.Check(t, 30*time.Second, fmt.Sprintf("%d records", n), func() error {
		b, err := g.Poll(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range recordKeys(b.Records) {
			if seen[k] {
				t.Fatalf("record %s delivered twice", k)
			}
			seen[k] = true
		}
		last = b
		if len(seen) < n {
			return fmt.Errorf("%d of %d records", len(seen), n)
		}
		return nil
	})
	if len(seen) != n {
		t.Fatalf("%d records, want %d", len(seen), n)
	}
	return last
}

func TestGroupConsumerAgainstCluster(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "orders", 3)
	for p := range int32(3) {
		produceN(t, cl, "orders", p, 0, 10)
	}
	opts := client.GroupConsumerOptions{Topics: []string{"orders"}, MaxRecords: 7, MaxWait: 200 * time.Millisecond}
	a := cl.NewGroupConsumer("billing", opts)
	if err := a.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if len(a.Assignment()) != 3 {
		t.Fatalf("assignment %v", a.Assignment())
	}
	last := pollUntil(t, a, 30)
	committed, err := a.Commit(ctx, last.Cursor)
	if err != nil || len(committed) != 3 {
		t.Fatalf("commit %v, %v", committed, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}

	d, err := cl.DescribeGroup(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Partitions {
		if p.CommittedOffset != 10 || p.Lag != 0 {
			t.Fatalf("after the commit: %+v", d.Partitions)
		}
	}
	if l, err := cl.ListGroups(ctx); err != nil || len(l) != 1 || l[0].Group != "billing" {
		t.Fatalf("list %+v, %v", l, err)
	}

	// A new member resumes after the committed offsets.
	b := cl.NewGroupConsumer("billing", opts)
	if err := b.Join(ctx); err != nil {
		t.Fatal(err)
	}
	produceN(t, cl, "orders", 1, 10, 4)
	got := pollUntil(t, b, 4)
	for _, r := range got.Records {
		if r.Partition != 1 || r.Offset < 10 {
			t.Fatalf("resumed at %s/%d/%d", r.Topic, r.Partition, r.Offset)
		}
	}
	// A member holding partitions keeps the group from being reset.
	if _, err := cl.ResetOffsets(ctx, "billing", api.ResetOffsetsRequest{Topics: []string{"orders"}, To: "earliest"}); !errors.Is(err, &api.Error{Code: api.CodeGroupNotEmpty}) {
		t.Fatalf("reset of a group with members: %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := cl.ResetOffsets(ctx, "billing", api.ResetOffsetsRequest{Topics: []string{"orders"}, To: "earliest"}); err != nil || len(r.Committed) != 3 || r.Committed[0].Offset != 0 {
		t.Fatalf("reset %+v, %v", r, err)
	}
	if err := cl.DeleteGroup(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DescribeGroup(ctx, "billing"); err == nil {
		t.Fatal("the group survived its deletion")
	}
}

// TestGroupConsumerHeartbeatKeepsIdleMember: a member that does not poll for
// several session timeouts stays in the group thanks to its heartbeats.
func TestGroupConsumerHeartbeatKeepsIdleMember(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "idle", 1)
	g := cl.NewGroupConsumer("idlers", client.GroupConsumerOptions{Topics: []string{"idle"}, SessionTimeout: time.Second, MaxWait: -1})
	if err := g.Join(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	member := g.MemberID()
	time.Sleep(3 * time.Second)
	if _, err := g.Poll(ctx); err != nil || g.MemberID() != member {
		t.Fatalf("poll after 3 idle seconds with a 1 s session: %v (member %q, was %q)", err, g.MemberID(), member)
	}
}

func TestGroupWSAgainstCluster(t *testing.T) {
	_, cl := startCluster(t)
	ctx := testCtx(t)
	createTopic(t, cl, "events", 2)
	for p := range int32(2) {
		produceN(t, cl, "events", p, 0, 50)
	}
	const buffer = 16
	m, err := cl.JoinGroupWS(ctx, "ws-readers", client.GroupWSOptions{Topics: []string{"events"}, Buffer: buffer, InstanceID: "reader-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if a, epoch := m.Assignment(); len(a) != 2 || epoch <= 0 {
		t.Fatalf("assignment %v at epoch %d", a, epoch)
	}
	seen := map[string]bool{}
	var last client.GroupBatch
	for len(seen) < 100 {
		nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		b, err := m.Next(nctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d records: %v", len(seen), err)
		}
		if len(b.Records) > buffer {
			t.Fatalf("%d records in a frame with a buffer of %d", len(b.Records), buffer)
		}
		for _, k := range recordKeys(b.Records) {
			if seen[k] {
				t.Fatalf("record %s delivered twice", k)
			}
			seen[k] = true
		}
		last = b
	}
	committed, err := m.Commit(ctx, last.Cursor)
	if err != nil || len(committed) != 2 {
		t.Fatalf("commit %v, %v", committed, err)
	}
	for _, o := range committed {
		if o.Offset != 50 {
			t.Fatalf("committed %v", committed)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	// The gateway removes the member when the connection closes.
	waitFor(t, 10*time.Second, "the member to leave", func() bool {
		d, err := cl.DescribeGroup(ctx, "ws-readers")
		return err == nil && len(d.Members) == 0
	})
	if _, err := cl.JoinGroupWS(ctx, "ws-readers", client.GroupWSOptions{Topics: []string{"no-such-topic"}}); err == nil {
		t.Fatal("joined for a topic that does not exist")
	}
}
