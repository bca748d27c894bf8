package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// pushCmd is `sluice push create|list|describe|pause|resume|seek|rotate|test|delete`.
func pushCmd(ctx context.Context, cio clientIO, args []string) error {
	return dispatch(ctx, cio, "push", []subcommand{
		{"create", "make a push subscription: a topic's records POSTed to an endpoint (its secret shown once)", pushCreate},
		{"list", "the push subscriptions, their states and endpoints", pushList},
		{"describe", "a subscription's settings, state and partitions (committed offset, lag, attempts, owner)", pushDescribe},
		{"pause", "stop delivering; the backlog waits in the log", pushPause},
		{"resume", "deliver again from the committed offsets (also after a disable)", pushResume},
		{"seek", "move a subscription's committed offsets to earliest, latest or a time", pushSeek},
		{"rotate", "make a new signing secret (shown once); the old one signs too for a grace period", pushRotate},
		{"test", "send one signed synthetic event to the endpoint and print how it answered", pushTest},
		{"deliveries", "the delivery log: failed attempts, dead-lettered records, recoveries (newest first)", pushDeliveries},
		{"delete", "delete a subscription and its group (its dead-letter topic stays)", pushDelete},
	}, args)
}

// topicsFlag collects --topic values: repeatable, each comma-separated.
type topicsFlag []string

func (t *topicsFlag) String() string { return strings.Join(*t, ",") }

func (t *topicsFlag) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name == "" {
			return fmt.Errorf("%q: empty topic name", v)
		}
		*t = append(*t, name)
	}
	return nil
}

// pushPosition turns a position as the other commands spell it
// (beginning, end, @TIME) into a push start or seek target (earliest,
// latest, timestamp:MS); the API's own spellings pass through.
func pushPosition(flagName, s string) (string, error) {
	bad := usagef("%s %q: want earliest, latest, timestamp:MS or @TIME (Unix ms or RFC 3339)", flagName, s)
	if ms, ok := strings.CutPrefix(s, "timestamp:"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err != nil || n < 0 {
			return "", bad
		}
		return s, nil
	}
	spec, err := parseStartSpec(s)
	if err != nil {
		return "", bad
	}
	switch spec.kind {
	case startBeginning:
		return api.ResetEarliest, nil
	case startEnd:
		return api.ResetLatest, nil
	case startTime:
		return "timestamp:" + strconv.FormatInt(spec.at.UnixMilli(), 10), nil
	}
	return "", bad
}

// pushSettingsFlags are the settings of `push create`, as flags; zero
// leaves a setting to the gateway's default.
func pushSettingsFlags(fs *flag.FlagSet) func() api.PushConfig {
	var c api.PushConfig
	fs.StringVar(&c.Endpoint, "endpoint", "", "the http or https URL each record (or batch) is POSTed to (required)")
	fs.StringVar(&c.Format, "format", "", "the request body: binary (CloudEvents binary mode: the value is the body), structured (application/cloudevents+json), json (the record as the fetch API renders it) or raw (the value alone); default binary")
	fs.StringVar(&c.Type, "type", "", "ce-type of records without a ce_type header; default sluice.record")
	fs.StringVar(&c.Ordering, "ordering", "", "partition (record n+1 of a partition waits for record n), key (in order per key) or none; default partition")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 0, "requests in flight per partition with ordering key or none; default 16, at most 1000")
	fs.IntVar(&c.Batch.MaxRecords, "batch-max-records", 0, "records of a partition per request, sent as a JSON array; default 1 (no batching), at most 1000")
	fs.Int64Var(&c.Batch.MaxBytes, "batch-max-bytes", 0, "bytes of records per request; default 1048576")
	fs.Int64Var(&c.Batch.MaxWaitMs, "batch-max-wait-ms", 0, "how long a batch waits to fill; default 0: send what is there")
	fs.Int64Var(&c.TimeoutMs, "timeout-ms", 0, "how long a request may take; default 30000")
	fs.Int64Var(&c.Retry.MinBackoffMs, "min-backoff-ms", 0, "the first wait after a failure; default 1000")
	fs.Int64Var(&c.Retry.MaxBackoffMs, "max-backoff-ms", 0, "the longest wait between tries; default 60000")
	fs.IntVar(&c.Retry.MaxAttempts, "max-attempts", 0, "attempts a record the endpoint refuses gets before it is dead-lettered (an outage counts none); default 10")
	fs.Int64Var(&c.Retry.RetryAfterMaxMs, "retry-after-max-ms", 0, "the longest wait a 429 or 503's Retry-After is granted; default 300000")
	fs.StringVar(&c.DeadLetter.Topic, "dead-letter-topic", "", "where records the endpoint never takes go; default NAME.dlt, created if missing")
	fs.Float64Var(&c.Rate.MaxPerSecond, "max-per-second", 0, "requests a second at most; default 0: unbounded")
	fs.Int64Var(&c.Outage.DisableAfterMs, "disable-after-ms", 0, "how long the endpoint may stay down before the subscription is disabled (nothing is lost: resume it); default 259200000 (3 days)")
	return func() api.PushConfig { return c }
}

func pushCreate(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push create NAME --topic T [--topic T2] --endpoint URL [--start earliest|latest|timestamp:MS] [--format binary|structured|json|raw] [--type T] [--ordering partition|key|none] [--max-in-flight N] [--batch-max-records N] [--batch-max-bytes N] [--batch-max-wait-ms N] [--timeout-ms N] [--min-backoff-ms N] [--max-backoff-ms N] [--max-attempts N] [--retry-after-max-ms N] [--dead-letter-topic T] [--max-per-second F] [--disable-after-ms N] [-o text|json] [--url URL]"
	fs := newFlags(cio, "push create", synopsis, `
Creates a push subscription: the gateways POST each record of the topics
to the endpoint, signed with Standard Webhooks headers, and commit past a
record only once the endpoint acknowledged it (2xx) or it was written to
the dead-letter topic. Its consumer group is push.NAME. The signing secret
(whsec_...) is printed once and never shown again: store it now, or rotate
it later. --start is where it begins in every partition: earliest (the
default), latest, timestamp:MS or @TIME (Unix ms or RFC 3339). A setting
left out takes its default.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	var topics topicsFlag
	fs.Var(&topics, "topic", "a topic to push (repeatable, or comma-separated; required)")
	start := fs.String("start", "", "earliest, latest, timestamp:MS or @TIME; default earliest")
	settings := pushSettingsFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	name, err := oneName(pos, "NAME", synopsis)
	if err != nil {
		return err
	}
	if err := checkOutput(*out); err != nil {
		return err
	}
	cfg := settings()
	if len(topics) == 0 || cfg.Endpoint == "" {
		return usagef("push create needs --topic and --endpoint; usage: sluice %s", synopsis)
	}
	cfg.Name, cfg.Topics = name, topics
	if *start != "" {
		if cfg.Start, err = pushPosition("--start", *start); err != nil {
			return err
		}
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub, err := cl.CreatePush(ctx, cfg)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, sub)
	}
	if err := printPushSettings(cio.out, sub); err != nil {
		return err
	}
	return printSecret(cio.out, sub.Secret)
}

func pushList(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push list [-o text|json] [--url URL]"
	fs := newFlags(cio, "push list", synopsis, "Lists the push subscriptions with their states, topics, endpoints and dead-letter topics.")
	base, out := gatewayFlag(fs), outputFlag(fs)
	cl, err := flagsOnlyClient(fs, args, base, out, "push list", synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	subs, err := cl.ListPush(ctx)
	if err != nil {
		return err
	}
	if *out == "json" {
		if subs == nil {
			subs = []api.PushSubscription{}
		}
		return printJSON(cio.out, api.PushList{Subscriptions: subs})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tTOPICS\tENDPOINT\tFORMAT\tORDERING\tDEAD-LETTER\tREASON")
	for _, s := range subs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.State, strings.Join(s.Topics, ","), s.Endpoint,
			s.Format, s.Ordering, s.DeadLetter.Topic, strOrDash(s.Reason))
	}
	return tw.Flush()
}

func pushDescribe(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push describe NAME [-o text|json] [--url URL]"
	fs := newFlags(cio, "push describe", synopsis, `
Describes a push subscription: its state (active, paused, backing_off while
its endpoint is down, disabled) and why, its settings, and a row per
partition: the committed offset, high watermark, lag in records and in
time, the attempts counted against the record at the committed offset, and
the pusher (group member) delivering it.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.GetPush(ctx, name)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, st)
	}
	if err := printPushSettings(cio.out, st.PushSubscription); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(cio.out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tLAG-TIME\tHEAD-ATTEMPTS\tIN-FLIGHT\tLAST-ERROR\tOWNER")
	for _, p := range st.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", p.Topic, p.Partition, orDash(p.CommittedOffset), orDash(p.HighWatermark),
			orDash(p.Lag), msOrDash(p.LagMs), p.HeadAttempts, p.InFlight, pushErrorLine(p.LastError), strOrDash(p.Owner))
	}
	return tw.Flush()
}

func pushPause(ctx context.Context, cio clientIO, args []string) error {
	return pushSetState(ctx, cio, args, "pause", api.PushPaused, `
Pauses a push subscription: its pushers stop delivering and leave its
group; the records wait in the log, and resume continues at the committed
offsets.`)
}

func pushResume(ctx context.Context, cio clientIO, args []string) error {
	return pushSetState(ctx, cio, args, "resume", api.PushActive, `
Resumes a paused or disabled push subscription: its pushers deliver again
from the committed offsets, so nothing the endpoint missed is lost.`)
}

func pushSetState(ctx context.Context, cio clientIO, args []string, verb, state, about string) error {
	synopsis := "push " + verb + " NAME [-o text|json] [--url URL]"
	fs := newFlags(cio, "push "+verb, synopsis, about)
	base, out := gatewayFlag(fs), outputFlag(fs)
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub, err := cl.SetPushState(ctx, name, state)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, sub)
	}
	_, err = fmt.Fprintln(cio.out, pushHeading(sub))
	return err
}

func pushSeek(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push seek NAME --to earliest|latest|timestamp:MS [-o text|json] [--url URL]"
	fs := newFlags(cio, "push seek", synopsis, `
Moves a push subscription's committed offsets, in every partition of its
topics, to the log start (earliest, or beginning), the high watermark
(latest, or end) or the first record at or after a time (timestamp:MS, or
@TIME in Unix ms or RFC 3339). The offsets are stored before the answer;
the pushers restart there. Prints the new offsets.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	to := fs.String("to", "", "earliest, latest, timestamp:MS or @TIME (required)")
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *to == "" {
		return usagef("push seek needs --to; usage: sluice %s", synopsis)
	}
	target, err := pushPosition("--to", *to)
	if err != nil {
		return err
	}
	res, err := cl.SeekPush(ctx, name, target)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, res)
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET")
	for _, o := range res.Committed {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", o.Topic, o.Partition, o.Offset)
	}
	return tw.Flush()
}

func pushRotate(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push rotate NAME [--grace-seconds N] [-o text|json] [--url URL]"
	fs := newFlags(cio, "push rotate", synopsis, `
Makes a new signing secret for a push subscription and prints it, once.
Requests are signed with it from now on, and with the old secrets too
(both signatures in webhook-signature) until the grace period ends, so the
endpoint can switch without refusing a request.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	grace := fs.Int64("grace-seconds", 0, "how long the old secrets keep signing; default 86400 (24 h), at most 604800")
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub, err := cl.RotatePushSecret(ctx, name, *grace)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, sub)
	}
	graceFor := 24 * time.Hour // the gateway's default
	if *grace != 0 {
		graceFor = time.Duration(*grace) * time.Second
	}
	if _, err := fmt.Fprintf(cio.out, "rotated the secret of push subscription %s; the old ones sign too for %s\n", sub.Name, graceFor); err != nil {
		return err
	}
	return printSecret(cio.out, sub.Secret)
}

func pushTest(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push test NAME [-o text|json] [--url URL]"
	fs := newFlags(cio, "push test", synopsis, `
Sends one signed synthetic event (ce-type sluice.push.test, body
{"test":true}) to a push subscription's endpoint, outside its delivery:
nothing is committed or retried. Prints the answer's status, the verdict
the subscription would act on (delivered, refused, unreachable, throttled,
gone), the latency and the start of the answer's body or the error.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.TestPush(ctx, name)
	if err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, res)
	}
	return printPushTest(cio.out, res)
}

func pushDeliveries(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push deliveries NAME [--status failed|dead|all] [--limit N] [-o text|json] [--url URL]"
	fs := newFlags(cio, "push deliveries", synopsis, `
Prints a push subscription's delivery log, newest first: the attempts its
endpoint did not acknowledge (failed), the records written to the
dead-letter topic (dead) and the acknowledgements that followed failures
(delivered), as every gateway's pushers saw them.`)
	status := fs.String("status", "all", "failed, dead or all")
	limit := fs.Int("limit", 0, "at most this many entries (default 100, at most 1000)")
	base, out := gatewayFlag(fs), outputFlag(fs)
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	log, err := cl.PushDeliveries(ctx, name, *status, *limit)
	if err != nil {
		return err
	}
	if *out == "json" {
		if log == nil {
			log = []api.PushDelivery{}
		}
		return printJSON(cio.out, api.PushDeliveries{Deliveries: log})
	}
	tw := tabwriter.NewWriter(cio.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME	STATUS	TOPIC	PARTITION	OFFSET	ATTEMPT	HTTP	LATENCY	GATEWAY	RESPONSE")
	for _, d := range log {
		resp := strings.ReplaceAll(d.Response, "\n", " ")
		if len(resp) > 60 {
			resp = resp[:60] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%dms\t%s\t%s\n", time.UnixMilli(d.TimeMs).UTC().Format(time.RFC3339), d.Status, d.Topic,
			d.Partition, d.Offset, d.Attempt, d.HTTPStatus, d.LatencyMs, d.Gateway, strOrDash(resp))
	}
	return tw.Flush()
}

func pushDelete(ctx context.Context, cio clientIO, args []string) error {
	const synopsis = "push delete NAME [-o text|json] [--url URL]"
	fs := newFlags(cio, "push delete", synopsis, `
Deletes a push subscription: its pushers stop and its group push.NAME and
committed offsets are deleted. The dead-letter topic stays.`)
	base, out := gatewayFlag(fs), outputFlag(fs)
	name, cl, err := oneNameClient(fs, args, base, out, synopsis)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.DeletePush(ctx, name); err != nil {
		return err
	}
	if *out == "json" {
		return printJSON(cio.out, map[string]string{"deleted": name})
	}
	_, err = fmt.Fprintf(cio.out, "deleted push subscription %s\n", name)
	return err
}

// oneNameClient parses a verb that names one subscription, checks its
// output switch and returns the name and a client of the gateway at base;
// the caller closes it.
func oneNameClient(fs *flag.FlagSet, args []string, base, out *string, synopsis string) (string, *client.Client, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", nil, err
	}
	name, err := oneName(pos, "NAME", synopsis)
	if err != nil {
		return "", nil, err
	}
	if err := checkOutput(*out); err != nil {
		return "", nil, err
	}
	cl, err := newClient(*base)
	return name, cl, err
}

// pushHeading is "push subscription NAME: STATE", with the reason when
// there is one.
func pushHeading(s api.PushSubscription) string {
	h := fmt.Sprintf("push subscription %s: %s", s.Name, s.State)
	if s.Reason != "" {
		h += " (" + s.Reason + ")"
	}
	return h
}

// printPushSettings renders a subscription as a heading with its state,
// then a line per group of settings.
func printPushSettings(w io.Writer, s api.PushSubscription) error {
	if _, err := fmt.Fprintln(w, pushHeading(s)); err != nil {
		return err
	}
	rate := "unbounded"
	if s.Rate.MaxPerSecond > 0 {
		rate = strconv.FormatFloat(s.Rate.MaxPerSecond, 'f', -1, 64) + " requests/s at most"
	}
	batch := fmt.Sprintf("%d records, %d bytes, wait %s at most", s.Batch.MaxRecords, s.Batch.MaxBytes, msDuration(s.Batch.MaxWaitMs))
	if s.Batch.MaxRecords <= 1 {
		batch = "none (a record per request)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"group", s.Group},
		{"topics", strings.Join(s.Topics, ",")},
		{"endpoint", s.Endpoint},
		{"start", s.Start},
		{"format", s.Format + ", type " + s.Type},
		{"ordering", fmt.Sprintf("%s, %d in flight per partition", s.Ordering, s.MaxInFlight)},
		{"batch", batch},
		{"timeout", msDuration(s.TimeoutMs)},
		{"retry", fmt.Sprintf("backoff %s to %s, %d attempts, Retry-After %s at most",
			msDuration(s.Retry.MinBackoffMs), msDuration(s.Retry.MaxBackoffMs), s.Retry.MaxAttempts, msDuration(s.Retry.RetryAfterMaxMs))},
		{"dead letter", s.DeadLetter.Topic},
		{"rate", rate},
		{"outage", "disabled after " + msDuration(s.Outage.DisableAfterMs) + " down"},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

// printSecret shows a new signing secret, apart from the rest.
func printSecret(w io.Writer, secret string) error {
	_, err := fmt.Fprintf(w, "\nsecret: %s  (shown once: store it now)\n", secret)
	return err
}

func printPushTest(w io.Writer, res client.PushTestResult) error {
	status := "none (no answer)"
	if res.Status != 0 {
		status = strconv.Itoa(res.Status)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "status:\t%s\n", status)
	fmt.Fprintf(tw, "verdict:\t%s\n", res.Verdict)
	fmt.Fprintf(tw, "latency:\t%s\n", msDuration(res.LatencyMs))
	fmt.Fprintf(tw, "response:\t%s\n", strOrDash(oneLine(res.Response)))
	return tw.Flush()
}

// oneLine is s with its line breaks and tabs turned into spaces, for a
// cell of a table.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
}

func msDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// msOrDash is a duration in ms, or "-" when it is not known (negative).
func msOrDash(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return msDuration(ms)
}

// pushErrorLine is a last error in one short column: offset, status and
// the start of the error.
func pushErrorLine(e *api.PushError) string {
	if e == nil {
		return "-"
	}
	msg := strings.Join(strings.Fields(e.Error), " ")
	if r := []rune(msg); len(r) > 40 {
		msg = string(r[:40]) + "…"
	}
	status := "no answer"
	if e.Status != 0 {
		status = strconv.Itoa(e.Status)
	}
	return fmt.Sprintf("@%d %s %s", e.Offset, status, msg)
}
