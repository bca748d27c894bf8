package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/client"
)

// TestGroupWSFrames plays the server side of a group WebSocket by hand:
// an assignment, records within the credit, a commit answered with
// {"committed"} and one answered with an error frame (the stream goes on),
// then an error frame and a 4404 close that end it.
func TestGroupWSFrames(t *testing.T) {
	cursor := func(off int64) string {
		return api.Cursor{Epoch: 3, Positions: []api.PartitionOffset{{Topic: "t", Partition: 0, Offset: off}}}.Encode()
	}
	type clientFrame struct {
		Credit int64  `json:"credit"`
		Commit string `json:"commit"`
	}
	got := make(chan clientFrame, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/v1/groups/g/ws" || q.Get("topics") != "t,u" || q.Get("credit") != "4" || q.Get("instance_id") != "i" {
			apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "unexpected %s", r.URL))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		send := func(v any) {
			b, _ := json.Marshal(v)
			if err := c.Write(ctx, websocket.MessageText, b); err != nil {
				t.Errorf("write: %v", err)
			}
		}
		recs := func(from, n int64) map[string]any {
			var rs []api.GroupRecord
			for o := from; o < from+n; o++ {
				rs = append(rs, api.GroupRecord{Topic: "t", FetchedRecord: api.FetchedRecord{Offset: o, Value: json.RawMessage("1")}})
			}
			return map[string]any{"records": rs, "cursor": cursor(from + n)}
		}
		send(map[string]any{"assignment": []api.TopicPartition{{Topic: "t"}}, "member_epoch": 3})
		send(recs(0, 2))
		send(recs(2, 2))
		// The credit is spent; the client returns 2 (half its buffer) per
		// two records it hands out. Then two commits.
		for i := 0; i < 3; i++ {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var f clientFrame
			_ = json.Unmarshal(b, &f)
			got <- f
			switch {
			case f.Commit == cursor(2):
				send(map[string]any{"committed": []api.PartitionOffset{{Topic: "t", Offset: 2}}, "commit": f.Commit})
			case f.Commit != "":
				send(map[string]any{"error": api.ErrorDetail{Code: api.CodeFencedMemberEpoch, Message: "moved", Retriable: false}, "commit": f.Commit})
			}
		}
		send(map[string]any{"assignment": []api.TopicPartition{}, "member_epoch": 4})
		send(recs(4, 1))
		send(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeUnknownMemberID, Message: "session expired", Retriable: false}})
		c.Close(4404, string(api.CodeUnknownMemberID))
	}))
	defer srv.Close()
	cl, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	m, err := cl.JoinGroupWS(ctx, "g", client.GroupWSOptions{Topics: []string{"t", "u"}, Buffer: 4, InstanceID: "i"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if a, epoch := m.Assignment(); len(a) != 1 || epoch != 3 {
		t.Fatalf("assignment %v epoch %d", a, epoch)
	}
	b, err := m.Next(ctx)
	if err != nil || len(b.Records) != 2 || b.Cursor != cursor(2) || b.MemberEpoch != 3 {
		t.Fatalf("first batch %+v, %v", b, err)
	}
	if f := <-got; f.Credit != 2 {
		t.Fatalf("client frame %+v, want a credit of 2", f)
	}
	// Commits are answered while nobody calls Next, records waiting or not.
	if offs, err := m.Commit(ctx, b.Cursor); err != nil || len(offs) != 1 || offs[0].Offset != 2 {
		t.Fatalf("commit: %v, %v", offs, err)
	}
	if _, err := m.Commit(ctx, cursor(1)); !errors.Is(err, &api.Error{Code: api.CodeFencedMemberEpoch}) {
		t.Fatalf("refused commit: %v", err)
	}
	if f1, f2 := <-got, <-got; f1.Commit != cursor(2) || f2.Commit != cursor(1) {
		t.Fatalf("client frames %+v %+v", f1, f2)
	}
	// The refused commit did not end the stream: the records behind it come.
	for _, want := range []int64{2, 4} {
		b, err := m.Next(ctx)
		if err != nil || b.Records[0].Offset != want {
			t.Fatalf("batch at %d: %+v, %v", want, b, err)
		}
	}
	if a, epoch := m.Assignment(); len(a) != 0 || epoch != 4 {
		t.Fatalf("assignment %v epoch %d after the change", a, epoch)
	}
	_, err = m.Next(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != api.CodeUnknownMemberID || ce.Message != "session expired" || ce.Status != 404 {
		t.Fatalf("end of stream: %v (%#v)", err, ce)
	}
	if _, err := m.Commit(ctx, cursor(5)); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		t.Fatalf("commit after the end: %v", err)
	}
	// A Next with a short ctx does not hang on an ended stream either.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m.Next(short); !errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		t.Fatalf("Next after the end: %v", err)
	}
}
