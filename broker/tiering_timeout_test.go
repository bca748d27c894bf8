package broker

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
)

func TestTierPassTimeoutScalesWithTheLargestSegment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		closed []commitlog.SegmentInfo
		want   time.Duration
	}{
		{"no segments", nil, 2 * time.Minute},
		{"small segments", []commitlog.SegmentInfo{{Size: 8 << 20}, {Size: 100 << 20}}, 2 * time.Minute},
		{"a 1 GiB segment", []commitlog.SegmentInfo{{Size: 8 << 20}, {Size: 1 << 30}}, 1025 * time.Second},
	} {
		if got := tierPassTimeout(tc.closed); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
