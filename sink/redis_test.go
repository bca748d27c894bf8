package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testsvc"
)

// testRedis is a client of the Redis that `make test` starts, and a key
// prefix no other test uses.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", testsvc.Redis(t), err)
	}
	prefix := fmt.Sprintf("test:%s:%d:", strings.ReplaceAll(t.Name(), "/", "."), rdbUnique(t, rdb))
	return rdb, prefix
}

func rdbUnique(t *testing.T, rdb *redis.Client) int64 {
	n, err := rdb.Incr(context.Background(), "test:unique").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newStore(t *testing.T, rdb *redis.Client, prefix, mode string) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(rdb, RedisOptions{Group: "g", Mode: mode, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func str(s string) []byte { return []byte(s) }

func recs(from int64, kvs ...string) []Record {
	var out []Record
	for i := 0; i+1 < len(kvs); i += 2 {
		r := Record{Offset: from + int64(i/2), Key: str(kvs[i])}
		if kvs[i+1] != "<nil>" {
			r.Value = str(kvs[i+1])
		}
		out = append(out, r)
	}
	return out
}

// snapshot is every key under prefix with its contents, to compare before
// and after a refused write.
func snapshot(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		switch typ {
		case "stream":
			out[k] = fmt.Sprint(rdb.XRange(ctx, k, "-", "+").Val())
		case "hash":
			out[k] = fmt.Sprint(rdb.HGetAll(ctx, k).Val())
		default:
			out[k] = rdb.Get(ctx, k).Val()
		}
	}
	return out
}

var tp0 = api.TopicPartition{Topic: "orders", Partition: 0}

// TestRedisOffsetsEntry: a partition's entry in the offsets hash is
// {"next","fence"}, the fence the highest claimed. (The Store contract,
// store_contract_test.go, holds Claim and Write to the rest.)
func TestRedisOffsetsEntry(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	s := newStore(t, rdb, prefix, ModeStream)
	if _, err := s.Claim(ctx, tp0, 3); err != nil {
		t.Fatal(err)
	}
	if next, err := s.Write(ctx, tp0, 3, recs(10, "a", "1", "b", "2")); err != nil || next != 12 {
		t.Fatalf("write: next %d, %v; want 12", next, err)
	}
	if _, err := s.Claim(ctx, tp0, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, tp0, 4); !errors.Is(err, ErrFenced) {
		t.Fatalf("claim at a lower fence: %v, want ErrFenced", err)
	}
	if got := rdb.HGet(ctx, s.OffsetsKey(), "orders/0").Val(); got != `{"next":12,"fence":5}` {
		t.Fatalf("offsets entry %s", got)
	}
}

func TestRedisWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		mode  string
		check func(t *testing.T, rdb *redis.Client, s *RedisStore)
	}{
		{"stream entries of every record shape", ModeStream, func(t *testing.T, rdb *redis.Client, s *RedisStore) {
			b := recs(0, "a", "1", "b", "<nil>", "c", "3")
			b[2].Headers = map[string]string{"h": "x"}
			b = append(b, Record{Offset: 3, Value: str("keyless")}, Record{Offset: 4})
			if next, err := s.Write(ctx, tp0, 1, b); err != nil || next != 5 {
				t.Fatalf("write: %d, %v", next, err)
			}
			var got []string
			for _, e := range rdb.XRange(ctx, s.DataKey("orders"), "-", "+").Val() {
				got = append(got, fmt.Sprint(e.Values))
			}
			want := []string{
				"map[key:a offset:0 partition:0 value:1]",
				"map[key:b offset:1 partition:0]",
				`map[headers:{"h":"x"} key:c offset:2 partition:0 value:3]`,
				"map[offset:3 partition:0 value:keyless]",
				"map[offset:4 partition:0]",
			}
			if !slices.Equal(got, want) {
				t.Fatalf("stream entries\n%q\nwant\n%q", got, want)
			}
		}},
		{"hash fold with tombstones", ModeHash, func(t *testing.T, rdb *redis.Client, s *RedisStore) {
			b := recs(0, "a", "1", "b", "2", "a", "3", "b", "<nil>", "c", "4")
			b = append(b, Record{Offset: 5, Value: str("keyless")})
			if next, err := s.Write(ctx, tp0, 1, b); err != nil || next != 6 {
				t.Fatalf("write: %d, %v", next, err)
			}
			if got := rdb.HGetAll(ctx, s.DataKey("orders")).Val(); fmt.Sprint(got) != "map[a:3 c:4]" {
				t.Fatalf("hash %v", got)
			}
		}},
		{"string fold with tombstones", ModeString, func(t *testing.T, rdb *redis.Client, s *RedisStore) {
			if _, err := s.Write(ctx, tp0, 1, recs(0, "a", "1", "b", "2")); err != nil {
				t.Fatal(err)
			}
			if next, err := s.Write(ctx, tp0, 1, recs(2, "a", "3", "b", "<nil>")); err != nil || next != 4 {
				t.Fatalf("write: %d, %v", next, err)
			}
			if v := rdb.Get(ctx, s.DataKey("orders")+":a").Val(); v != "3" {
				t.Fatalf("a = %q", v)
			}
			if n := rdb.Exists(ctx, s.DataKey("orders")+":b").Val(); n != 0 {
				t.Fatal("b survived its tombstone")
			}
		}},
		{"a bad batch changes nothing", ModeHash, func(t *testing.T, rdb *redis.Client, s *RedisStore) {
			if _, err := s.Write(ctx, tp0, 1, recs(0, "a", "1")); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, rdb, s.opts.Prefix)
			b := recs(1, "b", "2", "c", "3")
			b[1].Offset = 1
			if _, err := s.Write(ctx, tp0, 1, b); !errors.Is(err, ErrBadBatch) {
				t.Fatalf("offsets not ascending: %v, want ErrBadBatch", err)
			}
			if got := snapshot(t, rdb, s.opts.Prefix); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("a bad batch changed Redis:\n%v\n%v", before, got)
			}
		}},
		{"a data key of another type is refused before any write", ModeString, func(t *testing.T, rdb *redis.Client, s *RedisStore) {
			rdb.RPush(ctx, s.DataKey("orders")+":b", "x")
			before := snapshot(t, rdb, s.opts.Prefix)
			if _, err := s.Write(ctx, tp0, 1, recs(0, "a", "1", "b", "2")); !errors.Is(err, ErrBadBatch) {
				t.Fatalf("write over a list: %v, want ErrBadBatch", err)
			}
			if got := snapshot(t, rdb, s.opts.Prefix); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("a refused batch changed Redis:\n%v\n%v", before, got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, prefix := testRedis(t)
			tc.check(t, rdb, newStore(t, rdb, prefix, tc.mode))
		})
	}
}

func TestRedisScriptsReloadAfterFlush(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	s := newStore(t, rdb, prefix, ModeStream)
	if _, err := s.Claim(ctx, tp0, 1); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, tp0, 1, recs(0, "a", "1")); err != nil {
		t.Fatalf("write after SCRIPT FLUSH: %v", err)
	}
}

// TestRedisWriteForms: a batch sent in its short form ("kv" for keyed
// records, "v" for keyless ones) leaves Redis as the full form does, in
// every mode, and a retry that overlaps what was written lands only the
// records past next.
func TestRedisWriteForms(t *testing.T) {
	ctx := context.Background()
	keyless := func(from int64, values ...string) []Record {
		var out []Record
		for i, v := range values {
			out = append(out, Record{Offset: from + int64(i), Value: str(v)})
		}
		return out
	}
	for _, tc := range []struct {
		name, form string
		first      []Record
		retry      []Record // overlaps first
	}{
		{"keyed", formKeyValue, recs(10, "a", "1", "b", "2", "a", "3"), recs(11, "b", "2", "a", "3", "c", "4", "b", "5")},
		{"keyless", formValue, keyless(10, "x", "y"), keyless(10, "x", "y", "z")},
	} {
		for _, mode := range []string{ModeStream, ModeHash, ModeString} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				if got := batchForm(tc.first); got != tc.form {
					t.Fatalf("batchForm %q, want %q", got, tc.form)
				}
				rdb, prefix := testRedis(t)
				short := newStore(t, rdb, prefix+"short:", mode)
				full := newStore(t, rdb, prefix+"full:", mode)
				want := tc.retry[len(tc.retry)-1].Offset + 1
				for _, b := range [][]Record{tc.first, tc.retry} {
					n1, err1 := short.Write(ctx, tp0, 1, b)
					n2, err2 := full.write(ctx, tp0, 1, b, formFull)
					if err1 != nil || err2 != nil || n1 != n2 {
						t.Fatalf("short form: next %d, %v; full form: next %d, %v", n1, err1, n2, err2)
					}
				}
				if n, _ := full.Write(ctx, tp0, 1, nil); n != want {
					t.Fatalf("next %d after the retry, want %d", n, want)
				}
				a, b := contents(t, rdb, prefix+"short:"), contents(t, rdb, prefix+"full:")
				if fmt.Sprint(a) != fmt.Sprint(b) {
					t.Fatalf("short form left\n%v\nfull form left\n%v", a, b)
				}
				if mode == ModeStream {
					entries := rdb.XLen(ctx, short.DataKey("orders")).Val()
					if entries != want-10 {
						t.Fatalf("%d stream entries, want %d: a retried record landed twice or not at all", entries, want-10)
					}
				}
			})
		}
	}
	t.Run("gaps and mixed shapes take the full form", func(t *testing.T) {
		gap := recs(0, "a", "1", "b", "2")
		gap[1].Offset = 5
		mixed := append(recs(0, "a", "1"), Record{Offset: 1, Value: str("keyless")})
		tomb := recs(0, "a", "1", "b", "<nil>")
		headers := recs(0, "a", "1")
		headers[0].Headers = map[string]string{"h": "x"}
		for _, b := range [][]Record{gap, mixed, tomb, headers, nil} {
			if got := batchForm(b); got != formFull {
				t.Errorf("batchForm(%v) = %q, want %q", b, got, formFull)
			}
		}
	})
}

// contents is what snapshot returns with the prefix cut from each key and
// each stream entry's ID dropped, so that two prefixes can be compared.
func contents(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for k, v := range snapshot(t, rdb, prefix) {
		if rdb.Type(ctx, k).Val() == "stream" {
			var vals []string
			for _, e := range rdb.XRange(ctx, k, "-", "+").Val() {
				vals = append(vals, fmt.Sprint(e.Values))
			}
			v = fmt.Sprint(vals)
		}
		out[strings.TrimPrefix(k, prefix)] = v
	}
	return out
}
