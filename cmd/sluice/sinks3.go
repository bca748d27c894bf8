package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluice-io/sluice/sink"
)

// runSinkS3 is `sluice sink s3`: topics archived to S3 as NDJSON objects
// (gzipped by default), exactly once, by a group member.
func runSinkS3(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sink s3", flag.ContinueOnError)
	base := gatewayFlag(fs)
	s3 := addS3Flags(fs)
	group := fs.String("group", envOr("SLUICE_GROUP", ""), "consumer group (env SLUICE_GROUP); its members share the partitions; one group per prefix")
	topics := fs.String("topics", envOr("SLUICE_TOPICS", ""), "topics to archive, comma-separated (env SLUICE_TOPICS)")
	prefix := fs.String("prefix", "archive", "folder of the archive inside the bucket (after --s3-prefix)")
	instance := fs.String("instance-id", envOr("SLUICE_INSTANCE_ID", ""), "static member id: a restart takes the partitions back without a rebalance")
	session := fs.Duration("session-timeout", 0, "group session timeout (0: the server's 30s)")
	pollRecords := fs.Int("poll-records", 500, "records per poll")
	maxRecords := fs.Int("max-records", 100_000, "roll an object at this many records")
	maxBytes := fs.Int64("max-bytes", 64<<20, "roll an object at this many bytes of NDJSON (before compression)")
	compression := fs.String("compression", sink.CompressionGzip, "objects' compression: gzip (.ndjson.gz) or none (.ndjson: more room, less CPU)")
	maxInterval := fs.Duration("max-interval", time.Minute, "roll an object this long after its first record")
	parallel := fs.Int("parallel-writes", 8, "partitions of one poll written at once (each partition's batches stay in order)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on this address (/metrics); empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *group == "" || *topics == "" {
		return errors.New(sinkUsage)
	}
	bkt, err := s3.openS3(ctx)
	if err != nil {
		return err
	}
	defer closeLogged(slog.Default(), "the S3 bucket", bkt)
	// Fencing rests on conditional puts: refuse a store that ignores them.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = sink.ProbeConditionalWrites(pctx, bkt, *prefix)
	cancel()
	if err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	metrics := sink.NewMetrics()
	store, err := sink.NewS3Store(bkt, sink.S3Options{
		Group: *group, Prefix: *prefix, MaxRecords: *maxRecords, MaxBytes: *maxBytes, MaxInterval: *maxInterval,
		Compression: *compression, ReadLog: sink.ClientLog(cl), Metrics: metrics, Logger: logger,
	})
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, metrics.Handler())
		if err != nil {
			return err
		}
		defer stop()
	}
	s, err := sink.New(cl, sink.Options{
		Group: *group, Topics: strings.Split(*topics, ","), Store: store, InstanceID: *instance,
		SessionTimeout: *session, MaxRecords: *pollRecords, ParallelWrites: *parallel, Metrics: metrics, Logger: logger,
	})
	if err != nil {
		return err
	}
	return runWithProgress(ctx, s, *group, func() string {
		st := store.Stats()
		return fmt.Sprintf("%d objects, %.1f MB stored (%.1f MB NDJSON)", st.Objects, float64(st.Bytes)/1e6, float64(st.RawBytes)/1e6)
	})
}

const archiveUsage = "usage: sluice archive verify --topic T --s3-endpoint HOST:PORT --s3-bucket B [--prefix P] [--deep=false] [--json] [--url URL]"

// runArchive is `sluice archive verify`: a topic's archive checked against
// the log; the exit status is 1 on any gap, overlap or bad object.
func runArchive(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "verify" {
		return errors.New(archiveUsage)
	}
	fs := flag.NewFlagSet("archive verify", flag.ContinueOnError)
	base := gatewayFlag(fs)
	s3 := addS3Flags(fs)
	prefix := fs.String("prefix", "archive", "folder of the archive inside the bucket (after --s3-prefix)")
	topic := fs.String("topic", "", "topic to check")
	deep := fs.Bool("deep", true, "read every object and compare its offsets with the log's")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *topic == "" {
		return errors.New(archiveUsage)
	}
	bkt, err := s3.openS3(ctx)
	if err != nil {
		return err
	}
	defer closeLogged(slog.Default(), "the S3 bucket", bkt)
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := sink.VerifyArchive(ctx, bkt, cl, *prefix, *topic, *deep)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Partitions {
			fmt.Printf("partition %d: %d objects, %d bytes, archived to %d, log %d-%d\n",
				p.Partition, p.Objects, p.Bytes, p.ArchivedEnd, p.LogStart, p.HighWatermark)
		}
		for _, p := range rep.Problems {
			fmt.Println(p)
		}
	}
	if !rep.OK() {
		return fmt.Errorf("%d problems in the archive of %s", len(rep.Problems), *topic)
	}
	return nil
}
