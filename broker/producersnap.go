package broker

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/commitlog"
)

// handleProducerSnapshot serves the leader's producer table as of a snapshot
// offset, its log start, to a follower that starts over there (the table of
// the producers whose batches it will never copy). Only brokers may ask,
// where the cluster has a secret: the table names every producer's
// sequences. 404 NOT_FOUND when no snapshot was taken at that offset.
func (b *Broker) handleProducerSnapshot(w http.ResponseWriter, r *http.Request) {
	if len(b.opts.ClusterSecret) > 0 {
		if _, ok := brokerapi.BrokerID(callerNode(r.Context())); !ok {
			apihttp.WriteError(w, api.Errorf(api.CodeNotAuthorized, "producer snapshots are for brokers, not %q", callerNode(r.Context())))
			return
		}
	}
	p, epoch, err := b.partitionAndEpoch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := p.checkLeader(epoch); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	offset, err := apihttp.QueryInt(r.URL.Query(), "offset", -1, 0, 1<<62)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if offset < 0 {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "offset is required"))
		return
	}
	snap, err := p.log.ProducerSnapshotAt(offset)
	if errors.Is(err, commitlog.ErrNoProducerSnapshot) {
		apihttp.WriteError(w, api.Errorf(api.CodeNotFound, "no producer snapshot at offset %d", offset))
		return
	}
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(snap)))
	_, _ = w.Write(snap)
}
