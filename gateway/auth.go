package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// AuthOptions configure authentication and authorization.
type AuthOptions struct {
	// Required refuses requests without a valid token (401 UNAUTHENTICATED)
	// and checks every route against the ACLs. Default false: every caller
	// is User:ANONYMOUS and may do everything.
	Required bool
	// SuperUsers may do everything whatever the ACLs say.
	SuperUsers []string
	// BootstrapToken, when set, authenticates as BootstrapPrincipal without
	// being stored: the way in to a cluster with no tokens yet.
	BootstrapToken string
	// BootstrapPrincipal default "User:admin"; it is a super user.
	BootstrapPrincipal string
}

func (o *AuthOptions) withDefaults() (AuthOptions, error) {
	out := *o
	if out.BootstrapToken != "" {
		if _, _, err := auth.ParseToken(out.BootstrapToken); err != nil {
			return out, errors.New("gateway: the bootstrap token is not a token (slc_<16 hex>_<64 hex>)")
		}
		if out.BootstrapPrincipal == "" {
			out.BootstrapPrincipal = "User:admin"
		}
		out.SuperUsers = append(out.SuperUsers, out.BootstrapPrincipal)
	}
	for _, p := range out.SuperUsers {
		if err := auth.ValidatePrincipal(p); err != nil {
			return out, err
		}
	}
	return out, nil
}

// authenticate puts the caller's principal in the request context. With
// authentication required, a request without a valid bearer token is refused
// here; without, a request with no Authorization header is anonymous, and a
// bad token is still refused (a client that sends one expects it to count).
// Routes outside /v1/ (health, metrics, the spec, the dashboard's files)
// are open.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/v1/session" {
			// Signing in and out needs no credentials; asking who one is
			// takes them as any route does, but never requires them.
			if r.Method != http.MethodGet {
				next.ServeHTTP(w, r)
				return
			}
		}
		h := r.Header.Get("Authorization")
		if c, err := r.Cookie(sessionCookie); h == "" && err == nil && c.Value != "" {
			// A browser signed in with POST /v1/session.
			principal, err := g.principalOf(r, c.Value)
			if err != nil {
				writeUnauthenticated(w, "the session's token is unknown, revoked or expired: sign in again")
				return
			}
			next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), principal)))
			return
		}
		if h == "" {
			// A verified client certificate names the caller.
			if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
				if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; auth.ValidatePrincipal("User:"+cn) == nil {
					next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), "User:"+cn)))
					return
				}
			}
			if g.auth.Required && r.URL.Path != "/v1/session" {
				writeUnauthenticated(w, "this gateway requires a token: Authorization: Bearer slc_…")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			writeUnauthenticated(w, "the Authorization header is not 'Bearer <token>'")
			return
		}
		principal, err := g.principalOf(r, strings.TrimSpace(token))
		if err != nil {
			writeUnauthenticated(w, "the token is malformed, unknown, revoked or expired")
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), principal)))
	})
}

func (g *Gateway) principalOf(r *http.Request, token string) (string, error) {
	if b := g.auth.BootstrapToken; b != "" && len(token) == len(b) && subtle.ConstantTimeCompare([]byte(token), []byte(b)) == 1 {
		return g.auth.BootstrapPrincipal, nil
	}
	return g.authStore.Authenticate(r.Context(), token, time.Now())
}

func writeUnauthenticated(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	apihttp.WriteError(w, api.Errorf(api.CodeUnauthenticated, "%s", msg))
}

// allowed reports whether the request's principal may perform op on the
// resource; always true when authorization is off.
func (g *Gateway) allowed(ctx context.Context, op auth.Operation, rt auth.ResourceType, name string) bool {
	if !g.auth.Required {
		return true
	}
	z := auth.Authorizer{SuperUsers: g.auth.SuperUsers, ACLs: g.authStore.ACLs()}
	return z.Allowed(auth.PrincipalFrom(ctx), op, rt, name)
}

// authorize is allowed as an error (NOT_AUTHORIZED) for handlers.
func (g *Gateway) authorize(ctx context.Context, op auth.Operation, rt auth.ResourceType, name string) error {
	if g.allowed(ctx, op, rt, name) {
		return nil
	}
	if rt == auth.ResourceCluster {
		return api.Errorf(api.CodeNotAuthorized, "%s may not %s the cluster", auth.PrincipalFrom(ctx), op)
	}
	return api.Errorf(api.CodeNotAuthorized, "%s may not %s %s %q", auth.PrincipalFrom(ctx), op, rt, name)
}

// check is the route-level authorization: op on the resource named by the
// route's URL parameter (the cluster when param is "").
func (g *Gateway) check(op auth.Operation, rt auth.ResourceType) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := auth.ClusterName
			if rt != auth.ResourceCluster {
				name = chi.URLParam(r, string(rt))
			}
			if err := g.authorize(r.Context(), op, rt, name); err != nil {
				apihttp.WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
