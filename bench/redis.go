package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadCount is the records one read takes on both sides of the
// comparison: XREAD COUNT and the fetch's max_records.
const redisReadCount = 1000

// benchConsumeRedis is `sluice bench consume --baseline redis`: JSON records
// read through the gateway (GET .../records, max_records 1000) against
// Redis Streams holding the same records (XREAD COUNT 1000), in alternating
// rounds. The topic is filled once and copied into one stream per
// partition; each round reads everything from the start, one connection
// per partition (at most --connections at once) on both sides.
func benchConsumeRedis(ctx context.Context, c ThroughputOptions, records int, redisURL, results string) error {
	ropts, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	ropts.PoolSize = c.Connections
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", ropts.Addr, err)
	}
	if err := fillTopic(ctx, c, c.Topic, records); err != nil {
		return err
	}
	cl, err := newClient(c.URL)
	if err != nil {
		return err
	}
	defer cl.Close()
	recs, err := readTopic(ctx, cl, c.Topic)
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("sluice-bench:consume:%d:", time.Now().UnixNano())
	defer func() { _ = deleteKeys(context.Background(), rdb, prefix+"*") }()
	streams := map[int32]string{}
	pipe := rdb.Pipeline()
	for i, r := range recs {
		key, ok := streams[r.Partition]
		if !ok {
			key = prefix + strconv.Itoa(int(r.Partition))
			streams[r.Partition] = key
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: []any{"value", []byte(r.Value)}})
		if (i+1)%1000 == 0 || i == len(recs)-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("copying the records into Redis: %w", err)
			}
		}
	}
	c.out.printf("consume --baseline redis: %d records of %d bytes in %d partitions / streams; reads of %d records over %d connections; Redis at %s\n",
		len(recs), c.Size, len(streams), redisReadCount, c.Connections, ropts.Addr)
	c.out.printf("%-10s %12s %10s %10s %10s %10s %10s %6s\n", "target", "records/s", "MB/s", "req/s", "p50", "p99", "cpu ms/MB", "own")
	cc := c
	cc.fetchRecords = redisReadCount
	var bases, sluices []float64
	for round := 0; round < c.Rounds; round++ {
		base, err := benchXREAD(ctx, rdb, streams, c.Connections)
		if err != nil {
			return err
		}
		if base.records != int64(len(recs)) {
			return fmt.Errorf("XREAD read %d records of %d", base.records, len(recs))
		}
		base.print(c.out, "redis")
		res, err := benchConsume(ctx, cc)
		if err != nil {
			return err
		}
		if res.records != int64(len(recs)) {
			return fmt.Errorf("sluice read %d records of %d", res.records, len(recs))
		}
		res.print(c.out, "sluice")
		bases, sluices = append(bases, base.recordsPerSec), append(sluices, res.recordsPerSec)
	}
	c.out.printf("median records/s: Redis XREAD %.0f, sluice %.0f; ratio sluice/redis: %.2f\n",
		median(bases), median(sluices), median(sluices)/median(bases))
	return appendBenchRow(results, benchRow{scenario: "consume JSON /records", unit: "records/s",
		baseline: fmt.Sprintf("Redis XREAD COUNT %d %.0f", redisReadCount, median(bases)), sluice: fmt.Sprintf("%.0f", median(sluices)),
		ratio: ratioCell(median(sluices), median(bases)), aim: "≥ 1.0"})
}

// benchXREAD reads every stream from its start with XREAD COUNT
// redisReadCount, one goroutine per stream, at most conns at once.
func benchXREAD(ctx context.Context, rdb *redis.Client, streams map[int32]string, conns int) (benchResult, error) {
	var (
		mu  sync.Mutex
		res benchResult
		wg  sync.WaitGroup
		sem = make(chan struct{}, conns)
		ers []error
	)
	start, cpu := time.Now(), startCPU()
	for _, key := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			last := "0"
			for ctx.Err() == nil {
				t0 := time.Now()
				out, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: redisReadCount, Block: -1}).Result()
				if err == redis.Nil {
					break
				}
				if err != nil {
					mu.Lock()
					ers = append(ers, err)
					mu.Unlock()
					return
				}
				var n, nbytes int64
				for _, s := range out {
					for _, m := range s.Messages {
						n++
						if v, ok := m.Values["value"].(string); ok {
							nbytes += int64(len(v))
						}
						last = m.ID
					}
				}
				if n == 0 {
					break
				}
				mu.Lock()
				res.records += n
				res.bytes += nbytes
				res.requests++
				res.latencies = append(res.latencies, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	cpu.stop(&res)
	res.finish()
	if len(ers) > 0 {
		return res, ers[0]
	}
	return res, nil
}
