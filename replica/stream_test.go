package replica

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// fakeLeader answers replica fetches with what answer returns for each
// request, after recording it; an answer with nothing in it waits a little,
// as a long poll over idle partitions does, or, with hold, until a wake
// (PathReplicaFetchWake) ends it.
type fakeLeader struct {
	t        *testing.T
	requests chan brokerapi.ReplicaFetchRequest
	answer   func(n int32, r brokerapi.ReplicaFetchRequest) ([]brokerapi.ReplicaFetchedPartition, [][]byte)
	n        atomic.Int32 // requests so far (the stream sends one at a time)
	hold     bool
	wake     chan struct{} // cap 1, with hold
	wakes    atomic.Int32
}

func (f *fakeLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == brokerapi.PathReplicaFetchWake {
		if got := r.URL.Query().Get("session_id"); got != "5" {
			f.t.Errorf("a wake for session %q, want the leader's 5", got)
		}
		f.wakes.Add(1)
		if f.hold {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body, _ := io.ReadAll(r.Body)
	req, err := brokerapi.DecodeReplicaFetchRequest(body)
	if err != nil {
		f.t.Errorf("the stream sent a bad request: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	select {
	case f.requests <- req:
	case <-r.Context().Done():
		return
	}
	parts, data := f.answer(f.n.Add(1), req)
	if len(parts) == 0 {
		var held <-chan time.Time
		if !f.hold {
			held = time.After(10 * time.Millisecond)
		}
		select {
		case <-held:
		case <-f.wake:
		case <-r.Context().Done():
			return
		}
	}
	out := brokerapi.AppendReplicaFetchHeader(nil, 5, parts)
	for _, d := range data {
		out = append(out, d...)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out)
}

func openLog(t *testing.T) *commitlog.Log {
	t.Helper()
	fsys, err := commitlog.NewOSFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fsys.Close() })
	l, err := commitlog.Open(fsys, "p", commitlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// leaderBatch is one record written by a leader at offset 0, epoch 1.
func leaderBatch(t *testing.T) []byte {
	t.Helper()
	b, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: []byte("v"), Timestamp: time.Now().UnixMilli()}}, recordbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recordbatch.SetBaseOffset(b, 0)
	recordbatch.SetLeaderEpoch(b, 1)
	return b
}

func changedNames(r brokerapi.ReplicaFetchRequest) []string {
	var out []string
	for _, c := range r.Changed {
		out = append(out, c.Topic+"/"+strconv.Itoa(int(c.Partition))+"@"+strconv.FormatInt(c.FetchOffset, 10))
	}
	slices.Sort(out)
	return out
}

// TestStreamSessionAndPartitionErrors runs a stream against a scripted
// leader: a partition joins the session at its log end; data is appended
// and the HW follows the leader's; the next request names the partition at
// its new log end. A partition the leader answers NOT_LEADER leaves the
// session in the very next request (its error ended the long poll: kept,
// it would end every one), comes back after its backoff, and requests with
// nothing changed name no partition at all.
func TestStreamSessionAndPartitionErrors(t *testing.T) {
	la, lb := openLog(t), openLog(t)
	batch := leaderBatch(t)
	var dataAt, errAt atomic.Int32 // the number of the request answered so (0: none yet)
	leader := &fakeLeader{t: t, requests: make(chan brokerapi.ReplicaFetchRequest, 64)}
	leader.answer = func(n int32, r brokerapi.ReplicaFetchRequest) ([]brokerapi.ReplicaFetchedPartition, [][]byte) {
		var parts []brokerapi.ReplicaFetchedPartition
		var data [][]byte
		for _, c := range r.Changed {
			switch {
			case c.Partition == 0 && c.FetchOffset == 0 && dataAt.Load() == 0:
				dataAt.Store(n)
				parts = append(parts, brokerapi.ReplicaFetchedPartition{TopicPartition: c.TopicPartition, HighWatermark: 1, LogEnd: 1, Size: int64(len(batch))})
				data = append(data, batch)
			case c.Partition == 1 && errAt.Load() == 0:
				errAt.Store(n)
				parts = append(parts, brokerapi.ReplicaFetchedPartition{TopicPartition: c.TopicPartition, Err: &api.Error{Code: api.CodeNotLeader, Message: "not here"}, HighWatermark: -1})
			}
		}
		return parts, data
	}
	srv := httptest.NewServer(leader)
	defer srv.Close()
	trunc := NewTruncator(2, nil)
	defer trunc.Close()
	client := brokerapi.NewClient()
	defer client.Close()
	s := NewStream(StreamConfig{Self: 2, LeaderID: 1, Client: client, Truncator: trunc, MaxWait: 10 * time.Millisecond,
		// Far above scheduling stalls: the request after an error comes
		// before the partition's backoff ends.
		PartitionBackoff: 2 * time.Second,
		LeaderAddr:       func() (string, bool) { return strings.TrimPrefix(srv.URL, "http://"), true }})
	defer s.Close()
	s.Add(StreamPartition{Topic: "a", Partition: 0, LeaderEpoch: 1, Log: la})
	s.Add(StreamPartition{Topic: "a", Partition: 1, LeaderEpoch: 1, Log: lb})

	next := func() brokerapi.ReplicaFetchRequest {
		t.Helper()
		select {
		case r := <-leader.requests:
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("no request from the stream")
		}
		return brokerapi.ReplicaFetchRequest{}
	}
	removed := func(r brokerapi.ReplicaFetchRequest, p int32) bool {
		return slices.ContainsFunc(r.Removed, func(tp brokerapi.TopicPartition) bool { return tp.Partition == p })
	}
	var sawData, sawRemoval, back bool
	idleAfter := 0
	for i := int32(1); i < 500 && idleAfter < 2; i++ {
		r := next() // request number i; i-1 was answered just before it
		if r.SessionEpoch > 0 && r.SessionID != 5 {
			t.Fatalf("request in session %d, want the leader's 5", r.SessionID)
		}
		got := changedNames(r)
		if n := dataAt.Load(); n > 0 && n == i-1 {
			if r.SessionEpoch > 0 && !slices.Contains(got, "a/0@1") {
				t.Fatalf("after the append the request names %v, want a/0 at its new log end 1", got)
			}
			if o := la.Offsets(); o.LogEnd != 1 || o.HighWatermark != 1 {
				t.Fatalf("a/0 after the answer: %+v, want log end and HW 1", o)
			}
			sawData = true
		}
		if n := errAt.Load(); n > 0 && n == i-1 {
			if slices.Contains(got, "a/1@0") || (r.SessionEpoch > 0 && !removed(r, 1)) {
				t.Fatalf("after its NOT_LEADER, a/1 was not taken out of the session: epoch %d changed %v, removed %v", r.SessionEpoch, got, r.Removed)
			}
			sawRemoval = true
		} else if sawRemoval && slices.Contains(got, "a/1@0") {
			back = true
		} else if back && sawData && len(r.Changed) == 0 && len(r.Removed) == 0 {
			idleAfter++
		}
	}
	if !sawData || !sawRemoval || !back || idleAfter < 2 {
		t.Fatalf("data appended %v, error partition removed %v, back after its backoff %v, idle requests naming nothing %d", sawData, sawRemoval, back, idleAfter)
	}
	// Removed, a partition's log is no longer touched and it leaves the
	// session.
	s.Remove("a", 0)
	left := false
	for i := 0; i < 500 && !left; i++ {
		left = removed(next(), 0)
	}
	if !left {
		t.Fatal("a/0 did not leave the session after Remove")
	}
	if s.Len() != 1 {
		t.Fatalf("%d partitions on the stream, want 1", s.Len())
	}
}

// TestStreamWakesTheLeaderForAJoiningPartition: a partition that joins a
// stream while its long poll waits on a leader with nothing to send is not
// left out until the poll's max wait (here the fake leader's poll would
// never end): the stream asks the leader to end the poll, and the next
// request names the partition.
func TestStreamWakesTheLeaderForAJoiningPartition(t *testing.T) {
	la, lb := openLog(t), openLog(t)
	leader := &fakeLeader{t: t, requests: make(chan brokerapi.ReplicaFetchRequest, 64), hold: true, wake: make(chan struct{}, 1)}
	leader.answer = func(n int32, r brokerapi.ReplicaFetchRequest) ([]brokerapi.ReplicaFetchedPartition, [][]byte) {
		if r.SessionEpoch == 0 {
			// The first answer of a session carries its partitions.
			var parts []brokerapi.ReplicaFetchedPartition
			for _, c := range r.Changed {
				parts = append(parts, brokerapi.ReplicaFetchedPartition{TopicPartition: c.TopicPartition, HighWatermark: 0})
			}
			return parts, nil
		}
		return nil, nil
	}
	srv := httptest.NewServer(leader)
	defer srv.Close()
	trunc := NewTruncator(2, nil)
	defer trunc.Close()
	client := brokerapi.NewClient()
	defer client.Close()
	s := NewStream(StreamConfig{Self: 2, LeaderID: 1, Client: client, Truncator: trunc, MaxWait: time.Hour,
		LeaderAddr: func() (string, bool) { return strings.TrimPrefix(srv.URL, "http://"), true }})
	defer s.Close()
	next := func() brokerapi.ReplicaFetchRequest {
		t.Helper()
		select {
		case r := <-leader.requests:
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("no request from the stream (%d wakes sent)", leader.wakes.Load())
		}
		return brokerapi.ReplicaFetchRequest{}
	}
	s.Add(StreamPartition{Topic: "a", Partition: 0, LeaderEpoch: 1, Log: la})
	if r := next(); r.SessionEpoch != 0 || !slices.Equal(changedNames(r), []string{"a/0@0"}) {
		t.Fatalf("first request: epoch %d, changed %v; want a new session with a/0", r.SessionEpoch, changedNames(r))
	}
	if r := next(); r.SessionEpoch != 1 || len(r.Changed) != 0 {
		t.Fatalf("second request: epoch %d, changed %v; want the session with nothing changed", r.SessionEpoch, changedNames(r))
	}
	// That poll is held by the leader now (or about to be); a/1 joins.
	s.Add(StreamPartition{Topic: "a", Partition: 1, LeaderEpoch: 1, Log: lb})
	r := next()
	if r.SessionEpoch != 2 || !slices.Equal(changedNames(r), []string{"a/1@0"}) {
		t.Fatalf("the request after a/1 joined: epoch %d, changed %v; want the session naming a/1", r.SessionEpoch, changedNames(r))
	}
	if leader.wakes.Load() == 0 {
		t.Fatal("the poll ended with no wake sent")
	}
}
