package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestCLIGolden under testdata/cli")

// cliCase is one command line run against the test cluster. Its golden file
// testdata/cli/NAME.golden holds the command, its stdout, its stderr and its
// exit status; the gateway's URL is written as $SLUICE_URL, and the parts
// in volatile as their placeholders.
type cliCase struct {
	name  string
	stdin string
	args  []string
	// until, when set, is polled before the command runs until it returns
	// nil: a state the cluster reaches in its own time (a pusher leaving
	// its group) that the output depends on.
	until func(ctx context.Context, cl *client.Client) error
}

// volatile are the parts of an output that differ from run to run, and
// what the golden files hold instead.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`), "whsec_$$SECRET"},              // a push subscription's signing secret
	{regexp.MustCompile(`"(created_ms|updated_ms)": [0-9]+`), `"$1": $$UNIX_MS`}, // when it was made or changed
}

// Fixed times of the records produced below.
const (
	t0 = "2026-01-01T00:00:00Z" // 1767225600000
	t1 = "1767225660000"        // 2026-01-01T00:01:00Z
	t2 = "2026-01-01T00:02:00Z" // 1767225720000
)

// cliCases run in order against one cluster: each sees what the ones
// before it created.
var cliCases = []cliCase{
	// Help, for every command and verb.
	{name: "help", args: []string{"--help"}},
	{name: "consume-help", args: []string{"consume", "--help"}},
	{name: "produce-help", args: []string{"produce", "--help"}},
	{name: "topics-help", args: []string{"topics", "--help"}},
	{name: "topics-list-help", args: []string{"topics", "list", "--help"}},
	{name: "topics-describe-help", args: []string{"topics", "describe", "--help"}},
	{name: "topics-create-help", args: []string{"topics", "create", "--help"}},
	{name: "topics-delete-help", args: []string{"topics", "delete", "--help"}},
	{name: "topics-alter-config-help", args: []string{"topics", "alter-config", "--help"}},
	{name: "topics-alter-help", args: []string{"topics", "alter", "--help"}},
	{name: "groups-help", args: []string{"groups", "--help"}},
	{name: "groups-list-help", args: []string{"groups", "list", "--help"}},
	{name: "groups-describe-help", args: []string{"groups", "describe", "--help"}},
	{name: "groups-reset-help", args: []string{"groups", "reset", "--help"}},
	{name: "groups-delete-help", args: []string{"groups", "delete", "--help"}},

	// Topics.
	{name: "topics-create", args: []string{"topics", "create", "orders", "-p", "3", "-r", "1", "-c", "retention.ms=-1"}},
	{name: "topics-create-json", args: []string{"topics", "create", "events", "--partitions", "1", "--config", "retention.ms=-1", "--config", "cleanup.policy=compact,delete", "-o", "json"}},
	{name: "topics-create-exists", args: []string{"topics", "create", "orders"}},
	{name: "topics-create-bad-config", args: []string{"topics", "create", "bad", "-c", "retention.ms=soon"}},
	{name: "topics-list", args: []string{"topics", "list"}},
	{name: "topics-list-json", args: []string{"topics", "list", "--output", "json"}},

	// Produce: each form, with fixed timestamps and keys.
	{name: "produce-keysep-headers", stdin: "k1:v1\nk2:v2\nk3:{\"n\": 3}\n",
		args: []string{"produce", "orders", "-p", "0", "--timestamp", t0, "-K", ":", "-H", "src=cli", "-H", "env=test", "-f", `%t %p@%o key=%k ts=%T headers=%h\n`}},
	{name: "produce-key-default-format", stdin: "a\nb\n", args: []string{"produce", "orders", "-p", "0", "--timestamp", t1, "-k", "fixed"}},
	{name: "produce-by-key", stdin: "alpha,1\nbravo,2\ncharlie,3\ndelta,4\n", args: []string{"produce", "orders", "--timestamp", t2, "-K", ",", "-f", `%k -> %p\n`}},
	{name: "produce-json", stdin: "x\n", args: []string{"produce", "orders", "-p", "2", "--timestamp", t2, "-f", "json"}},
	{name: "produce-output-json", stdin: "y\n", args: []string{"produce", "orders", "-p", "2", "--timestamp", t2, "--output", "json"}},
	{name: "produce-args", args: []string{"produce", "events", "--timestamp", t0, "-k", "user-1", "-f", `%o %k=%v\n`, "signed-up", "logged-in"}},
	{name: "produce-tombstone", stdin: "\n", args: []string{"produce", "events", "--timestamp", t1, "-k", "user-2", "-Z", "-f", `%o %k value-length=%S\n`}},
	{name: "produce-json-values", stdin: "{\"a\": 1}\n[1, 2]\n", args: []string{"produce", "events", "--timestamp", t1, "-k", "user-3", "--json", "-f", `%o %v\n`}},
	{name: "produce-silent", stdin: "quiet\n", args: []string{"produce", "events", "--timestamp", t2, "-k", "user-4", "-f", ""}},
	{name: "produce-not-json", stdin: "{\n", args: []string{"produce", "events", "--json"}},
	{name: "produce-unknown-topic", stdin: "v\n", args: []string{"produce", "nope"}},
	{name: "produce-unknown-partition", stdin: "v\n", args: []string{"produce", "orders", "-p", "7"}},
	{name: "produce-key-and-sep", args: []string{"produce", "orders", "-k", "a", "-K", ":"}},

	// Consume: every -o form, -e, -n, -p, formats.
	{name: "consume-format", args: []string{"consume", "orders", "-p", "0", "-e", "-f", `%t/%p@%o %T key=%k (%K) value=%v (%S) [%h]\n`}},
	{name: "consume-json", args: []string{"consume", "orders", "-p", "0", "-e"}},
	{name: "consume-output-json", args: []string{"consume", "orders", "-p", "2", "-e", "--output", "json"}},
	{name: "consume-output-text", args: []string{"consume", "orders", "-p", "0", "-e", "--output", "text"}},
	{name: "consume-kcat-s", args: []string{"consume", "orders", "-p", "0", "-e", "-f", `%s\t%k\t100%%\n`}},
	{name: "consume-partitions", args: []string{"consume", "orders", "-p", "0,2", "-e", "-f", `%p %o %v\n`}},
	{name: "consume-all-partitions", args: []string{"consume", "-e", "-f", `%p %o %k %v\n`, "orders"}},
	{name: "consume-offset-beginning", args: []string{"consume", "orders", "-p", "0", "-o", "beginning", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-end", args: []string{"consume", "orders", "-p", "0", "-o", "end", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-absolute", args: []string{"consume", "orders", "-p", "0", "-o", "3", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-from-end", args: []string{"consume", "orders", "-p", "0", "-o", "-2", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-from-start", args: []string{"consume", "orders", "-p", "0", "-o", "+1", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-past-start", args: []string{"consume", "orders", "-p", "0", "-o", "+99", "-e", "-f", `%o %v\n`}},
	{name: "consume-offset-time-ms", args: []string{"consume", "orders", "-p", "0", "-o", "@" + t1, "-e", "-f", `%o %T %v\n`}},
	{name: "consume-offset-time-rfc3339", args: []string{"consume", "orders", "-o", "@" + t2, "-e", "-f", `%p %o %T %v\n`}},
	{name: "consume-offset-time-after-all", args: []string{"consume", "orders", "-p", "0", "-o", "@2030-01-01T00:00:00Z", "-e", "-f", `%o %v\n`}},
	{name: "consume-count", args: []string{"consume", "orders", "-p", "0", "-n", "2", "-f", `%o %v\n`}},
	{name: "consume-count-with-end", args: []string{"consume", "orders", "-n", "100", "-e", "-p", "2", "-f", `%o %v\n`}},
	{name: "consume-binary-and-tombstone", args: []string{"consume", "events", "-e"}},
	{name: "consume-unknown-topic", args: []string{"consume", "nope", "-e"}},
	{name: "consume-unknown-partition", args: []string{"consume", "orders", "-p", "9", "-e"}},
	{name: "consume-bad-offset", args: []string{"consume", "orders", "-o", "soon"}},
	{name: "consume-bad-format", args: []string{"consume", "orders", "-f", "%x"}},
	{name: "consume-no-topic", args: []string{"consume", "-e"}},
	{name: "consume-bad-flag", args: []string{"consume", "orders", "--frobnicate"}},
	{name: "consume-bad-url", args: []string{"consume", "orders", "--url", "ftp://example"}},

	// Altering configs: the gateway refuses a record over the new
	// max.message.bytes at once.
	{name: "topics-alter-config", args: []string{"topics", "alter-config", "orders", "--set", "max.message.bytes=64", "--set", "segment.ms=3600000", "--delete", "flush.ms"}},
	{name: "produce-too-large", stdin: strings.Repeat("x", 100) + "\n", args: []string{"produce", "orders", "-p", "1"}},
	{name: "topics-alter-config-json", args: []string{"topics", "alter-config", "orders", "--delete", "max.message.bytes", "-o", "json"}},
	{name: "produce-after-alter", stdin: strings.Repeat("x", 100) + "\n", args: []string{"produce", "orders", "-p", "1", "--timestamp", t2, "-f", `%p@%o %S\n`}},
	{name: "topics-alter-config-bad-value", args: []string{"topics", "alter-config", "orders", "--set", "retention.ms=soon"}},
	{name: "topics-alter-config-fixed", args: []string{"topics", "alter-config", "orders", "--set", "remote.storage.enable=true"}},
	{name: "topics-alter-config-unknown-topic", args: []string{"topics", "alter-config", "nope", "--set", "retention.ms=1"}},
	{name: "topics-alter-config-nothing", args: []string{"topics", "alter-config", "orders"}},

	// Groups.
	{name: "consume-group", args: []string{"consume", "events", "-g", "billing", "-e", "-f", `%t %p %o %k\n`}},
	{name: "consume-group-again", args: []string{"consume", "events", "-g", "billing", "-e", "-f", `%t %p %o %k\n`}},
	{name: "consume-group-with-partitions", args: []string{"consume", "events", "-g", "billing", "-p", "0"}},
	{name: "groups-list", args: []string{"groups", "list"}},
	{name: "groups-list-json", args: []string{"groups", "list", "-o", "json"}},
	{name: "groups-describe", args: []string{"groups", "describe", "billing"}},
	{name: "groups-describe-json", args: []string{"groups", "describe", "billing", "--output", "json"}},
	{name: "groups-reset", args: []string{"groups", "reset", "billing", "--topic", "events", "--to", "+1"}},
	{name: "groups-reset-offset", args: []string{"groups", "reset", "billing", "--topic", "events", "--to", "3"}},
	{name: "consume-group-after-reset", args: []string{"consume", "events", "-g", "billing", "-n", "1", "-f", `%o %k\n`}},
	{name: "groups-reset-time", args: []string{"groups", "reset", "billing", "--topic", "events", "--to", "@" + t1, "-o", "json"}},
	{name: "groups-reset-beginning", args: []string{"groups", "reset", "billing", "--topic", "events", "--to", "beginning"}},
	{name: "groups-delete", args: []string{"groups", "delete", "billing"}},
	{name: "groups-describe-unknown", args: []string{"groups", "describe", "billing"}},

	// Push subscriptions, from the end of events: nothing is sent to their
	// endpoints (no port listens there), so their states stay as set.
	{name: "push-help", args: []string{"push", "--help"}},
	{name: "push-create-help", args: []string{"push", "create", "--help"}},
	{name: "push-create", args: []string{"push", "create", "hooks", "--topic", "events", "--endpoint", "http://127.0.0.1:9/hooks", "--start", "latest",
		"--format", "structured", "--max-attempts", "5", "--max-per-second", "50"}},
	{name: "push-create-json", args: []string{"push", "create", "audit", "--topic", "events", "--endpoint", "http://127.0.0.1:9/audit", "--start", "end",
		"--ordering", "key", "--max-in-flight", "4", "--timeout-ms", "5000", "--dead-letter-topic", "audit-failed", "-o", "json"}},
	{name: "push-create-exists", args: []string{"push", "create", "hooks", "--topic", "events", "--endpoint", "http://127.0.0.1:9/hooks"}},
	{name: "push-create-no-endpoint", args: []string{"push", "create", "more", "--topic", "events"}},
	{name: "push-create-bad-start", args: []string{"push", "create", "more", "--topic", "events", "--endpoint", "http://127.0.0.1:9/more", "--start", "soon"}},
	{name: "push-create-bad-format", args: []string{"push", "create", "more", "--topic", "events", "--endpoint", "http://127.0.0.1:9/more", "--format", "xml"}},
	{name: "push-create-unknown-topic", args: []string{"push", "create", "more", "--topic", "events,nope", "--endpoint", "http://127.0.0.1:9/more"}},
	{name: "push-list", args: []string{"push", "list"}},
	{name: "push-list-json", args: []string{"push", "list", "-o", "json"}},
	{name: "push-pause", args: []string{"push", "pause", "hooks"}},
	{name: "push-describe", args: []string{"push", "describe", "hooks"}, until: pushUnowned("hooks")},
	{name: "push-describe-json", args: []string{"push", "describe", "hooks", "-o", "json"}},
	{name: "push-seek-time", args: []string{"push", "seek", "hooks", "--to", "@" + t1}},
	{name: "push-seek-latest", args: []string{"push", "seek", "hooks", "--to", "latest", "-o", "json"}},
	{name: "push-seek-offset", args: []string{"push", "seek", "hooks", "--to", "3"}},
	{name: "push-resume", args: []string{"push", "resume", "hooks"}},
	{name: "push-rotate", args: []string{"push", "rotate", "hooks", "--grace-seconds", "3600"}},
	{name: "push-rotate-json", args: []string{"push", "rotate", "hooks", "-o", "json"}},
	{name: "push-delete", args: []string{"push", "delete", "hooks"}},
	{name: "push-delete-json", args: []string{"push", "delete", "audit", "-o", "json"}},
	{name: "push-describe-deleted", args: []string{"push", "describe", "hooks"}},
	{name: "push-list-empty", args: []string{"push", "list"}},

	// Describe and delete.
	{name: "topics-describe", args: []string{"topics", "describe", "orders"}},
	{name: "topics-describe-json", args: []string{"topics", "describe", "events", "-o", "json"}},
	{name: "topics-delete", args: []string{"topics", "delete", "orders"}},
	{name: "topics-describe-deleted", args: []string{"topics", "describe", "orders"}},
	{name: "topics-unknown-verb", args: []string{"topics", "frob"}},

	// Adding partitions.
	{name: "topics-alter-partitions-validate", args: []string{"topics", "alter", "events", "--partitions", "3", "--validate-only"}},
	{name: "topics-alter-partitions", args: []string{"topics", "alter", "events", "--partitions", "3"}},
	{name: "topics-alter-partitions-more", args: []string{"topics", "alter", "events", "--partitions", "4"}},
	{name: "topics-describe-grown", args: []string{"topics", "describe", "events"}, until: partitionsOpen("events")},
	{name: "topics-alter-partitions-json", args: []string{"topics", "alter", "events", "--partitions", "5", "-o", "json", "--validate-only"}},
	{name: "topics-alter-partitions-shrink", args: []string{"topics", "alter", "events", "--partitions", "2"}},
	{name: "topics-alter-partitions-unknown-topic", args: []string{"topics", "alter", "nope", "--partitions", "2"}},
	{name: "topics-alter-partitions-missing", args: []string{"topics", "alter", "events"}},
	{name: "unknown-command", args: []string{"frob"}},
}

// TestCLIGolden runs every documented form of the client commands against
// an in-process cluster and compares what each printed, and its exit status,
// with testdata/cli. go test ./cmd/sluice -run TestCLIGolden -update
// rewrites the files.
func TestCLIGolden(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{Brokers: 1})
	t.Setenv("SLUICE_URL", c.URL) // --url is left out: the environment names the gateway
	for _, tc := range cliCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.until != nil {
				waitUntil(t, c.URL, tc.until)
			}
			got := runGolden(t, c.URL, tc)
			path := filepath.Join("testdata", "cli", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (when the change is meant, rewrite the files with go test ./cmd/sluice -run TestCLIGolden -update and review the diff):\n--- got\n%s\n--- want\n%s", tc.name, path, got, want)
			}
		})
	}
}

// runGolden runs one case through runMain and renders the transcript.
func runGolden(t *testing.T, url string, tc cliCase) string {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := runMain(ctx, clientIO{in: strings.NewReader(tc.stdin), out: &out, errOut: &errOut}, tc.args)
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in 30 s", tc.name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "$ sluice %s\n", shellJoin(tc.args))
	if tc.stdin != "" {
		fmt.Fprintf(&b, "--- stdin\n%s", tc.stdin)
	}
	fmt.Fprintf(&b, "--- stdout\n%s", out.String())
	fmt.Fprintf(&b, "--- stderr\n%s", errOut.String())
	fmt.Fprintf(&b, "--- exit %d\n", code)
	got := strings.ReplaceAll(b.String(), url, "$SLUICE_URL")
	for _, v := range volatile {
		got = v.re.ReplaceAllString(got, v.with)
	}
	return got
}

// waitUntil polls cond until it returns nil, and fails the test with its
// last error after 15 s.
func waitUntil(t *testing.T, url string, cond func(context.Context, *client.Client) error) {
	t.Helper()
	cl, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		err := cond(ctx, cl)
		if err == nil {
			return
		}
		if ctx.Err() == nil || last == nil {
			last = err // not the deadline's own error, when there was another
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waited 15 s: %v", last)
		case <-tick.C:
		}
	}
}

// pushUnowned holds once no pusher holds a partition of subscription
// name: it was paused and its pushers left its group.
// partitionsOpen waits until every partition of a topic is open on its
// leader (its offsets are known).
func partitionsOpen(name string) func(context.Context, *client.Client) error {
	return func(ctx context.Context, cl *client.Client) error {
		tp, err := cl.GetTopic(ctx, name)
		if err != nil {
			return err
		}
		for _, p := range tp.Partitions {
			if p.HighWatermark < 0 || p.LogStartOffset < 0 {
				return fmt.Errorf("%s/%d is not open yet", name, p.Partition)
			}
		}
		return nil
	}
}

func pushUnowned(name string) func(context.Context, *client.Client) error {
	return func(ctx context.Context, cl *client.Client) error {
		st, err := cl.GetPush(ctx, name)
		if err != nil {
			return err
		}
		if len(st.Partitions) == 0 {
			return fmt.Errorf("push subscription %s has no partitions yet", name)
		}
		for _, p := range st.Partitions {
			if p.Owner != "" {
				return fmt.Errorf("%s/%d is still delivered by %s", p.Topic, p.Partition, p.Owner)
			}
		}
		return nil
	}
}

// shellJoin quotes args as a POSIX shell would need them.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:=/@+") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
