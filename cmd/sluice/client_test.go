package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
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
		_ = inW.Close() // the command reads to the end either way
	}()
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(outR)
		out <- string(b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, args)
	_ = outW.Close() // ends the reader above
	s := <-out
	_ = inR.Close()
	_ = outR.Close()
	return s, err
}

// TestClientCommands covers what the golden files do not: the long flag
// names scripts use, a large stdin round trip, and following partitions
// while records arrive.
func TestClientCommands(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	url := "--url=" + c.URL

	if _, err := runCLI(t, runTopics, "", "create", "orders", url, "--partitions", "2", "--config", "retention.ms=60000"); err != nil {
		t.Fatalf("topics create: %v", err)
	}
	out, err := runCLI(t, runTopics, "", "describe", "orders", url, "-o", "json")
	var created api.Topic
	if err != nil || json.Unmarshal([]byte(out), &created) != nil || len(created.Partitions) != 2 || created.Configs["retention.ms"] != "60000" {
		t.Fatalf("topics describe -o json: %v\n%s", err, out)
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
	out, err = runCLI(t, runConsume, "", "orders", url, "--partition", p, "-e", "-f", `%k=%v\n`)
	if err != nil || out != "k=a\nk=b\nk=1\nk=2\nk=3\n" {
		t.Fatalf("consume: %v\n%q", err, out)
	}
	if out, err := runCLI(t, runConsume, "", "orders", url, "--partition", p, "--offset", "3", "--limit", "1"); err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"offset":3`) {
		t.Fatalf("consume --offset --limit: %v\n%s", err, out)
	}

	// 5,000 lines through batches of at most 500 come back in order, each once.
	var in strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	other := "0"
	if p == "0" {
		other = "1"
	}
	out, err = runCLI(t, runProduce, in.String(), "orders", url, "-p", other, "-f", `%o\n`)
	if err != nil || strings.Count(out, "\n") != 5000 || !strings.HasPrefix(out, "0\n1\n") || !strings.HasSuffix(out, "\n4999\n") {
		t.Fatalf("produce 5,000 lines: %v\n%.200s", err, out)
	}
	if out, err := runCLI(t, runConsume, "", "orders", url, "-p", other, "-e", "-f", `%v\n`); err != nil || out != in.String() {
		t.Fatalf("consume 5,000 lines: %v, %d bytes back of %d", err, len(out), in.Len())
	}

	// Following returns once -n records came, including one produced after it started.
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

	// Following every partition: a record produced to each after the start
	// is printed, whichever partition it is in.
	done = make(chan string, 1)
	go func() {
		out, err := runCLI(t, runConsume, "", "orders", url, "-o", "end", "-n", "2", "-f", `%p:%v\n`)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	time.Sleep(300 * time.Millisecond)
	for _, part := range []string{"0", "1"} {
		if err := produceTo(c.URL, part, `"new-`+part+`"`); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case out := <-done:
		lines := strings.Split(strings.TrimSpace(out), "\n")
		sort.Strings(lines)
		if strings.Join(lines, " ") != `0:"new-0" 1:"new-1"` {
			t.Fatalf("consume -o end -n 2 over two partitions:\n%s", out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("consume -o end -n 2 did not return")
	}

	if _, err := runCLI(t, runTopics, "", "delete", "orders", url); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, runTopics, "", "describe", "orders", url); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("describe after delete: %v", err)
	}
}

// runCLIFollow is `sluice consume --follow` of six records.
func runCLIFollow(t *testing.T, base, p string) (string, error) {
	return runCLI(t, runConsume, "", "orders", "--url="+base, "--partition", p, "--follow", "--limit", "6")
}

// produceLate writes one record to partition p through the client package,
// which does not touch os.Stdout while runCLIFollow holds it.
func produceLate(base, p string) error { return produceTo(base, p, `"late"`) }

// produceTo writes one JSON value to partition p of orders.
func produceTo(base, p, value string) error {
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
	_, err = cl.Produce(ctx, "orders", []client.Record{{Key: []byte("k"), JSON: json.RawMessage(value)}}, client.ProduceOptions{Partition: client.Partition(int32(n))})
	return err
}
