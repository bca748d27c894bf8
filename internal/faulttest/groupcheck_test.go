package faulttest

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/offsets"
)

// The group checks are pure functions of the calls and the logs; each case
// here is a history with one kind of violation (or none), so that a
// scenario that passes is known to have been able to fail.

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func tp(p int32) api.TopicPartition { return api.TopicPartition{Topic: "t", Partition: p} }

func poll(member, id string, start, end int, epoch int32, parts []int32, recs ...Delivery) *GroupCall {
	gc := &GroupCall{Member: member, MemberID: id, Kind: CallPoll, Start: at(start), End: at(end), OK: true, Status: 200, Epoch: epoch, Records: recs}
	for _, p := range parts {
		gc.Assignment = append(gc.Assignment, tp(p))
	}
	return gc
}

func commit(member, id string, start, end int, ok bool, offs ...api.PartitionOffset) *GroupCall {
	return &GroupCall{Member: member, MemberID: id, Kind: CallCommit, Start: at(start), End: at(end), OK: ok, Offsets: offs}
}

func off(p int32, o int64) api.PartitionOffset {
	return api.PartitionOffset{Topic: "t", Partition: p, Offset: o}
}

func rec(p int32, o int64, v string) Delivery {
	return Delivery{Topic: "t", Partition: p, Offset: o, Value: v}
}

// groupRec is a group record of the given members at log offset offset.
func groupRec(offset int64, members ...offsets.MemberValue) groupLogRecord {
	return groupLogRecord{Offset: offset, Group: &offsets.GroupValue{Members: members}}
}

// member is a member at epoch owning parts, each granted at that epoch.
func member(id string, epoch int32, parts ...int32) offsets.MemberValue {
	m := offsets.MemberValue{ID: id, Epoch: epoch}
	for _, p := range parts {
		m.Owned = append(m.Owned, offsets.Grant{Topic: "t", Partition: p, Epoch: epoch})
	}
	return m
}

func offsetRec(offset int64, p int32, o int64) groupLogRecord {
	return groupLogRecord{Offset: offset, TP: &api.TopicPartition{Topic: "t", Partition: p}, Commit: &offsets.OffsetValue{Offset: o}}
}

func TestCheckOwnership(t *testing.T) {
	sessions := map[string]time.Duration{"a": time.Second, "b": time.Second}
	logAB := []groupLogRecord{groupRec(0, member("A", 1, 0)), groupRec(1, member("A", 2), member("B", 3, 0))}
	for _, tc := range []struct {
		name  string
		calls []*GroupCall
		log   []groupLogRecord
		want  func(r *GroupReport) int
	}{
		{"handover after the revoking call", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}),
			poll("a", "A", 100, 110, 2, nil), // p0 taken away by this call
			poll("b", "B", 105, 120, 3, []int32{0}),
		}, logAB, func(r *GroupReport) int { return r.Overlaps + r.UnloggedViews }},
		{"two certain owners", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}),
			poll("b", "B", 20, 30, 3, []int32{0}), // a's next call starts later
			poll("a", "A", 100, 110, 2, nil),
		}, logAB, func(r *GroupReport) int { return 1 - r.Overlaps }},
		{"the session ran out first", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}),
			poll("b", "B", 1500, 1510, 3, []int32{0}),
			commit("a", "A", 3000, 3001, false, off(0, 5)),
		}, logAB, func(r *GroupReport) int { return r.Overlaps }},
		{"an answer the log does not hold", []*GroupCall{
			poll("a", "A", 0, 10, 7, []int32{0}),
		}, logAB, func(r *GroupReport) int { return 1 - r.UnloggedViews }},
		{"two owners in a group record", nil,
			[]groupLogRecord{groupRec(0, member("A", 1, 0, 1), member("B", 1, 1))}, func(r *GroupReport) int { return 1 - r.DoubleOwners }},
		{"an epoch that goes back", nil,
			[]groupLogRecord{groupRec(0, member("A", 2, 0)), groupRec(1, member("A", 1, 0))}, func(r *GroupReport) int { return 1 - r.EpochBackwards }},
		{"one epoch, two owned sets", nil,
			[]groupLogRecord{groupRec(0, member("A", 2, 0)), groupRec(1, member("A", 2, 0, 1))}, func(r *GroupReport) int { return 1 - r.EpochReuse }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &GroupReport{Calls: map[string]int{}}
			r.checkOwnership(tc.calls, tc.log, sessions)
			if tc.want(r) != 0 {
				t.Errorf("report: %s", r)
			}
		})
	}
}

func TestCheckCommits(t *testing.T) {
	desc := func(committed ...int64) api.GroupDescription {
		var d api.GroupDescription
		for p, c := range committed {
			d.Partitions = append(d.Partitions, api.GroupPartitionLag{Topic: "t", Partition: int32(p), CommittedOffset: c})
		}
		return d
	}
	for _, tc := range []struct {
		name  string
		calls []*GroupCall
		log   []groupLogRecord
		d     api.GroupDescription
		want  func(r *GroupReport) int
	}{
		{"new owner goes on from the last commit", []*GroupCall{
			commit("a", "A", 0, 10, true, off(0, 5)),
			commit("b", "B", 20, 30, true, off(0, 9)),
		}, []groupLogRecord{offsetRec(0, 0, 5), offsetRec(1, 0, 9)}, desc(9),
			func(r *GroupReport) int { return r.Violations() }},
		{"an acknowledged commit missing from the log", []*GroupCall{
			commit("a", "A", 0, 10, true, off(0, 5)),
		}, nil, desc(-1),
			func(r *GroupReport) int { return 1 - r.CommitsMissing }},
		{"a later owner commits below an acknowledged commit", []*GroupCall{
			commit("a", "A", 0, 10, true, off(0, 9)),
			commit("b", "B", 20, 30, true, off(0, 5)),
		}, []groupLogRecord{offsetRec(0, 0, 9), offsetRec(1, 0, 5)}, desc(5),
			func(r *GroupReport) int { return min(r.AckedBackwards, r.LogBackwards, r.FinalMismatch) - 1 }},
		{"concurrent commits are not ordered", []*GroupCall{
			commit("a", "A", 0, 30, true, off(0, 9)),
			commit("b", "B", 20, 40, true, off(0, 5)),
		}, []groupLogRecord{offsetRec(0, 0, 5), offsetRec(1, 0, 9)}, desc(9),
			func(r *GroupReport) int { return r.AckedBackwards }},
		{"the describe is not the log's last", []*GroupCall{
			commit("a", "A", 0, 10, true, off(0, 5)),
		}, []groupLogRecord{offsetRec(0, 0, 5)}, desc(4),
			func(r *GroupReport) int { return 1 - r.FinalMismatch }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &GroupReport{Calls: map[string]int{}}
			r.checkCommits(tc.calls, "t", tc.log, tc.d, ackedCommits(tc.calls, "t"))
			if tc.want(r) != 0 {
				t.Errorf("report: %s", r)
			}
		})
	}
}

func TestCheckDeliveries(t *testing.T) {
	stored := []Stored{{Partition: 0, Offset: 0, Value: "x"}, {Partition: 0, Offset: 1, Value: "y"}}
	storedAt := map[recKey]string{{0, 0}: "x", {0, 1}: "y"}
	for _, tc := range []struct {
		name  string
		calls []*GroupCall
		want  func(r *GroupReport) int
	}{
		{"once each", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}, rec(0, 0, "x"), rec(0, 1, "y")),
			commit("a", "A", 20, 30, true, off(0, 2)),
		}, func(r *GroupReport) int { return r.Violations() + r.Redelivered }},
		{"again after the holder lost it uncommitted", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}, rec(0, 0, "x"), rec(0, 1, "y")),
			poll("b", "B", 50, 60, 2, []int32{0}, rec(0, 0, "x"), rec(0, 1, "y")),
			commit("b", "B", 70, 80, true, off(0, 2)),
		}, func(r *GroupReport) int {
			return r.Violations() + (2 - r.RedeliveredAllowed) + (2 - r.UncommittedRecords)
		}},
		{"again after a commit covered it", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}, rec(0, 0, "x"), rec(0, 1, "y")),
			commit("a", "A", 20, 30, true, off(0, 2)),
			poll("b", "B", 50, 60, 2, []int32{0}, rec(0, 1, "y")),
		}, func(r *GroupReport) int { return 1 - r.RedeliveredAfterCommit }},
		{"a record nobody was served", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}, rec(0, 0, "x")),
		}, func(r *GroupReport) int { return 1 - r.Missed }},
		{"a value the log does not hold there", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{0}, rec(0, 0, "x"), rec(0, 1, "z")),
		}, func(r *GroupReport) int { return 1 - r.BadDeliveries }},
		{"a partition outside the assignment, with a gap", []*GroupCall{
			poll("a", "A", 0, 10, 1, []int32{1}, rec(0, 0, "x")),
			poll("a", "A", 20, 30, 1, []int32{0}, rec(0, 0, "x"), rec(0, 2, "w")),
		}, func(r *GroupReport) int { return min(r.OutsideAssignment, r.Gaps) - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &GroupReport{Calls: map[string]int{}}
			r.checkDeliveries(tc.calls, stored, storedAt, ackedCommits(tc.calls, "t"))
			if tc.want(r) != 0 {
				t.Errorf("report: %s", r)
			}
		})
	}
}
