package gateway

import (
	"net/http"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// sessionCookie holds a browser's token after it signed in: HttpOnly (no
// script reads it), SameSite=Strict (no other site's page sends it), Secure
// over TLS. The routes that change state also need a JSON Content-Type,
// which a cross-site form cannot send.
const sessionCookie = "sluice_session"

// handleGetSession is GET /v1/session: who the caller is, and whether this
// gateway requires authentication (the dashboard asks, to offer sign-in).
func (g *Gateway) handleGetSession(w http.ResponseWriter, r *http.Request) {
	apihttp.WriteJSON(w, http.StatusOK, api.Session{Principal: auth.PrincipalFrom(r.Context()), AuthRequired: g.auth.Required})
}

// handleCreateSession is POST /v1/session {"token": …}: a valid token is
// set as the session cookie, for browsers, which cannot add an
// Authorization header to a WebSocket.
func (g *Gateway) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSessionRequest
	if err := decodeStrictJSON(w, r, &req, 4<<10, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	principal, err := g.principalOf(r, req.Token)
	if err != nil {
		writeUnauthenticated(w, "the token is malformed, unknown, revoked or expired")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: req.Token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	apihttp.WriteJSON(w, http.StatusOK, api.Session{Principal: principal, AuthRequired: g.auth.Required})
}

// handleDeleteSession is DELETE /v1/session: the cookie is cleared (the
// token itself stays valid; revoke it under /v1/tokens).
func (g *Gateway) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1, Expires: time.Unix(0, 0)})
	w.WriteHeader(http.StatusNoContent)
}
