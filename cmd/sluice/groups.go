package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

const groupsUsage = "usage: sluice groups list | describe GROUP | reset GROUP --topic T[,T] --to earliest|latest|offset:N|timestamp:MS | delete GROUP [--url URL] [-o text|json]"

// runGroups is `sluice groups list|describe|reset|delete`.
func runGroups(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(groupsUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("groups "+sub, flag.ContinueOnError)
	base := gatewayFlag(fs)
	out := fs.String("o", "text", "output: text or json")
	topics := fs.String("topic", "", "reset: the topics to reset, comma-separated")
	to := fs.String("to", "", "reset: earliest, latest, offset:N or timestamp:MS")
	rest := args[1:]
	var group string
	if sub != "list" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return errors.New(groupsUsage)
		}
		group, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if *out != "text" && *out != "json" {
		return fmt.Errorf("-o %q: want text or json", *out)
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	switch sub {
	case "list":
		gs, err := cl.ListGroups(ctx)
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(api.GroupList{Groups: gs})
		}
		return printGroupList(os.Stdout, gs)
	case "describe":
		d, err := cl.DescribeGroup(ctx, group)
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(d)
		}
		return printGroup(os.Stdout, d)
	case "reset":
		if *topics == "" || *to == "" {
			return errors.New("reset needs --topic and --to")
		}
		res, err := cl.ResetOffsets(ctx, group, api.ResetOffsetsRequest{Topics: strings.Split(*topics, ","), To: *to})
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(res)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tOFFSET")
		for _, o := range res.Committed {
			fmt.Fprintf(w, "%s\t%d\t%d\n", o.Topic, o.Partition, o.Offset)
		}
		return w.Flush()
	case "delete":
		if err := cl.DeleteGroup(ctx, group); err != nil {
			return err
		}
		if *out == "text" {
			fmt.Printf("deleted group %s\n", group)
		}
		return nil
	}
	return errors.New(groupsUsage)
}

func printGroupList(w io.Writer, gs []api.GroupSummary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", g.Group, g.State, g.Members)
	}
	return tw.Flush()
}

// printGroup renders a group as kafka-consumer-groups --describe does: a
// row per partition with its owner, then the members.
func printGroup(w io.Writer, d api.GroupDescription) error {
	fmt.Fprintf(w, "group %s: %s, epoch %d, assignor %s, %d members\n\n", d.Group, d.State, d.GroupEpoch, d.Assignor, len(d.Members))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tLAG-TIME\tOWNER")
	num := func(n int64) string {
		if n < 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, p := range d.Partitions {
		lagTime := "-"
		if p.LagMs >= 0 {
			lagTime = (time.Duration(p.LagMs) * time.Millisecond).String()
		}
		owner := p.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, num(p.CommittedOffset), num(p.HighWatermark), num(p.Lag), lagTime, owner)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Members) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tINSTANCE\tKIND\tEPOCH\tPARTITIONS")
	for _, m := range d.Members {
		inst := m.InstanceID
		if inst == "" {
			inst = "-"
		}
		var parts []string
		for _, tp := range m.Assignment {
			parts = append(parts, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.MemberID, inst, m.Kind, m.MemberEpoch, strings.Join(parts, ","))
	}
	return tw.Flush()
}

// consumeGroup is `sluice consume TOPIC --group G`: a group member that
// prints each record as NDJSON and commits after printing (at least once).
// Without --follow it stops at the first empty poll; it leaves the group on
// exit, so its partitions move at once.
func consumeGroup(ctx context.Context, cl *client.Client, group string, topics []string, follow bool, limit int, instance string) error {
	opts := client.GroupConsumerOptions{Topics: topics, InstanceID: instance, MaxWait: fetchWait, Rejoin: true}
	if !follow {
		opts.MaxWait = time.Second
	}
	gc := cl.NewGroupConsumer(group, opts)
	if err := gc.Join(ctx); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gc.Close(cctx)
	}()
	enc := json.NewEncoder(os.Stdout)
	n := 0
	for ctx.Err() == nil {
		b, err := gc.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, r := range b.Records {
			if err := enc.Encode(r); err != nil {
				return err
			}
			if n++; limit > 0 && n >= limit {
				// Commit only what was printed.
				next := b.Records[:i+1]
				return commitPrinted(ctx, gc, b, next)
			}
		}
		if len(b.Records) > 0 {
			if _, err := gc.Commit(ctx, b.Cursor); err != nil {
				return err
			}
		} else if !follow {
			return nil
		}
	}
	return nil
}

// commitPrinted commits the offsets after the printed records of a poll.
func commitPrinted(ctx context.Context, gc *client.GroupConsumer, b client.GroupBatch, printed []api.GroupRecord) error {
	last := map[api.TopicPartition]int64{}
	for _, r := range printed {
		last[api.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
	}
	offs := make([]api.PartitionOffset, 0, len(last))
	for tp, o := range last {
		offs = append(offs, api.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: o})
	}
	_, err := gc.CommitOffsets(ctx, b.MemberEpoch, offs)
	return err
}
