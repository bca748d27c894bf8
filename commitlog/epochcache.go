package commitlog

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// EpochEntry says that leader epoch Epoch wrote its first record at StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochCache is the leader-epoch lineage of a log (KIP-101): which epoch wrote
// which range of offsets. A follower asks the leader for the end offset of its
// own latest epoch and truncates there, instead of to its possibly stale HW.
// Guarded by the owning Log's mutex.
type epochCache struct {
	entries []EpochEntry // strictly increasing in both fields
}

// assign records that epoch starts at offset, if it is newer than the latest.
// It reports whether the lineage changed.
func (c *epochCache) assign(epoch int32, offset int64) bool {
	if epoch < 0 {
		return false
	}
	if n := len(c.entries); n > 0 {
		last := c.entries[n-1]
		if epoch <= last.Epoch {
			return false
		}
		if offset < last.StartOffset {
			// A newer epoch starting below the last entry means the log was
			// truncated under it; drop what it overwrote.
			c.truncateFrom(offset)
		}
	}
	c.entries = append(c.entries, EpochEntry{epoch, offset})
	return true
}

// latest returns the newest epoch, or -1 when there is none.
func (c *epochCache) latest() int32 {
	if len(c.entries) == 0 {
		return -1
	}
	return c.entries[len(c.entries)-1].Epoch
}

// endOffsetFor answers OffsetsForLeaderEpoch: the largest epoch <= epoch that
// this log knows, and the offset where the epoch after it starts (or leo when it
// is the latest). With no such epoch it returns (-1, -1).
func (c *epochCache) endOffsetFor(epoch int32, leo int64) (int32, int64) {
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].Epoch > epoch })
	if i == 0 {
		return -1, -1
	}
	if i == len(c.entries) {
		return c.entries[i-1].Epoch, leo
	}
	return c.entries[i-1].Epoch, c.entries[i].StartOffset
}

// truncateFrom drops epochs that start at or after offset (the log was cut there).
func (c *epochCache) truncateFrom(offset int64) bool {
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset >= offset })
	changed := i < len(c.entries)
	c.entries = c.entries[:i]
	return changed
}

// truncateBefore moves the first epoch's start up to offset (segments below it
// were deleted) and drops epochs wholly below it.
func (c *epochCache) truncateBefore(offset int64) bool {
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].StartOffset > offset })
	if i == 0 {
		return false
	}
	changed := i > 1 || c.entries[i-1].StartOffset != offset
	c.entries = append([]EpochEntry{{c.entries[i-1].Epoch, offset}}, c.entries[i:]...)
	return changed
}

func (c *epochCache) encode() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "0\n%d\n", len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return []byte(b.String())
}

func decodeEpochs(b []byte) ([]EpochEntry, error) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 || lines[0] != "0" {
		return nil, fmt.Errorf("leader epoch checkpoint: bad header")
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, fmt.Errorf("leader epoch checkpoint: bad count")
	}
	out := make([]EpochEntry, 0, n)
	for _, l := range lines[2:] {
		var e EpochEntry
		if _, err := fmt.Sscanf(l, "%d %d", &e.Epoch, &e.StartOffset); err != nil {
			return nil, fmt.Errorf("leader epoch checkpoint: %q: %w", l, err)
		}
		if k := len(out); k > 0 && (e.Epoch <= out[k-1].Epoch || e.StartOffset < out[k-1].StartOffset) {
			return nil, fmt.Errorf("leader epoch checkpoint: entries out of order")
		}
		out = append(out, e)
	}
	return out, nil
}
