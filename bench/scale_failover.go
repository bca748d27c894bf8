package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/api"
)

// balanceTimeout bounds the wait for leadership to be back on the first
// replicas before a broker is stopped (the controller moves it back every
// 10 s by default); past it the step runs on the cluster as it is.
const balanceTimeout = time.Minute

// drainGaveUp is what `sluice broker` logs when its drain ran out of time.
const drainGaveUp = "leaderships not all moved in time"

// prepare waits until the cluster is healthy, and for a while until
// leadership is back on the first replicas, and picks the broker to stop:
// the controller, or the non-controller broker leading the most
// partitions. ok is false when the cluster did not get healthy.
func (s *scaleRun) prepare(ctx context.Context, controller bool) (victim api.BrokerStatus, note string, ok bool, err error) {
	t0 := time.Now()
	healthy := &milestone{name: "healthy", reached: s.healthy}
	if _, err := s.waitState(ctx, t0, s.o.Timeout, healthy); err != nil {
		return victim, "", false, err
	}
	if healthy.at < 0 {
		s.timedOut = true
		return victim, "", false, nil
	}
	bal := &milestone{name: "balanced", reached: s.balanced}
	ci, err := s.waitState(ctx, time.Now(), balanceTimeout, bal)
	if err != nil {
		return victim, "", false, err
	}
	if bal.at < 0 {
		// Not a failure of the step: it runs on the leaderships as they are.
		led := make([]string, 0, len(ci.Brokers))
		for _, b := range ci.Brokers {
			led = append(led, fmt.Sprintf("b%d %d of %d", b.ID, b.PartitionsLed, s.preferred[b.ID]))
		}
		note = fmt.Sprintf("; leadership not back on the first replicas after %s: %s; %d offline, %d under-replicated",
			balanceTimeout, strings.Join(led, ", "), ci.Partitions.Offline, ci.Partitions.UnderReplicated)
	}
	for _, b := range ci.Brokers {
		switch {
		case !b.Alive:
		case controller && b.Controller:
			victim = b
		case !controller && !b.Controller && b.PartitionsLed > victim.PartitionsLed:
			victim = b
		}
	}
	if victim.ID == 0 {
		return victim, "", false, fmt.Errorf("no broker to stop in %+v", ci.Brokers)
	}
	return victim, note, true, nil
}

// controlledShutdown SIGTERMs the non-controller broker leading the most
// partitions while acks=all producers write to some of them, and measures
// how long its leaderships take to move and the process to exit. It
// returns the broker, 0 when the step did not run.
func (s *scaleRun) controlledShutdown(ctx context.Context) (int32, error) {
	v, note, ok, err := s.prepare(ctx, false)
	if err != nil || !ok {
		s.unhealthy("controlled shutdown (SIGTERM)")
		return 0, err
	}
	parts, err := s.ledPartitions(ctx, v.ID, s.o.ProducePartitions)
	if err != nil {
		return 0, err
	}
	prod := startProducers(ctx, s.cl, parts)
	defer prod.stop()
	if err := prod.waitAcked(ctx, time.Now(), time.Now().Add(30*time.Second)); err != nil {
		return 0, fmt.Errorf("the acks=all producers before the shutdown: %w", err)
	}
	proc := s.pc.brokers[v.ID]
	progressf("SIGTERM to broker %d (leads %d partitions)", v.ID, v.PartitionsLed)
	t0 := time.Now()
	if err := proc.signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	moved := &milestone{name: "moved", reached: func(ci api.ClusterInfo) bool {
		return brokerIn(ci, v.ID).PartitionsLed == 0 && ci.Partitions.Offline == 0
	}}
	if _, err := s.waitState(ctx, t0, s.o.Timeout, moved); err != nil {
		return 0, err
	}
	exit := fmt.Sprintf("timed out after %s", s.o.Timeout)
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-proc.done:
		d := proc.exitedAt.Sub(t0)
		exit = secs(d)
		if d <= s.o.DrainTimeout {
			exit += fmt.Sprintf(", within --drain-timeout %s", s.o.DrainTimeout)
		} else {
			exit += fmt.Sprintf(", past --drain-timeout %s", s.o.DrainTimeout)
		}
		if b, err := os.ReadFile(proc.logPath); err == nil && bytes.Contains(b, []byte(drainGaveUp)) {
			exit += "; it logged that its drain ran out of time"
		}
	case <-time.After(time.Until(t0.Add(s.o.Timeout))):
		s.timedOut = true
	}
	// Every producer acknowledged once more after the moves: the longest
	// stall is over.
	ackErr := prod.waitAcked(ctx, time.Now(), time.Now().Add(s.o.Timeout))
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	res := prod.stop()
	s.add(fmt.Sprintf("controlled shutdown (SIGTERM) of broker %d (led %d%s): leaderships moved", v.ID, v.PartitionsLed, note), "s", s.at(moved), "≤ 3")
	s.add("the SIGTERMed broker exits", "s", exit, "within --drain-timeout")
	measured := res.String()
	if ackErr != nil {
		measured += "; " + ackErr.Error()
	}
	s.add(fmt.Sprintf("acks=all produces to %d of its partitions during it: longest stall", len(parts)), "s", measured, "no stall longer than a leader move")
	return v.ID, nil
}

// restart starts broker id again and measures until it is registered and
// back in every ISR. A run that has not exited yet (its exit timed out) is
// SIGKILLed first.
func (s *scaleRun) restart(ctx context.Context, id int32, what string) error {
	note := ""
	if p := s.pc.brokers[id]; !p.exited() {
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		note = "; it had not exited and was SIGKILLed first"
	}
	progressf("restarting broker %d", id)
	t0 := time.Now()
	if err := s.pc.restartBroker(ctx, id); err != nil {
		return err
	}
	registered := &milestone{name: "registered", reached: func(ci api.ClusterInfo) bool { return brokerIn(ci, id).Alive }}
	inSync := &milestone{name: "in every ISR", reached: s.healthy}
	if _, err := s.waitState(ctx, t0, s.o.Timeout, registered, inSync); err != nil {
		return err
	}
	s.add(what, "s", fmt.Sprintf("%s (registered after %s%s)", s.at(inSync), s.at(registered), note), "≤ 10")
	return nil
}

// kill sends SIGKILL to the non-controller broker leading the most
// partitions, or to the controller, and measures until the cluster's
// metadata no longer lists it and every partition has a live leader again
// (for the controller: and another controller is elected). It returns the
// broker, 0 when the step did not run.
func (s *scaleRun) kill(ctx context.Context, controller bool) (int32, error) {
	label := "kill -9 of a broker"
	if controller {
		label = "the controller SIGKILLed"
	}
	v, note, ok, err := s.prepare(ctx, controller)
	if err != nil || !ok {
		s.unhealthy(label)
		return 0, err
	}
	progressf("SIGKILL to broker %d (leads %d partitions, controller %v)", v.ID, v.PartitionsLed, v.Controller)
	t0 := time.Now()
	if err := s.pc.brokers[v.ID].signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	gone := &milestone{name: "gone", reached: func(ci api.ClusterInfo) bool { return !brokerIn(ci, v.ID).Alive }}
	newController := &milestone{name: "new controller", reached: func(ci api.ClusterInfo) bool {
		return ci.Controller >= 0 && ci.Controller != v.ID
	}}
	led := &milestone{name: "led again", reached: func(ci api.ClusterInfo) bool {
		return ledAgain(v.ID)(ci) && newController.reached(ci)
	}}
	ms := []*milestone{gone, led}
	if controller {
		ms = append(ms, newController)
	}
	if _, err := s.waitState(ctx, t0, s.o.Timeout, ms...); err != nil {
		return 0, err
	}
	session := s.o.SessionTimeout.Seconds()
	if controller {
		s.add(fmt.Sprintf("%s (broker %d, led %d%s): every partition led again", label, v.ID, v.PartitionsLed, note), "s",
			fmt.Sprintf("%s (gone from the metadata after %s, another controller after %s)", s.at(led), s.at(gone), s.at(newController)),
			fmt.Sprintf("≤ session + 4 (%.0f)", session+4))
	} else {
		s.add(fmt.Sprintf("%s (broker %d, led %d%s): every partition led again", label, v.ID, v.PartitionsLed, note), "s",
			fmt.Sprintf("%s (gone from the metadata after %s)", s.at(led), s.at(gone)),
			fmt.Sprintf("≤ session + 2 (%.0f)", session+2))
	}
	return v.ID, nil
}

// unhealthy records that a step did not run because the cluster did not
// get healthy first.
func (s *scaleRun) unhealthy(what string) {
	s.add(what, "", fmt.Sprintf("not run: the cluster did not get every broker, leader and ISR back within %s", s.o.Timeout), "")
}

// ledPartitions returns up to n partitions that broker id leads, from the
// first topics.
func (s *scaleRun) ledPartitions(ctx context.Context, id int32, n int) ([]topicPartition, error) {
	var parts []topicPartition
	for i := 0; i < s.o.Topics && len(parts) < n; i++ {
		name := fmt.Sprintf("scale-%03d", i)
		t, err := s.cl.GetTopic(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("describing %s: %w", name, err)
		}
		for _, p := range t.Partitions {
			if p.Leader == id && len(parts) < n {
				parts = append(parts, topicPartition{name, p.Partition})
			}
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("broker %d leads no partition", id)
	}
	return parts, nil
}
