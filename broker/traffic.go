package broker

import "sync/atomic"

// traffic counts what a broker accepted from producers and served to
// consumers since it started. Handlers add to it after each successful
// request; the stats route and the metrics read it. Follower fetches and
// replicated appends are not counted: they are the same records again.
type traffic struct {
	producedRecords atomic.Int64
	producedBytes   atomic.Int64
	fetchedRecords  atomic.Int64 // offsets spanned by consumer fetches
	fetchedBytes    atomic.Int64
}

// produced counts one leader append of the offsets [base, last] in n bytes.
func (t *traffic) produced(base, last int64, n int) {
	if last >= base {
		t.producedRecords.Add(last - base + 1)
	}
	t.producedBytes.Add(int64(n))
}

// fetched counts one consumer fetch that served the offsets [from, next) in n bytes.
func (t *traffic) fetched(from, next, n int64) {
	if n == 0 {
		return
	}
	if next > from {
		t.fetchedRecords.Add(next - from)
	}
	t.fetchedBytes.Add(n)
}
