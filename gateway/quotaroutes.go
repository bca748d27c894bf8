package gateway

import (
	"errors"
	"net/http"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/quota"
)

func quotaFromAPI(q api.Quota) quota.Quota {
	return quota.Quota{Entity: quota.Entity{Principal: q.Principal, ClientID: q.ClientID},
		ProducerByteRate: q.ProducerByteRate, ConsumerByteRate: q.ConsumerByteRate, RequestRate: q.RequestRate}
}

func quotaToAPI(q quota.Quota) api.Quota {
	return api.Quota{Principal: q.Principal, ClientID: q.ClientID,
		ProducerByteRate: q.ProducerByteRate, ConsumerByteRate: q.ConsumerByteRate, RequestRate: q.RequestRate}
}

// handleListQuotas is GET /v1/quotas[?principal=…][&client_id=…]: the
// quotas whose entity has the given parts.
func (g *Gateway) handleListQuotas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	_, byPrincipal := q["principal"]
	_, byClient := q["client_id"]
	res := api.QuotaList{Quotas: []api.Quota{}}
	cfg, err := g.quotas.Read(r.Context())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	for _, qt := range cfg.All() {
		if byPrincipal && qt.Principal != q.Get("principal") || byClient && qt.ClientID != q.Get("client_id") {
			continue
		}
		res.Quotas = append(res.Quotas, quotaToAPI(qt))
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handlePutQuota is PUT /v1/quotas: sets an entity's rates, replacing the
// ones it had. Brokers apply them as soon as their watch fires.
func (g *Gateway) handlePutQuota(w http.ResponseWriter, r *http.Request) {
	var req api.Quota
	if err := decodeStrictJSON(w, r, &req, 64<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	qt := quotaFromAPI(req)
	err := g.quotas.Set(r.Context(), qt)
	switch {
	case errors.Is(err, quota.ErrInvalid):
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "%v", err))
	case errors.Is(err, quota.ErrTooMany):
		apihttp.WriteError(w, api.Errorf(api.CodePolicyViolation, "%v", err))
	case err != nil:
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "storing the quota: %v", err))
	default:
		g.log.Info("quota set", "entity", qt.String(), "producer_byte_rate", qt.ProducerByteRate,
			"consumer_byte_rate", qt.ConsumerByteRate, "request_rate", qt.RequestRate, "by", auth.PrincipalFrom(r.Context()))
		apihttp.WriteJSON(w, http.StatusOK, quotaToAPI(qt))
	}
}

// handleDeleteQuota is DELETE /v1/quotas?principal=…&client_id=…: removes
// exactly that entity's quota (a part left out is not part of the entity).
func (g *Gateway) handleDeleteQuota(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	e := quota.Entity{Principal: q.Get("principal"), ClientID: q.Get("client_id")}
	if err := e.Validate(); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "%v", err))
		return
	}
	err := g.quotas.Delete(r.Context(), e)
	switch {
	case errors.Is(err, quota.ErrUnknown):
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownQuota, "no quota for %s", e))
	case err != nil:
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "deleting the quota: %v", err))
	default:
		g.log.Info("quota deleted", "entity", e.String(), "by", auth.PrincipalFrom(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	}
}
