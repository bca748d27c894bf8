package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/client"
)

// Where `sluice consume -o SPEC` starts in each partition, as kcat spells it:
//
//	beginning (or earliest)  the log start offset
//	end (or latest)          the high watermark: only new records
//	N                        offset N
//	-N                       N records before the end (not before the log start)
//	+N                       N records after the log start (not past the end)
//	@T                       the first record at or after time T: Unix
//	                         milliseconds or RFC 3339; the end when none is

type startKind int

const (
	startBeginning startKind = iota
	startEnd
	startAbsolute
	startFromEnd
	startFromStart
	startTime
)

// startSpec is a parsed -o.
type startSpec struct {
	kind startKind
	n    int64     // startAbsolute, startFromEnd, startFromStart
	at   time.Time // startTime
}

// parseStartSpec parses -o. Errors are INVALID_OFFSET, as the API's.
func parseStartSpec(s string) (startSpec, error) {
	switch s {
	case "beginning", "earliest", "":
		return startSpec{kind: startBeginning}, nil
	case "end", "latest":
		return startSpec{kind: startEnd}, nil
	}
	if rest, ok := strings.CutPrefix(s, "@"); ok {
		t, err := parseTime(rest)
		if err != nil {
			return startSpec{}, api.Errorf(api.CodeInvalidOffset, "-o %q: %v", s, err)
		}
		return startSpec{kind: startTime, at: t}, nil
	}
	kind, digits := startAbsolute, s
	switch s[0] {
	case '-':
		kind, digits = startFromEnd, s[1:]
	case '+':
		kind, digits = startFromStart, s[1:]
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 || digits == "" || digits[0] == '+' || digits[0] == '-' {
		return startSpec{}, api.Errorf(api.CodeInvalidOffset, "-o %q: want beginning, end, N, -N, +N or @TIME (Unix ms or RFC 3339)", s)
	}
	return startSpec{kind: kind, n: n}, nil
}

// parseTime reads Unix milliseconds or an RFC 3339 time.
func parseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return time.Time{}, fmt.Errorf("time %d is before the Unix epoch", ms)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want Unix milliseconds or RFC 3339 (2026-01-02T15:04:05Z)", s)
	}
	return t, nil
}

// resolve asks the partition's leader where spec starts, and returns that
// offset with the partition's high watermark at the time of asking.
func (spec startSpec) resolve(ctx context.Context, cl *client.Client, topic string, partition int32) (start, hw int64, err error) {
	if spec.kind == startTime {
		o, err := cl.OffsetForTime(ctx, topic, partition, spec.at)
		if err != nil {
			return 0, 0, err
		}
		if o.Offset < 0 { // every record is older
			return o.HighWatermark, o.HighWatermark, nil
		}
		return o.Offset, o.HighWatermark, nil
	}
	o, err := cl.ListOffsets(ctx, topic, partition, client.Latest)
	if err != nil {
		return 0, 0, err
	}
	hw = o.HighWatermark
	switch spec.kind {
	case startBeginning:
		start = o.LogStartOffset
	case startEnd:
		start = hw
	case startAbsolute:
		start = spec.n
	case startFromEnd:
		start = max(o.LogStartOffset, hw-spec.n)
	case startFromStart:
		start = min(o.LogStartOffset+spec.n, hw)
	}
	return start, hw, nil
}

// resetSpec turns a -o style position (beginning, end, N, @TIME) into the
// API's reset target (earliest, latest, offset:N, timestamp:MS); the API's
// own spellings pass through. Relative positions (-N, +N) have no group
// reset equivalent.
func resetSpec(s string) (string, error) {
	if strings.HasPrefix(s, "offset:") || strings.HasPrefix(s, "timestamp:") {
		return s, nil
	}
	spec, err := parseStartSpec(s)
	if err != nil {
		return "", err
	}
	switch spec.kind {
	case startBeginning:
		return api.ResetEarliest, nil
	case startEnd:
		return api.ResetLatest, nil
	case startAbsolute:
		return "offset:" + strconv.FormatInt(spec.n, 10), nil
	case startTime:
		return "timestamp:" + strconv.FormatInt(spec.at.UnixMilli(), 10), nil
	}
	return "", api.Errorf(api.CodeInvalidOffset, "--to %q: a group resets to beginning, end, N or @TIME", s)
}
