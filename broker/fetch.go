package broker

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/quota"
	"github.com/sluice-io/sluice/tier"
)

// requestEpoch reads the optional leader-epoch header (-1 when absent).
func requestEpoch(r *http.Request) (int32, error) {
	s := r.Header.Get(api.HeaderLeaderEpoch)
	if s == "" {
		return -1, nil
	}
	e, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, api.Errorf(api.CodeInvalidRequest, "bad %s header %q", api.HeaderLeaderEpoch, s)
	}
	return int32(e), nil
}

// partitionAndEpoch resolves the partition of a request and the leader epoch
// it names (-1: none).
func (b *Broker) partitionAndEpoch(r *http.Request) (*Partition, int32, error) {
	p, err := b.partitionFor(r)
	if err != nil {
		return nil, 0, err
	}
	epoch, err := requestEpoch(r)
	return p, epoch, err
}

// handleEpochEnd answers OffsetsForLeaderEpoch for a follower about to truncate.
func (b *Broker) handleEpochEnd(w http.ResponseWriter, r *http.Request) {
	p, epoch, err := b.partitionAndEpoch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := p.checkLeader(epoch); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	asked, err := apihttp.QueryInt(r.URL.Query(), "epoch", 0, 0, 1<<31-1)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	e, end := p.log.EndOffsetForEpoch(int32(asked))
	apihttp.WriteJSON(w, http.StatusOK, brokerapi.EpochEndResult{Epoch: e, EndOffset: end})
}

// handleFetch serves raw batches from offset, long-polling up to max_wait_ms
// until at least min_bytes are there. The batches go from the segment file to
// the socket with sendfile: the handler seeks its own descriptor and copies an
// io.LimitReader over the *os.File with Content-Length set, which net/http
// hands to (*net.TCPConn).ReadFrom.
func (b *Broker) handleFetch(w http.ResponseWriter, r *http.Request) {
	p, epoch, err := b.partitionAndEpoch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	offset, err := apihttp.QueryInt(r.URL.Query(), "offset", 0, -1<<62, 1<<62)
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidOffset, "%v", err))
		return
	}
	maxBytes, err := apihttp.QueryInt(r.URL.Query(), "max_bytes", defaultFetchMaxBytes, 1, maxFetchMaxBytes)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	minBytes, err := apihttp.QueryInt(r.URL.Query(), "min_bytes", 1, 0, maxFetchMaxBytes)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	waitMs, err := apihttp.QueryInt(r.URL.Query(), "max_wait_ms", 0, 0, maxFetchWait.Milliseconds())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	// max_records lets a reader that decodes records (the gateway's JSON
	// routes) take only the batches that hold them.
	maxRecords, err := apihttp.QueryInt(r.URL.Query(), "max_records", 0, 0, 1<<31-1)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	replica, err := apihttp.QueryInt(r.URL.Query(), "replica_id", 0, 0, 1<<31-1)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if replica > 0 {
		err = b.checkReplicaCaller(r.Context(), int32(replica))
	} else {
		err = b.admitFetch(r)
	}
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	wait := time.Duration(waitMs) * time.Millisecond
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + time.Minute))
	res := b.FetchPartitions(r.Context(), FetchSpec{
		ReplicaID: int32(replica), MaxWait: wait, MinBytes: minBytes, Cold: true,
		Partitions: []FetchPartitionSpec{{Topic: p.Topic, Partition: p.ID, Offset: offset, LeaderEpoch: epoch, MaxBytes: maxBytes, MaxRecords: maxRecords}},
	})
	defer CloseFetched(res)
	f := &res[0]
	if f.Err != nil {
		apihttp.WriteError(w, f.Err)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeBatches)
	h.Set(api.HeaderNextOffset, strconv.FormatInt(f.NextOffset, 10))
	h.Set(api.HeaderHighWatermark, strconv.FormatInt(f.HighWatermark, 10))
	logStart := f.LogStart
	if f.Remote {
		logStart = p.positions().LogStartOffset
	}
	h.Set(api.HeaderLogStartOffset, strconv.FormatInt(logStart, 10))
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	if replica == 0 && f.Size > 0 {
		b.traffic.fetched(offset, f.NextOffset, f.Size)
		b.chargeFetch(r, f.Size)
		b.markDebt(h, r, quota.Fetch, quota.Request)
	}
	w.WriteHeader(http.StatusOK)
	if f.Size > 0 {
		_ = writeFetched(w, f)
	}
}

// writeFetched writes a fetched partition's data to w: a local read goes
// from the segment file to the socket with sendfile (the concrete *os.File
// under an io.LimitReader is what lets (*net.TCPConn).ReadFrom pick it), a
// cold read from the cached chunks as they are, without a joined copy.
func writeFetched(w io.Writer, f *FetchedPartition) error {
	if f.Cold != nil {
		for _, piece := range f.Cold {
			if _, err := w.Write(piece); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := f.Local.File.Seek(f.Local.Position, io.SeekStart); err != nil {
		return err
	}
	src := io.Reader(f.Local.File)
	if file, ok := f.Local.File.(*os.File); ok {
		src = file
	}
	_, err := io.Copy(w, io.LimitReader(src, f.Size))
	return err
}

// coldSegment finds the remote segment holding offset, loading the records
// if this leadership has not read them yet.
func (b *Broker) coldSegment(ctx context.Context, p *Partition, offset int64) (tier.RemoteSegment, bool) {
	if b.cold == nil || !p.config().RemoteStorage {
		return tier.RemoteSegment{}, false
	}
	epoch, _, leader := p.leaderState()
	if !leader {
		return tier.RemoteSegment{}, false
	}
	if err := b.loadRemote(ctx, p, epoch); err != nil {
		return tier.RemoteSegment{}, false
	}
	segs, _ := p.tier.snapshot()
	return tier.Covering(segs, offset)
}
