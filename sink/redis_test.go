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
