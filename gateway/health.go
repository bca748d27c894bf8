package gateway

import (
	"net/http"

	"github.com/sluice-io/sluice/api/apihttp"
)

// handleHealthz is GET /healthz: the process is up.
func (g *Gateway) handleHealthz(w http.ResponseWriter, r *http.Request) {
	apihttp.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz is GET /readyz: 200 only when the gateway can serve: it has
// metadata and at least one live broker, and a controller exists.
func (g *Gateway) handleReadyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.view.Loaded():
	default:
		apihttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "no cluster metadata yet"})
		return
	}
	md := g.view.Current()
	switch {
	case len(md.Brokers) == 0:
		apihttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "no live broker"})
	case md.Controller.BrokerID < 0:
		apihttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "no controller"})
	default:
		apihttp.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// handleOpenAPI serves the API description.
func (g *Gateway) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(g.opts.OpenAPI)
}
