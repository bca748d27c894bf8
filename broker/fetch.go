package broker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
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
		// A follower's fetch offset is its log end: the leader's view of it.
		err = b.checkReplicaCaller(r.Context(), int32(replica))
		if err == nil {
			err = p.onFollowerFetch(int32(replica), offset, epoch)
		}
	} else if err = p.checkLeader(epoch); err == nil {
		err = b.admitFetch(r)
	}
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if replica == 0 && offset < p.log.Offsets().LogStart {
		if seg, ok := b.coldSegment(r.Context(), p, offset); ok {
			b.serveCold(w, r, p, seg, offset, maxBytes, maxRecords)
			return
		}
	}
	wait := time.Duration(waitMs) * time.Millisecond
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + time.Minute))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()

	var res commitlog.ReadResult
	for {
		o := p.log.Offsets()
		limit := o.HighWatermark
		if replica > 0 {
			limit = o.LogEnd // followers copy what is not committed yet
		}
		res, err = p.log.ReadRecords(offset, maxBytes, limit, maxRecords)
		if err != nil {
			// Local retention may have moved the local start past offset
			// since the check above: the object store has it now.
			if replica == 0 && errors.Is(err, api.ErrOffsetOutOfRange) && offset < res.LogStart {
				if seg, ok := b.coldSegment(r.Context(), p, offset); ok {
					b.serveCold(w, r, p, seg, offset, maxBytes, maxRecords)
					return
				}
			}
			apihttp.WriteError(w, err)
			return
		}
		if res.Size >= minBytes || ctx.Err() != nil {
			break
		}
		res.Close()
		// Nothing yet: sleep until the HW or the log end moves, or the wait ends.
		if p.log.Wait(ctx, res.HighWatermark, res.LogEnd) != nil && r.Context().Err() != nil {
			return // the client went away
		}
	}
	defer res.Close()
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeBatches)
	h.Set(api.HeaderNextOffset, strconv.FormatInt(res.NextOffset, 10))
	h.Set(api.HeaderHighWatermark, strconv.FormatInt(res.HighWatermark, 10))
	h.Set(api.HeaderLogStartOffset, strconv.FormatInt(res.LogStart, 10))
	h.Set("Content-Length", strconv.FormatInt(res.Size, 10))
	if replica == 0 && res.Size > 0 {
		b.traffic.fetched(offset, res.NextOffset, res.Size)
		b.chargeFetch(r, res.Size)
		b.markDebt(h, r, quota.Fetch, quota.Request)
	}
	w.WriteHeader(http.StatusOK)
	if res.Size == 0 {
		return
	}
	if _, err := res.File.Seek(res.Position, io.SeekStart); err != nil {
		return // headers are out; the short body tells the client
	}
	src := io.Reader(res.File)
	if f, ok := res.File.(*os.File); ok {
		src = f // the concrete type is what lets ReadFrom pick sendfile
	}
	_, _ = io.Copy(w, io.LimitReader(src, res.Size))
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

// serveCold answers a fetch below the local log start from the object
// store. The bytes come through the cold reader's cache, not sendfile,
// written from the cached chunks as they are.
func (b *Broker) serveCold(w http.ResponseWriter, r *http.Request, p *Partition, seg tier.RemoteSegment, offset, maxBytes, maxRecords int64) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	data, next, err := b.cold.ReadPieces(ctx, seg, offset, maxBytes, maxRecords)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if next == seg.Next {
		// The consumer crosses into the next segment with its next fetch.
		segs, _ := p.tier.snapshot()
		if following, ok := tier.Covering(segs, next); ok {
			b.cold.Prefetch(following)
		}
	}
	pos := p.positions()
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeBatches)
	h.Set(api.HeaderNextOffset, strconv.FormatInt(next, 10))
	h.Set(api.HeaderHighWatermark, strconv.FormatInt(pos.HighWatermark, 10))
	h.Set(api.HeaderLogStartOffset, strconv.FormatInt(pos.LogStartOffset, 10))
	size := data.Len()
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	b.traffic.fetched(offset, next, size)
	b.chargeFetch(r, size)
	b.markDebt(h, r, quota.Fetch, quota.Request)
	w.WriteHeader(http.StatusOK)
	for _, piece := range data { // views of the cached chunks, not a joined copy
		if _, err := w.Write(piece); err != nil {
			return
		}
	}
}
