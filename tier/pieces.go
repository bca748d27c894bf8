package tier

// Pieces is a range of a segment's log object as consecutive views of the
// cached chunks that hold it, so that a read spanning chunks is served
// without copying them into one buffer. The views are read-only: chunks
// are never written once made, and a view keeps its chunk alive past its
// eviction from the cache.
type Pieces [][]byte

// Len is the range's length in bytes.
func (ps Pieces) Len() int64 {
	var n int64
	for _, p := range ps {
		n += int64(len(p))
	}
	return n
}

// Bytes returns the range as one slice: the only piece itself, or a copy
// of them all.
func (ps Pieces) Bytes() []byte {
	switch len(ps) {
	case 0:
		return nil
	case 1:
		return ps[0]
	}
	out := make([]byte, 0, ps.Len())
	for _, p := range ps {
		out = append(out, p...)
	}
	return out
}

// Slice is [lo, hi) of the range, as views.
func (ps Pieces) Slice(lo, hi int64) Pieces {
	if lo >= hi {
		return nil
	}
	var out Pieces
	var at int64 // where ps[i] starts in the range
	for _, p := range ps {
		end := at + int64(len(p))
		if end > lo && at < hi {
			a, b := max(lo-at, 0), min(hi, end)-at
			out = append(out, p[a:b:b])
		}
		if end >= hi {
			break
		}
		at = end
	}
	return out
}

// contiguous is [lo, hi) of the range as one slice: a view when it lies
// within one piece, else a copy (a batch that straddles two chunks).
func (ps Pieces) contiguous(lo, hi int64) []byte {
	return ps.Slice(lo, hi).Bytes()
}
