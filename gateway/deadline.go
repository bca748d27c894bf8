package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api/apihttp"
)

// Write deadlines (gateway.write.timeout.ms). The server has no
// WriteTimeout, since a long poll may legitimately wait before it writes;
// instead each long-polling handler sets its connection's deadline to its
// poll plus the write timeout when it starts, and again to the write
// timeout alone once the poll is over and the answer is encoded. A client
// that stops reading then gets its connection closed, and the handler's
// goroutine and buffers go with it. WebSocket frames have a deadline each
// (wsStream.write).

// setWriteDeadline sets the connection's write deadline to wait plus the
// write timeout from now, through http.ResponseController: the
// ResponseWriter is not wrapped, so sendfile and splice still apply.
// net/http clears the deadline when the response is done.
func (g *Gateway) setWriteDeadline(w http.ResponseWriter, wait time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + g.wsConns.lim.WriteTimeout))
}

// writeRenderedWithin writes the answer of a long poll, rendered by one of
// jsonrender.go's functions into a pooled buffer (with its error), which it
// gives back. The write timeout starts once the answer is rendered, not
// before.
func (g *Gateway) writeRenderedWithin(w http.ResponseWriter, status int, bp *[]byte, err error) {
	defer putBuf(bp)
	g.setWriteDeadline(w, 0)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	*bp = append(*bp, '\n')
	writeEncoded(w, status, *bp)
}

// writeEncoded writes b, a JSON document ending in a newline.
func writeEncoded(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
