package faulttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/tcpproxy"
)

// Consumer groups under faults. Every scenario runs members of one group
// over a six-partition topic fed by keyed acks=all producers, records every
// call, and ends with GroupHistory.Check: every acknowledged record stored
// and delivered, redeliveries only of records a member held uncommitted,
// at most one owner per partition (in the coordinator's log and as the
// members saw it), and no acknowledged commit lost or gone backwards.

const groupPartitions = 6

// startGroupCluster starts a cluster with three gateways and the topic.
func startGroupCluster(t *testing.T) (*Cluster, []string) {
	t.Helper()
	c := Start(t, Options{OffsetsTopicPartitions: 12})
	gws := []string{c.URL, c.AddGateway(), c.AddGateway()}
	c.CreateTopic(topic, groupPartitions, 3, 2)
	return c, gws
}

// groupName draws a group id from the seed, so a replay lands the group on
// the same __consumer_offsets partition.
func groupName(c *Cluster) string { return fmt.Sprintf("g%06d", c.Rand.IntN(1_000_000)) }

func memberIDs(ms ...*GroupMember) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID())
	}
	return ids
}

// waitJoined waits until every member has a member id.
func waitJoined(c *Cluster, ms ...*GroupMember) {
	c.T.Helper()
	c.WaitFor("the members to join", 45*time.Second, func() (bool, string) {
		ids := memberIDs(ms...)
		return !slices.Contains(ids, ""), fmt.Sprint(ids)
	})
}

// waitDelivered waits until member ("" any) was served n more records than
// it had been when called.
func waitDelivered(c *Cluster, h *GroupHistory, member string, n int, timeout time.Duration) {
	c.T.Helper()
	base := h.Delivered(member)
	c.WaitFor(fmt.Sprintf("%d more records delivered to %q", n, member), timeout, func() (bool, string) {
		got := h.Delivered(member) - base
		return got >= n, fmt.Sprintf("%d", got)
	})
}

// waitCommits waits until n more commits were acknowledged.
func waitCommits(c *Cluster, h *GroupHistory, n int, timeout time.Duration) {
	c.T.Helper()
	base := h.Count("", CallCommit, true)
	c.WaitFor(fmt.Sprintf("%d more acknowledged commits", n), timeout, func() (bool, string) {
		got := h.Count("", CallCommit, true) - base
		return got >= n, fmt.Sprintf("%d", got)
	})
}

// finishGroup stops the load, lets the members read and commit everything
// (every partition's committed offset at its HW), stops them (each commits
// what it holds, then leaves), and checks the whole history.
func finishGroup(t *testing.T, c *Cluster, h *GroupHistory, load *KeyedLoad, ms ...*GroupMember) *GroupReport {
	t.Helper()
	load.Stop()
	c.WaitFullISR(topic, 45*time.Second, true)
	d := h.WaitCaughtUp(topic, groupPartitions, 60*time.Second)
	c.Logf("caught up: %s", DescribeGroup(d))
	for _, m := range ms {
		m.Leave()
	}
	r := h.Check(load, topic, groupPartitions)
	t.Logf("group history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations in the group history", r.Violations())
	}
	if r.Acked == 0 || r.Delivered == 0 || r.CommitsAcked == 0 {
		t.Errorf("nothing happened: %d records acknowledged, %d delivered, %d commits acknowledged", r.Acked, r.Delivered, r.CommitsAcked)
	}
	return r
}

// TestGroupRebalanceAcrossGateways (consumer groups, scenario 1): three
// members, each on a gateway of its own, share the topic while keyed
// producers write acks=all; a fourth member joins and one of the first
// three leaves (DELETE, after committing what it polled) mid-run. Each
// member loops poll → process → commit → poll. Every acknowledged record is
// delivered, none twice (no member lost a partition with records in hand),
// and no partition ever had two owners.
func TestGroupRebalanceAcrossGateways(t *testing.T) {
	c, gws := startGroupCluster(t)
	group := groupName(c)
	h := NewGroupHistory(c, group)
	load := c.StartKeyedLoad(topic, KeyedOptions{URLs: gws, Producers: 2})
	const session = 6 * time.Second
	member := func(i int, gw string) *GroupMember {
		return h.StartMember(MemberOptions{Name: fmt.Sprintf("m%d", i), URL: gw, Topics: []string{topic}, SessionTimeout: session, MaxRecords: 20})
	}
	ms := []*GroupMember{member(1, gws[0]), member(2, gws[1]), member(3, gws[2])}
	waitJoined(c, ms...)
	h.WaitMembers(memberIDs(ms...), 30*time.Second)
	waitDelivered(c, h, "", 300, 30*time.Second)

	m4 := member(4, gws[c.Rand.IntN(len(gws))])
	waitJoined(c, m4)
	d := h.WaitMembers(memberIDs(append(ms, m4)...), 30*time.Second)
	rebalanceJoin := time.Since(firstCall(h, "m4", CallJoin).Start)
	c.Logf("m4 joined; stable after %v: %s", rebalanceJoin.Round(time.Millisecond), DescribeGroup(d))
	waitDelivered(c, h, "m4", 50, 30*time.Second)

	i := c.Rand.IntN(len(ms))
	leaver := ms[i]
	stay := append(slices.Clone(ms[:i]), ms[i+1:]...)
	stay = append(stay, m4)
	left := time.Now()
	leaver.Leave()
	d = h.WaitMembers(memberIDs(stay...), 30*time.Second)
	rebalanceLeave := time.Since(left)
	c.Logf("%s left; stable after %v: %s", leaver.Name(), rebalanceLeave.Round(time.Millisecond), DescribeGroup(d))
	waitDelivered(c, h, "", 300, 30*time.Second)

	r := finishGroup(t, c, h, load, stay...)
	if r.Redelivered > 0 {
		t.Errorf("%d records were delivered twice in a run without faults (bound %d: records of polls whose commit was not acknowledged)", r.Redelivered, r.UncommittedRecords)
	}
	t.Logf("figures: seed %d, group %s; records acked %d, delivered %d, redelivered %d (uncommitted when lost: bound %d); commits %d (acked %d); group records %d, certain ownership intervals %d, overlaps %d; stable again %v after the join, %v after %s left",
		c.Seed, group, r.Acked, r.Delivered, r.Redelivered, r.UncommittedRecords, r.Commits, r.CommitsAcked, r.GroupRecords, r.OwnedIntervals, r.Overlaps,
		rebalanceJoin.Round(time.Millisecond), rebalanceLeave.Round(time.Millisecond), leaver.Name())
}

// TestGroupSessionLapse (scenario 2): a member is held between its poll and
// its commit (what SIGSTOP does to a consumer process) past its session
// timeout. The group forgets it and its partitions go to the others, which
// read on from the committed offsets. With the others held between two
// iterations, the held member resumes and commits the cursor it holds:
// the commit is refused (UNKNOWN_MEMBER_ID, or FENCED_MEMBER_EPOCH) and
// the committed offsets are the same before and after. It then joins again.
// The records it held uncommitted are delivered to another member.
func TestGroupSessionLapse(t *testing.T) {
	c, gws := startGroupCluster(t)
	group := groupName(c)
	h := NewGroupHistory(c, group)
	load := c.StartKeyedLoad(topic, KeyedOptions{URLs: gws, Producers: 2})
	const session = 4 * time.Second
	var ms []*GroupMember
	for i := range 3 {
		ms = append(ms, h.StartMember(MemberOptions{Name: fmt.Sprintf("m%d", i+1), URL: gws[i], Topics: []string{topic}, SessionTimeout: session, MaxRecords: 20}))
	}
	waitJoined(c, ms...)
	h.WaitMembers(memberIDs(ms...), 30*time.Second)
	waitDelivered(c, h, "", 200, 30*time.Second)

	i := c.Rand.IntN(len(ms))
	x := ms[i]
	others := append(slices.Clone(ms[:i]), ms[i+1:]...)
	// Let records pile up in its partitions first, so that it holds a full
	// poll when it stops (well within its session).
	gather := x.PauseBefore(CallPoll)
	select {
	case <-gather.Paused:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not finish an iteration within 30 s", x.Name())
	}
	acked := load.Acked()
	c.WaitFor("100 more acknowledged records", 10*time.Second, func() (bool, string) {
		return load.Acked()-acked >= 100, fmt.Sprint(load.Acked() - acked)
	})
	held := x.PauseBefore(CallCommit)
	gather.Resume()
	select {
	case <-held.Paused:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not reach a commit within 30 s", x.Name())
	}
	xid := x.ID()
	var lastPoll *GroupCall
	for _, gc := range h.Calls() {
		if gc.Member == x.Name() && gc.Kind == CallPoll && gc.OK {
			lastPoll = gc
		}
	}
	c.Logf("FAULT: %s (%s) held before committing %s, %d records in hand (%s)", x.Name(), short(xid), offsetsString(cursorOffsets(lastPoll.Next)), len(lastPoll.Records), lastPoll)

	d := h.WaitMembers(memberIDs(others...), 3*session)
	lapse := time.Since(lastPoll.Start)
	c.Logf("%s forgotten %v after its last poll began: %s", x.Name(), lapse.Round(time.Millisecond), DescribeGroup(d))
	if lapse < session {
		t.Errorf("%s was dropped %v after its last call began, before its %v session ran out", x.Name(), lapse, session)
	}
	waitCommits(c, h, 4, 30*time.Second)

	// Quiet the others between two iterations (nothing uncommitted in
	// hand), let the held member take exactly one step, its commit, and
	// compare the group before and after it.
	var quiet []*PausePoint
	for _, m := range others {
		quiet = append(quiet, m.PauseBefore(CallPoll))
	}
	for j, pp := range quiet {
		select {
		case <-pp.Paused:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not finish its iteration within 30 s", others[j].Name())
		}
	}
	before, err := h.Describe()
	if err != nil {
		t.Fatal(err)
	}
	step := x.PauseBefore(CallPoll)
	held.Resume()
	select {
	case <-step.Paused:
	case <-time.After(45 * time.Second):
		t.Fatalf("%s's commit did not end within 45 s", x.Name())
	}
	after, err := h.Describe()
	if err != nil {
		t.Fatal(err)
	}
	var commit *GroupCall
	for _, gc := range h.Calls() {
		if gc.Member == x.Name() && gc.Kind == CallCommit {
			commit = gc
		}
	}
	for _, pp := range append(quiet, step) {
		pp.Resume()
	}
	c.Logf("the resumed member's commit: %s", commit)
	for _, o := range commit.Offsets {
		if b := committed(before)[o.Partition]; o.Offset < b {
			c.Logf("accepted, it would have moved p%d back from %d to %d", o.Partition, b, o.Offset)
		}
	}
	c.Logf("before: %s", DescribeGroup(before))
	c.Logf("after:  %s", DescribeGroup(after))
	if commit == nil || commit.MemberID != xid || commit.Start.Before(lastPoll.End.Add(session)) {
		t.Fatalf("the held member's commit is not the one after its lapse: %v", commit)
	}
	if commit.OK || !(commit.Status == http.StatusNotFound && commit.Code == api.CodeUnknownMemberID ||
		commit.Status == http.StatusConflict && commit.Code == api.CodeFencedMemberEpoch) {
		t.Errorf("a commit after the session lapsed was answered %d %s, want 404 %s or 409 %s", commit.Status, commit.Code, api.CodeUnknownMemberID, api.CodeFencedMemberEpoch)
	}
	if b, a := committed(before), committed(after); !maps.Equal(b, a) {
		t.Errorf("the refused commit changed the committed offsets: before %v, after %v", b, a)
	}
	if before.GroupEpoch != after.GroupEpoch {
		t.Errorf("the refused commit changed the group epoch: %d → %d", before.GroupEpoch, after.GroupEpoch)
	}

	c.WaitFor(x.Name()+" to join again", 30*time.Second, func() (bool, string) {
		id := x.ID()
		return id != xid && id != "", id
	})
	h.WaitMembers(memberIDs(ms...), 30*time.Second)
	waitDelivered(c, h, x.Name(), 20, 30*time.Second)

	r := finishGroup(t, c, h, load, ms...)
	// The records the lapsed member held were never committed by it: each
	// must reach another member.
	again := 0
	for _, rec := range lastPoll.Records {
		for _, gc := range h.Calls() {
			if gc.Kind == CallPoll && gc.OK && gc.MemberID != xid && gc.Start.After(lastPoll.Start) && slices.ContainsFunc(gc.Records, func(d Delivery) bool {
				return d.Partition == rec.Partition && d.Offset == rec.Offset
			}) {
				again++
				break
			}
		}
	}
	if again != len(lastPoll.Records) {
		t.Errorf("of the %d records %s held uncommitted when its session lapsed, %d were delivered to another member", len(lastPoll.Records), x.Name(), again)
	}
	t.Logf("figures: seed %d, group %s; %s held %d records uncommitted, forgotten %v after its last poll began (session %v), all %d redelivered; its late commit: %d %s; records acked %d, delivered %d, redelivered %d (bound %d); commits %d (acked %d)",
		c.Seed, group, x.Name(), len(lastPoll.Records), lapse.Round(time.Millisecond), session, again, commit.Status, commit.Code,
		r.Acked, r.Delivered, r.Redelivered, r.UncommittedRecords, r.Commits, r.CommitsAcked)
}

// firstCall returns member's first call of kind.
func firstCall(h *GroupHistory, member, kind string) *GroupCall {
	for _, gc := range h.Calls() {
		if gc.Member == member && gc.Kind == kind {
			return gc
		}
	}
	return nil
}

func cursorOffsets(cursor string) []api.PartitionOffset {
	cur, err := api.DecodeCursor(cursor)
	if err != nil {
		return nil
	}
	sortOffsets(cur.Positions)
	return cur.Positions
}

func committed(d api.GroupDescription) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range d.Partitions {
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

// TestGroupCoordinatorKill (scenario 3): four members commit as fast as
// they can (a commit after every poll, records or not; polls do not wait)
// while the broker that leads the group's __consumer_offsets partition is
// SIGKILLed with commits in flight, then restarted; twice, the second time
// whichever broker coordinates by then. No acknowledged commit may be lost
// or go backwards (see checkCommits), every state a member was told must be
// in the log, and every member's polls must succeed again within two
// session timeouts of each kill.
func TestGroupCoordinatorKill(t *testing.T) {
	c, gws := startGroupCluster(t)
	group := groupName(c)
	h := NewGroupHistory(c, group)
	load := c.StartKeyedLoad(topic, KeyedOptions{URLs: gws, Producers: 2})
	const session = 6 * time.Second
	var ms []*GroupMember
	for i := range 4 {
		ms = append(ms, h.StartMember(MemberOptions{Name: fmt.Sprintf("m%d", i+1), URL: gws[i%len(gws)], Topics: []string{topic}, SessionTimeout: session,
			MaxRecords: 10, MaxWait: time.Millisecond, CommitEmpty: true}))
	}
	waitJoined(c, ms...)
	h.WaitMembers(memberIDs(ms...), 30*time.Second)
	waitCommits(c, h, 300, 30*time.Second)

	ot, err := c.Topic(api.OffsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	gp := api.GroupPartition(group, len(ot.Partitions))
	var rounds []string
	for round := 1; round <= 2; round++ {
		before := c.WaitLeader(api.OffsetsTopic, gp, 10*time.Second, nil)
		victim := before.Leader
		c.Logf("round %d: group %s is coordinated by b%d, leader of %s-%d at epoch %d (isr %v)", round, group, victim, api.OffsetsTopic, gp, before.LeaderEpoch, before.ISR)
		h.WaitInFlight(CallCommit, 2, 10*time.Second)
		// Calls sent before the signal and answered after the exit were
		// caught by the kill; calls sent after the exit cannot have been
		// served by the victim.
		signalled := time.Now()
		c.Kill(victim)
		killed := time.Now()
		after := c.WaitLeader(api.OffsetsTopic, gp, 30*time.Second, func(pi api.PartitionInfo) bool {
			return pi.Leader != victim && pi.LeaderEpoch > before.LeaderEpoch
		})
		failover := time.Since(killed)
		c.Logf("round %d: %s-%d: b%d leads at epoch %d, %v after the kill", round, api.OffsetsTopic, gp, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond))
		var back []time.Duration
		c.WaitFor("every member's poll to succeed after the kill", 4*session, func() (bool, string) {
			back = back[:0]
			for _, m := range ms {
				p := h.FirstOKPoll(m.Name(), killed)
				if p == nil {
					return false, m.Name() + " has not polled since"
				}
				back = append(back, p.End.Sub(killed))
			}
			return true, ""
		})
		for j, d := range back {
			if d > 2*session {
				t.Errorf("round %d: %s's first successful poll after the kill ended %v after it, over two session timeouts (%v)", round, ms[j].Name(), d, 2*session)
			}
		}
		// The commits the kill met: sent before the signal, ended after
		// it (on a quiet machine the victim may still answer one in the
		// moment between the signal and its death).
		caught := 0
		for _, gc := range h.Calls() {
			if gc.Kind == CallCommit && gc.Start.Before(signalled) && gc.End.After(signalled) {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("round %d: no commit was in flight at the kill: the storm did not meet the fault", round)
		}
		c.Logf("round %d: members poll again %v after the kill; %d commits were in flight at the kill", round, roundAll(back), caught)
		waitCommits(c, h, 100, 30*time.Second)
		c.Restart(victim)
		c.WaitFullISR(api.OffsetsTopic, 45*time.Second, false)
		c.WaitFullISR(topic, 45*time.Second, false)
		c.Logf("round %d: b%d back in every ISR", round, victim)
		waitCommits(c, h, 100, 30*time.Second)
		rounds = append(rounds, fmt.Sprintf("b%d killed at epoch %d, b%d led at epoch %d after %v, polls back after %v, %d commits in flight",
			victim, before.LeaderEpoch, after.Leader, after.LeaderEpoch, failover.Round(time.Millisecond), roundAll(back), caught))
	}

	r := finishGroup(t, c, h, load, ms...)
	if n := h.Count("", CallCommit, false); n > 0 {
		c.Logf("%d commits were not acknowledged", n)
	}
	t.Logf("figures: seed %d, group %s on %s-%d; %s; commits %d (acked %d), offset records %d; records acked %d, delivered %d, redelivered %d (bound %d); rejoins %d",
		c.Seed, group, api.OffsetsTopic, gp, strings.Join(rounds, "; "), r.Commits, r.CommitsAcked, r.OffsetRecords, r.Acked, r.Delivered, r.Redelivered, r.UncommittedRecords,
		h.Count("", CallJoin, true)-len(ms))
}

// TestGroupPollAnswerLost (scenario 4): a member's polls go through a proxy
// in front of one gateway that loses the answer (the gateway read the
// records and answered; the member never sees it). The member retries with
// the same cursor through the other gateways and must be served the very
// records the lost answer held: first on a quiet log (the same list,
// record for record, and the same cursor), then while producers write (per
// partition, the same start and one list a prefix of the other). The
// first lost poll is the member's first, with the cursor its join answered.
func TestGroupPollAnswerLost(t *testing.T) {
	c, gws := startGroupCluster(t)
	group := groupName(c)
	h := NewGroupHistory(c, group)
	lp := newLostPolls(c, gws)
	load := c.NewKeyedLoad(topic, KeyedOptions{URLs: gws, Producers: 2})
	load.ProduceUntilOK(gws[1], c.NewRand(), 400, 60*time.Second)

	// The first round is the member's first poll, with the cursor its join
	// answered (it names no positions).
	m1 := h.NewMemberClient("m1", lp.client)
	jr := lp.join(m1)
	id, cursor, epoch := jr.MemberID, jr.Cursor, jr.MemberEpoch
	if cursor == "" {
		t.Fatalf("the join answered no cursor: %+v", jr)
	}
	mismatches, rounds := 0, 0
	lostRound := func(writing bool) {
		t.Helper()
		rounds++
		lostRes := lp.lose(m1, id, cursor)
		want := deliveries(lostRes.Records)
		var retries []*GroupCall
		for _, gw := range []string{gws[1+rounds%2], gws[1+(rounds+1)%2]} {
			r := m1.Poll(gw, id, cursor, lostMaxRecords, 0)
			if !r.OK {
				t.Fatalf("round %d: the retry through %s: %s", rounds, gw, r)
			}
			retries = append(retries, r)
			var diff string
			if writing {
				diff = diffPrefix(want, r.Records)
			} else {
				diff = diffExact(want, r.Records)
				if r.Next != lostRes.Cursor {
					diff += fmt.Sprintf("; cursor %s, the lost answer's %s", offsetsString(cursorOffsets(r.Next)), offsetsString(cursorOffsets(lostRes.Cursor)))
				}
			}
			if diff != "" {
				mismatches++
				t.Errorf("round %d (cursor %s): the retry through %s differs from the lost answer (%d records %s): %s",
					rounds, offsetsString(cursorOffsets(cursor)), gw, len(want), span(want), diff)
			}
		}
		c.Logf("round %d: lost answer %d records %s; retries %d %s and %d %s", rounds, len(want), span(want),
			len(retries[0].Records), span(retries[0].Records), len(retries[1].Records), span(retries[1].Records))
		// Go on from the second retry's answer, the latest: commit it, poll
		// on with it.
		cursor, epoch = retries[1].Next, retries[1].Epoch
		if cm := m1.Commit(gws[2], id, epoch, cursor); !cm.OK {
			t.Fatalf("round %d: commit: %s", rounds, cm)
		}
	}
	for range 5 {
		lostRound(false)
	}
	load.Start()
	acked := load.Acked()
	c.WaitFor("100 more acknowledged records", 30*time.Second, func() (bool, string) {
		return load.Acked()-acked >= 100, fmt.Sprint(load.Acked() - acked)
	})
	for range 5 {
		lostRound(true)
	}
	load.Stop()

	// Read the rest, committing each poll, and check the whole history.
	c.WaitFullISR(topic, 45*time.Second, true)
	c.WaitFor("m1 to read and commit everything", 60*time.Second, func() (bool, string) {
		p := m1.Poll(gws[1], id, cursor, 500, 100*time.Millisecond)
		if !p.OK {
			return false, p.String()
		}
		cursor, epoch = p.Next, p.Epoch
		if len(p.Records) > 0 {
			if cm := m1.Commit(gws[1], id, epoch, cursor); !cm.OK {
				return false, cm.String()
			}
			return false, p.String()
		}
		d, err := h.Describe()
		if err != nil {
			return false, err.Error()
		}
		for _, row := range d.Partitions {
			if row.CommittedOffset != row.HighWatermark {
				return false, DescribeGroup(d)
			}
		}
		return len(d.Partitions) == groupPartitions, DescribeGroup(d)
	})
	if lv := m1.Leave(gws[1], id); !lv.OK {
		t.Errorf("leave: %s", lv)
	}
	r := h.Check(load, topic, groupPartitions)
	t.Logf("group history: %s", r)
	if r.Violations() > 0 {
		t.Errorf("%d violations in the group history", r.Violations())
	}
	if lp.px.Dropped() != rounds {
		t.Errorf("the proxy dropped %d answers in %d rounds", lp.px.Dropped(), rounds)
	}
	t.Logf("figures: seed %d, group %s; %d polls lost and retried twice each through the other gateways, %d retries differed; records acked %d, delivered %d, redelivered %d",
		c.Seed, group, rounds, mismatches, r.Acked, r.Delivered, r.Redelivered)
}

// lostMaxRecords bounds the polls of the lost-answer scenarios.
const lostMaxRecords = 25

// lostPolls is a member's way to the gateways in the lost-answer
// scenarios: one connection per call (each poll through the proxy is a
// connection of its own, and the gateway closes it after answering), and a
// proxy in front of the first gateway that can lose a poll's answer.
type lostPolls struct {
	c      *Cluster
	gws    []string
	px     *tcpproxy.Proxy
	client *http.Client
}

func newLostPolls(c *Cluster, gws []string) *lostPolls {
	px := c.GatewayProxy("member→gw1")
	px.KeepDroppedAnswers(4 << 20)
	return &lostPolls{c: c, gws: gws, px: px, client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 45 * time.Second}}
}

// join joins mc with a session long enough for a test's slow steps.
func (lp *lostPolls) join(mc *MemberClient) api.JoinGroupResponse {
	lp.c.T.Helper()
	var jr api.JoinGroupResponse
	lp.c.WaitFor(mc.Name+" to join", 45*time.Second, func() (bool, string) {
		var gc *GroupCall
		gc, jr = mc.Join(lp.gws[1], api.JoinGroupRequest{Topics: []string{topic}, SessionTimeoutMs: (30 * time.Second).Milliseconds()})
		return gc.OK, gc.String()
	})
	return jr
}

// lose polls through the proxy, which drops the answer, and returns what
// the answer held.
func (lp *lostPolls) lose(mc *MemberClient, id, cursor string) api.GroupPollResponse {
	lp.c.T.Helper()
	lp.px.DropResponses(1, lp.c.NewRand())
	lost := mc.Poll("http://"+lp.px.Addr(), id, cursor, lostMaxRecords, 0)
	lp.px.DropResponses(0, nil)
	if lost.OK || lost.Status != 0 {
		lp.c.T.Fatalf("the poll through the proxy was answered: %s", lost)
	}
	raw, ok := lp.px.TakeDroppedAnswer(lost.Conn)
	if !ok {
		lp.c.T.Fatalf("the proxy kept no answer for %s", lost.Conn)
	}
	res, err := parsePollAnswer(raw)
	if err != nil {
		lp.c.T.Fatalf("the dropped answer: %v", err)
	}
	return res
}

// parsePollAnswer reads a poll's whole HTTP answer as the proxy kept it.
func parsePollAnswer(raw string) (api.GroupPollResponse, error) {
	var res api.GroupPollResponse
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		return res, fmt.Errorf("%v (%d bytes kept)", err, len(raw))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return res, fmt.Errorf("body: %v (%d bytes kept)", err, len(raw))
	}
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("the lost answer was %d: %s", resp.StatusCode, b)
	}
	return res, json.Unmarshal(b, &res)
}

func span(ds []Delivery) string {
	first := map[int32]int64{}
	last := map[int32]int64{}
	var parts []int32
	for _, d := range ds {
		if _, ok := first[d.Partition]; !ok {
			first[d.Partition] = d.Offset
			parts = append(parts, d.Partition)
		}
		last[d.Partition] = d.Offset
	}
	var out []string
	for _, p := range parts {
		out = append(out, fmt.Sprintf("p%d/%d..%d", p, first[p], last[p]))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// diffExact describes how two poll answers differ, record by record
// (topic, partition, offset, value); "" when they are the same.
func diffExact(want, got []Delivery) string {
	if slices.Equal(want, got) {
		return ""
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("record %d: %+v, the lost answer's %+v", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d records %s, the lost answer's %d %s", len(got), span(got), len(want), span(want))
}

// diffPrefix: with writes in between, each partition's records in one
// answer must be a prefix of the other's (the same start, the same records
// where both have them).
func diffPrefix(want, got []Delivery) string {
	byPart := func(ds []Delivery) map[int32][]Delivery {
		m := map[int32][]Delivery{}
		for _, d := range ds {
			m[d.Partition] = append(m[d.Partition], d)
		}
		return m
	}
	w, g := byPart(want), byPart(got)
	for p := range int32(groupPartitions) {
		a, b := w[p], g[p]
		n := min(len(a), len(b))
		if !slices.Equal(a[:n], b[:n]) {
			return fmt.Sprintf("p%d: %s, the lost answer's %s", p, span(b), span(a))
		}
	}
	return ""
}
