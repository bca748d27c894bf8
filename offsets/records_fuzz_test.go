package offsets

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

// FuzzApplyRecord: the records of __consumer_offsets are replayed from the
// log when a broker takes a partition over. Applying any key and value
// never panics, nor does describing the state it leaves or operating on it
// (heartbeats, polls, expiry); a state built from records it accepts
// encodes to records that rebuild it, equal, and encode the same again.
func FuzzApplyRecord(f *testing.F) {
	// Real records: what a coordinator writes as members join, commit,
	// leave and expire.
	now := time.Unix(1_700_000_000, 0)
	topics := map[string]int32{"orders": 4, "audit": 2}
	meta := func(topic string) (int32, bool) { n, ok := topics[topic]; return n, ok }
	s := NewState()
	var log []Record
	apply := func(recs []Record, err error) {
		if err != nil {
			f.Fatal(err)
		}
		for _, r := range recs {
			if err := s.Apply(r, now); err != nil {
				f.Fatal(err)
			}
			log = append(log, r)
		}
	}
	join := func(group, id string, req api.JoinGroupRequest) {
		p, err := ValidateJoin(req, api.MemberKindHTTP, meta)
		if err != nil {
			f.Fatal(err)
		}
		apply(s.Join(group, id, p, meta, now))
	}
	join("g1", "m1", api.JoinGroupRequest{Topics: []string{"orders", "audit"}})
	join("g1", "m2", api.JoinGroupRequest{Topics: []string{"orders"}, InstanceID: "static-1"})
	join("g2", "m3", api.JoinGroupRequest{Topics: []string{"audit"}, Assignor: "range"})
	for _, id := range []string{"m1", "m2", "m1", "m2"} {
		apply(s.Heartbeat("g1", id, meta, now))
	}
	if m, err := s.Member("g1", "m1"); err == nil {
		var offs []api.PartitionOffset
		for _, tp := range m.Assignment() {
			offs = append(offs, api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: 42})
		}
		apply(s.Commit("g1", "m1", m.Epoch, offs, meta, now))
	}
	apply(s.SetOffsets("g3", []api.PartitionOffset{{Topic: "audit", Partition: 1, Offset: 7}}, now))
	apply(s.Leave("g1", "m2", meta))
	apply(s.Expire(now.Add(time.Hour), meta), nil)
	for _, r := range log {
		f.Add(r.Key, r.Value, false)
		f.Add(r.Key, []byte(nil), true)
	}
	f.Add([]byte(`{"v":2,"group":"g"}`), []byte(`{}`), false)            // a newer version's key
	f.Add([]byte(`not json`), []byte(`{}`), false)                       // not ours
	f.Add([]byte(`{"v":1,"group":"g","topic":"t"`), []byte(`{}`), false) // cut short
	f.Add([]byte(`{"v":1,"group":"g"}`), []byte(`{"partitions":{"t":-3},"members":[{"id":"m","topics":["t"],"owned":[{"topic":"t","partition":-1}]}]}`), false)

	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		} else if value == nil {
			value = []byte{}
		}
		r := Record{Key: key, Value: value}
		// Onto the state the real records built, and onto an empty one.
		full := NewState()
		for _, lr := range log {
			if err := full.Apply(lr, now); err != nil {
				t.Fatal(err)
			}
		}
		_ = full.Apply(r, now)
		describeAll(full)
		operateAll(full, meta, now)
		s := NewState()
		if err := s.Apply(r, now); err != nil {
			return
		}
		describeAll(s)
		recs := encodeState(s)
		again := NewState()
		for _, er := range recs {
			if err := again.Apply(er, now); err != nil {
				t.Fatalf("a re-encoded record is refused: %v\n%s = %s", err, er.Key, er.Value)
			}
		}
		if a, b := persisted(t, s), persisted(t, again); a != b {
			t.Fatalf("the state rebuilt from its records differs:\n%s\n%s", a, b)
		}
		if twice := encodeState(again); fmt.Sprint(twice) != fmt.Sprint(recs) {
			t.Fatalf("the records re-encoded differ:\n%q\n%q", recs, twice)
		}
	})
}

// operateAll runs what a coordinator does next with a state it loaded:
// heartbeats of every member (which retarget the group), a poll, expiry.
func operateAll(s *State, meta Metadata, now time.Time) {
	for _, g := range s.Groups() {
		for _, id := range s.Group(g).memberIDs() {
			if recs, err := s.Heartbeat(g, id, meta, now); err == nil {
				for _, r := range recs {
					_ = s.Apply(r, now)
				}
			}
			if _, err := s.StartPoll(g, id, nil, meta, now); err == nil {
				s.EndPoll(g, id, nil, now)
			}
		}
	}
	for _, r := range s.Expire(now.Add(time.Hour), meta) {
		_ = s.Apply(r, now)
	}
}

// describeAll reads every group as the HTTP API shows it.
func describeAll(s *State) {
	for _, g := range s.Groups() {
		s.Describe(g)
		s.Summary(g)
	}
}

// encodeState is the records that hold s: per group, its group record and
// an offset record per committed offset, in a fixed order.
func encodeState(s *State) []Record {
	var out []Record
	for _, id := range s.Groups() {
		g := s.Group(id)
		out = append(out, groupRecord(g))
		tps := make([]api.TopicPartition, 0, len(g.Offsets))
		for tp := range g.Offsets {
			tps = append(tps, tp)
		}
		sortTPs(tps)
		for _, tp := range tps {
			out = append(out, offsetRecord(id, tp, g.Offsets[tp]))
		}
	}
	return out
}

// persisted renders what a state keeps in the log: its groups with their
// persisted fields, members and offsets.
func persisted(t *testing.T, s *State) string {
	t.Helper()
	type offset struct {
		TP api.TopicPartition
		OffsetValue
	}
	type view struct {
		ID         string
		Epoch      int32
		Assignor   string
		Partitions map[string]int32
		Fences     int64
		Members    []MemberValue
		Offsets    []offset
	}
	var out []view
	for _, id := range s.Groups() {
		g := s.Group(id)
		v := view{ID: id, Epoch: g.Epoch, Assignor: g.Assignor, Partitions: g.Partitions, Fences: g.Fences}
		for _, mid := range g.memberIDs() {
			v.Members = append(v.Members, g.Members[mid].MemberValue)
		}
		for tp, ov := range g.Offsets {
			v.Offsets = append(v.Offsets, offset{tp, ov})
		}
		slices.SortFunc(v.Offsets, func(a, b offset) int {
			if tpLess(a.TP, b.TP) {
				return -1
			}
			if tpLess(b.TP, a.TP) {
				return 1
			}
			return 0
		})
		out = append(out, v)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
