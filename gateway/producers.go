package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coord"
)

// Idempotent producers. Ids come from sequential nodes under /producer_ids
// (the sequence number is the id) holding the current epoch. POST
// /v1/producers with an id bumps the epoch by a conditional write, which
// fences every older instance: the gateway refuses their produces with
// PRODUCER_FENCED, and so does every partition once the new epoch wrote to
// it. Brokers deduplicate retried batches by (id, epoch, sequence).

// maxWatchedProducers bounds the producer ids a gateway caches under a
// watch (a map entry and a coordinator watch each, no goroutine): past it,
// an id's epoch is read from the coordinator at each produce instead, so a
// client cycling through ids costs coordinator reads, not gateway memory.
const maxWatchedProducers = 10_000

// producerEpochs caches producer epochs, each watched so a bump by any
// gateway is seen at once: the watch's WatchFunc drops the entry. Guarded
// by mu, a leaf lock (never held across a coordinator call).
type producerEpochs struct {
	mu     sync.Mutex
	epochs map[int64]cachedEpoch
}

// cachedEpoch is a producer id's epoch and the watch it is good under.
type cachedEpoch struct {
	epoch int16
	watch *producerWatch
}

// producerWatch is one armed watch of a producer id; fired is set under
// producerEpochs.mu, possibly before the read that armed it is cached.
type producerWatch struct{ fired bool }

// handleInitProducer is POST /v1/producers.
func (g *Gateway) handleInitProducer(w http.ResponseWriter, r *http.Request) {
	var req api.InitProducerRequest
	if err := decodeStrictJSON(w, r, &req, 4096, true); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if !g.mayProduce(r.Context()) {
		apihttp.WriteError(w, api.Errorf(api.CodeNotAuthorized, "%s may write to no topic", auth.PrincipalFrom(r.Context())))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var (
		id  api.ProducerIdentity
		err error
	)
	if req.ProducerID == nil {
		id, err = g.newProducer(ctx)
	} else {
		id, err = g.bumpProducer(ctx, *req.ProducerID)
	}
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusCreated, id)
}

// mayProduce is the check of POST /v1/producers (Kafka's IDEMPOTENT_WRITE
// rule): WRITE on the cluster, or on at least one existing topic.
func (g *Gateway) mayProduce(ctx context.Context) bool {
	if g.allowed(ctx, auth.OpWrite, auth.ResourceCluster, auth.ClusterName) {
		return true
	}
	for name := range g.view.Current().Topics {
		if g.allowed(ctx, auth.OpWrite, auth.ResourceTopic, name) {
			return true
		}
	}
	return false
}

func (g *Gateway) newProducer(ctx context.Context) (api.ProducerIdentity, error) {
	principal := ""
	if g.auth.Required {
		principal = auth.PrincipalFrom(ctx)
	}
	id, err := cluster.NewProducerID(ctx, g.opts.Coord, principal)
	if err != nil {
		return api.ProducerIdentity{}, err
	}
	return api.ProducerIdentity{ProducerID: id}, nil
}

func (g *Gateway) bumpProducer(ctx context.Context, id int64) (api.ProducerIdentity, error) {
	for {
		data, st, err := g.opts.Coord.Get(ctx, cluster.ProducerPath(id))
		if errors.Is(err, coord.ErrNoNode) {
			return api.ProducerIdentity{}, api.Errorf(api.CodeUnknownProducer, "producer id %d was never issued", id)
		}
		if err != nil {
			return api.ProducerIdentity{}, err
		}
		var rec api.ProducerRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return api.ProducerIdentity{}, api.Errorf(api.CodeInternal, "producer %d: unreadable record", id)
		}
		if p := auth.PrincipalFrom(ctx); g.auth.Required && rec.Principal != p && !g.allowed(ctx, auth.OpWrite, auth.ResourceCluster, auth.ClusterName) {
			return api.ProducerIdentity{}, api.Errorf(api.CodeNotAuthorized, "producer id %d was issued to another principal; %s may not bump its epoch", id, p)
		}
		if rec.Epoch == 1<<15-1 {
			return api.ProducerIdentity{}, api.Errorf(api.CodeInvalidRequest, "producer %d has used every epoch; ask for a new id", id)
		}
		rec.Epoch++
		data, _ = json.Marshal(rec)
		_, err = g.opts.Coord.Set(ctx, cluster.ProducerPath(id), data, st.Version)
		if errors.Is(err, coord.ErrBadVersion) {
			continue // another instance bumped it at the same moment: bump again
		}
		if err != nil {
			return api.ProducerIdentity{}, err
		}
		return api.ProducerIdentity{ProducerID: id, ProducerEpoch: rec.Epoch}, nil
	}
}

// producerEpoch returns a producer id's current epoch, cached under a watch.
func (g *Gateway) producerEpoch(ctx context.Context, id int64) (int16, error) {
	g.producers.mu.Lock()
	e, ok := g.producers.epochs[id]
	g.producers.mu.Unlock()
	if ok {
		return e.epoch, nil
	}
	g.producers.mu.Lock()
	full := len(g.producers.epochs) >= maxWatchedProducers
	g.producers.mu.Unlock()
	if full {
		return g.readProducerEpoch(ctx, id)
	}
	w := &producerWatch{}
	data, _, err := g.opts.Coord.GetW(ctx, cluster.ProducerPath(id), func(coord.Event) {
		g.producers.mu.Lock()
		defer g.producers.mu.Unlock()
		w.fired = true
		if e, ok := g.producers.epochs[id]; ok && e.watch == w {
			delete(g.producers.epochs, id)
		}
	})
	epoch, err := producerRecordEpoch(id, data, err)
	if err != nil {
		return 0, err
	}
	g.producers.mu.Lock()
	defer g.producers.mu.Unlock()
	if g.producers.epochs == nil {
		g.producers.epochs = map[int64]cachedEpoch{}
	}
	if !w.fired { // fired meanwhile: the epoch read may be stale already
		g.producers.epochs[id] = cachedEpoch{epoch, w}
	}
	return epoch, nil
}

// readProducerEpoch reads an id's epoch without caching or watching it.
func (g *Gateway) readProducerEpoch(ctx context.Context, id int64) (int16, error) {
	data, _, err := g.opts.Coord.Get(ctx, cluster.ProducerPath(id))
	return producerRecordEpoch(id, data, err)
}

// producerRecordEpoch is the epoch in a producer id's node, as read.
func producerRecordEpoch(id int64, data []byte, err error) (int16, error) {
	if errors.Is(err, coord.ErrNoNode) {
		return 0, api.Errorf(api.CodeUnknownProducer, "producer id %d was never issued", id)
	}
	if err != nil {
		return 0, err
	}
	var rec api.ProducerRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return 0, api.Errorf(api.CodeInternal, "producer %d: unreadable record", id)
	}
	return rec.Epoch, nil
}

// checkProducer validates a produce request's idempotence fields against the
// partitions it writes, and returns the base sequence per partition.
func (g *Gateway) checkProducer(ctx context.Context, pf producerFields, parts []int32) (map[int32]int32, error) {
	if pf.id == nil {
		if pf.epoch != nil || pf.sequences != nil {
			return nil, api.Errorf(api.CodeInvalidRequest, "producer_epoch and sequences need producer_id")
		}
		return nil, nil
	}
	if pf.epoch == nil {
		return nil, api.Errorf(api.CodeInvalidRequest, "producer_id needs producer_epoch")
	}
	current, err := g.producerEpoch(ctx, *pf.id)
	if err != nil {
		return nil, err
	}
	if *pf.epoch > current {
		// The cache follows its watch, which may not have fired yet for a
		// bump made a moment ago through another gateway: ask the
		// coordinator before refusing.
		if current, err = g.readProducerEpoch(ctx, *pf.id); err != nil {
			return nil, err
		}
	}
	if *pf.epoch < current {
		return nil, api.Errorf(api.CodeProducerFenced, "producer %d epoch %d is fenced by epoch %d", *pf.id, *pf.epoch, current)
	}
	if *pf.epoch > current {
		return nil, api.Errorf(api.CodeInvalidRequest, "producer %d has no epoch %d yet (current %d)", *pf.id, *pf.epoch, current)
	}
	seqs := make(map[int32]int32, len(parts))
	for _, p := range parts {
		s, ok := pf.sequences[strconv.Itoa(int(p))]
		if !ok {
			return nil, api.Errorf(api.CodeInvalidRequest, `"sequences" has no entry for partition %d, which this request writes`, p)
		}
		if s < 0 {
			return nil, api.Errorf(api.CodeInvalidRequest, "sequence %d for partition %d is negative", s, p)
		}
		seqs[p] = s
	}
	return seqs, nil
}
