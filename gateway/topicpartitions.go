package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// handleCreatePartitions is POST /v1/topics/{topic}/partitions: grows a
// topic to a partition count (api.CreatePartitionsRequest) through the
// controller, and answers with the topic as it is afterwards (as it is,
// with validate_only).
func (g *Gateway) handleCreatePartitions(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "topic")
	var req api.CreatePartitionsRequest
	if err := decodeStrictJSON(w, r, &req, 1<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	tm, ok := g.view.Current().Topics[name]
	if !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name))
		return
	}
	if n := len(tm.Record.Replicas); req.Count <= n {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidPartitions, "topic %q has %d partitions: count=%d does not add any (partitions can only be added)", name, n, req.Count))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := g.callController(ctx, func(addr string) error { return g.brokers.CreatePartitions(ctx, addr, name, req) })
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.view.Refresh(ctx); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	t, err := g.describeTopic(ctx, name)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, t)
}
