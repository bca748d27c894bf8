package gateway

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// SCRAM credentials for Kafka clients (SASL SCRAM-SHA-256/512 on the
// brokers' Kafka listeners), kept in the coordinator beside the tokens;
// the routes need ALTER on the cluster, as the token routes do.

// handleSetScramCredential is PUT /v1/scram-credentials: the principal's
// credential for the mechanism is made from the password (a new salt each
// time) and replaces the one it had.
func (g *Gateway) handleSetScramCredential(w http.ResponseWriter, r *http.Request) {
	var req api.SetScramCredentialRequest
	if err := decodeStrictJSON(w, r, &req, 16<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	cred, err := auth.NewScramCredential(req.Principal, req.Mechanism, req.Password, req.Iterations, time.Now())
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "%v", err))
		return
	}
	if err := g.authStore.SetScramCredential(r.Context(), cred); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "storing the SCRAM credential: %v", err))
		return
	}
	g.log.Info("SCRAM credential set", "principal", cred.Principal, "mechanism", cred.Mechanism, "by", auth.PrincipalFrom(r.Context()))
	apihttp.WriteJSON(w, http.StatusOK, scramOf(cred))
}

func scramOf(c auth.ScramCredential) api.ScramCredential {
	return api.ScramCredential{Principal: c.Principal, Mechanism: c.Mechanism, Iterations: c.Iterations, CreatedAt: c.CreatedAt}
}

// handleListScramCredentials is GET /v1/scram-credentials[?principal=]:
// principals, mechanisms and iterations, never keys.
func (g *Gateway) handleListScramCredentials(w http.ResponseWriter, r *http.Request) {
	principal := r.URL.Query().Get("principal")
	if principal != "" {
		if err := auth.ValidatePrincipal(principal); err != nil {
			apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "principal: %v", err))
			return
		}
	}
	creds, err := g.authStore.ReadScramCredentials(r.Context(), principal)
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "reading the SCRAM credentials: %v", err))
		return
	}
	res := api.ScramCredentialList{Credentials: []api.ScramCredential{}}
	for _, c := range creds {
		res.Credentials = append(res.Credentials, scramOf(c))
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleDeleteScramCredential is DELETE
// /v1/scram-credentials?principal=&mechanism=.
func (g *Gateway) handleDeleteScramCredential(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	principal, mechanism := q.Get("principal"), q.Get("mechanism")
	if err := auth.ValidatePrincipal(principal); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "principal: %v", err))
		return
	}
	if !slices.Contains(auth.ScramMechanisms, mechanism) {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "mechanism is %s or %s", auth.ScramSHA256, auth.ScramSHA512))
		return
	}
	err := g.authStore.DeleteScramCredential(r.Context(), mechanism, principal)
	switch {
	case errors.Is(err, auth.ErrUnknownScramCredential):
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownScram, "%s has no %s credential", principal, mechanism))
	case err != nil:
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "deleting the SCRAM credential: %v", err))
	default:
		g.log.Info("SCRAM credential deleted", "principal", principal, "mechanism", mechanism, "by", auth.PrincipalFrom(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	}
}
