package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// The command-line client speaks the public HTTP API only, like any other client.

func gatewayFlag(fs *flag.FlagSet) *string {
	return fs.String("url", envOr("SLUICE_URL", "http://127.0.0.1:8080"), "gateway base URL (env SLUICE_URL)")
}

// call sends a request and decodes a JSON answer into out; error answers
// become *api.Error.
func call(ctx context.Context, method, u, ctype string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return api.ReadError(resp)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
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
	switch sub {
	case "list":
		var tl api.TopicList
		if err := call(ctx, "GET", *base+"/v1/topics", "", nil, &tl); err != nil {
			return err
		}
		for _, t := range tl.Topics {
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
		b, _ := json.Marshal(req)
		var t api.Topic
		if err := call(ctx, "POST", *base+"/v1/topics", "application/json", b, &t); err != nil {
			return err
		}
		return printJSON(t)
	case "describe":
		var t api.Topic
		if err := call(ctx, "GET", *base+"/v1/topics/"+url.PathEscape(name), "", nil, &t); err != nil {
			return err
		}
		return printJSON(t)
	case "delete":
		return call(ctx, "DELETE", *base+"/v1/topics/"+url.PathEscape(name), "", nil, nil)
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
	send := func(values []string) error {
		var body bytes.Buffer
		for _, v := range values {
			rec := map[string]any{}
			if *key != "" {
				rec["key"] = *key
			}
			if *asJSON {
				if !json.Valid([]byte(v)) {
					return fmt.Errorf("not JSON: %q", v)
				}
				rec["value"] = json.RawMessage(v)
			} else {
				rec["value"] = v
			}
			line, _ := json.Marshal(rec)
			body.Write(line)
			body.WriteByte('\n')
		}
		var pr api.ProduceResponse
		u := fmt.Sprintf("%s/v1/topics/%s/records?acks=%s", *base, url.PathEscape(topic), url.QueryEscape(*acks))
		if err := call(ctx, "POST", u, "application/x-ndjson", body.Bytes(), &pr); err != nil {
			return err
		}
		for _, o := range pr.Offsets {
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
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	next, n := *offset, 0
	for ctx.Err() == nil {
		wait := 0
		if *follow {
			wait = 10000
		}
		u := fmt.Sprintf("%s/v1/topics/%s/partitions/%d/records?offset=%s&max_wait_ms=%d", *base, url.PathEscape(topic), *partition, url.QueryEscape(next), wait)
		var fr api.FetchResponse
		if err := call(ctx, "GET", u, "", nil, &fr); err != nil {
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
		next = fmt.Sprint(fr.NextOffset)
		if len(fr.Records) == 0 && !*follow {
			return nil
		}
	}
	return nil
}
