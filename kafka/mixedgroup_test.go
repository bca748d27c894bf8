package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
)

// reads counts, per record key, which members read it.
type reads struct {
	mu sync.Mutex
	by map[string][]string
}

func (r *reads) add(member, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by[key] = append(r.by[key], member)
}

// check reports whether every key prefix+0..n-1 was read exactly once, and
// how many distinct members read them.
func (r *reads) check(prefix string, n int) (members map[string]int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	members = map[string]int{}
	for i := range n {
		k := fmt.Sprintf("%s%d", prefix, i)
		switch got := r.by[k]; len(got) {
		case 0:
			return nil, fmt.Errorf("%s not read yet", k)
		case 1:
			members[got[0]]++
		default:
			return nil, fmt.Errorf("%s read by %v", k, got)
		}
	}
	return members, nil
}

// One group, three kinds of member: an HTTP member, kcat -G and a franz-go
// consumer split a topic's partitions, and each commits after what it
// read. Every record is read once across them. When kcat is killed, its
// partitions move to the others once its session ran out, from its
// commits, and the records produced then are read once too.
func TestMixedGroupEveryRecordOnce(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 6, ReplicationFactor: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := &reads{by: map[string][]string{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// The HTTP member polls with its cursor and commits it after each
	// poll that read something.
	var member api.JoinGroupResponse
	testwait.Check(t, 30*time.Second, "the HTTP member joins", func() error {
		var err error
		member, err = hc.JoinGroup(ctx, "mixed", api.JoinGroupRequest{Topics: []string{"events"}, SessionTimeoutMs: 30000})
		return err
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		cursor := ""
		for ctx.Err() == nil {
			res, err := hc.PollGroup(ctx, "mixed", member.MemberID, client.PollOptions{MaxWait: 300 * time.Millisecond, Cursor: cursor})
			if err != nil {
				if ctx.Err() == nil {
					t.Logf("HTTP poll: %v", err)
				}
				cursor = ""
				continue
			}
			for _, rec := range res.Records {
				if rec.Key != nil {
					r.add("http", *rec.Key)
				}
			}
			cursor = res.Cursor
			if len(res.Records) > 0 {
				if _, err := hc.CommitOffsets(ctx, "mixed", api.CommitRequest{MemberID: member.MemberID, Cursor: res.Cursor}); err != nil && ctx.Err() == nil {
					t.Logf("HTTP commit: %v", err)
				}
			}
		}
	}()

	// franz-go commits after each poll.
	kc := newKgo(t, cl, kgo.ConsumerGroup("mixed"), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.HeartbeatInterval(200*time.Millisecond), kgo.SessionTimeout(10*time.Second), kgo.ClientID("kgo"))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			fs := kc.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) { r.add("kgo", string(rec.Key)) })
			if err := kc.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				t.Logf("kgo commit: %v", err)
			}
		}
	}()

	// kcat commits what it printed (librdkafka's auto commit, every 100 ms).
	cmd := exec.CommandContext(ctx, testsvc.Kcat(t), "-b", strings.Join(seeds(cl), ","), "-G", "mixed", "events", "-u", "-f", "%k\n",
		"-X", "auto.offset.reset=earliest", "-X", "heartbeat.interval.ms=200", "-X", "session.timeout.ms=6000",
		"-X", "auto.commit.interval.ms=100")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.add("kcat", sc.Text())
		}
		_ = cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Kill()
		t.Logf("kcat -G:\n%s", stderr.String())
	}()

	owners := func(want int) error {
		d, err := hc.DescribeGroup(ctx, "mixed")
		if err != nil {
			return err
		}
		if len(d.Members) != want {
			return fmt.Errorf("%d members", len(d.Members))
		}
		for _, m := range d.Members {
			if len(m.Assignment) != 6/want {
				return fmt.Errorf("%s member %s holds %v", m.Kind, m.MemberID, m.Assignment)
			}
		}
		return nil
	}
	testwait.Check(t, 60*time.Second, "three members hold two partitions each", func() error { return owners(3) })

	produce := func(prefix string) {
		t.Helper()
		var recs []client.Record
		for i := range 300 {
			recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("%s%d", prefix, i)), Value: []byte(`{}`)})
		}
		if _, err := hc.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	produce("a")
	testwait.Check(t, 60*time.Second, "every record read once, by all three", func() error {
		members, err := r.check("a", 300)
		if err == nil && len(members) != 3 {
			err = fmt.Errorf("read by %v", members)
		}
		return err
	})
	testwait.Check(t, 30*time.Second, "every partition committed at its end", func() error {
		d, err := hc.DescribeGroup(ctx, "mixed")
		if err != nil {
			return err
		}
		for _, p := range d.Partitions {
			if p.CommittedOffset != p.HighWatermark {
				return fmt.Errorf("%+v", d.Partitions)
			}
		}
		return nil
	})

	// kcat dies without leaving; once its session ran out, the others
	// hold every partition and read what comes next, once.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 60*time.Second, "two members hold three partitions each", func() error { return owners(2) })
	produce("b")
	testwait.Check(t, 60*time.Second, "every later record read once, by the two left", func() error {
		members, err := r.check("b", 300)
		if err == nil && (len(members) != 2 || members["kcat"] != 0) {
			err = fmt.Errorf("read by %v", members)
		}
		return err
	})
}
