package gateway

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// maxTokenTTL bounds expires_in_ms (ten years).
const maxTokenTTL = 10 * 365 * 24 * time.Hour

// handleCreateToken is POST /v1/tokens.
func (g *Gateway) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTokenRequest
	if err := decodeStrictJSON(w, r, &req, 64<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := auth.ValidatePrincipal(req.Principal); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "%v", err))
		return
	}
	ttl := time.Duration(req.ExpiresInMs) * time.Millisecond
	if req.ExpiresInMs < 0 || ttl > maxTokenTTL {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "expires_in_ms is 0 (never) or up to %d", maxTokenTTL.Milliseconds()))
		return
	}
	tok, rec, err := g.authStore.CreateToken(r.Context(), req.Principal, ttl, time.Now())
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "storing the token: %v", err))
		return
	}
	g.log.Info("token created", "id", rec.ID, "principal", rec.Principal, "by", auth.PrincipalFrom(r.Context()))
	res := tokenOf(rec)
	res.Token = tok
	apihttp.WriteJSON(w, http.StatusCreated, res)
}

func tokenOf(rec auth.TokenRecord) api.Token {
	return api.Token{ID: rec.ID, Principal: rec.Principal, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}
}

// handleListTokens is GET /v1/tokens: ids and principals, never secrets.
func (g *Gateway) handleListTokens(w http.ResponseWriter, r *http.Request) {
	res := api.TokenList{Tokens: []api.Token{}}
	recs, err := g.authStore.ReadTokens(r.Context())
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	for _, rec := range recs {
		res.Tokens = append(res.Tokens, tokenOf(rec))
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleDeleteToken is DELETE /v1/tokens/{id}: the token stops working on
// every gateway as soon as its watch fires.
func (g *Gateway) handleDeleteToken(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	err := g.authStore.DeleteToken(r.Context(), id)
	switch {
	case errors.Is(err, auth.ErrUnknownToken):
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownToken, "no token with id %q", id))
	case err != nil:
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "revoking the token: %v", err))
	default:
		g.log.Info("token revoked", "id", id, "by", auth.PrincipalFrom(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	}
}

func aclFromAPI(a api.ACL) auth.ACL {
	return auth.ACL{Principal: a.Principal, ResourceType: auth.ResourceType(a.ResourceType), PatternType: auth.PatternType(a.PatternType),
		ResourceName: a.ResourceName, Operation: auth.Operation(a.Operation), Permission: auth.Permission(a.Permission)}
}

func aclToAPI(a auth.ACL) api.ACL {
	return api.ACL{Principal: a.Principal, ResourceType: string(a.ResourceType), PatternType: string(a.PatternType),
		ResourceName: a.ResourceName, Operation: string(a.Operation), Permission: string(a.Permission)}
}

// handleCreateACL is POST /v1/acls.
func (g *Gateway) handleCreateACL(w http.ResponseWriter, r *http.Request) {
	var req api.ACL
	if err := decodeStrictJSON(w, r, &req, 64<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	a := aclFromAPI(req)
	if err := a.Validate(); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "%v", err))
		return
	}
	if err := g.authStore.CreateACL(r.Context(), a); err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "storing the ACL: %v", err))
		return
	}
	g.log.Info("ACL created", "acl", a, "by", auth.PrincipalFrom(r.Context()))
	apihttp.WriteJSON(w, http.StatusCreated, aclToAPI(a))
}

// aclFilter reads the filter of GET and DELETE /v1/acls from the query.
func aclFilter(r *http.Request) auth.Filter {
	q := r.URL.Query()
	return auth.Filter{Principal: q.Get("principal"), ResourceType: auth.ResourceType(q.Get("resource_type")),
		PatternType: auth.PatternType(q.Get("pattern_type")), ResourceName: q.Get("resource_name"),
		Operation: auth.Operation(q.Get("operation")), Permission: auth.Permission(q.Get("permission"))}
}

// handleListACLs is GET /v1/acls[?principal=…&resource_type=…&…].
func (g *Gateway) handleListACLs(w http.ResponseWriter, r *http.Request) {
	res := api.ACLList{ACLs: []api.ACL{}}
	acls, err := g.authStore.ReadACLs(r.Context(), aclFilter(r))
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	for _, a := range acls {
		res.ACLs = append(res.ACLs, aclToAPI(a))
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleDeleteACLs is DELETE /v1/acls?…: removes every ACL the filter
// matches (at least one filter field is required) and lists them.
func (g *Gateway) handleDeleteACLs(w http.ResponseWriter, r *http.Request) {
	f := aclFilter(r)
	if f == (auth.Filter{}) {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "name at least one of principal, resource_type, pattern_type, resource_name, operation, permission"))
		return
	}
	gone, err := g.authStore.DeleteACLs(r.Context(), f)
	if err != nil {
		apihttp.WriteError(w, api.Errorf(api.CodeCoordinatorNotAvail, "deleting ACLs: %v", err))
		return
	}
	res := api.ACLList{ACLs: []api.ACL{}}
	for _, a := range gone {
		res.ACLs = append(res.ACLs, aclToAPI(a))
	}
	g.log.Info("ACLs deleted", "count", len(gone), "by", auth.PrincipalFrom(r.Context()))
	apihttp.WriteJSON(w, http.StatusOK, res)
}
