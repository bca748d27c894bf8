package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// The command-line client speaks the public HTTP API only, through the
// client package, like any other Go program.

func gatewayFlag(fs *flag.FlagSet) *string {
	return fs.String("url", envOr("SLUICE_URL", "http://127.0.0.1:8080"), "gateway base URL (env SLUICE_URL)")
}

// newClient is a client of the gateway at base; the caller closes it.
func newClient(base string) (*client.Client, error) {
	return client.New(base, client.WithUserAgent("sluice-cli/"+version))
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runTopics is `sluice topics list|create|describe|delete`.
func runTopics(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: sluice topics list|create NAME|describe NAME|delete NAME [flags]")
	}
	sub := args[0]
	fs := flag.NewFlagSet("topics "+sub, flag.ContinueOnError)
	base := gatewayFlag(fs)
	partitions := fs.Int("partitions", 1, "partitions (create)")
	rf := fs.Int("replication-factor", 0, "replicas per partition (create; 0: min(3, live brokers))")
	var configs []string
	fs.Func("config", "topic config key=value (create, repeatable)", func(v string) error { configs = append(configs, v); return nil })
	rest := args[1:]
	name := ""
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if sub != "list" && name == "" {
		return fmt.Errorf("topics %s needs a topic name", sub)
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	switch sub {
	case "list":
		topics, err := cl.ListTopics(ctx)
		if err != nil {
			return err
		}
		for _, t := range topics {
			fmt.Printf("%s\tpartitions=%d\treplication_factor=%d\n", t.Name, len(t.Partitions), t.ReplicationFactor)
		}
		return nil
	case "create":
		req := api.CreateTopicRequest{Name: name, Partitions: *partitions, ReplicationFactor: *rf, Configs: map[string]string{}}
		for _, c := range configs {
			k, v, ok := strings.Cut(c, "=")
			if !ok {
				return fmt.Errorf("--config %q: want key=value", c)
			}
			req.Configs[k] = v
		}
		t, err := cl.CreateTopic(ctx, req)
		if err != nil {
			return err
		}
		return printJSON(t)
	case "describe":
		t, err := cl.GetTopic(ctx, name)
		if err != nil {
			return err
		}
		return printJSON(t)
	case "delete":
		return cl.DeleteTopic(ctx, name)
	}
	return fmt.Errorf("unknown topics command %q", sub)
}

// runProduce is `sluice produce TOPIC`: each argument, or each stdin line, is
// one record value; --key sets the key of all of them. Lines are sent in
// requests of --batch records; offsets are printed as partition/offset.
func runProduce(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: sluice produce TOPIC [flags] [VALUE...]")
	}
	topic := args[0]
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	base := gatewayFlag(fs)
	key := fs.String("key", "", "record key (empty: none)")
	acks := fs.String("acks", "all", "0, 1 or all")
	batch := fs.Int("batch", 500, "records per request when reading stdin")
	asJSON := fs.Bool("json", false, "values are JSON (sent as JSON values); otherwise they are sent as strings")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	opts := client.ProduceOptions{Acks: client.Acks(*acks)}
	send := func(values []string) error {
		recs := make([]client.Record, len(values))
		for i, v := range values {
			if *key != "" {
				recs[i].Key = []byte(*key)
			}
			if *asJSON {
				if !json.Valid([]byte(v)) {
					return fmt.Errorf("not JSON: %q", v)
				}
				recs[i].JSON = json.RawMessage(v)
			} else {
				// A string value is stored as its JSON text, quotes
				// included, and fetched back as the same string.
				recs[i].JSON, _ = json.Marshal(v)
			}
		}
		offsets, err := cl.Produce(ctx, topic, recs, opts)
		if err != nil {
			return err
		}
		for _, o := range offsets {
			fmt.Printf("%d/%d\n", o.Partition, o.Offset)
		}
		return nil
	}
	if fs.NArg() > 0 {
		return send(fs.Args())
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), api.DefaultMaxMessageBytes+1)
	var pending []string
	for sc.Scan() {
		pending = append(pending, sc.Text())
		if len(pending) == *batch {
			if err := send(pending); err != nil {
				return err
			}
			pending = pending[:0]
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(pending) > 0 {
		return send(pending)
	}
	return nil
}

// fetchWait is how long one --follow fetch waits for new records.
const fetchWait = 10 * time.Second

// runConsume is `sluice consume TOPIC`: prints one partition's records as
// NDJSON from --offset; with --follow it keeps long-polling for new ones.
func runConsume(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: sluice consume TOPIC [flags]")
	}
	topic := args[0]
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	base := gatewayFlag(fs)
	partition := fs.Int("partition", 0, "partition")
	offset := fs.String("offset", "earliest", "earliest, latest or a number")
	follow := fs.Bool("follow", false, "keep waiting for new records")
	limit := fs.Int("limit", 0, "stop after this many records (0: no limit)")
	group := fs.String("group", "", "consume as a member of this consumer group: the group's partitions of the topic (comma-separated topics allowed), from its committed offsets, committing what was printed")
	instance := fs.String("instance-id", "", "with --group: a static member id (a restart takes the member's partitions back without a rebalance)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *group != "" {
		return consumeGroup(ctx, cl, *group, strings.Split(topic, ","), *follow, *limit, *instance)
	}
	var opts client.FetchOptions
	if *follow {
		opts.MaxWait = fetchWait
	}
	enc := json.NewEncoder(os.Stdout)
	from, n := client.Offset(*offset), 0
	for ctx.Err() == nil {
		fr, err := cl.Fetch(ctx, topic, int32(*partition), from, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, r := range fr.Records {
			if err := enc.Encode(r); err != nil {
				return err
			}
			if n++; *limit > 0 && n >= *limit {
				return nil
			}
		}
		from = client.At(fr.NextOffset)
		if len(fr.Records) == 0 && !*follow {
			return nil
		}
	}
	return nil
}
