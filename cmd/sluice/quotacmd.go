package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/sluice-io/sluice/api"
)

func quotasCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "quotas", []subcommand{
		{"list", "the client quotas, optionally of one principal or client id", quotasList},
		{"set", "set an entity's rates (replacing the ones it had)", quotasSet},
		{"delete", "remove an entity's quota", quotasDelete},
	}, args)
}

// entityFlags are the parts of a quota entity, as flags.
func entityFlags(fs *flag.FlagSet) (principal, clientID *string) {
	return fs.String("principal", "", `User:NAME, or "<default>" for every principal without a quota of its own`),
		fs.String("client-id", "", `a client id (X-Client-Id), or "<default>" for every client id without one`)
}

func rate(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func printQuotas(cio clientIO, out string, quotas []api.Quota) error {
	if out == "json" {
		return printJSON(cio.out, api.QuotaList{Quotas: quotas})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tCLIENT ID\tPRODUCE B/S\tFETCH B/S\tREQUESTS/S")
	for _, q := range quotas {
		p, c := q.Principal, q.ClientID
		if p == "" {
			p = "-"
		}
		if c == "" {
			c = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p, c, rate(q.ProducerByteRate), rate(q.ConsumerByteRate), rate(q.RequestRate))
	}
	return tw.Flush()
}

func quotasList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "quotas list [--principal P] [--client-id ID] [-o text|json] [--url URL]"
	fs := newFlags(cio, "quotas list", synopsis, "Lists the client quotas whose principal and client id equal the given ones.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	principal, clientID := entityFlags(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "quotas list", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	quotas, err := cl.ListQuotas(ctx, *principal, *clientID)
	if err != nil {
		return err
	}
	return printQuotas(cio, *out, quotas)
}

func quotasSet(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "quotas set [--principal P] [--client-id ID] [--producer-byte-rate N] [--consumer-byte-rate N] [--request-rate N] [-o text|json] [--url URL]"
	fs := newFlags(cio, "quotas set", synopsis,
		"Sets an entity's rates, per broker (as Kafka's), replacing the ones it had; a rate left out is not set. Over a rate, requests get 429 THROTTLED with Retry-After.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	principal, clientID := entityFlags(fs)
	produce := fs.Float64("producer-byte-rate", 0, "batch bytes a second the entity may append, per broker")
	fetch := fs.Float64("consumer-byte-rate", 0, "batch bytes a second the entity may fetch, per broker")
	requests := fs.Float64("request-rate", 0, "requests a second the entity may make, per broker")
	cl, err := flagsOnlyClient(fs, args, base, out, "quotas set", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *principal == "" && *clientID == "" {
		return usagef("name --principal, --client-id or both; usage: sluice %s", synopsis)
	}
	q, err := cl.SetQuota(ctx, api.Quota{Principal: *principal, ClientID: *clientID,
		ProducerByteRate: *produce, ConsumerByteRate: *fetch, RequestRate: *requests})
	if err != nil {
		return err
	}
	return printQuotas(cio, *out, []api.Quota{q})
}

func quotasDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "quotas delete [--principal P] [--client-id ID] [--url URL]"
	fs := newFlags(cio, "quotas delete", synopsis, "Removes exactly the named entity's quota.")
	base := gatewayFlag(fs)
	principal, clientID := entityFlags(fs)
	cl, err := flagsOnlyClient(fs, args, base, nil, "quotas delete", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *principal == "" && *clientID == "" {
		return usagef("name --principal, --client-id or both; usage: sluice %s", synopsis)
	}
	if err := cl.DeleteQuota(ctx, *principal, *clientID); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cio.out, "deleted the quota of principal %q client id %q\n", *principal, *clientID)
	return err
}
