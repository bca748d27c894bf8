package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testwait"
)

// One group holds an HTTP member, a classic franz-go consumer and a
// franz-go consumer of the KIP-848 protocol: they split the partitions,
// and every record is read once across them.
func TestKgoConsumerGroupProtocolMixed(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "events", Partitions: 6, ReplicationFactor: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := &reads{by: map[string][]string{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	var member api.JoinGroupResponse
	testwait.Check(t, 30*time.Second, "the HTTP member joins", func() error {
		var err error
		member, err = hc.JoinGroup(ctx, "mixed848", api.JoinGroupRequest{Topics: []string{"events"}, SessionTimeoutMs: 30000})
		return err
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		cursor := ""
		for ctx.Err() == nil {
			res, err := hc.PollGroup(ctx, "mixed848", member.MemberID, client.PollOptions{MaxWait: 300 * time.Millisecond, Cursor: cursor})
			if err != nil {
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
				if _, err := hc.CommitOffsets(ctx, "mixed848", api.CommitRequest{MemberID: member.MemberID, Cursor: res.Cursor}); err != nil && ctx.Err() == nil {
					t.Logf("HTTP commit: %v", err)
				}
			}
		}
	}()
	classic := newKgo(t, cl, kgo.ConsumerGroup("mixed848"), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.HeartbeatInterval(200*time.Millisecond))
	nextGen, on := newNextGen(t, cl, "mixed848")
	for name, kc := range map[string]*kgo.Client{"classic": classic, "848": nextGen} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				fs := kc.PollFetches(ctx)
				fs.EachRecord(func(rec *kgo.Record) { r.add(name, string(rec.Key)) })
				if err := kc.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
					t.Logf("%s commit: %v", name, err)
				}
			}
		}()
	}
	waitShares(t, ctx, hc, "mixed848", 2, 2, 2)
	if !on.Load() {
		t.Fatal("franz-go runs the classic protocol")
	}
	// ConsumerGroupDescribe shows each kind: the HTTP member as type -1
	// with its kind as client id, the classic consumer as 0, the KIP-848
	// one as 1.
	testwait.Check(t, 30*time.Second, "ConsumerGroupDescribe of the three kinds", func() error {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Version, req.Groups = 1, []string{"mixed848"}
		resp, err := req.RequestWith(ctx, classic)
		if err != nil {
			return err
		}
		if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
			return fmt.Errorf("answer %+v", resp.Groups)
		}
		types := map[int8]string{}
		for _, m := range resp.Groups[0].Members {
			types[m.MemberType] = m.ClientID
			if m.MemberType == -1 && m.MemberID != member.MemberID {
				return fmt.Errorf("member %s of type -1; the HTTP member is %s", m.MemberID, member.MemberID)
			}
		}
		if len(types) != 3 || types[-1] != "http" || types[0] == "" || types[1] == "" {
			return fmt.Errorf("member types and client ids %v", types)
		}
		return nil
	})
	var recs []client.Record
	for i := range 60 {
		recs = append(recs, client.Record{Key: []byte(fmt.Sprintf("m%d", i)), Value: []byte("v")})
	}
	if _, err := hc.Produce(ctx, "events", recs, client.ProduceOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.Check(t, 60*time.Second, "every record read once", func() error {
		members, err := r.check("m", 60)
		if err != nil {
			return err
		}
		if len(members) != 3 {
			return fmt.Errorf("read by %v", members)
		}
		return nil
	})
}
