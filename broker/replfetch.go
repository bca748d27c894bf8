package broker

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
)

// handleReplicaFetch serves a follower's replication stream
// (PathReplicaFetch): one long poll over every partition of its fetch
// session, read through FetchPartitions, answered with only what changed.
// The header goes first; each partition's batches follow from the segment
// file with sendfile (writeFetched), Content-Length covering both.
func (b *Broker) handleReplicaFetch(w http.ResponseWriter, r *http.Request) {
	req, err := b.readReplicaFetch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := b.checkReplicaCaller(r.Context(), req.ReplicaID); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	req.MaxWait = min(req.MaxWait, maxFetchWait)
	if req.MaxBytes == 0 || req.MaxBytes > maxFetchMaxBytes {
		req.MaxBytes = maxFetchMaxBytes
	}
	if req.PartitionMaxBytes == 0 {
		req.PartitionMaxBytes = defaultFetchMaxBytes
	}
	s, err := b.sessions.acquire(r.Context(), req.ReplicaID, req.SessionID, req.SessionEpoch, time.Now())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	defer func() { b.sessions.release(s, time.Now()) }()
	if err := s.apply(req.Changed, req.Removed); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	spec, order := s.spec(req)
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(req.MaxWait + time.Minute))
	res := b.FetchPartitions(r.Context(), spec)
	defer CloseFetched(res)
	if r.Context().Err() != nil {
		return // the follower went away
	}
	picked := s.answer(order, res)
	parts := make([]brokerapi.ReplicaFetchedPartition, len(picked))
	var size int64
	for i, k := range picked {
		f := &res[k]
		parts[i] = brokerapi.ReplicaFetchedPartition{TopicPartition: order[k], Err: api.Classify(f.Err),
			HighWatermark: f.HighWatermark, LogStart: f.LogStart, LogEnd: f.LogEnd, Size: f.Size}
		if f.Err != nil {
			parts[i].Size = 0
		}
		size += parts[i].Size
	}
	hdr := brokerapi.AppendReplicaFetchHeader(make([]byte, 0, 16+len(parts)*64), s.id, parts)
	h := w.Header()
	h.Set("Content-Type", brokerapi.ContentTypeReplicaFetch)
	h.Set("Content-Length", strconv.FormatInt(int64(len(hdr))+size, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(hdr); err != nil {
		return
	}
	for i, k := range picked {
		if parts[i].Size > 0 {
			if err := writeFetched(w, &res[k]); err != nil {
				return
			}
		}
	}
}

// handleReplicaFetchWake ends the long poll of a follower's fetch session
// (PathReplicaFetchWake): its stream has a partition to name at once.
func (b *Broker) handleReplicaFetchWake(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	replica, err := apihttp.QueryInt(q, "replica_id", 0, 1, 1<<31-1)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	id, err := apihttp.QueryInt(q, "session_id", 0, 1, 1<<31-1)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if replica == 0 || id == 0 {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "a fetch wake names replica_id and session_id"))
		return
	}
	if err := b.checkReplicaCaller(r.Context(), int32(replica)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := b.sessions.wake(int32(replica), int32(id)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readReplicaFetch reads and decodes a replica fetch request body, bounded
// by MaxReplicaFetchRequestBytes before it is buffered.
func (b *Broker) readReplicaFetch(r *http.Request) (brokerapi.ReplicaFetchRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != brokerapi.ContentTypeReplicaFetch {
		return brokerapi.ReplicaFetchRequest{}, api.Errorf(api.CodeUnsupportedMediaType, "a replica fetch is %s, not %q", brokerapi.ContentTypeReplicaFetch, ct)
	}
	if r.ContentLength > brokerapi.MaxReplicaFetchRequestBytes {
		return brokerapi.ReplicaFetchRequest{}, api.Errorf(api.CodeRequestTooLarge, "body of %d bytes exceeds %d", r.ContentLength, brokerapi.MaxReplicaFetchRequestBytes)
	}
	bp, err := readBody(r, brokerapi.MaxReplicaFetchRequestBytes)
	if err != nil {
		return brokerapi.ReplicaFetchRequest{}, err
	}
	defer putBody(bp)
	req, err := brokerapi.DecodeReplicaFetchRequest(*bp)
	var ae *api.Error
	if err != nil && !errors.As(err, &ae) {
		err = api.Errorf(api.CodeInvalidRequest, "%v", err)
	}
	return req, err
}
