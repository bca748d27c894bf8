package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/recordbatch"
)

const consumeSynopsis = "consume TOPIC [-p 0,2] [-o beginning|end|N|-N|+N|@TIME] [-n COUNT] [-e] [-g GROUP] [-f FORMAT|json] [--url URL]"

const consumeAbout = `
Prints records of TOPIC's partitions (all of them, or those of -p) from the
position -o names in each, and keeps waiting for new ones until interrupted;
-e stops at the end of each partition instead (its high watermark when the
command started), -n after COUNT records. With -g it joins consumer group
GROUP, reads the group's share of TOPIC (several topics: T1,T2) from the
group's committed offsets, and commits what it printed.

-o (the start, as in kcat):
  beginning | end      the log start, or the high watermark (new records only)
  N | -N | +N          offset N; N before the end; N after the log start
  @TIME                the first record at or after TIME (Unix ms or RFC 3339)
With -g, -o beginning|end only says where a partition without a committed
offset starts.

-f (the output; the default is json, one JSON object per line):
  %t topic  %p partition  %o offset  %T timestamp (ms)  %h headers (k=v,...)
  %k key  %K key length  %v or %s value  %S value length  %% a percent sign
  \n \t \r \\ escapes; a null key or value prints as nothing, its length as -1
--output json is the same as -f json, --output text the same as -f '%v\n'
(consume's -o is the start offset, as in kcat).

Exit status: 0 when done or interrupted, 1 when the API answered an error
(printed with its code, e.g. UNKNOWN_TOPIC), 2 for a bad command line.`

// fetchWait is how long one fetch or poll waits for new records.
const fetchWait = 10 * time.Second

// endWait bounds a fetch below the high watermark, which finds records at once.
const endWait = time.Second

// consumeOptions is a parsed `sluice consume` command line.
type consumeOptions struct {
	topic      string
	partitions []int32 // nil: every partition
	start      startSpec
	startSet   bool // -o was given
	limit      int
	exitAtEnd  bool
	group      string
	instanceID string
	format     *recordFormat
}

func consumeCmd(ctx context.Context, cio clientIO, args []string) (err error) {
	fs := newFlags(cio, "consume", consumeSynopsis, consumeAbout)
	base := gatewayFlag(fs)
	var parts, start, format, output string
	var follow bool
	var o consumeOptions
	fs.StringVar(&parts, "p", "", "partitions, comma-separated (default: all)")
	fs.StringVar(&parts, "partition", "", "the same as -p")
	fs.StringVar(&start, "o", "beginning", "where to start in each partition: beginning, end, N, -N, +N or @TIME")
	fs.StringVar(&start, "offset", "beginning", "the same as -o")
	fs.IntVar(&o.limit, "n", 0, "stop after COUNT records (0: no limit)")
	fs.IntVar(&o.limit, "limit", 0, "the same as -n")
	fs.BoolVar(&o.exitAtEnd, "e", false, "exit at the end of each partition (its high watermark at the start)")
	fs.BoolVar(&follow, "follow", false, "keep waiting for new records (the default; the opposite of -e)")
	fs.StringVar(&o.group, "g", "", "consume as a member of this consumer group, committing what was printed")
	fs.StringVar(&o.group, "group", "", "the same as -g")
	fs.StringVar(&o.instanceID, "instance-id", "", "with -g: a static member id (a restart takes the member's partitions back without a rebalance)")
	fs.StringVar(&format, "f", formatJSON, "output format: json, or a template of %t %p %o %T %k %K %v %s %S %h")
	fs.StringVar(&output, "output", "", "json (the same as -f json) or text (the same as -f '%v\\n' unless -f gives a template)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one TOPIC; usage: sluice %s", consumeSynopsis)
	}
	o.topic = pos[0]
	set := setFlags(fs)
	if follow && o.exitAtEnd {
		return usagef("-e and --follow contradict each other")
	}
	if o.limit < 0 {
		return usagef("-n %d: want a count of 0 or more", o.limit)
	}
	switch output {
	case "":
	case "json":
		format = formatJSON
	case "text":
		if !set["f"] {
			format = `%v\n`
		}
	default:
		return usagef("--output %q: want text or json", output)
	}
	if o.format, err = parseFormat(format); err != nil {
		return &usageError{msg: err.Error()}
	}
	if o.start, err = parseStartSpec(start); err != nil {
		return &usageError{msg: err.Error()}
	}
	o.startSet = set["o"] || set["offset"]
	if parts != "" {
		if o.partitions, err = parsePartitions(parts); err != nil {
			return err
		}
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	w := bufio.NewWriter(cio.out)
	defer func() {
		if ferr := w.Flush(); err == nil {
			err = ferr // what is printed is the command's output
		}
	}()
	p := &printer{w: w, format: o.format, limit: o.limit}
	if o.group != "" {
		return consumeGroup(ctx, cl, p, o)
	}
	if strings.Contains(o.topic, ",") {
		return usagef("several topics (%s) need -g", o.topic)
	}
	return consumePartitions(ctx, cl, p, o)
}

// setFlags is the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parsePartitions reads "0,2".
func parsePartitions(s string) ([]int32, error) {
	var out []int32
	seen := map[int32]bool{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return nil, usagef("-p %q: want partition numbers, comma-separated (0,2)", s)
		}
		if !seen[int32(n)] {
			seen[int32(n)] = true
			out = append(out, int32(n))
		}
	}
	return out, nil
}

// printer writes records in a format and counts them against a limit.
type printer struct {
	w      *bufio.Writer
	format *recordFormat
	limit  int // 0: none
	n      int
}

// print writes r; full reports that the limit is reached.
func (p *printer) print(r *shownRecord) (full bool, err error) {
	if err := p.format.write(p.w, r); err != nil {
		return false, err
	}
	p.n++
	return p.limit > 0 && p.n >= p.limit, nil
}

// partitionReader reads one partition from next on, up to end.
type partitionReader struct {
	topic     string
	partition int32
	next      int64
	end       int64 // -1: no end
}

func (r *partitionReader) done() bool { return r.end >= 0 && r.next >= r.end }

// read fetches the records after the last read (raw batches, so keys,
// values and headers come byte for byte), waiting up to wait when there are
// none yet, and steps past them.
func (r *partitionReader) read(ctx context.Context, cl *client.Client, wait time.Duration) ([]recordbatch.Record, error) {
	b, err := cl.FetchBatches(ctx, r.topic, r.partition, client.At(r.next), client.FetchOptions{MaxWait: wait})
	if err != nil {
		return nil, err
	}
	recs, err := b.Records(r.next)
	if err != nil {
		return nil, err
	}
	if r.end >= 0 {
		n := 0
		for n < len(recs) && recs[n].Offset < r.end {
			n++
		}
		recs = recs[:n]
	}
	r.next = max(r.next, b.NextOffset)
	return recs, nil
}

// consumePartitions is consume without a group. With -e the partitions are
// read one after the other, in the order given (everything below a high
// watermark is there to read at once); otherwise each has a reader
// goroutine, and records print as they come.
func consumePartitions(ctx context.Context, cl *client.Client, p *printer, o consumeOptions) error {
	t, err := cl.GetTopic(ctx, o.topic)
	if err != nil {
		return err
	}
	parts := o.partitions
	if parts == nil {
		for _, pi := range t.Partitions {
			parts = append(parts, pi.Partition)
		}
	}
	readers := make([]*partitionReader, 0, len(parts))
	for _, part := range parts {
		if int(part) >= len(t.Partitions) {
			return api.Errorf(api.CodeUnknownPartition, "topic %q has no partition %d (it has %d)", o.topic, part, len(t.Partitions))
		}
		start, hw, err := o.start.resolve(ctx, cl, o.topic, part)
		if err != nil {
			return fmt.Errorf("partition %d: %w", part, err)
		}
		r := &partitionReader{topic: o.topic, partition: part, next: start, end: -1}
		if o.exitAtEnd {
			r.end = hw
		}
		readers = append(readers, r)
	}
	if o.exitAtEnd {
		return readToEnd(ctx, cl, p, readers)
	}
	return follow(ctx, cl, p, readers)
}

// readToEnd prints each partition up to its end, one after the other.
func readToEnd(ctx context.Context, cl *client.Client, p *printer, readers []*partitionReader) error {
	for _, r := range readers {
		for !r.done() {
			recs, err := r.read(ctx, cl, endWait)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("partition %d: %w", r.partition, err)
			}
			for i := range recs {
				s := shownFromLog(r.topic, r.partition, &recs[i])
				if full, err := p.print(&s); err != nil || full {
					return err
				}
			}
			if err := p.w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// chunk is what one fetch of a reader goroutine found.
type chunk struct {
	r    *partitionReader
	recs []recordbatch.Record
	err  error
}

// follow long-polls every partition at once until ctx ends, the limit is
// reached or a fetch fails. It owns the reader goroutines and waits for
// them before it returns.
func follow(ctx context.Context, cl *client.Client, p *printer, readers []*partitionReader) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	chunks := make(chan chunk)
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				recs, err := r.read(ctx, cl, fetchWait)
				if err == nil && len(recs) == 0 {
					continue
				}
				select {
				case chunks <- chunk{r: r, recs: recs, err: err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-chunks:
			if c.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("partition %d: %w", c.r.partition, c.err)
			}
			for i := range c.recs {
				s := shownFromLog(c.r.topic, c.r.partition, &c.recs[i])
				if full, err := p.print(&s); err != nil || full {
					return err
				}
			}
			if err := p.w.Flush(); err != nil {
				return err
			}
		}
	}
}
