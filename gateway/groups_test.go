package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
)

func (c client) produceN(topic string, partition, n int, tag string) {
	c.t.Helper()
	recs := make([]map[string]any, n)
	for i := range recs {
		recs[i] = map[string]any{"value": fmt.Sprintf("%s-%d-%d", tag, partition, i), "partition": partition}
	}
	c.json("POST", "/v1/topics/"+topic+"/records?acks=all", map[string]any{"records": recs}, nil)
}

func (c client) join(group string, req api.JoinGroupRequest) api.JoinGroupResponse {
	c.t.Helper()
	var res api.JoinGroupResponse
	c.json("POST", "/v1/groups/"+group+"/members", req, &res)
	return res
}

func (c client) poll(group, member, query string) api.GroupPollResponse {
	c.t.Helper()
	var res api.GroupPollResponse
	c.json("GET", "/v1/groups/"+group+"/members/"+member+"/records?"+query, nil, &res)
	return res
}

func (c client) errCode(method, path string, v any) (int, api.Code) {
	c.t.Helper()
	var body []byte
	if v != nil {
		body, _ = json.Marshal(v)
	}
	status, _, b := c.do(method, path, "application/json", body)
	var e struct {
		Error api.ErrorDetail `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return status, api.Code(e.Error.Code)
}

func TestGroupConsumeCommitResume(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 3})
	c := client{t: t, base: tc.URL}
	c.createTopic("orders", 4)
	for p := 0; p < 4; p++ {
		c.produceN("orders", p, 5, "a")
	}

	a := c.join("g1", api.JoinGroupRequest{Topics: []string{"orders"}})
	if len(a.Assignment) != 4 || a.MemberID == "" || a.HeartbeatIntervalMs <= 0 {
		t.Fatalf("join: %+v", a)
	}
	// Read everything, in pages of 7; every record once.
	seen := map[string]bool{}
	var cursor string
	for range 10 {
		q := "max_records=7"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		res := c.poll("g1", a.MemberID, q)
		for _, r := range res.Records {
			k := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
			if seen[k] {
				t.Fatalf("record %s delivered twice", k)
			}
			seen[k] = true
		}
		if len(res.Records) == 0 {
			break
		}
		if len(res.Records) > 7 {
			t.Fatalf("poll returned %d records, max 7", len(res.Records))
		}
		// The same cursor again returns the same records.
		if cursor != "" {
			again := c.poll("g1", a.MemberID, "max_records=7&cursor="+url.QueryEscape(cursor))
			if len(again.Records) != len(res.Records) || again.Records[0].Offset != res.Records[0].Offset || again.Records[0].Partition != res.Records[0].Partition {
				t.Fatalf("a retried poll returned %d records from %v, want %d from %v", len(again.Records), again.Records, len(res.Records), res.Records[0])
			}
		}
		cursor = res.Cursor
	}
	if len(seen) != 20 {
		t.Fatalf("read %d records, want 20", len(seen))
	}
	var cr api.CommitResponse
	c.json("POST", "/v1/groups/g1/offsets", api.CommitRequest{MemberID: a.MemberID, Cursor: cursor}, &cr)
	if len(cr.Committed) != 4 {
		t.Fatalf("committed %+v", cr)
	}

	var d api.GroupDescription
	c.json("GET", "/v1/groups/g1", nil, &d)
	if d.State != api.GroupStable || len(d.Members) != 1 || len(d.Partitions) != 4 {
		t.Fatalf("describe: %+v", d)
	}
	for _, p := range d.Partitions {
		if p.CommittedOffset != 5 || p.HighWatermark != 5 || p.Lag != 0 || p.Owner != a.MemberID {
			t.Fatalf("partition row %+v", p)
		}
	}
	c.produceN("orders", 2, 3, "b")
	c.json("GET", "/v1/groups/g1", nil, &d)
	for _, p := range d.Partitions {
		if p.Partition == 2 && (p.Lag != 3 || p.LagMs < 0) {
			t.Fatalf("lag after three more records: %+v", p)
		}
	}

	// Leave; a new member of the group resumes at the committed offsets.
	if status, _, b := c.do("DELETE", "/v1/groups/g1/members/"+a.MemberID, "", nil); status != 204 {
		t.Fatalf("leave: %d %s", status, b)
	}
	if status, code := c.errCode("POST", "/v1/groups/g1/offsets", api.CommitRequest{MemberID: a.MemberID, Cursor: cursor}); status != 404 || code != api.CodeUnknownMemberID {
		t.Fatalf("commit after leaving: %d %s", status, code)
	}
	b := c.join("g1", api.JoinGroupRequest{Topics: []string{"orders"}})
	res := c.poll("g1", b.MemberID, "max_wait_ms=2000")
	if len(res.Records) != 3 || res.Records[0].Partition != 2 || res.Records[0].Offset != 5 {
		t.Fatalf("after resume: %+v", res.Records)
	}

	var list api.GroupList
	c.json("GET", "/v1/groups", nil, &list)
	if len(list.Groups) != 1 || list.Groups[0].Group != "g1" || list.Groups[0].Members != 1 {
		t.Fatalf("list: %+v", list)
	}
	if status, code := c.errCode("DELETE", "/v1/groups/g1", nil); status != 409 || code != api.CodeGroupNotEmpty {
		t.Fatalf("delete of a live group: %d %s", status, code)
	}
	if status, code := c.errCode("POST", "/v1/groups/g1/offsets/reset", api.ResetOffsetsRequest{Topics: []string{"orders"}, To: "earliest"}); status != 409 || code != api.CodeGroupNotEmpty {
		t.Fatalf("reset of a live group: %d %s", status, code)
	}
	c.do("DELETE", "/v1/groups/g1/members/"+b.MemberID, "", nil)
	c.json("POST", "/v1/groups/g1/offsets/reset", api.ResetOffsetsRequest{Topics: []string{"orders"}, To: "offset:1"}, &cr)
	c.json("GET", "/v1/groups/g1", nil, &d)
	if d.State != api.GroupEmpty || len(d.Partitions) != 4 || d.Partitions[0].CommittedOffset != 1 {
		t.Fatalf("after reset: %+v", d)
	}
	if status, _, body := c.do("DELETE", "/v1/groups/g1", "", nil); status != 204 {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, code := c.errCode("GET", "/v1/groups/g1", nil); status != 404 || code != api.CodeUnknownGroup {
		t.Fatalf("describe after delete: %d %s", status, code)
	}
}

func TestGroupSplitsPartitions(t *testing.T) {
	tc := embedtest.Start(t, embedtest.Options{Brokers: 1})
	c := client{t: t, base: tc.URL}
	c.createTopic("events", 6)
	req := api.JoinGroupRequest{Topics: []string{"events"}}
	m := []api.JoinGroupResponse{c.join("g", req), c.join("g", req), c.join("g", req)}
	// Members converge by heartbeating; no partition ever has two owners.
	owners := map[api.TopicPartition]string{}
	for range 5 {
		clear(owners)
		for _, mm := range m {
			var hb api.HeartbeatResponse
			c.json("POST", "/v1/groups/g/members/"+mm.MemberID+"/heartbeat", nil, &hb)
			for _, tp := range hb.Assignment {
				if o, ok := owners[tp]; ok && o != mm.MemberID {
					t.Fatalf("%v owned by %s and %s", tp, o, mm.MemberID)
				}
				owners[tp] = mm.MemberID
			}
		}
	}
	var d api.GroupDescription
	c.json("GET", "/v1/groups/g", nil, &d)
	for _, mem := range d.Members {
		if len(mem.Assignment) != 2 {
			t.Fatalf("member %s holds %v, want 2 partitions", mem.MemberID, mem.Assignment)
		}
	}
}

func TestGroupErrors(t *testing.T) {
	c := newCluster(t)
	c.createTopic("t", 1)
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               api.Code
	}{
		{"bad group id", "POST", "/v1/groups/a%20b/members", api.JoinGroupRequest{Topics: []string{"t"}}, 400, api.CodeInvalidGroupID},
		{"unknown topic", "POST", "/v1/groups/g/members", api.JoinGroupRequest{Topics: []string{"nope"}}, 404, api.CodeUnknownTopic},
		{"unknown field", "POST", "/v1/groups/g/members", map[string]any{"topics": []string{"t"}, "session": 1}, 400, api.CodeInvalidRequest},
		{"unknown member", "GET", "/v1/groups/g/members/nobody/records", nil, 404, api.CodeUnknownMemberID},
		{"bad cursor", "GET", "/v1/groups/g/members/nobody/records?cursor=%21", nil, 400, api.CodeInvalidRequest},
		{"bad reset target", "POST", "/v1/groups/g/offsets/reset", api.ResetOffsetsRequest{Topics: []string{"t"}, To: "yesterday"}, 400, api.CodeInvalidOffset},
		{"commit without member", "POST", "/v1/groups/g/offsets", api.CommitRequest{}, 400, api.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			status, code := c.errCode(tc.method, tc.path, tc.body)
			if status != tc.status || code != tc.code {
				t.Fatalf("got %d %s, want %d %s", status, code, tc.status, tc.code)
			}
		})
	}
	status, _, _ := c.do("POST", "/v1/groups/g/members", "text/plain", []byte(`{"topics":["t"]}`))
	if status != 415 {
		t.Fatalf("join as text/plain: %d, want 415", status)
	}
}

// A long poll is cut to half the member's session, and renews it, so a
// member that only ever long-polls an idle topic stays in the group.
func TestGroupLongPollKeepsSession(t *testing.T) {
	c := newCluster(t)
	c.createTopic("idle", 1)
	m := c.join("lp", api.JoinGroupRequest{Topics: []string{"idle"}, SessionTimeoutMs: 1500})
	for range 4 {
		res := c.poll("lp", m.MemberID, "max_wait_ms=30000")
		if len(res.Records) != 0 {
			t.Fatalf("records from an idle topic: %+v", res.Records)
		}
	}
	var d api.GroupDescription
	c.json("GET", "/v1/groups/lp", nil, &d)
	if len(d.Members) != 1 {
		t.Fatalf("the polling member left the group: %+v", d)
	}
}

// A member's poll shares max_records among its partitions: one with a
// backlog does not keep the others waiting.
func TestGroupPollSharesAmongPartitions(t *testing.T) {
	c := newCluster(t)
	c.createTopic("busy", 3)
	c.produceN("busy", 0, 100, "a")
	c.produceN("busy", 1, 100, "b")
	c.produceN("busy", 2, 5, "c")
	m := c.join("fair", api.JoinGroupRequest{Topics: []string{"busy"}})
	res := c.poll("fair", m.MemberID, "max_records=30&cursor="+m.Cursor)
	per := map[int32]int{}
	for _, r := range res.Records {
		per[r.Partition]++
	}
	if len(res.Records) != 30 || per[2] != 5 || per[0] < 10 || per[1] < 10 {
		t.Fatalf("a poll of 30 from partitions with 100, 100 and 5 records took %v", per)
	}
	// The next poll goes on where each partition stopped: nothing skipped.
	res2 := c.poll("fair", m.MemberID, "max_records=1000&cursor="+res.Cursor)
	if len(res.Records)+len(res2.Records) != 205 {
		t.Fatalf("two polls read %d + %d records, want 205", len(res.Records), len(res2.Records))
	}
}
