package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
)

// `kcat -G` (librdkafka 2.0.2: FindCoordinator v2, JoinGroup v5, SyncGroup
// v3, Heartbeat v3, LeaveGroup v1, OffsetFetch v7) joins a group beside an
// HTTP member, the two split the partitions, and when kcat stops it leaves
// and the HTTP member gets them all back (groupconsume_test.go has kcat -G
// reading and committing).
func TestKcatGroupMembership(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 4, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var member api.JoinGroupResponse
	testwait.Check(t, 30*time.Second, "the HTTP member joins", func() error {
		var err error
		member, err = hc.JoinGroup(ctx, "mixed", api.JoinGroupRequest{Topics: []string{"events"}, SessionTimeoutMs: 60000})
		return err
	})
	httpHeld := func() int {
		t.Helper()
		hb, err := hc.Heartbeat(ctx, "mixed", member.MemberID)
		if err != nil {
			t.Fatal(err)
		}
		return len(hb.Assignment)
	}

	cmd := exec.CommandContext(ctx, testsvc.Kcat(t), "-b", strings.Join(seeds(cl), ","), "-G", "mixed", "events",
		"-X", "heartbeat.interval.ms=200", "-X", "session.timeout.ms=10000", "-X", "partition.assignment.strategy=range")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		_ = <-exited
		t.Logf("kcat -G:\n%s", stderr.String())
	}()

	testwait.Check(t, 60*time.Second, "kcat and the HTTP member split the partitions", func() error {
		d, err := hc.DescribeGroup(ctx, "mixed")
		if err != nil {
			return err
		}
		held := map[string]int{}
		for _, m := range d.Members {
			held[m.Kind] += len(m.Assignment)
		}
		if h := httpHeld(); h != 2 || held[api.MemberKindKafka] != 2 {
			return fmt.Errorf("HTTP holds %d, kcat %d (%+v)", h, held[api.MemberKindKafka], d.Members)
		}
		return nil
	})

	// kcat leaves the group when it stops.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 30*time.Second, "the HTTP member holds every partition again", func() error {
		d, err := hc.DescribeGroup(ctx, "mixed")
		if err != nil {
			return err
		}
		if h := httpHeld(); h != 4 || len(d.Members) != 1 {
			return fmt.Errorf("HTTP holds %d; members %+v", h, d.Members)
		}
		return nil
	})
}
