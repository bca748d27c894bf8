package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/faulttest"
	"github.com/sluice-io/sluice/internal/testsvc"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/sink"
	"github.com/sluice-io/sluice/tier"
)

// TestSinkS3Command: `sluice sink s3` archives a topic and stops on
// SIGTERM; `sluice archive verify` passes on the archive and fails (exit
// status 1) once an object is removed from the middle.
func TestSinkS3Command(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	cl, err := client.New(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: "orders", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i += 50 {
		var recs []client.Record
		for j := i; j < i+50; j++ {
			recs = append(recs, client.Record{Key: []byte("k" + strconv.Itoa(j%7)), Value: []byte(`{"n":` + strconv.Itoa(j) + `}`)})
		}
		if _, err := cl.Produce(ctx, "orders", recs, client.ProduceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testsvc.S3(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	s3Prefix := "sink-cmd-test/" + hex.EncodeToString(rnd[:])
	bkt, err := tier.NewS3(ctx, tier.S3Options{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: s3Prefix, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	s3Args := []string{"--url", c.URL, "--s3-endpoint", cfg.Endpoint, "--s3-bucket", cfg.Bucket, "--s3-prefix", s3Prefix,
		"--s3-access-key", cfg.AccessKey, "--prefix", "arch"}
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(faulttest.Binary(t), append(args, s3Args...)...)
		cmd.Env = append(os.Environ(), "SLUICE_S3_SECRET_KEY="+cfg.SecretKey)
		cmd.Stderr = faulttest.LogWriter(t, "sluice: ")
		return cmd
	}

	s := run("sink", "s3", "--group", "arch", "--topics", "orders", "--max-records", "60", "--max-interval", "300ms")
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 60*time.Second, "the archive to reach the log end", func() bool {
		rep, err := sink.VerifyArchive(ctx, bkt, cl, "arch", "orders", false)
		if err != nil || !rep.OK() {
			return false
		}
		sum := int64(0)
		for _, p := range rep.Partitions {
			sum += p.ArchivedEnd
		}
		return sum == 400
	})
	_ = s.Process.Signal(syscall.SIGTERM)
	if err := s.Wait(); err != nil {
		t.Fatalf("sink s3 after SIGTERM: %v", err)
	}
	if err := run("archive", "verify", "--topic", "orders").Run(); err != nil {
		t.Fatalf("archive verify on a complete archive: %v", err)
	}

	list, err := sink.ListArchive(ctx, bkt, "arch", api.TopicPartition{Topic: "orders", Partition: 0})
	if err != nil || len(list) < 3 {
		t.Fatalf("partition 0 has %d objects (%v); want at least 3", len(list), err)
	}
	if err := bkt.Delete(ctx, list[1].Key); err != nil {
		t.Fatal(err)
	}
	err = run("archive", "verify", "--topic", "orders").Run()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Fatalf("archive verify with %s removed: %v, want exit status 1", list[1].Key, err)
	}
	t.Cleanup(func() {
		var keys []string
		_ = bkt.List(context.Background(), "", func(info tier.ObjectInfo) error { keys = append(keys, info.Key); return nil })
		for _, k := range keys {
			_ = bkt.Delete(context.Background(), k)
		}
	})
}
