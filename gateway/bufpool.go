package gateway

import (
	"sync"

	"github.com/sluice-io/sluice/recordbatch"
)

// Request bodies and encoded batches are ~100 KiB each; reusing them keeps the
// produce path from feeding the garbage collector a body's worth per request.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooled keeps outsized buffers out of the pool.
const maxPooled = 8 << 20

func getBuf(n int) *[]byte {
	bp := bufPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = make([]byte, 0, n)
	}
	*bp = (*bp)[:0]
	return bp
}

func putBuf(bp *[]byte) {
	if bp == nil || cap(*bp) > maxPooled {
		return
	}
	bufPool.Put(bp)
}

// Record slices of a request (a thousand records is ~90 KiB of slice
// headers) are pooled too. Pooled slices keep pointers into old bodies past
// their length until reused; those bodies are pooled buffers anyway.
var (
	pendingPool = sync.Pool{New: func() any { s := make([]pendingRecord, 0, 1024); return &s }}
	recordPool  = sync.Pool{New: func() any { s := make([]recordbatch.Record, 0, 1024); return &s }}
)

func getPending(n int) []pendingRecord {
	s := *pendingPool.Get().(*[]pendingRecord)
	if cap(s) < n {
		s = make([]pendingRecord, 0, n)
	}
	return s[:0]
}

func putPending(s []pendingRecord) {
	if cap(s) <= 1<<16 {
		pendingPool.Put(&s)
	}
}

func getRecords(n int) []recordbatch.Record {
	s := *recordPool.Get().(*[]recordbatch.Record)
	if cap(s) < n {
		s = make([]recordbatch.Record, 0, n)
	}
	return s[:0]
}

func putRecords(s []recordbatch.Record) {
	if cap(s) <= 1<<16 {
		recordPool.Put(&s)
	}
}
