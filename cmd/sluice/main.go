// Command sluice is every Sluice role in one binary: the embedded dev cluster,
// the broker and gateway servers, and the command-line client.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"dev", "run a gateway, brokers, an in-process coordinator and a local object store in one process", runDev},
		{"broker", "run a broker node (ZooKeeper-coordinated)", runBroker},
		{"gateway", "run a stateless public API gateway (ZooKeeper-coordinated)", runGateway},
		{"topics", "list, create, describe or delete topics", runTopics},
		{"produce", "produce records read from stdin (one per line) or given as arguments", runProduce},
		{"consume", "print records of a partition, or of a consumer group's share of a topic, as NDJSON", runConsume},
		{"groups", "list, describe, reset or delete consumer groups", runGroups},
		{"sink", "write topics into Redis or an S3 archive exactly once, as a consumer group member (sink redis|s3)", runSink},
		{"archive", "check an S3 archive of a topic against the log: gaps, overlaps (archive verify)", runArchive},
		{"bench", "measure produce and consume throughput and latency through a gateway", runBench},
		{"version", "print the version", func(context.Context, []string) error { fmt.Println(version); return nil }},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: sluice <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'sluice <command> -h' for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		return
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := c.run(ctx, os.Args[2:])
		stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "sluice %s: %v\n", name, err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", name)
	usage()
	os.Exit(2)
}

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
