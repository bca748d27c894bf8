package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/recordbatch"
)

const produceSynopsis = "produce TOPIC [-k KEY | -K SEP] [-H key=value ...] [-p N] [-f FORMAT|json] [--timestamp TIME] [--acks all|1|0] [--url URL] [VALUE ...]"

const produceAbout = `
Produces each line of stdin (or each VALUE argument) as one record, its bytes
as typed. Lines go out in batches as fast as they come (--batch at most),
through an idempotent producer: a batch the client retries is written once.
After each batch it prints a delivery line per record, in the format -f
(default '%p/%o\n'; -f '' prints nothing; -f json a JSON object per record).

  -k KEY          every record's key
  -K SEP          each line is KEY SEP VALUE (a line without SEP is a value
                  with no key)
  -H key=value    a header on every record (repeatable)
  -p N            the partition (default: murmur2 of the key, as Kafka's
                  producers; keyless records of a batch share one partition,
                  round-robin from batch to batch)
  --timestamp T   every record's timestamp, Unix ms or RFC 3339 (default: the
                  gateway's clock)

-f takes the escapes of 'sluice consume -f' (%t %p %o %T %k %K %v %s %S %h
%% \n \t \r \\); %T is -1 unless --timestamp is given. --output json is the
same as -f json.

Exit status: 0 when every record was acknowledged, 1 when the API answered an
error (printed with its code, e.g. RECORD_TOO_LARGE), 2 for a bad command line.`

// produceOptions is a parsed `sluice produce` command line.
type produceOptions struct {
	topic     string
	key       *string
	keySep    string
	headers   map[string]string
	partition *int32
	timestamp time.Time
	asJSON    bool
	nullEmpty bool
	acks      client.Acks
	batch     int
	format    *recordFormat // nil: print nothing
}

func produceCmd(ctx context.Context, cio clientIO, args []string) (err error) {
	fs := newFlags(cio, "produce", produceSynopsis, produceAbout)
	base := gatewayFlag(fs)
	var key, partition, format, output, ts, acks string
	o := produceOptions{headers: configFlag{}}
	fs.StringVar(&key, "k", "", "every record's key")
	fs.StringVar(&key, "key", "", "the same as -k")
	fs.StringVar(&o.keySep, "K", "", "key separator: each line is KEY SEP VALUE")
	fs.Var(configFlag(o.headers), "H", "a header key=value on every record (repeatable)")
	fs.StringVar(&partition, "p", "", "the partition (default: by key, else round-robin per batch)")
	fs.StringVar(&partition, "partition", "", "the same as -p")
	fs.StringVar(&format, "f", `%p/%o\n`, "delivery line format: json, '' (none), or a template of %t %p %o %T %k %K %v %s %S %h")
	fs.StringVar(&output, "output", "", "json (the same as -f json) or text")
	fs.StringVar(&ts, "timestamp", "", "every record's timestamp: Unix ms or RFC 3339 (default: the gateway's clock)")
	fs.StringVar(&acks, "acks", "all", "all, 1 or 0 (0 is not idempotent and reports offset -1)")
	fs.IntVar(&o.batch, "batch", 500, "most records per request")
	fs.BoolVar(&o.asJSON, "json", false, "values are JSON: checked, and stored as their compact text")
	fs.BoolVar(&o.nullEmpty, "Z", false, "an empty value is a null value (a tombstone on a compacted topic)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want a TOPIC; usage: sluice %s", produceSynopsis)
	}
	o.topic = pos[0]
	set := setFlags(fs)
	if (set["k"] || set["key"]) && o.keySep != "" {
		return usagef("-k and -K exclude each other")
	}
	if set["k"] || set["key"] {
		o.key = &key
	}
	if partition != "" {
		n, err := strconv.ParseInt(partition, 10, 32)
		if err != nil || n < 0 {
			return usagef("-p %q: want a partition number", partition)
		}
		o.partition = client.Partition(int32(n))
	}
	if ts != "" {
		if o.timestamp, err = parseTime(ts); err != nil {
			return usagef("--timestamp: %v", err)
		}
	}
	switch acks {
	case "all", "-1", "1", "0":
		o.acks = client.Acks(acks)
	default:
		return usagef("--acks %q: want all, 1 or 0", acks)
	}
	if o.batch < 1 {
		return usagef("--batch %d: want 1 or more", o.batch)
	}
	switch output {
	case "", "text":
	case "json":
		format = formatJSON
	default:
		return usagef("--output %q: want text or json", output)
	}
	if format != "" {
		if o.format, err = parseFormat(format); err != nil {
			return &usageError{msg: err.Error()}
		}
	}
	cl, err := newClient(*base)
	if err != nil {
		return err
	}
	defer cl.Close()
	s := &sender{cl: cl, o: o, w: bufio.NewWriter(cio.out)}
	defer func() {
		if ferr := s.w.Flush(); err == nil {
			err = ferr // what is printed is the command's output
		}
	}()
	if o.acks != client.AcksNone {
		if s.producer, err = cl.NewProducer(ctx); err != nil {
			return err
		}
	}
	if len(pos) > 1 {
		return s.send(ctx, pos[1:])
	}
	return s.sendLines(ctx, cio)
}

// sender turns lines into records, sends them and reports deliveries.
type sender struct {
	cl       *client.Client
	producer *client.Producer // nil with acks=0
	o        produceOptions
	w        *bufio.Writer
}

// sendLines sends stdin's lines in batches: a reader goroutine scans them,
// and each batch is whatever has arrived (up to --batch) when the previous
// one is done, so a line typed at a terminal goes out at once and a pipe
// fills whole batches. The reader is owned here; when sendLines returns
// early it stops at its next line (a read blocked on stdin stays blocked
// until the process exits).
func (s *sender) sendLines(ctx context.Context, cio clientIO) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan string, s.o.batch)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(cio.in)
		sc.Buffer(make([]byte, 64<<10), api.DefaultMaxMessageBytes+1)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				readErr <- nil
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		var first string
		var ok bool
		select {
		case first, ok = <-lines:
		case <-ctx.Done():
			return nil
		}
		if !ok {
			break
		}
		pending := []string{first}
	fill:
		for len(pending) < s.o.batch {
			select {
			case l, ok := <-lines:
				if !ok {
					break fill
				}
				pending = append(pending, l)
			default:
				break fill
			}
		}
		if err := s.send(ctx, pending); err != nil {
			return err
		}
	}
	if err := <-readErr; err != nil {
		return &usageError{msg: "reading stdin: " + err.Error()}
	}
	return nil
}

// send produces one batch of lines and prints their deliveries.
func (s *sender) send(ctx context.Context, lines []string) error {
	recs := make([]client.Record, len(lines))
	shown := make([]shownRecord, len(lines))
	for i, line := range lines {
		r, err := s.record(line)
		if err != nil {
			return err
		}
		recs[i] = r
		shown[i] = shownRecord{Topic: s.o.topic, Timestamp: -1, Key: r.Key, Value: r.Value}
		if r.JSON != nil {
			// The log holds the compact text of a JSON value.
			var b bytes.Buffer
			if err := json.Compact(&b, r.JSON); err != nil {
				return usagef("not JSON: %q", r.JSON)
			}
			shown[i].Value = b.Bytes()
		}
		if !r.Timestamp.IsZero() {
			shown[i].Timestamp = r.Timestamp.UnixMilli()
		}
		for _, k := range sortedKeys(r.Headers) {
			shown[i].Headers = append(shown[i].Headers, recordbatch.RecordHeader{Key: k, Value: []byte(r.Headers[k])})
		}
	}
	opts := client.ProduceOptions{Acks: s.o.acks, Partition: s.o.partition}
	var offsets []api.RecordOffset
	var err error
	if s.producer != nil {
		offsets, err = s.producer.Send(ctx, s.o.topic, recs, opts)
	} else {
		offsets, err = s.cl.Produce(ctx, s.o.topic, recs, opts)
	}
	// Report what was written, a partial failure's written records included.
	if s.o.format != nil {
		for i, off := range offsets {
			if i >= len(shown) || (off.Offset < 0 && s.o.acks != client.AcksNone) {
				continue
			}
			shown[i].Partition, shown[i].Offset = off.Partition, off.Offset
			if werr := s.o.format.write(s.w, &shown[i]); werr != nil {
				return werr
			}
		}
	}
	if ferr := s.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// record is one line as a record.
func (s *sender) record(line string) (client.Record, error) {
	r := client.Record{Timestamp: s.o.timestamp}
	if len(s.o.headers) > 0 {
		r.Headers = s.o.headers
	}
	value := line
	switch {
	case s.o.key != nil:
		r.Key = []byte(*s.o.key)
	case s.o.keySep != "":
		if k, v, ok := strings.Cut(line, s.o.keySep); ok {
			r.Key, value = []byte(k), v
		}
	}
	switch {
	case value == "" && s.o.nullEmpty:
		// A null value: neither Value nor JSON.
	case s.o.asJSON:
		if !json.Valid([]byte(value)) {
			return r, usagef("not JSON: %q", value)
		}
		r.JSON = json.RawMessage(value)
	default:
		r.Value = []byte(value)
	}
	return r, nil
}
