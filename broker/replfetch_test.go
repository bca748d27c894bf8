package broker_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
)

// TestReplicaFetchRoute drives a leader's replication route the way a
// follower's stream does: a full fetch answers every partition of the
// session with its positions; an incremental request with nothing changed
// answers none after its long poll, and one after a produce answers the
// data; a wake ends a long poll at once; a lost session or a repeated epoch is refused with its code; a
// malformed or mistyped body is refused before it is decoded.
func TestReplicaFetchRoute(t *testing.T) {
	rc := startReplicated(t)
	rc.produce("all", 3, "a")
	p := rc.waitFor("HW at the log end", func(p api.PartitionInfo) bool { return p.HighWatermark == 3 && len(p.ISR) == 3 })
	var leaderAddr string
	for _, b := range rc.Brokers {
		if b.ID() == p.Leader {
			leaderAddr = b.Addr()
		}
	}
	var follower int32
	for _, id := range p.Replicas {
		if id != p.Leader {
			follower = id
		}
	}
	client := brokerapi.NewClient()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf []byte
	tp := brokerapi.TopicPartition{Topic: "r", Partition: 0}
	req := brokerapi.ReplicaFetchRequest{ReplicaID: follower, MaxWait: 200 * time.Millisecond, MinBytes: 1,
		Changed: []brokerapi.ReplicaFetchPartition{{TopicPartition: tp, FetchOffset: 3, LeaderEpoch: p.LeaderEpoch}}}
	full, err := client.ReplicaFetch(ctx, leaderAddr, req, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if full.SessionID == 0 || len(full.Partitions) != 1 {
		t.Fatalf("full fetch: %+v, want a session and the one partition", full)
	}
	if fp := full.Partitions[0]; fp.Err != nil || fp.HighWatermark != 3 || fp.LogEnd != 3 || fp.Size != 0 {
		t.Fatalf("full fetch at the log end: %+v", fp)
	}
	// Nothing changed: the long poll ends at its max wait with nothing.
	idle, err := client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID, SessionEpoch: 1, MaxWait: 200 * time.Millisecond, MinBytes: 1}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if idle.SessionID != full.SessionID || len(idle.Partitions) != 0 {
		t.Fatalf("idle incremental fetch: %+v, want the session and no partition", idle)
	}
	// The same epoch again (as after a lost answer) is refused.
	_, err = client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID, SessionEpoch: 1, MaxWait: 0}, &buf)
	if !errors.Is(err, &api.Error{Code: api.CodeInvalidFetchEpoch}) {
		t.Fatalf("a repeated epoch: %v, want INVALID_FETCH_SESSION_EPOCH", err)
	}
	// Data produced meanwhile comes in the next incremental answer, at the
	// offset the session holds, without the partition named.
	rc.produce("1", 2, "b")
	data, err := client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID, SessionEpoch: 2, MaxWait: 5 * time.Second, MinBytes: 1}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(data.Partitions) != 1 || data.Partitions[0].Size == 0 || int64(len(data.Partitions[0].Data)) != data.Partitions[0].Size {
		t.Fatalf("incremental fetch after a produce: %+v", data)
	}
	// A wake ends a long poll that would otherwise last the route's
	// longest wait (30 s, past this step's bound): the answer comes, with
	// no data, and the session goes on at the next epoch.
	type fetched struct {
		a   brokerapi.ReplicaFetchAnswer
		err error
	}
	polled := make(chan fetched, 1)
	go func() {
		a, err := client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID, SessionEpoch: 3, MaxWait: time.Hour, MinBytes: 1,
			Changed: []brokerapi.ReplicaFetchPartition{{TopicPartition: tp, FetchOffset: 5, LeaderEpoch: p.LeaderEpoch}}}, &buf)
		polled <- fetched{a, err}
	}()
	woken := false
	for !woken {
		if err := client.WakeReplicaFetch(ctx, leaderAddr, follower, full.SessionID); err != nil {
			t.Fatal(err)
		}
		// A wake that came before the poll began ends the poll at once
		// too; one that came between two looks here only repeats that.
		select {
		case f := <-polled:
			// The partition may be named for its HW, which the
			// followers move meanwhile, but with no data.
			if f.err != nil || f.a.SessionID != full.SessionID || len(f.a.Partitions) > 1 || (len(f.a.Partitions) == 1 && f.a.Partitions[0].Size != 0) {
				t.Fatalf("a woken long poll: %+v %v, want the session and no data", f.a, f.err)
			}
			woken = true
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("a woken long poll did not end")
		}
	}
	if _, err := client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID, SessionEpoch: 4, MaxWait: 0}, &buf); err != nil {
		t.Fatalf("the session after a wake: %v", err)
	}
	if err := client.WakeReplicaFetch(ctx, leaderAddr, follower, full.SessionID+1000); !errors.Is(err, &api.Error{Code: api.CodeFetchSessionNotFound}) {
		t.Fatalf("a wake for an unknown session: %v, want FETCH_SESSION_ID_NOT_FOUND", err)
	}
	if err := client.WakeReplicaFetch(ctx, leaderAddr, follower+10, full.SessionID); !errors.Is(err, &api.Error{Code: api.CodeFetchSessionNotFound}) {
		t.Fatalf("a wake for another replica's session: %v, want FETCH_SESSION_ID_NOT_FOUND", err)
	}
	if resp, err := http.Post("http://"+leaderAddr+brokerapi.PathReplicaFetchWake, "", nil); err != nil {
		t.Fatal(err)
	} else if code := apiCode(t, resp); resp.StatusCode != 400 || code != api.CodeInvalidRequest {
		resp.Body.Close()
		t.Fatalf("a wake naming no session: %d %s, want 400 INVALID_REQUEST", resp.StatusCode, code)
	} else {
		resp.Body.Close()
	}
	_, err = client.ReplicaFetch(ctx, leaderAddr, brokerapi.ReplicaFetchRequest{ReplicaID: follower, SessionID: full.SessionID + 1000, SessionEpoch: 1}, &buf)
	if !errors.Is(err, &api.Error{Code: api.CodeFetchSessionNotFound}) {
		t.Fatalf("an unknown session: %v, want FETCH_SESSION_ID_NOT_FOUND", err)
	}

	post := func(contentType string, body []byte) (int, api.Code) {
		t.Helper()
		resp, err := http.Post("http://"+leaderAddr+brokerapi.PathReplicaFetch, contentType, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, apiCode(t, resp)
	}
	if status, code := post(brokerapi.ContentTypeReplicaFetch, []byte{1, 2, 3}); status != 400 || code != api.CodeInvalidRequest {
		t.Fatalf("a malformed body: %d %s, want 400 INVALID_REQUEST", status, code)
	}
	if status, code := post("application/json", []byte("{}")); status != 415 || code != api.CodeUnsupportedMediaType {
		t.Fatalf("a JSON body: %d %s, want 415 UNSUPPORTED_MEDIA_TYPE", status, code)
	}
	if status, code := post(brokerapi.ContentTypeReplicaFetch, make([]byte, brokerapi.MaxReplicaFetchRequestBytes+1)); status != 413 || code != api.CodeRequestTooLarge {
		t.Fatalf("an oversized body: %d %s, want 413 REQUEST_TOO_LARGE", status, code)
	}
}

// apiCode is the error code of a refused internal API call.
func apiCode(t *testing.T, resp *http.Response) api.Code {
	t.Helper()
	return apihttp.ReadError(resp).Code
}
