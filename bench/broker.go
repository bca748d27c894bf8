package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
)

// BrokerOptions configure Broker (`sluice bench broker`).
type BrokerOptions struct {
	// Partitions to create on the one broker. Default 2,000.
	Partitions int
	// Connections is how many idle keep-alive connections to open to the
	// broker's internal port. Default 1,000.
	Connections int
	// Out receives the figures. Default os.Stdout.
	Out io.Writer
}

// DefaultBroker returns the defaults of BrokerOptions.
func DefaultBroker() BrokerOptions { return BrokerOptions{Partitions: 2000, Connections: 1000} }

// Broker is `sluice bench broker`: what a partition and an idle connection
// cost a broker. It runs one broker and a gateway in this process, creates
// Partitions single-replica partitions (each with its empty log: three
// files, its indexes, its state), then opens Connections keep-alive
// connections to the broker's internal port that each made one request and
// stay idle, and reports heap, RSS, goroutines and file descriptors per
// partition and per connection.
func Broker(ctx context.Context, o BrokerOptions) (err error) {
	out := newFigures(o.Out)
	defer out.done(&err)
	if o.Partitions < 1 || o.Connections < 1 {
		return errors.New("--partitions and --connections must be >= 1")
	}
	cl, err := startWSBenchCluster(ctx, 1)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }() // a throwaway cluster: its data is deleted with it
	url := cl.URL()
	var ci api.ClusterInfo
	if err := getJSON(url+"/v1/cluster", &ci); err != nil || len(ci.Brokers) != 1 {
		return fmt.Errorf("cluster: %+v %v", ci, err)
	}
	addr := strings.TrimPrefix(ci.Brokers[0].Address, "http://")

	before := measureProcess()
	beforeFDs := openFDs()
	start := time.Now()
	if err := ensureTopic(url, "bench-broker", o.Partitions, 1, nil); err != nil {
		return err
	}
	if err := waitLed(ctx, url, "bench-broker", o.Partitions); err != nil {
		return err
	}
	created := time.Since(start)
	withParts := measureProcess()
	partFDs := openFDs()

	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := range o.Connections {
		c, err := idleConn(ctx, addr)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		open = append(open, c)
	}
	time.Sleep(time.Second)
	withConns := measureProcess()
	connFDs := openFDs()

	perPart := func(a, b int64) float64 { return float64(b-a) / float64(o.Partitions) / 1024 }
	perConn := func(a, b int64) float64 { return float64(b-a) / float64(o.Connections) / 1024 }
	out.printf("one broker and a gateway in this process; %d partitions created and led in %s, then %d idle keep-alive connections to the broker\n",
		o.Partitions, created.Round(time.Millisecond), o.Connections)
	out.printf("%-22s %10s %10s %11s %6s\n", "", "heap KiB", "RSS KiB", "goroutines", "fds")
	for _, m := range []struct {
		name string
		m    processMeasure
		fds  int
	}{{"before", before, beforeFDs}, {"with the partitions", withParts, partFDs}, {"and the connections", withConns, connFDs}} {
		out.printf("%-22s %10d %10d %11d %6d\n", m.name, m.m.heap>>10, m.m.rss>>10, m.m.goroutines, m.fds)
	}
	out.printf("per partition: heap %.1f KiB, RSS %.1f KiB, goroutines %.2f, fds %.2f\n",
		perPart(before.heap, withParts.heap), perPart(before.rss, withParts.rss),
		float64(withParts.goroutines-before.goroutines)/float64(o.Partitions), float64(partFDs-beforeFDs)/float64(o.Partitions))
	out.printf("per idle connection (both ends, the client's without a goroutine): heap %.1f KiB, RSS %.1f KiB, goroutines %.2f, fds %.2f\n",
		perConn(withParts.heap, withConns.heap), perConn(withParts.rss, withConns.rss),
		float64(withConns.goroutines-withParts.goroutines)/float64(o.Connections), float64(connFDs-partFDs)/float64(o.Connections))
	return nil
}

// waitLed waits until every partition of topic has a leader.
func waitLed(ctx context.Context, url, topic string, n int) error {
	for deadline := time.Now().Add(5 * time.Minute); ; {
		var tp api.Topic
		if err := getJSON(url+"/v1/topics/"+topic, &tp); err == nil && len(tp.Partitions) == n {
			led := 0
			for _, p := range tp.Partitions {
				if !p.Offline && p.Leader >= 0 && p.HighWatermark >= 0 {
					led++
				}
			}
			if led == n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d partitions of %s did not all get a leader in 5 minutes", n, topic)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// idleConn opens a connection, makes one keep-alive request on it and
// leaves it open and unread.
func idleConn(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// openFDs counts this process's open file descriptors.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
