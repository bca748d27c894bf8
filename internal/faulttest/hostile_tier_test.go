package faulttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// rotSegment is one remote segment of topic "rot" in sluice dev's
// object directory: its base offset and its two object files.
type rotSegment struct {
	base             int64
	logPath, idxPath string
}

// prepareRot makes topic "rot" (one partition, tiered, small segments),
// writes n records "v-<offset>" and waits until at least four segments live
// only in the object directory under dataDir/tier. It returns them by base.
func prepareRot(t *testing.T, base, dataDir string, n int) []rotSegment {
	t.Helper()
	a := hostileDo(t, "POST", base+"/v1/topics", "application/json",
		[]byte(`{"name":"rot","partitions":1,"configs":{"remote.storage.enable":"true","segment.bytes":"8192","local.retention.bytes":"16384"}}`))
	if a.status != 201 {
		t.Fatalf("create rot: %d %s", a.status, a.body)
	}
	for i := 0; i < n; i += 50 {
		var body bytes.Buffer
		body.WriteString(`{"records":[`)
		for j := i; j < min(i+50, n); j++ {
			if j > i {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"value":"v-%d"}`, j)
		}
		body.WriteString(`]}`)
		if a := hostileDo(t, "POST", base+"/v1/topics/rot/records", "application/json", body.Bytes()); a.status != 200 {
			t.Fatalf("producing into rot: %d %s", a.status, a.body)
		}
	}
	var segs []rotSegment
	testwait.For(t, 90*time.Second, "four segments of rot only in the object directory", func() bool {
		var tp api.Topic
		if err := getJSON(base+"/v1/topics/rot", &tp); err != nil || len(tp.Partitions) != 1 {
			return false
		}
		segs = rotObjects(t, filepath.Join(dataDir, "tier"))
		local := tp.Partitions[0].LocalStartOffset
		remoteOnly := 0
		for i, s := range segs {
			if i+1 < len(segs) && segs[i+1].base <= local && s.base < local {
				remoteOnly++
			}
		}
		return remoteOnly >= 4
	})
	return segs
}

var rotObjectName = regexp.MustCompile(`^(\d{20})-\d+-[0-9a-z]+\.(log|index)$`)

// rotObjects lists the objects of rot's partition 0 (keys
// "rot-<topic id>/0/<base>-<epoch>-<id>.log|.index").
func rotObjects(t *testing.T, dir string) []rotSegment {
	t.Helper()
	byBase := map[int64]*rotSegment{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(filepath.ToSlash(path), "/rot-") || filepath.Base(filepath.Dir(path)) != "0" {
			return nil
		}
		m := rotObjectName.FindStringSubmatch(d.Name())
		if m == nil {
			return nil
		}
		b, _ := strconv.ParseInt(m[1], 10, 64)
		s := byBase[b]
		if s == nil {
			s = &rotSegment{base: b}
			byBase[b] = s
		}
		if m[2] == "log" {
			s.logPath = path
		} else {
			s.idxPath = path
		}
		return nil
	})
	var out []rotSegment
	for _, s := range byBase {
		if s.logPath != "" && s.idxPath != "" {
			out = append(out, *s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].base < out[j].base })
	return out
}

// attackCorruptObjects damages three of rot's remote segments in the
// object directory (an index entry pointing 1 TiB into its segment, an index
// blown up to 64 MiB of junk, a flipped byte in a batch) and has 24 HTTP
// readers and 6 WebSocket streams read across each: every reader gets every
// record up to the damage, none past it, then a retriable REMOTE_CORRUPT
// (503 on HTTP, the error frame and close 4503 on a WebSocket); the
// broker counts the corrupt reads. Put right, the objects read whole again.
func attackCorruptObjects(t *testing.T, base string, segs []rotSegment) {
	farIdx, hugeIdx, flipLog := segs[1], segs[2], segs[3]
	orig := map[string][]byte{}
	for _, p := range []string{farIdx.idxPath, hugeIdx.idxPath, flipLog.logPath} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		orig[p] = b
	}
	defer func() {
		for p, b := range orig {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Error(err)
			}
		}
	}()
	far := bytes.Clone(orig[farIdx.idxPath])
	binary.BigEndian.PutUint64(far[16+8:], 1<<40)
	writeObject(t, farIdx.idxPath, far)
	writeObject(t, hugeIdx.idxPath, bytes.Repeat([]byte{0xff}, 64<<20))
	logIdx, err := os.ReadFile(flipLog.idxPath)
	if err != nil || len(logIdx) < 32 {
		t.Fatalf("index of %d: %d bytes, %v", flipLog.base, len(logIdx), err)
	}
	badOffset, badPos := int64(binary.BigEndian.Uint64(logIdx[16:])), int64(binary.BigEndian.Uint64(logIdx[24:]))
	flipped := bytes.Clone(orig[flipLog.logPath])
	flipped[badPos+recordbatch.HeaderSize+2] ^= 0x20
	writeObject(t, flipLog.logPath, flipped)

	leader := rotLeader(t, base)
	beforeIdx, beforeLog := corruptReads(t, leader, "index"), corruptReads(t, leader, "log")
	ranges := []struct{ from, bad int64 }{{0, farIdx.base}, {hugeIdx.base, hugeIdx.base}, {flipLog.base, badOffset}}
	var wg sync.WaitGroup
	for _, r := range ranges {
		for range 8 {
			wg.Go(func() { readToCorruption(t, base, r.from, r.bad) })
		}
		for _, format := range []string{"json", "binary"} {
			wg.Go(func() { streamToCorruption(t, base, format, r.from, r.bad) })
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := corruptReads(t, leader, "index"); n <= beforeIdx {
		t.Errorf("sluice_tier_corrupt_reads_total{object=\"index\"} stayed at %d", n)
	}
	if n := corruptReads(t, leader, "log"); n <= beforeLog {
		t.Errorf("sluice_tier_corrupt_reads_total{object=\"log\"} stayed at %d", n)
	}
	for p, b := range orig {
		writeObject(t, p, b)
	}
	var tp api.Topic
	if err := getJSON(base+"/v1/topics/rot", &tp); err != nil {
		t.Fatal(err)
	}
	readToCorruption(t, base, 0, tp.Partitions[0].HighWatermark)
}

func writeObject(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readToCorruption reads rot's records from `from` over HTTP, each checked
// to be v-<offset> with no gap, up to bad; there it wants a retriable 503
// REMOTE_CORRUPT from the records and the batches route alike (or, with bad
// at the high watermark, nothing more).
func readToCorruption(t *testing.T, base string, from, bad int64) {
	next := from
	for next < bad {
		a := hostileGet(t, fmt.Sprintf("%s/v1/topics/rot/partitions/0/records?offset=%d&max_records=1000", base, next))
		if a.status != 200 {
			t.Errorf("records at %d (reading from %d, damage at %d): %d %.300s", next, from, bad, a.status, a.body)
			return
		}
		var fr api.FetchResponse
		if err := json.Unmarshal(a.body, &fr); err != nil || len(fr.Records) == 0 {
			t.Errorf("records at %d: %.300s %v", next, a.body, err)
			return
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"v-%d"`, next) {
				t.Errorf("at %d got offset %d value %s", next, r.Offset, r.Value)
				return
			}
			next++
		}
	}
	var tp api.Topic
	if err := getJSON(base+"/v1/topics/rot", &tp); err == nil && bad >= tp.Partitions[0].HighWatermark {
		return
	}
	for _, route := range []string{"records", "batches"} {
		a := hostileGet(t, fmt.Sprintf("%s/v1/topics/rot/partitions/0/%s?offset=%d", base, route, bad))
		var eb api.ErrorBody
		_ = json.Unmarshal(a.body, &eb)
		if a.status != 503 || eb.Error.Code != api.CodeRemoteCorrupt || !eb.Error.Retriable || a.header.Get("Retry-After") == "" {
			t.Errorf("%s at %d: %d %.300s, want a retriable 503 REMOTE_CORRUPT with Retry-After", route, bad, a.status, a.body)
		}
	}
}

// hostileGet is hostileDo for concurrent readers: failures are errors, not
// fatal.
func hostileGet(t *testing.T, url string) hostileAnswer {
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return hostileAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hostileAnswer{resp.StatusCode, resp.Header, b}
}

// streamToCorruption reads rot over a WebSocket from `from`: every record
// up to bad in order, then the REMOTE_CORRUPT error frame and close 4503.
func streamToCorruption(t *testing.T, base, format string, from, bad int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := fmt.Sprintf("ws%s/v1/topics/rot/partitions/0/ws?offset=%d&credit=1000000&format=%s", strings.TrimPrefix(base, "http"), from, format)
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Errorf("%s stream: %v", format, err)
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20)
	next := from
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != 4503 {
				t.Errorf("%s stream from %d: closed with %v, want 4503", format, from, err)
			}
			break
		}
		if typ == websocket.MessageBinary {
			_, serr := recordbatch.Scan(b, true, func(h recordbatch.Header, _ []byte) error {
				if h.BaseOffset != next {
					return fmt.Errorf("batch at %d, want %d", h.BaseOffset, next)
				}
				next = h.NextOffset()
				return nil
			})
			if serr != nil {
				t.Errorf("binary stream from %d: %v", from, serr)
				return
			}
			continue
		}
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
			if eb.Error.Code != api.CodeRemoteCorrupt || !eb.Error.Retriable {
				t.Errorf("%s stream from %d: error frame %s", format, from, b)
			}
			continue
		}
		var fr api.FetchResponse
		if err := json.Unmarshal(b, &fr); err != nil {
			t.Errorf("json stream frame: %.200s: %v", b, err)
			return
		}
		for _, r := range fr.Records {
			if r.Offset != next || string(r.Value) != fmt.Sprintf(`"v-%d"`, next) {
				t.Errorf("json stream at %d got offset %d value %s", next, r.Offset, r.Value)
				return
			}
			next++
		}
	}
	if next != bad {
		t.Errorf("%s stream read [%d, %d) before the error, want [%d, %d)", format, from, next, from, bad)
	}
}

// rotLeader is the address of rot's leader broker.
func rotLeader(t *testing.T, base string) string {
	t.Helper()
	var tp api.Topic
	var ci api.ClusterInfo
	if err := getJSON(base+"/v1/topics/rot", &tp); err != nil {
		t.Fatal(err)
	}
	if err := getJSON(base+"/v1/cluster", &ci); err != nil {
		t.Fatal(err)
	}
	for _, b := range ci.Brokers {
		if b.ID == tp.Partitions[0].Leader {
			return b.Address
		}
	}
	t.Fatalf("no address for rot's leader %d", tp.Partitions[0].Leader)
	return ""
}

var corruptSeries = regexp.MustCompile(`sluice_tier_corrupt_reads_total\{object="(index|log)"\} (\d+)`)

// corruptReads is a broker's sluice_tier_corrupt_reads_total{object}.
func corruptReads(t *testing.T, addr, object string) int {
	t.Helper()
	a := hostileDo(t, "GET", "http://"+addr+"/metrics", "", nil)
	for _, m := range corruptSeries.FindAllSubmatch(a.body, -1) {
		if string(m[1]) == object {
			n, _ := strconv.Atoi(string(m[2]))
			return n
		}
	}
	return 0
}
