package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/api"
)

// groupsCmd is `sluice groups list|describe|reset|delete`.
func groupsCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "groups", []subcommand{
		{"list", "the consumer groups, their states and member counts", groupsList},
		{"describe", "a group's partitions (committed offset, lag, owner) and members", groupsDescribe},
		{"reset", "move a group's committed offsets (the group must have no members)", groupsReset},
		{"delete", "delete a group and its committed offsets (it must have no members)", groupsDelete},
	}, args)
}

func groupsList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "groups list [-o text|json] [--url URL]"
	fs := newFlags(cio, "groups list", synopsis, "Lists the consumer groups with their states and member counts.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("groups list takes no arguments; usage: sluice %s", synopsis)
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	gs, err := cl.ListGroups(ctx)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, api.GroupList{Groups: gs})
	}
	return printGroupList(cio.out, gs)
}

func groupsDescribe(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "groups describe GROUP [-o text|json] [--url URL]"
	fs := newFlags(cio, "groups describe", synopsis, `
Describes a group: its state and epoch, a row per partition of its topics
(committed offset, high watermark, lag in records and in time, owner), and
its members with their partitions.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	group, err := oneName(pos, "GROUP", synopsis)
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, d)
	}
	return printGroup(cio.out, d)
}

func groupsReset(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "groups reset GROUP --topic T[,T] --to beginning|end|N|@TIME [-o text|json] [--url URL]"
	fs := newFlags(cio, "groups reset", synopsis, `
Sets a group's committed offset in every partition of the topics: to the log
start (beginning, or earliest), the high watermark (end, or latest), offset N
(also offset:N), or the first record at or after TIME (@TIME in Unix ms or
RFC 3339, also timestamp:MS). The group must have no members
(GROUP_NOT_EMPTY otherwise).`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	topics := fs.String("topic", "", "the topics to reset, comma-separated")
	to := fs.String("to", "", "beginning, end, N or @TIME")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	group, err := oneName(pos, "GROUP", synopsis)
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	if *topics == "" || *to == "" {
		return usagef("groups reset needs --topic and --to; usage: sluice %s", synopsis)
	}
	target, err := resetSpec(*to)
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.ResetOffsets(ctx, group, api.ResetOffsetsRequest{Topics: strings.Split(*topics, ","), To: target})
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, res)
	}
	w := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tOFFSET")
	for _, o := range res.Committed {
		fmt.Fprintf(w, "%s\t%d\t%d\n", o.Topic, o.Partition, o.Offset)
	}
	return w.Flush()
}

func groupsDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "groups delete GROUP [-o text|json] [--url URL]"
	fs := newFlags(cio, "groups delete", synopsis, "Deletes a group and its committed offsets. The group must have no members (GROUP_NOT_EMPTY otherwise).")
	base, out := gatewayFlag(fs), outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	group, err := oneName(pos, "GROUP", synopsis)
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.DeleteGroup(ctx, group); err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, map[string]string{"deleted": group})
	}
	_, err = fmt.Fprintf(cio.out, "deleted group %s\n", group)
	return err
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
	if _, err := fmt.Fprintf(w, "group %s: %s, epoch %d, assignor %s, %d members\n\n", d.Group, d.State, d.GroupEpoch, d.Assignor, len(d.Members)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tLAG-TIME\tOWNER")
	for _, p := range d.Partitions {
		lagTime := "-"
		if p.LagMs >= 0 {
			lagTime = (time.Duration(p.LagMs) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, orDash(p.CommittedOffset), orDash(p.HighWatermark), orDash(p.Lag), lagTime, strOrDash(p.Owner))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Members) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tINSTANCE\tKIND\tEPOCH\tPARTITIONS")
	for _, m := range d.Members {
		var parts []string
		for _, tp := range m.Assignment {
			parts = append(parts, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.MemberID, strOrDash(m.InstanceID), m.Kind, m.MemberEpoch, strings.Join(parts, ","))
	}
	return tw.Flush()
}

// orDash is n, or "-" for a position that is not known (negative).
func orDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func strOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
