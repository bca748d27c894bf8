package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/testcluster"
)

// runCLI runs one client command with stdin and returns what it printed.
// It swaps os.Stdin and os.Stdout, so these tests do not run in parallel.
func runCLI(t *testing.T, run func(context.Context, []string) error, stdin string, args ...string) (string, error) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return "", err
	}
	oldIn, oldOut := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = inR, outW
	defer func() { os.Stdin, os.Stdout = oldIn, oldOut }()
	go func() {
		_, _ = io.WriteString(inW, stdin)
		inW.Close()
	}()
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(outR)
		out <- string(b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, args)
	outW.Close()
	s := <-out
	inR.Close()
	outR.Close()
	return s, err
}

func TestClientCommands(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Brokers: 1})
	url := "--url=" + c.URL

	out, err := runCLI(t, runTopics, "", "create", "orders", url, "--partitions", "2", "--config", "retention.ms=60000")
	var created api.Topic
	if err != nil || json.Unmarshal([]byte(out), &created) != nil || len(created.Partitions) != 2 || created.Configs["retention.ms"] != "60000" {
		t.Fatalf("topics create: %v\n%s", err, out)
	}
	if out, err := runCLI(t, runTopics, "", "list", url); err != nil || out != "orders\tpartitions=2\treplication_factor=1\n" {
		t.Fatalf("topics list: %v\n%q", err, out)
	}
	if out, err := runCLI(t, runTopics, "", "describe", "orders", url); err != nil || !strings.Contains(out, `"name": "orders"`) {
		t.Fatalf("topics describe: %v\n%s", err, out)
	}

	// Values from arguments, with a key; from stdin in batches; as JSON.
	out, err = runCLI(t, runProduce, "", "orders", url, "--key", "k", "a", "b")
	if err != nil || len(strings.Fields(out)) != 2 {
		t.Fatalf("produce args: %v\n%s", err, out)
	}
	p := strings.Split(strings.Fields(out)[0], "/")[0] // the partition key k hashes to
	if out, err := runCLI(t, runProduce, "1\n2\n3\n", "orders", url, "--batch", "2", "--json", "--acks", "1", "--key", "k"); err != nil || len(strings.Fields(out)) != 3 {
		t.Fatalf("produce stdin: %v\n%s", err, out)
	}
	if _, err := runCLI(t, runProduce, "", "orders", url, "--json", "{"); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("produce of bad JSON: %v", err)
	}

	out, err = runCLI(t, runConsume, "", "orders", url, "--partition", p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r api.FetchedRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil || *r.Key != "k" {
			t.Fatalf("consume line %q: %v", line, err)
		}
		got = append(got, string(r.Value))
	}
	if strings.Join(got, " ") != `"a" "b" 1 2 3` {
		t.Fatalf("consumed %v", got)
	}
	if out, err := runCLI(t, runConsume, "", "orders", url, "--partition", p, "--offset", "3", "--limit", "1"); err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"offset":3`) {
		t.Fatalf("consume --offset --limit: %v\n%s", err, out)
	}

	// --follow returns once --limit records came, including one produced after it started.
	done := make(chan string, 1)
	go func() {
		out, err := runCLIFollow(t, c.URL, p)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	time.Sleep(300 * time.Millisecond)
	if err := produceLate(c.URL, p); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if strings.Count(out, "\n") != 6 || !strings.Contains(out, `"late"`) {
			t.Fatalf("consume --follow:\n%s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("consume --follow did not return")
	}

	if _, err := runCLI(t, runTopics, "", "delete", "orders", url); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, runTopics, "", "describe", "orders", url); err == nil || !strings.HasPrefix(err.Error(), "UNKNOWN_TOPIC: ") {
		t.Fatalf("describe after delete: %v", err)
	}
}

// runCLIFollow is `sluice consume --follow` of six records.
func runCLIFollow(t *testing.T, base, p string) (string, error) {
	return runCLI(t, runConsume, "", "orders", "--url="+base, "--partition", p, "--follow", "--limit", "6")
}

// produceLate writes one record to partition p through the client package,
// which does not touch os.Stdout while runCLIFollow holds it.
func produceLate(base, p string) error {
	cl, err := client.New(base)
	if err != nil {
		return err
	}
	defer cl.Close()
	n, err := strconv.Atoi(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cl.Produce(ctx, "orders", []client.Record{{Key: []byte("k"), JSON: json.RawMessage(`"late"`)}}, client.ProduceOptions{Partition: client.Partition(int32(n))})
	return err
}
