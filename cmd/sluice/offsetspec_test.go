package main

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
)

func TestParseStartSpec(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want startSpec
	}{
		{"beginning", startSpec{kind: startBeginning}},
		{"earliest", startSpec{kind: startBeginning}},
		{"end", startSpec{kind: startEnd}},
		{"latest", startSpec{kind: startEnd}},
		{"0", startSpec{kind: startAbsolute}},
		{"42", startSpec{kind: startAbsolute, n: 42}},
		{"-5", startSpec{kind: startFromEnd, n: 5}},
		{"+5", startSpec{kind: startFromStart, n: 5}},
		{"@1767225600000", startSpec{kind: startTime, at: at}},
		{"@2026-01-01T00:00:00Z", startSpec{kind: startTime, at: at}},
		{"@2026-01-01T01:00:00+01:00", startSpec{kind: startTime, at: at}},
	} {
		got, err := parseStartSpec(tc.in)
		if err != nil || got.kind != tc.want.kind || got.n != tc.want.n || !got.at.Equal(tc.want.at) {
			t.Errorf("parseStartSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"soon", "-", "+", "--5", "+-5", "1.5", "@", "@yesterday", "@-5", "9223372036854775808"} {
		if _, err := parseStartSpec(bad); !errors.Is(err, &api.Error{Code: api.CodeInvalidOffset}) {
			t.Errorf("parseStartSpec(%q): %v, want INVALID_OFFSET", bad, err)
		}
	}
}

func TestResetSpec(t *testing.T) {
	for in, want := range map[string]string{
		"beginning": "earliest", "earliest": "earliest", "end": "latest", "latest": "latest",
		"12": "offset:12", "offset:12": "offset:12",
		"@2026-01-01T00:00:00Z": "timestamp:1767225600000", "timestamp:5": "timestamp:5",
	} {
		if got, err := resetSpec(in); err != nil || got != want {
			t.Errorf("resetSpec(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "+1", "soon"} {
		if _, err := resetSpec(bad); err == nil {
			t.Errorf("resetSpec(%q) accepted", bad)
		}
	}
}
