package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

func tokensCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "tokens", []subcommand{
		{"create", "make an API token for a principal (shown once)", tokensCreate},
		{"list", "the stored tokens: ids, principals, expiry (never secrets)", tokensList},
		{"delete", "revoke a token by id", tokensDelete},
	}, args)
}

func aclsCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "acls", []subcommand{
		{"create", "add an ACL", aclsCreate},
		{"list", "the ACLs, optionally filtered", aclsList},
		{"delete", "remove the ACLs a filter matches", aclsDelete},
	}, args)
}

// flagsOnlyClient parses a verb that takes flags and no arguments, checks
// its output switch (out may be nil) and returns a client of the gateway at
// base; the caller closes it.
func flagsOnlyClient(fs *flag.FlagSet, args []string, base, out *string, verb, synopsis string) (*client.Client, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != 0 {
		return nil, usagef("%s takes flags only; usage: sluice %s", verb, synopsis)
	}
	if out != nil {
		if err := checkOutput(*out); err != nil {
			return nil, err
		}
	}
	return newClient(*base)
}

func tokensCreate(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "tokens create --principal User:NAME [--ttl DURATION] [-o text|json] [--url URL]"
	fs := newFlags(cio, "tokens create", synopsis, "Makes an API token. The token is printed once and never shown again; only its hash is stored.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	principal := fs.String("principal", "", "who the token authenticates as, User:NAME (required)")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 24h; 0: never expires")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *principal == "" {
		return usagef("usage: sluice %s", synopsis)
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	tok, err := cl.CreateToken(ctx, *principal, ttl.Milliseconds())
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, tok)
	}
	_, err = fmt.Fprintln(cio.out, tok.Token)
	return err
}

func tokensList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "tokens list [-o text|json] [--url URL]"
	fs := newFlags(cio, "tokens list", synopsis, "Lists the stored tokens: ids, principals, creation and expiry times.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "tokens list", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	toks, err := cl.ListTokens(ctx)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, api.TokenList{Tokens: toks})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tCREATED\tEXPIRES")
	for _, t := range toks {
		exp := "never"
		if t.ExpiresAt > 0 {
			exp = time.UnixMilli(t.ExpiresAt).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Principal, time.UnixMilli(t.CreatedAt).UTC().Format(time.RFC3339), exp)
	}
	return tw.Flush()
}

func tokensDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "tokens delete ID [--url URL]"
	fs := newFlags(cio, "tokens delete", synopsis, "Revokes a token: every gateway refuses it within moments.")
	base := gatewayFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := oneName(pos, "ID", synopsis)
	if err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.DeleteToken(ctx, id); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cio.out, "revoked token %s\n", id)
	return err
}

// aclFlags are the fields of an ACL, as flags: a rule to create, or a filter.
func aclFlags(fs *flag.FlagSet) func() api.ACL {
	principal := fs.String("principal", "", "User:NAME, or User:* for everyone")
	rtype := fs.String("resource-type", "", "topic, group or cluster")
	pattern := fs.String("pattern", "", "literal (the default when creating) or prefixed")
	name := fs.String("resource", "", `the topic or group name or prefix ("*" with literal: all; "cluster" for the cluster)`)
	op := fs.String("operation", "", "READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS or ALL")
	perm := fs.String("permission", "", "allow (the default when creating) or deny")
	return func() api.ACL {
		return api.ACL{Principal: *principal, ResourceType: *rtype, PatternType: *pattern, ResourceName: *name, Operation: *op, Permission: *perm}
	}
}

func printACLs(cio clientIO, out string, acls []api.ACL) error {
	if out == "json" {
		return printJSON(cio.out, api.ACLList{ACLs: acls})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tRESOURCE\tPATTERN\tNAME\tOPERATION\tPERMISSION")
	for _, a := range acls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Principal, a.ResourceType, a.PatternType, a.ResourceName, a.Operation, a.Permission)
	}
	return tw.Flush()
}

func aclsCreate(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "acls create --principal P --resource-type T --resource NAME --operation OP [--pattern literal|prefixed] [--permission allow|deny] [-o text|json] [--url URL]"
	fs := newFlags(cio, "acls create", synopsis, "Adds an ACL. A deny beats every allow; with no matching allow, the answer is no.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	rule := aclFlags(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "acls create", synopsis)
	if err != nil {
		return err
	}
	a := rule()
	if a.Permission == "" {
		a.Permission = "allow"
	}
	defer cl.Close()
	made, err := cl.CreateACL(ctx, a)
	if err != nil {
		return err
	}
	return printACLs(cio, *out, []api.ACL{made})
}

func aclsList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "acls list [--principal P] [--resource-type T] [--resource NAME] [--pattern P] [--operation OP] [--permission P] [-o text|json] [--url URL]"
	fs := newFlags(cio, "acls list", synopsis, "Lists the ACLs whose fields equal the given ones.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	filter := aclFlags(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "acls list", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	acls, err := cl.ListACLs(ctx, filter())
	if err != nil {
		return err
	}
	return printACLs(cio, *out, acls)
}

func aclsDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "acls delete [--principal P] [--resource-type T] [--resource NAME] [--pattern P] [--operation OP] [--permission P] [-o text|json] [--url URL]"
	fs := newFlags(cio, "acls delete", synopsis, "Removes every ACL whose fields equal the given ones (at least one) and lists them.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	filter := aclFlags(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "acls delete", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	gone, err := cl.DeleteACLs(ctx, filter())
	if err != nil {
		return err
	}
	return printACLs(cio, *out, gone)
}
