package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// handleAlterTopicConfig is PATCH /v1/topics/{topic}/configs: sets and
// deletes topic configs, and answers with the topic as it is afterwards.
// The request is checked here first, against the configs this gateway
// knows, so a bad one is refused without a call to the controller; the
// controller checks it again against the record it rewrites.
func (g *Gateway) handleAlterTopicConfig(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "topic")
	var req api.AlterTopicConfigRequest
	if err := decodeStrictJSON(w, r, &req, 1<<20, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	tm, ok := g.view.Current().Topics[name]
	if !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name))
		return
	}
	rf := 0
	if len(tm.Record.Replicas) > 0 {
		rf = len(tm.Record.Replicas[0])
	}
	if _, err := api.AlterTopicConfigs(tm.Record.Configs, req, rf); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := g.callController(ctx, func(addr string) error { return g.brokers.AlterTopicConfig(ctx, addr, name, req) })
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
