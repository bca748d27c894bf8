package faulttest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/offsets"
)

// GroupReport is what GroupHistory.Check found. Counts of records unless
// said otherwise.
type GroupReport struct {
	Calls map[string]int // "poll ok", "commit 503 COORDINATOR_NOT_AVAILABLE", ...

	// The produce side.
	Produced, Acked int
	Lost            int // acknowledged, not stored where acknowledged
	FailedPresent   int // "nothing was written", yet stored
	StoredTwice     int // extra copies of a value
	Phantoms        int // stored, never sent
	Stored          int // records in the partitions at the end
	ReadErrors      int

	// Delivery.
	Delivered int // records in answered polls
	Missed    int // stored, never delivered
	// BadDeliveries were delivered at an offset that holds another value
	// (or nothing); OutsideAssignment in a partition the poll's answer did
	// not assign; Gaps are skipped offsets inside one poll's partition.
	BadDeliveries, OutsideAssignment, Gaps int
	// Redelivered counts deliveries after a record's first. Allowed ones
	// come while an earlier delivery of the record was not yet committed by
	// the member that had it (it lost the partition, or its session, with
	// the record in hand). UncommittedRecords counts deliveries their
	// member never committed: what was in hand when partitions moved or
	// members stopped. RedeliveredAfterCommit came after an acknowledged
	// commit covered the record; Unexplained after every earlier delivery
	// had been committed (a commit the history does not show covering it).
	Redelivered, RedeliveredAllowed, UncommittedRecords int
	RedeliveredAfterCommit, RedeliveredUnexplained      int

	// Ownership.
	GroupRecords int // the group's records in __consumer_offsets
	// DoubleOwners: group records in which a partition has two owners.
	// EpochReuse: one member epoch with two different owned sets.
	// EpochBackwards: a member's epoch lower than in an earlier record.
	DoubleOwners, EpochReuse, EpochBackwards int
	// UnloggedViews: answers (member id, epoch, assignment) that no group
	// record holds: a member was told a state the log does not have.
	UnloggedViews int
	// Overlaps: two members both certain to own a partition at the same
	// moment. Member m is certain to own p from the end of an answer that
	// assigned it p to the start of m's next call (which may take it away),
	// capped at that answer's start plus the session timeout.
	Overlaps       int
	OwnedIntervals int

	// Commits.
	Commits, CommitsAcked int // calls
	// CommitsMissing: partitions of acknowledged commits whose offset no
	// offset record of the log holds. LogBackwards: offset records of a
	// partition that go back in log order. AckedBackwards: an acknowledged
	// commit lower than one acknowledged before it was sent. FinalMismatch:
	// a describe's committed offset other than the log's last for the
	// partition, or lower than an acknowledged commit.
	CommitsMissing, LogBackwards, AckedBackwards, FinalMismatch int
	OffsetRecords                                               int

	Problems []string
}

func (r *GroupReport) problem(format string, args ...any) {
	if len(r.Problems) < 30 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Violations counts what must never happen.
func (r *GroupReport) Violations() int {
	return r.Lost + r.FailedPresent + r.StoredTwice + r.Phantoms + r.ReadErrors +
		r.Missed + r.BadDeliveries + r.OutsideAssignment + r.Gaps + r.RedeliveredAfterCommit + r.RedeliveredUnexplained +
		r.DoubleOwners + r.EpochReuse + r.EpochBackwards + r.UnloggedViews + r.Overlaps +
		r.CommitsMissing + r.LogBackwards + r.AckedBackwards + r.FinalMismatch
}

func (r *GroupReport) String() string {
	var calls []string
	for k, n := range r.Calls {
		calls = append(calls, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(calls)
	s := fmt.Sprintf("calls: %s\n"+
		"produce: records %d, acked %d, lost %d, failed-then-present %d, stored twice %d, phantoms %d, stored %d, read errors %d\n"+
		"delivery: delivered %d, missed %d, bad %d, outside the assignment %d, gaps %d; redelivered %d (allowed %d, bound %d; after a commit %d, unexplained %d)\n"+
		"ownership: group records %d, double owners %d, epoch reused %d, epoch backwards %d, unlogged views %d; certain intervals %d, overlaps %d\n"+
		"commits: %d (acked %d), offset records %d; acked missing from the log %d, log backwards %d, acked backwards %d, final mismatch %d",
		strings.Join(calls, " "),
		r.Produced, r.Acked, r.Lost, r.FailedPresent, r.StoredTwice, r.Phantoms, r.Stored, r.ReadErrors,
		r.Delivered, r.Missed, r.BadDeliveries, r.OutsideAssignment, r.Gaps, r.Redelivered, r.RedeliveredAllowed, r.UncommittedRecords, r.RedeliveredAfterCommit, r.RedeliveredUnexplained,
		r.GroupRecords, r.DoubleOwners, r.EpochReuse, r.EpochBackwards, r.UnloggedViews, r.OwnedIntervals, r.Overlaps,
		r.Commits, r.CommitsAcked, r.OffsetRecords, r.CommitsMissing, r.LogBackwards, r.AckedBackwards, r.FinalMismatch)
	for _, p := range r.Problems {
		s += "\n  VIOLATION: " + p
	}
	return s
}

type recKey struct {
	p   int32
	off int64
}

// Check reads the topic's partitions and the group's records in
// __consumer_offsets to their high watermarks, describes the group, and
// holds the history (and load's produces) against them. Call it once the
// members and the load stopped and the group caught up (WaitCaughtUp).
func (h *GroupHistory) Check(load *KeyedLoad, topic string, partitions int) *GroupReport {
	h.c.T.Helper()
	r := &GroupReport{Calls: map[string]int{}}
	calls := h.Calls()
	for _, gc := range calls {
		k := gc.Kind + " ok"
		if !gc.OK {
			k = fmt.Sprintf("%s %d %s", gc.Kind, gc.Status, gc.Code)
		}
		r.Calls[k]++
	}
	storedAt := map[recKey]string{}
	var all []Stored
	for p := range int32(partitions) {
		recs, _, err := h.c.ReadPartition(topic, p)
		if err != nil {
			r.ReadErrors++
			r.problem("%v", err)
		}
		for _, s := range recs {
			storedAt[recKey{s.Partition, s.Offset}] = s.Value
		}
		all = append(all, recs...)
	}
	r.Stored = len(all)
	r.checkProduce(load.Ops(), all)
	log, err := h.readGroupLog()
	if err != nil {
		r.ReadErrors++
		r.problem("reading the group's records: %v", err)
	}
	d, err := h.Describe()
	if err != nil {
		r.ReadErrors++
		r.problem("describing the group: %v", err)
	}
	acked := ackedCommits(calls, topic)
	r.checkDeliveries(calls, all, storedAt, acked)
	h.mu.Lock()
	sessions := h.sessions
	h.mu.Unlock()
	r.checkOwnership(calls, log, sessions)
	r.checkCommits(calls, topic, log, d, acked)
	return r
}

// checkProduce: every acknowledged value is stored once, where it was
// acknowledged; nothing whose request failed before writing is stored;
// nothing is stored that was never sent.
func (r *GroupReport) checkProduce(ops []*KeyedOp, all []Stored) {
	where := map[string][]Stored{}
	for _, s := range all {
		where[s.Value] = append(where[s.Value], s)
	}
	sent := map[string]bool{}
	for _, op := range ops {
		for i, v := range op.Values {
			r.Produced++
			sent[v] = true
			got := where[v]
			switch op.Outcome {
			case OK:
				r.Acked++
				if len(got) == 0 || got[0].Partition != op.Partition || got[0].Offset != op.Offsets[i] {
					r.Lost++
					r.problem("acknowledged %s (key %s) at p%d/%d is stored at %v", v, op.Key, op.Partition, op.Offsets[i], got)
				}
			case Failed:
				if len(got) > 0 {
					r.FailedPresent++
					r.problem("%s is stored at p%d/%d though its request failed with %s", v, got[0].Partition, got[0].Offset, op.Code)
				}
			}
		}
	}
	for v, got := range where {
		if len(got) > 1 {
			r.StoredTwice += len(got) - 1
			r.problem("%s is stored %d times: %v", v, len(got), got)
		}
		if !sent[v] {
			r.Phantoms++
			r.problem("%s is stored at p%d/%d but was never sent", v, got[0].Partition, got[0].Offset)
		}
	}
}

// commitIndex answers, per partition, the highest offset of the
// acknowledged commits that ended before a given time.
type commitIndex map[int32][]ackedCommit

type ackedCommit struct {
	call   *GroupCall
	offset int64
	maxSo  int64 // the highest offset of this and the earlier-ending commits
}

// ackedCommits indexes the acknowledged commits of topic by partition, in
// the order they ended.
func ackedCommits(calls []*GroupCall, topic string) commitIndex {
	idx := commitIndex{}
	for _, gc := range calls {
		if gc.Kind != CallCommit || !gc.OK {
			continue
		}
		for _, o := range gc.Offsets {
			if o.Topic == topic {
				idx[o.Partition] = append(idx[o.Partition], ackedCommit{call: gc, offset: o.Offset})
			}
		}
	}
	for _, l := range idx {
		sort.SliceStable(l, func(i, j int) bool { return l[i].call.End.Before(l[j].call.End) })
		for i := range l {
			l[i].maxSo = l[i].offset
			if i > 0 {
				l[i].maxSo = max(l[i].maxSo, l[i-1].maxSo)
			}
		}
	}
	return idx
}

// before returns the highest offset acknowledged for p by commits that
// ended before t, and the commit that acknowledged it; -1 when none did.
func (idx commitIndex) before(p int32, t time.Time) (int64, *GroupCall) {
	l := idx[p]
	n := sort.Search(len(l), func(i int) bool { return !l[i].call.End.Before(t) })
	if n == 0 {
		return -1, nil
	}
	best := l[n-1].maxSo
	for i := n - 1; i >= 0; i-- {
		if l[i].offset == best {
			return best, l[i].call
		}
	}
	return best, nil
}

type delivery struct {
	call *GroupCall
	d    Delivery
	// committed is when the member that was served d acknowledged a commit
	// past it (zero: never).
	committed time.Time
}

// committedAt returns the end of the first acknowledged commit of
// gc's member, made after gc, past offset off of partition p; zero if none.
// commits are the member id's acknowledged commits, one after another.
func committedAt(gc *GroupCall, p int32, off int64, commits []*GroupCall) time.Time {
	first := sort.Search(len(commits), func(i int) bool { return !commits[i].Start.Before(gc.End) })
	for _, c := range commits[first:] {
		for _, o := range c.Offsets {
			if o.Topic == gc.Records[0].Topic && o.Partition == p && o.Offset > off {
				return c.End
			}
		}
	}
	return time.Time{}
}

// checkDeliveries: every stored record was delivered; each delivery is what
// the log holds at its offset, in the poll's assignment, without gaps; a
// record is delivered again only while an earlier delivery of it was not
// yet committed by the member that had it, and never once any acknowledged
// commit covered it.
func (r *GroupReport) checkDeliveries(calls []*GroupCall, all []Stored, storedAt map[recKey]string, acked commitIndex) {
	commits := map[string][]*GroupCall{} // acknowledged, by member id
	for _, gc := range calls {
		if gc.Kind == CallCommit && gc.OK {
			commits[gc.MemberID] = append(commits[gc.MemberID], gc)
		}
	}
	byRec := map[recKey][]delivery{}
	for _, gc := range calls {
		if gc.Kind != CallPoll || !gc.OK {
			continue
		}
		next := map[int32]int64{}
		for _, d := range gc.Records {
			r.Delivered++
			k := recKey{d.Partition, d.Offset}
			dl := delivery{call: gc, d: d, committed: committedAt(gc, d.Partition, d.Offset, commits[gc.MemberID])}
			if dl.committed.IsZero() {
				r.UncommittedRecords++
			}
			byRec[k] = append(byRec[k], dl)
			if v, ok := storedAt[k]; !ok || v != d.Value {
				r.BadDeliveries++
				r.problem("%s was served %q at p%d/%d, which holds %q", gc.Member, d.Value, d.Partition, d.Offset, v)
			}
			if !slices.Contains(gc.Assignment, api.TopicPartition{Topic: d.Topic, Partition: d.Partition}) {
				r.OutsideAssignment++
				r.problem("%s was served p%d/%d outside its assignment: %s", gc.Member, d.Partition, d.Offset, gc)
			}
			if n, ok := next[d.Partition]; ok && d.Offset != n {
				r.Gaps++
				r.problem("a poll of %s skips from p%d/%d to %d: %s", gc.Member, d.Partition, n-1, d.Offset, gc)
			}
			next[d.Partition] = d.Offset + 1
		}
	}
	for _, s := range all {
		ds := byRec[recKey{s.Partition, s.Offset}]
		if len(ds) == 0 {
			r.Missed++
			r.problem("p%d/%d (%s) was never delivered", s.Partition, s.Offset, s.Value)
			continue
		}
		for i := 1; i < len(ds); i++ {
			r.Redelivered++
			again := ds[i]
			if off, by := acked.before(s.Partition, again.call.Start); off > s.Offset {
				r.RedeliveredAfterCommit++
				r.problem("p%d/%d was delivered to %s (%s) after %s committed past it: %s", s.Partition, s.Offset, again.call.Member, again.call, by.Member, by)
				continue
			}
			explained := false
			for _, earlier := range ds[:i] {
				explained = explained || earlier.committed.IsZero() || !earlier.committed.Before(again.call.Start)
			}
			if explained {
				r.RedeliveredAllowed++
			} else {
				r.RedeliveredUnexplained++
				r.problem("p%d/%d was delivered again to %s though every earlier delivery was committed before: %s; first %s", s.Partition, s.Offset, again.call.Member, again.call, ds[0].call)
			}
		}
	}
}

// groupLogRecord is one record of the group in __consumer_offsets.
type groupLogRecord struct {
	Offset int64
	Group  *offsets.GroupValue  // a group record; nil for an offset record or a tombstone
	TP     *api.TopicPartition  // an offset record's partition
	Commit *offsets.OffsetValue // an offset record's value; nil for a tombstone
}

// readGroupLog reads the group's __consumer_offsets partition from its
// start to its HW through the gateway and keeps the group's records.
func (h *GroupHistory) readGroupLog() ([]groupLogRecord, error) {
	t, err := h.c.Topic(api.OffsetsTopic)
	if err != nil {
		return nil, err
	}
	gp := api.GroupPartition(h.Group, len(t.Partitions))
	var out []groupLogRecord
	next := t.Partitions[gp].LogStartOffset
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%s-%d: reading to the HW took over 60 s (at %d)", api.OffsetsTopic, gp, next)
		}
		var fr api.FetchResponse
		u := fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%d&max_records=5000", h.c.URL, api.OffsetsTopic, gp, next)
		if err := h.c.getJSON(u, &fr, 15*time.Second); err != nil {
			h.c.Logf("read %s-%d at %d: %v (retrying)", api.OffsetsTopic, gp, next, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for _, rec := range fr.Records {
			if lr, ok, err := decodeGroupLogRecord(h.Group, rec); err != nil {
				return out, fmt.Errorf("%s-%d/%d: %w", api.OffsetsTopic, gp, rec.Offset, err)
			} else if ok {
				out = append(out, lr)
			}
		}
		next = max(next, fr.NextOffset)
		if next >= fr.HighWatermark {
			return out, nil
		}
	}
}

func decodeGroupLogRecord(group string, rec api.FetchedRecord) (groupLogRecord, bool, error) {
	lr := groupLogRecord{Offset: rec.Offset}
	if rec.Key == nil {
		return lr, false, nil
	}
	var k struct {
		V         int     `json:"v"`
		Group     string  `json:"group"`
		Topic     *string `json:"topic"`
		Partition int32   `json:"partition"`
	}
	if err := json.Unmarshal([]byte(*rec.Key), &k); err != nil || k.Group != group {
		return lr, false, nil
	}
	if k.Topic != nil {
		lr.TP = &api.TopicPartition{Topic: *k.Topic, Partition: k.Partition}
		if len(rec.Value) > 0 {
			lr.Commit = &offsets.OffsetValue{}
			if err := json.Unmarshal(rec.Value, lr.Commit); err != nil {
				return lr, false, fmt.Errorf("bad offset record: %w", err)
			}
		}
		return lr, true, nil
	}
	if len(rec.Value) > 0 {
		lr.Group = &offsets.GroupValue{}
		if err := json.Unmarshal(rec.Value, lr.Group); err != nil {
			return lr, false, fmt.Errorf("bad group record: %w", err)
		}
	}
	return lr, true, nil
}

type memberEpoch struct {
	id    string
	epoch int32
}

type owned struct {
	id         string
	from, till time.Time
	call       *GroupCall
}

// checkOwnership: in every group record each partition has at most one
// owner and member epochs only grow, each with one owned set; every answer
// a member had is a state the log holds; and no two members were ever
// certain to own a partition at the same moment.
func (r *GroupReport) checkOwnership(calls []*GroupCall, log []groupLogRecord, sessions map[string]time.Duration) {
	views := map[memberEpoch]string{}
	lastEpoch := map[string]int32{}
	for _, lr := range log {
		if lr.Group == nil {
			continue
		}
		r.GroupRecords++
		owner := map[api.TopicPartition]string{}
		for _, m := range lr.Group.Members {
			var tps []api.TopicPartition
			for _, g := range m.Owned {
				tp := api.TopicPartition{Topic: g.Topic, Partition: g.Partition}
				tps = append(tps, tp)
				if o, ok := owner[tp]; ok {
					r.DoubleOwners++
					r.problem("group record at offset %d: p%d is owned by %s and %s", lr.Offset, tp.Partition, short(o), short(m.ID))
				}
				owner[tp] = m.ID
				if g.Epoch > m.Epoch {
					r.EpochBackwards++
					r.problem("group record at offset %d: %s holds p%d at grant epoch %d above its member epoch %d", lr.Offset, short(m.ID), g.Partition, g.Epoch, m.Epoch)
				}
			}
			set := tpSet(tps)
			k := memberEpoch{m.ID, m.Epoch}
			if prev, ok := views[k]; ok && prev != set {
				r.EpochReuse++
				r.problem("group record at offset %d: %s at epoch %d owns %s, earlier %s at the same epoch", lr.Offset, short(m.ID), m.Epoch, set, prev)
			}
			views[k] = set
			if e, ok := lastEpoch[m.ID]; ok && m.Epoch < e {
				r.EpochBackwards++
				r.problem("group record at offset %d: %s at epoch %d after %d", lr.Offset, short(m.ID), m.Epoch, e)
			}
			lastEpoch[m.ID] = m.Epoch
		}
	}
	byPart := map[api.TopicPartition][]owned{}
	nextCall := map[*GroupCall]*GroupCall{}
	prev := map[string]*GroupCall{}
	for _, gc := range calls {
		if p := prev[gc.Member]; p != nil {
			nextCall[p] = gc
		}
		prev[gc.Member] = gc
	}
	for _, gc := range calls {
		if !gc.OK || (gc.Kind != CallJoin && gc.Kind != CallPoll) {
			continue
		}
		if set, ok := views[memberEpoch{gc.MemberID, gc.Epoch}]; !ok || set != tpSet(gc.Assignment) {
			r.UnloggedViews++
			r.problem("%s was told epoch %d %s, which no group record holds (the log has %q at that epoch)", gc.Member, gc.Epoch, tpSet(gc.Assignment), set)
		}
		// Sessions end after at least the timeout since the coordinator
		// last heard from the member, which was after gc started; the
		// expiry pass runs every 250 ms, so 100 ms of slack is plenty.
		till := gc.Start.Add(sessions[gc.Member] - 100*time.Millisecond)
		if n := nextCall[gc]; n != nil && n.Start.Before(till) {
			till = n.Start
		}
		if !till.After(gc.End) {
			continue
		}
		for _, tp := range gc.Assignment {
			byPart[tp] = append(byPart[tp], owned{id: gc.MemberID, from: gc.End, till: till, call: gc})
			r.OwnedIntervals++
		}
	}
	for tp, ivs := range byPart {
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].from.Before(ivs[j].from) })
		var reach owned // the interval that reaches furthest so far
		for _, iv := range ivs {
			if reach.id != "" && reach.id != iv.id && iv.from.Before(reach.till) {
				r.Overlaps++
				r.problem("p%d: %s was certain to own it until %s, and %s from %s: %s / %s", tp.Partition, reach.call.Member, reach.till.Format("15:04:05.000"), iv.call.Member, iv.from.Format("15:04:05.000"), reach.call, iv.call)
			}
			if reach.id == "" || iv.till.After(reach.till) {
				reach = iv
			}
		}
	}
}

func tpSet(tps []api.TopicPartition) string {
	s := slices.Clone(tps)
	sortTPs(s)
	return tpsString(s)
}

func sortTPs(tps []api.TopicPartition) {
	slices.SortFunc(tps, func(a, b api.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
}

// checkCommits: every acknowledged commit is in the log; a partition's
// offset records never go back in log order (a new owner starts at the
// committed offset, and an old owner's late commit is fenced); no
// acknowledged commit is lower than one acknowledged before it was sent;
// and the describe's committed offsets are the log's last ones, so at
// least every acknowledged commit.
func (r *GroupReport) checkCommits(calls []*GroupCall, topic string, log []groupLogRecord, d api.GroupDescription, acked commitIndex) {
	logged := map[int32]map[int64]bool{}
	lastLogged := map[int32]int64{}
	for _, lr := range log {
		if lr.TP == nil || lr.TP.Topic != topic {
			continue
		}
		p := lr.TP.Partition
		if lr.Commit == nil {
			delete(lastLogged, p)
			continue
		}
		r.OffsetRecords++
		if last, ok := lastLogged[p]; ok && lr.Commit.Offset < last {
			r.LogBackwards++
			r.problem("the committed offset of p%d goes back from %d to %d at log offset %d", p, last, lr.Commit.Offset, lr.Offset)
		}
		lastLogged[p] = lr.Commit.Offset
		if logged[p] == nil {
			logged[p] = map[int64]bool{}
		}
		logged[p][lr.Commit.Offset] = true
	}
	for _, gc := range calls {
		if gc.Kind != CallCommit {
			continue
		}
		r.Commits++
		if !gc.OK {
			continue
		}
		r.CommitsAcked++
		for _, o := range gc.Offsets {
			if o.Topic != topic {
				continue
			}
			if !logged[o.Partition][o.Offset] {
				r.CommitsMissing++
				r.problem("acknowledged commit p%d=%d is not in the log: %s", o.Partition, o.Offset, gc)
			}
			if before, by := acked.before(o.Partition, gc.Start); o.Offset < before {
				r.AckedBackwards++
				r.problem("acknowledged commit p%d=%d by %s comes after %s acknowledged %d: %s / %s", o.Partition, o.Offset, gc.Member, by.Member, before, by, gc)
			}
		}
	}
	for _, row := range d.Partitions {
		if row.Topic != topic {
			continue
		}
		last, ok := lastLogged[row.Partition]
		if !ok {
			last = -1
		}
		highest := int64(-1)
		if l := acked[row.Partition]; len(l) > 0 {
			highest = l[len(l)-1].maxSo
		}
		if row.CommittedOffset != last || row.CommittedOffset < highest {
			r.FinalMismatch++
			r.problem("p%d: the group describes committed offset %d; the log's last is %d, the highest acknowledged %d", row.Partition, row.CommittedOffset, last, highest)
		}
	}
}
