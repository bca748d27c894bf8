package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/api"
)

// topicsCmd is `sluice topics list|describe|create|delete|alter-config|alter`.
func topicsCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "topics", []subcommand{
		{"list", "the topics, with partition counts and replication factors", topicsList},
		{"describe", "a topic's configs and partitions (leader, replicas, ISR, offsets)", topicsDescribe},
		{"create", "create a topic", topicsCreate},
		{"delete", "delete a topic and its records", topicsDelete},
		{"alter-config", "set or remove a topic's configs", topicsAlterConfig},
		{"alter", "add partitions to a topic", topicsAlter},
	}, args)
}

// configFlag collects repeated key=value flags.
type configFlag map[string]string

func (c configFlag) String() string { return "" }

func (c configFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	c[k] = val
	return nil
}

func topicsList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics list [-i] [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics list", synopsis, "Lists the topics, sorted by name, with their partition counts and replication factors.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	internal := fs.Bool("i", false, "include internal topics (__consumer_offsets)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("topics list takes no arguments; usage: sluice %s", synopsis)
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	all, err := cl.ListTopics(ctx)
	if err != nil {
		return err
	}
	topics := []api.Topic{}
	for _, t := range all {
		if *internal || !strings.HasPrefix(t.Name, "__") {
			topics = append(topics, t)
		}
	}
	if *out == "json" {
		return printJSON(cio.out, api.TopicList{Topics: topics})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPARTITIONS\tREPLICAS")
	for _, t := range topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", t.Name, len(t.Partitions), t.ReplicationFactor)
	}
	return tw.Flush()
}

func topicsDescribe(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics describe TOPIC [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics describe", synopsis, `
Describes a topic: the configs it sets (every other config is at its
default) and a row per partition: its leader and leader epoch, replicas,
in-sync replicas and those out of sync, and its offsets (log start, local
start and remote end for tiered topics, high watermark, log end). "-" is a
position its leader did not report.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
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
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.GetTopic(ctx, name)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, t)
	}
	return printTopic(cio.out, t)
}

// printTopic renders a topic as a heading, its configs and a partition table.
func printTopic(w io.Writer, t api.Topic) error {
	if _, err := fmt.Fprintf(w, "topic %s: %d partitions, replication factor %d\n%s\n\n", t.Name, len(t.Partitions), t.ReplicationFactor, configLine(t.Configs)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOUT-OF-SYNC\tLOG-START\tLOCAL-START\tREMOTE-END\tHIGH-WATERMARK\tLOG-END")
	for _, p := range t.Partitions {
		leader := fmt.Sprint(p.Leader)
		if p.Offline || p.Leader < 0 {
			leader = "offline"
		}
		var lagging []int32
		for _, r := range p.Replicas {
			if !slices.Contains(p.ISR, r) {
				lagging = append(lagging, r)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Partition, leader, p.LeaderEpoch,
			brokerList(p.Replicas), brokerList(p.ISR), brokerList(lagging),
			orDash(p.LogStartOffset), orDash(p.LocalStartOffset), orDash(p.RemoteEndOffset), orDash(p.HighWatermark), orDash(p.LogEndOffset))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printOfflineReplicas(w, t)
}

// printOfflineReplicas lists, under the partition table, the replicas that
// cannot serve and why (nothing when every replica can).
func printOfflineReplicas(w io.Writer, t api.Topic) error {
	first := true
	for _, p := range t.Partitions {
		for _, o := range p.OfflineReplicas {
			if first {
				if _, err := fmt.Fprintln(w, "\noffline replicas:"); err != nil {
					return err
				}
				first = false
			}
			line := fmt.Sprintf("  partition %d, broker %d: %s", p.Partition, o.Broker, o.Reason)
			if o.Error != "" {
				line += ": " + o.Error
			}
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// configLine is "configs: k=v k2=v2", sorted, or says there are none.
func configLine(configs map[string]string) string {
	if len(configs) == 0 {
		return "configs: none set (all defaults)"
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		kv = append(kv, k+"="+configs[k])
	}
	return "configs: " + strings.Join(kv, " ")
}

// brokerList is "1,2,3", or "-" for none.
func brokerList(ids []int32) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

func topicsCreate(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics create TOPIC [-p PARTITIONS] [-r REPLICATION-FACTOR] [-c key=value ...] [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics create", synopsis, `
Creates a topic and returns once every partition has a leader. Configs use
Kafka's names (retention.ms, cleanup.policy, max.message.bytes, ...; see
the README); -c repeats.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	var partitions, rf int
	configs := configFlag{}
	fs.IntVar(&partitions, "p", 1, "partitions")
	fs.IntVar(&partitions, "partitions", 1, "the same as -p")
	fs.IntVar(&rf, "r", 0, "replicas per partition (0: min(3, live brokers))")
	fs.IntVar(&rf, "replication-factor", 0, "the same as -r")
	fs.Var(configs, "c", "a topic config key=value (repeatable)")
	fs.Var(configs, "config", "the same as -c")
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
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.CreateTopic(ctx, api.CreateTopicRequest{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs})
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, t)
	}
	_, err = fmt.Fprintf(cio.out, "created topic %s: %d partitions, replication factor %d\n", t.Name, len(t.Partitions), t.ReplicationFactor)
	return err
}

func topicsDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics delete TOPIC [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics delete", synopsis, "Deletes a topic: its partitions and records go from every broker and the object store.")
	base, out := gatewayFlag(fs), outputFlag(fs)
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
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.DeleteTopic(ctx, name); err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, map[string]string{"deleted": name})
	}
	_, err = fmt.Fprintf(cio.out, "deleted topic %s\n", name)
	return err
}

func topicsAlterConfig(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "topics alter-config TOPIC [--set key=value ...] [--delete key ...] [-o text|json] [--url URL]"
	fs := newFlags(cio, "topics alter-config", synopsis, `
Sets configs of a topic (--set, repeatable) and removes others so they take
their defaults again (--delete, repeatable); the rest keep their values.
Brokers apply the change to the open partitions at once (retention, segment
size and age, fsync policy, min.insync.replicas, timestamp bounds,
compaction), gateways to the next produce (max.message.bytes,
compression.type). remote.storage.enable cannot change once the topic
exists. Prints the topic's configs afterwards.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	set := configFlag{}
	var del []string
	fs.Var(set, "set", "a config key=value to set (repeatable)")
	fs.Func("delete", "a config to remove, back to its default (repeatable)", func(v string) error {
		if v == "" || strings.Contains(v, "=") {
			return fmt.Errorf("%q: want a config name", v)
		}
		del = append(del, v)
		return nil
	})
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
	if len(set) == 0 && len(del) == 0 {
		return usagef("nothing to alter: give --set key=value or --delete key; usage: sluice %s", synopsis)
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	t, err := cl.AlterTopicConfig(ctx, name, api.AlterTopicConfigRequest{Set: set, Delete: del})
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, t)
	}
	_, err = fmt.Fprintf(cio.out, "altered topic %s: %s\n", t.Name, configLine(t.Configs))
	return err
}
