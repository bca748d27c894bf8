package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
)

// runDrain is `sluice drain`: a controlled shutdown's first half, for a
// supervisor's pre-stop hook. The broker marks itself shutting down, the
// controller moves its leaderships to other in-sync replicas, and the
// command returns once nothing more can move. The broker leads nothing new
// until it restarts; stopping it (SIGTERM) then costs no election.
func runDrain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	addr := fs.String("broker", envOr("SLUICE_ADDR", "127.0.0.1:9001"), "the broker's internal API address host:port, or https://host:port for a broker with TLS (env SLUICE_ADDR)")
	timeout := fs.Duration("timeout", envDuration("SLUICE_DRAIN_TIMEOUT", 30*time.Second), "how long to wait for the leaderships to move (env SLUICE_DRAIN_TIMEOUT)")
	secretf := addClusterSecretFlag(fs)
	clusterTLS := addClusterTLSFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	secret, err := secretf.value()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be positive")
	}
	c := brokerapi.NewClient()
	defer c.Close()
	if err := clusterTLS.useOn(c); err != nil {
		return err
	}
	if secret != nil {
		c.Auth = &brokerapi.NodeAuth{Secret: secret, Node: brokerapi.NodeGateway}
	}
	// An operator with the cluster secret drains as a node, which a broker
	// that checks ACLs lets do everything.
	ctx, cancel := context.WithTimeout(auth.WithPrincipal(ctx, brokerapi.PrincipalGateway), *timeout+5*time.Second)
	defer cancel()
	r, err := c.Drain(ctx, *addr, *timeout)
	if err != nil {
		return fmt.Errorf("broker %s: %w", *addr, err)
	}
	fmt.Printf("broker %d: leaderships handed over; it still leads %d partitions with no other in-sync replica\n", r.BrokerID, r.Leaderships)
	return nil
}
