package gateway

import "sync"

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
