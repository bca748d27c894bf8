package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
)

func TestGroupCommands(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	url := "--url=" + c.URL
	if _, err := runCLI(t, runTopics, "", "create", "events", url, "--partitions", "2"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, runProduce, "1\n2\n3\n4\n5\n", "events", url, "--json"); err != nil {
		t.Fatal(err)
	}

	// --limit 2 prints two records and commits only those.
	out, err := runCLI(t, runConsume, "", "events", url, "--group", "billing", "--limit", "2")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Fatalf("consume --group --limit 2: %v\n%s", err, out)
	}
	// The next member of the group reads the other three, each once.
	out2, err := runCLI(t, runConsume, "", "events", url, "--group", "billing", "-e")
	if err != nil || strings.Count(out2, "\n") != 3 {
		t.Fatalf("consume --group, the rest: %v\n%s", err, out2)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out+out2), "\n") {
		var r api.GroupRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Topic != "events" {
			t.Fatalf("line %q: %v", line, err)
		}
		seen[string(r.Value)] = true
	}
	if len(seen) != 5 {
		t.Fatalf("read %v, want the five values once each", seen)
	}

	out, err = runCLI(t, runGroups, "", "list", url)
	if err != nil || !strings.Contains(out, "billing  empty  0") {
		t.Fatalf("groups list: %v\n%s", err, out)
	}
	out, err = runCLI(t, runGroups, "", "describe", "billing", url, "-o", "json")
	var d api.GroupDescription
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || len(d.Partitions) != 2 {
		t.Fatalf("groups describe: %v\n%s", err, out)
	}
	var committed int64
	for _, p := range d.Partitions {
		committed += p.CommittedOffset
		if p.Lag != 0 {
			t.Fatalf("lag after reading everything: %+v", p)
		}
	}
	if committed != 5 {
		t.Fatalf("committed %d records' worth, want 5", committed)
	}
	out, err = runCLI(t, runGroups, "", "describe", "billing", url)
	if err != nil || !strings.Contains(out, "TOPIC   PARTITION  COMMITTED  HIGH-WATERMARK  LAG  LAG-TIME  OWNER") {
		t.Fatalf("groups describe as text: %v\n%s", err, out)
	}
	if out, err = runCLI(t, runGroups, "", "reset", "billing", url, "--topic", "events", "--to", "earliest"); err != nil || strings.Count(out, "\n") != 3 {
		t.Fatalf("groups reset: %v\n%s", err, out)
	}
	out, err = runCLI(t, runConsume, "", "events", url, "--group", "billing", "-e")
	if err != nil || strings.Count(out, "\n") != 5 {
		t.Fatalf("consume after a reset to earliest: %v\n%s", err, out)
	}
	if _, err := runCLI(t, runGroups, "", "delete", "billing", url); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, runGroups, "", "describe", "billing", url); err == nil || !strings.Contains(err.Error(), "UNKNOWN_GROUP") {
		t.Fatalf("describe after delete: %v", err)
	}
}
