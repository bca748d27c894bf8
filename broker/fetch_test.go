package broker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/recordbatch"
)

// readFromRecorder is a ResponseWriter that, like net/http's, implements
// io.ReaderFrom, and records what it was handed. net/http passes that source
// to (*net.TCPConn).ReadFrom, which uses sendfile only for an *os.File (or an
// io.LimitedReader over one).
type readFromRecorder struct {
	*httptest.ResponseRecorder
	src any
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.src = src
	return io.Copy(r.ResponseRecorder, src)
}

func TestFetchHandsTheSegmentFileToReadFrom(t *testing.T) {
	c := embedtest.Start(t, embedtest.Options{})
	body, _ := json.Marshal(api.CreateTopicRequest{Name: "sf", Partitions: 1})
	resp, err := http.Post(c.URL+"/v1/topics", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create: %v", resp)
	}
	for i := 0; i < 3; i++ {
		resp, err := http.Post(c.URL+"/v1/topics/sf/records", "application/json", bytes.NewReader([]byte(fmt.Sprintf(`{"records":[{"value":%d}]}`, i))))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("produce: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	rec := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	req := httptest.NewRequest("GET", "/internal/v1/partitions/sf/0/fetch?offset=1", nil)
	c.Brokers[0].Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("fetch: %d %s", rec.Code, rec.Body)
	}
	lr, ok := rec.src.(*io.LimitedReader)
	if !ok {
		t.Fatalf("ReadFrom got %T, want *io.LimitedReader over the segment file", rec.src)
	}
	if _, ok := lr.R.(*os.File); !ok {
		t.Fatalf("ReadFrom got a LimitedReader over %T, want *os.File (sendfile needs it)", lr.R)
	}
	var offsets []int64
	if _, err := recordbatch.Scan(rec.Body.Bytes(), true, func(h recordbatch.Header, b []byte) error {
		offsets = append(offsets, h.BaseOffset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(offsets) != "[1 2]" || rec.Header().Get("Content-Length") != fmt.Sprint(rec.Body.Len()) {
		t.Fatalf("batches at %v, content length %s for %d bytes", offsets, rec.Header().Get("Content-Length"), rec.Body.Len())
	}
}
