package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/api"
)

func scramCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "scram", []subcommand{
		{"set", "set a principal's SCRAM password for Kafka clients (read from stdin)", scramSet},
		{"list", "the SCRAM credentials: principals, mechanisms, iterations (never keys)", scramList},
		{"delete", "remove a principal's SCRAM credential for a mechanism", scramDelete},
	}, args)
}

func scramSet(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "scram set --principal User:NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N] [-o text|json] [--url URL] < password"
	fs := newFlags(cio, "scram set", synopsis, "Sets a principal's SCRAM credential, which Kafka clients use with SASL SCRAM-SHA-256 or SCRAM-SHA-512 (user name NAME). The password is the first line of stdin; only a salted hash of it is stored.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	principal := fs.String("principal", "", "whose credential it is, User:NAME (required)")
	mechanism := fs.String("mechanism", "SCRAM-SHA-256", "SCRAM-SHA-256 or SCRAM-SHA-512")
	iterations := fs.Int("iterations", 0, "PBKDF2 iterations, 4096 to 16384; 0: 8192")
	cl, err := flagsOnlyClient(fs, args, base, out, "scram set", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *principal == "" {
		return usagef("usage: sluice %s", synopsis)
	}
	line, err := bufio.NewReader(io.LimitReader(cio.in, 4<<10)).ReadString('\n')
	if err != nil && err != io.EOF {
		return err
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return usagef("scram set: the password is the first line of stdin, and it is empty")
	}
	cred, err := cl.SetScramCredential(ctx, api.SetScramCredentialRequest{Principal: *principal, Mechanism: *mechanism, Password: password, Iterations: *iterations})
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, cred)
	}
	_, err = fmt.Fprintf(cio.out, "set %s credential of %s (%d iterations)\n", cred.Mechanism, cred.Principal, cred.Iterations)
	return err
}

func scramList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "scram list [--principal User:NAME] [-o text|json] [--url URL]"
	fs := newFlags(cio, "scram list", synopsis, "Lists the SCRAM credentials: principals, mechanisms, iterations and when each was set.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	principal := fs.String("principal", "", "only this principal's")
	cl, err := flagsOnlyClient(fs, args, base, out, "scram list", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	creds, err := cl.ListScramCredentials(ctx, *principal)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, api.ScramCredentialList{Credentials: creds})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tMECHANISM\tITERATIONS\tSET")
	for _, c := range creds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Principal, c.Mechanism, c.Iterations, time.UnixMilli(c.CreatedAt).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func scramDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "scram delete --principal User:NAME --mechanism SCRAM-SHA-256|SCRAM-SHA-512 [--url URL]"
	fs := newFlags(cio, "scram delete", synopsis, "Removes a principal's SCRAM credential for a mechanism: Kafka clients can no longer authenticate with it.")
	base := gatewayFlag(fs)
	principal := fs.String("principal", "", "whose credential (required)")
	mechanism := fs.String("mechanism", "", "SCRAM-SHA-256 or SCRAM-SHA-512 (required)")
	cl, err := flagsOnlyClient(fs, args, base, nil, "scram delete", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *principal == "" || *mechanism == "" {
		return usagef("usage: sluice %s", synopsis)
	}
	if err := cl.DeleteScramCredential(ctx, *principal, *mechanism); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cio.out, "deleted %s credential of %s\n", *mechanism, *principal)
	return err
}
