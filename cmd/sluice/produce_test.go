package main

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/embedtest"
)

// TestProduceLinesAsTheyCome: a line typed at a terminal is produced, and
// its delivery printed, while stdin is still open: batches take what has
// arrived rather than wait for --batch lines.
func TestProduceLinesAsTheyCome(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topicsCmd(ctx, clientIO{out: io.Discard, errOut: io.Discard}, []string{"create", "typed", "--url", c.URL}); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- produceCmd(ctx, clientIO{in: inR, out: outW, errOut: io.Discard}, []string{"typed", "--url", c.URL, "-f", `%o %v\n`})
		outW.Close()
	}()
	deliveries := bufio.NewScanner(outR)
	for i, line := range []string{"first", "second"} {
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !deliveries.Scan() {
			t.Fatalf("no delivery line for %q: %v", line, deliveries.Err())
		}
		if want := string(rune('0'+i)) + " " + line; deliveries.Text() != want {
			t.Fatalf("delivery %q, want %q", deliveries.Text(), want)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if deliveries.Scan() {
		t.Fatalf("unexpected output %q", deliveries.Text())
	}
}
