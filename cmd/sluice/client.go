package main

import (
	"context"
	"encoding/json"
	"io"
	"os"

	"github.com/sluice-io/sluice/client"
)

// The command-line client speaks the public HTTP API only, through the
// client package, like any other Go program. Each client command has a
// run* form on the process's standard streams.

func runTopics(ctx context.Context, args []string) error  { return topicsCmd(ctx, stdIO(), args) }
func runProduce(ctx context.Context, args []string) error { return produceCmd(ctx, stdIO(), args) }
func runConsume(ctx context.Context, args []string) error { return consumeCmd(ctx, stdIO(), args) }
func runGroups(ctx context.Context, args []string) error  { return groupsCmd(ctx, stdIO(), args) }

// newClient is a client of the gateway at base; the caller closes it. A
// URL it cannot use is a usage error (--url, SLUICE_URL). The environment
// variable SLUICE_TOKEN, when set, is sent as the bearer token.
func newClient(base string) (*client.Client, error) {
	cl, err := client.New(base, client.WithUserAgent("sluice-cli/"+version), client.WithToken(os.Getenv("SLUICE_TOKEN")),
		client.WithClientID(os.Getenv("SLUICE_CLIENT_ID")))
	if err != nil {
		return nil, &usageError{msg: "--url: " + err.Error()}
	}
	return cl, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
