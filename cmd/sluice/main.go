// Command sluice is every Sluice role in one binary: the embedded dev cluster,
// the broker and gateway servers, and the command-line client.
package main

import (
	"context"
	"errors"
	"flag"
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
	// cli, set for the client commands instead of run, reads and writes
	// through the given streams (tests run them in-process).
	cli func(ctx context.Context, cio clientIO, args []string) error
}

func commands() []command {
	return []command{
		{name: "dev", summary: "run a gateway, brokers, an in-process coordinator and a local object store in one process", run: runDev},
		{name: "broker", summary: "run a broker node (ZooKeeper-coordinated)", run: runBroker},
		{name: "gateway", summary: "run a stateless public API gateway (ZooKeeper-coordinated)", run: runGateway},
		{name: "drain", summary: "ask a broker to hand its leaderships to other replicas before it stops (controlled shutdown)", run: runDrain},
		{name: "topics", summary: "list, describe, create, delete topics or alter their configs", cli: topicsCmd},
		{name: "produce", summary: "produce stdin's lines (or arguments) as records, idempotently; print where each landed", cli: produceCmd},
		{name: "consume", summary: "print records of a topic's partitions from any position, or of a consumer group's share", cli: consumeCmd},
		{name: "groups", summary: "list, describe, reset or delete consumer groups", cli: groupsCmd},
		{name: "push", summary: "create, list, describe, pause, resume, seek, rotate, test or delete push subscriptions (records POSTed to HTTP endpoints)", cli: pushCmd},
		{name: "tokens", summary: "create, list or revoke API tokens (env SLUICE_TOKEN sends one with every command)", cli: tokensCmd},
		{name: "acls", summary: "create, list or delete ACLs", cli: aclsCmd},
		{name: "scram", summary: "set, list or delete SCRAM credentials of Kafka clients (SASL SCRAM-SHA-256/512)", cli: scramCmd},
		{name: "quotas", summary: "list, set or delete client quotas (env SLUICE_CLIENT_ID sends a client id with every command)", cli: quotasCmd},
		{name: "sink", summary: "write topics into Redis or an S3 archive exactly once, as a consumer group member (sink redis|s3)", run: runSink},
		{name: "archive", summary: "check an S3 archive of a topic against the log: gaps, overlaps (archive verify)", run: runArchive},
		{name: "bench", summary: "measure produce and consume throughput and latency through a gateway", run: runBench},
		{name: "version", summary: "print the version", run: func(context.Context, []string) error { fmt.Println(version); return nil }},
	}
}

func usage(cio clientIO) {
	cio.diagf("usage: sluice <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		cio.diagf("  %-9s %s\n", c.name, c.summary)
	}
	cio.diagf("\nRun 'sluice <command> --help' for a command's flags.\n")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, stdIO(), os.Args[1:])
	stop()
	os.Exit(code)
}

// runMain runs the command named by args[0] and returns the exit status:
// 0 on success (and for --help), 1 when the command failed (the error is
// printed with its stable code when the API answered one), 2 for a command
// line that cannot run.
func runMain(ctx context.Context, cio clientIO, args []string) int {
	if len(args) < 1 {
		usage(cio)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(cio)
		return 0
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		var err error
		if c.cli != nil {
			err = c.cli(ctx, cio, args[1:])
		} else {
			err = c.run(ctx, args[1:])
		}
		return exitStatus(cio, name, err)
	}
	cio.diagf("sluice: unknown command %q\n\n", name)
	usage(cio)
	return 2
}

// exitStatus prints err, unless the flag package already did, and maps it
// to the exit status.
func exitStatus(cio clientIO, name string, err error) int {
	var ue *usageError
	var ve *verbError
	if errors.As(err, &ve) {
		name, err = name+" "+ve.verb, ve.err
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagsReported):
		return 2
	case errors.As(err, &ue):
		cio.diagf("sluice %s: %v\n", name, err)
		return 2
	}
	cio.diagf("sluice %s: %v\n", name, err)
	return 1
}

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
