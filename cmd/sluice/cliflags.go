package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// clientIO is where a client command reads its input and writes its output
// and errors.
type clientIO struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
}

// stdIO is the process's standard streams, as they are at the call.
func stdIO() clientIO { return clientIO{in: os.Stdin, out: os.Stdout, errOut: os.Stderr} }

// diagf writes a diagnostic (usage, a command's error) to the error stream.
// A failed write there is dropped: the error stream is where it would be
// reported.
func (c clientIO) diagf(format string, args ...any) { _, _ = fmt.Fprintf(c.errOut, format, args...) }

// usageError is a command line that cannot run (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// errFlagsReported is a flag error the flag package already printed, with
// the command's usage (exit status 2).
var errFlagsReported = errors.New("bad flags")

// newFlags is a client command's flag set. Its usage text (--help) is the
// synopsis, what the command does, and each flag with its default.
func newFlags(cio clientIO, name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(cio.errOut)
	fs.Usage = func() {
		cio.diagf("usage: sluice %s\n\n%s\n", synopsis, strings.TrimSpace(about))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			cio.diagf("\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseArgs parses flags wherever they stand among the positional
// arguments (`sluice consume -e orders -p 0` and `sluice consume orders -e
// -p 0` mean the same) and returns the positional ones in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errFlagsReported
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// outputFlag is the admin commands' -o/--output text|json.
func outputFlag(fs *flag.FlagSet) *string {
	out := new(string)
	fs.StringVar(out, "o", "text", "output: text or json")
	fs.StringVar(out, "output", "text", "the same as -o")
	return out
}

func checkOutput(out string) error {
	if out != "text" && out != "json" {
		return usagef("output %q: want text or json", out)
	}
	return nil
}

// gatewayFlag is --url, on every client command.
func gatewayFlag(fs *flag.FlagSet) *string {
	return fs.String("url", envOr("SLUICE_URL", "http://127.0.0.1:8080"), "gateway base URL (env SLUICE_URL)")
}

// subcommand is one verb of a command with verbs (`sluice topics list`).
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, cio clientIO, args []string) error
}

// dispatch runs the verb args[0] names among subs; without one, or with
// --help, it prints the verbs.
func dispatch(ctx context.Context, cio clientIO, command string, subs []subcommand, args []string) error {
	list := func() {
		cio.diagf("usage: sluice %s <verb> [flags]\n\nverbs:\n", command)
		for _, s := range subs {
			cio.diagf("  %-13s %s\n", s.name, s.summary)
		}
		cio.diagf("\nRun 'sluice %s <verb> --help' for a verb's flags.\n", command)
	}
	if len(args) == 0 {
		list()
		return errFlagsReported
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		list()
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			if err := s.run(ctx, cio, args[1:]); err != nil {
				return &verbError{verb: s.name, err: err}
			}
			return nil
		}
	}
	list()
	return usagef("unknown verb %q", args[0])
}

// verbError is a verb's error, for the message to name the verb.
type verbError struct {
	verb string
	err  error
}

func (e *verbError) Error() string { return e.verb + ": " + e.err.Error() }
func (e *verbError) Unwrap() error { return e.err }

// oneName is the single positional argument of a verb that names one thing.
func oneName(pos []string, what, synopsis string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("want one %s; usage: sluice %s", what, synopsis)
	}
	return pos[0], nil
}

// sortedKeys is m's keys in order.
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
