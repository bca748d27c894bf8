package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

func code(err error) api.Code {
	if err == nil {
		return ""
	}
	return api.Classify(err).Code
}

func TestMemBudget(t *testing.T) {
	b := &memBudget{limit: 100}
	r1, r2 := &reservation{b: b}, &reservation{b: b}
	if err := r1.grow(60); err != nil {
		t.Fatal(err)
	}
	if got := code(r2.grow(50)); got != api.CodeTooManyRequests {
		t.Fatalf("over the free budget: %s, want TOO_MANY_REQUESTS", got)
	}
	if got := code(r2.grow(101)); got != api.CodeRequestTooLarge {
		t.Fatalf("over the whole budget: %s, want REQUEST_TOO_LARGE", got)
	}
	if err := r2.grow(40); err != nil {
		t.Fatal(err)
	}
	// r2 asks for 41 in all: it could fit once r1 is done, so it is 429.
	if got := code(r2.grow(1)); got != api.CodeTooManyRequests {
		t.Fatalf("full: %s", got)
	}
	bg := r1.split(25)
	r1.shrink(10)
	if b.used.Load() != 90 || r1.n != 25 || bg.n != 25 {
		t.Fatalf("used %d, r1 %d, bg %d", b.used.Load(), r1.n, bg.n)
	}
	r1.release()
	r2.release()
	bg.release()
	if b.used.Load() != 0 || b.refused.Load() != 2 {
		t.Fatalf("used %d refused %d after release", b.used.Load(), b.refused.Load())
	}
}

func TestLimitsDefaults(t *testing.T) {
	l, err := Limits{}.withDefaults()
	if err != nil || l.MaxRecordsPerRequest != api.DefaultMaxRecordsPerRequest || l.MaxHeadersPerRecord != api.DefaultMaxHeadersPerRecord ||
		l.ProduceMemoryBytes != api.DefaultProduceMemoryBytes || l.Acks0MaxInFlight != api.DefaultAcks0MaxInFlight {
		t.Fatalf("%+v %v", l, err)
	}
	if _, err := (Limits{ProduceMemoryBytes: -1}).withDefaults(); err == nil {
		t.Fatal("a negative limit was taken")
	}
}

// readGrowing takes budget as bytes arrive, never sizes the buffer past the
// declared length, and gives everything back when it fails.
func TestReadGrowing(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 1<<20+3)
	tests := []struct {
		name     string
		r        io.Reader
		limit    int64
		ceiling  int64
		wantCode api.Code
		maxHeld  int64
	}{
		{"declared", bytes.NewReader(body), 8 << 20, int64(len(body)) + 1, "", int64(len(body)) + 1},
		{"chunked", iotest.HalfReader(bytes.NewReader(body)), 8 << 20, 8<<20 + 1, "", 2 << 20},
		{"over the limit", bytes.NewReader(body), 1 << 20, 1<<20 + 1, api.CodeRequestTooLarge, 0},
		{"failing reader", io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(errors.New("reset"))), 8 << 20, 8<<20 + 1, api.CodeInvalidRequest, 0},
		{"empty", bytes.NewReader(nil), 8 << 20, 1, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &memBudget{limit: 64 << 20}
			res := &reservation{b: b}
			bp, held, err := readGrowing(tt.r, tt.limit, api.CodeRequestTooLarge, tt.ceiling, res)
			if code(err) != tt.wantCode {
				t.Fatalf("err %v, want %s", err, tt.wantCode)
			}
			if err != nil {
				if b.used.Load() != 0 {
					t.Fatalf("%d bytes still held after a failed read", b.used.Load())
				}
				return
			}
			defer putBuf(bp)
			if !bytes.Equal(*bp, body[:len(*bp)]) || (tt.name != "empty" && len(*bp) != len(body)) {
				t.Fatalf("read %d bytes", len(*bp))
			}
			if held != res.n || held > tt.maxHeld || held < int64(len(*bp)) {
				t.Fatalf("held %d (reservation %d) for %d bytes, at most %d", held, res.n, len(*bp), tt.maxHeld)
			}
		})
	}
	t.Run("budget runs out", func(t *testing.T) {
		b := &memBudget{limit: 512 << 10}
		res := &reservation{b: b}
		_, _, err := readGrowing(bytes.NewReader(body), 8<<20, api.CodeRequestTooLarge, 8<<20+1, res)
		if code(err) != api.CodeRequestTooLarge && code(err) != api.CodeTooManyRequests {
			t.Fatalf("err %v", err)
		}
		if b.used.Load() != 0 {
			t.Fatalf("%d bytes still held", b.used.Load())
		}
	})
}

// Each partition's batch buffer is sized for its own records, not for the
// whole body, and its bytes are taken from the budget.
func TestBatchBuffersPerPartition(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 4<<20)
	recs := []pendingRecord{{partition: 0, value: big}, {partition: 1, value: []byte("1")}, {partition: 2, value: []byte("2")}}
	parts, order := groupByPartition(recs)
	b := &memBudget{limit: 64 << 20}
	res := &reservation{b: b}
	bs := newPartitionBatches(len(parts))
	defer bs.release()
	if err := bs.encode(recs, parts, order, recordbatch.Options{}, nil, res); err != nil {
		t.Fatal(err)
	}
	for j, p := range parts {
		if p != 0 && cap(*bs.bufs[j]) > maxPooled {
			t.Fatalf("partition %d's one-byte batch has a %d-byte buffer", p, cap(*bs.bufs[j]))
		}
	}
	if res.n < int64(len(big)) || res.n > int64(len(big))+3*(recordbatch.HeaderSize+36)+2 {
		t.Fatalf("%d budget bytes for batches of %d value bytes", res.n, len(big)+2)
	}
	res.release()
}

// A scan charges its record and header tables to the request's budget and
// stops when the budget is spent.
func TestScanChargesBudget(t *testing.T) {
	body := []byte(`{"records":[` + strings.Repeat(`{"headers":{"a":"b"}},`, 9999) + `{}]}`)
	b := &memBudget{limit: 1 << 20}
	lim := &parseLimits{maxRecords: 100_000, maxHeaders: 10, maxSequences: 1, mem: &reservation{b: b}}
	if _, _, err := parseJSONBody(body, lim); code(err) != api.CodeRequestTooLarge {
		t.Fatalf("10,000 records against a 1 MiB budget: %v", err)
	}
	b = &memBudget{limit: 64 << 20}
	lim = &parseLimits{maxRecords: 100_000, maxHeaders: 10, maxSequences: 1, mem: &reservation{b: b}}
	recs, _, err := parseJSONBody(body, lim)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(recs))*recordCost + int64(len(recs)-1)*(headerCost+1); lim.mem.n != want {
		t.Fatalf("charged %d, want %d", lim.mem.n, want)
	}
	putPending(recs)
	lim.maxRecords = 9999
	if _, _, err := parseJSONBody(body, lim); code(err) != api.CodeTooManyRecords {
		t.Fatalf("10,000 records, limit 9,999: %v", err)
	}
	lim.maxRecords = 9999
	if _, err := parseNDJSON(bytes.Repeat([]byte("{}\n"), 10_000), lim); code(err) != api.CodeTooManyRecords {
		t.Fatalf("NDJSON, 10,000 records, limit 9,999: %v", err)
	}
}

// docs/limits.md and openapi.yaml (x-limits) list exactly api.Limits().
func TestLimitsDocumented(t *testing.T) {
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Limits []struct {
			Name    string `yaml:"name"`
			Scope   string `yaml:"scope"`
			Default int64  `yaml:"default"`
			Unit    string `yaml:"unit"`
			Code    string `yaml:"code"`
		} `yaml:"x-limits"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	want := api.Limits()
	if len(doc.Limits) != len(want) {
		t.Fatalf("openapi.yaml x-limits has %d rows; api.Limits() has %d", len(doc.Limits), len(want))
	}
	for i, l := range want {
		got := doc.Limits[i]
		if got.Name != l.Name || got.Scope != l.Scope || got.Default != l.Default || got.Unit != l.Unit || got.Code != string(l.Refusal) {
			t.Errorf("x-limits row %d = %+v; api.Limits() says %+v", i, got, l)
		}
		if row := fmt.Sprintf("| `%s` |", l.Name); !strings.Contains(section, row) {
			t.Errorf("docs/limits.md has no row %q", row)
		}
	}
}
