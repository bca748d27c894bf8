package main

import (
	"context"
	"fmt"
)

// topicsAlter is `sluice topics alter TOPIC --partitions N`.
func topicsAlter(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics alter TOPIC --partitions N [--validate-only] [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics alter", synopsis, `
Adds partitions to a topic, up to N in all; partitions are never removed,
so N must be more than the topic has. The controller places the new ones as
at creation, with the topic's replication factor. Keys are placed by murmur2
modulo the partition count: once a topic grows, new records of a key may go
to another partition than its earlier ones did (as in Kafka). With
--validate-only the request is checked and nothing is added. Prints the
topic's partition count afterwards.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	partitions := fs.Int("partitions", 0, "the partition count the topic grows to")
	validateOnly := fs.Bool("validate-only", false, "check the request, add nothing")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName(pos, "TOPIC", synopsis)
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *partitions < 1 {
		return usagef("give --partitions N, the partition count to grow to; usage: sluice %s", synopsis)
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.CreatePartitions(ctx, name, *partitions, *validateOnly)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, t)
	}
	if *validateOnly {
		_, err = fmt.Fprintf(cio.out, "topic %s can grow to %d partitions (it has %d; validate only, nothing added)\n", t.Name, *partitions, len(t.Partitions))
		return err
	}
	_, err = fmt.Fprintf(cio.out, "altered topic %s: %d partitions\n", t.Name, len(t.Partitions))
	return err
}
