package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

func TestAppendBenchRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.md")
	if err := os.WriteFile(path, []byte("# sluice bench\n\nLoad average before: 1.00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := []benchRow{
		{scenario: "produce", unit: "records/s", baseline: "append 100", sluice: "90", ratio: ratioCell(90, 100)},
		{scenario: "e2e a|b", unit: "ms", sluice: "p99 3.00"},
	}
	for _, r := range rows {
		if err := appendBenchRow(path, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# sluice bench\n\nLoad average before: 1.00\n\n" + benchResultsHeader +
		"| produce | records/s | append 100 | 90 | 0.90 | — |\n" +
		"| e2e a/b | ms | — | p99 3.00 | — | — |\n"
	if string(got) != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	if err := appendBenchRow("", rows[0]); err != nil {
		t.Fatalf("no --results: %v", err)
	}
}

// The e2e producer's records are the size asked for, and the consumer
// reads back the time they were stamped with.
func TestE2ERecords(t *testing.T) {
	at := time.Unix(1_700_000_000, 123456789)
	for _, size := range []int{40, 100, 1000} {
		var b bytes.Buffer
		(&e2eProducer{size: size}).fill(&b, at, 3)
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("size %d: %d lines", size, len(lines))
		}
		for _, l := range lines {
			var rec struct{ Value json.RawMessage }
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("size %d: %q: %v", size, l, err)
			}
			if len(rec.Value) != size {
				t.Errorf("size %d: value of %d bytes: %s", size, len(rec.Value), rec.Value)
			}
			got, ok := sentAt(api.FetchedRecord{Value: rec.Value})
			if !ok || got != at.UnixNano() {
				t.Errorf("size %d: sentAt = %d, %v; want %d", size, got, ok, at.UnixNano())
			}
		}
	}
	if _, ok := sentAt(api.FetchedRecord{Value: json.RawMessage(`{"x":1}`)}); ok {
		t.Error("sentAt read a time out of a record without one")
	}
}
