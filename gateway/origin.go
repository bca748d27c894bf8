package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
)

// originGuard keeps other web sites' pages from using a visitor's browser
// against the gateway: a WebSocket upgrade or a state-changing request
// (any method but GET, HEAD and OPTIONS) that carries an Origin must come
// from the gateway's own origin or from one of the allowed origins, and every
// request's Host must be one of the gateway's names, which defeats DNS
// rebinding (a page of evil.example whose name is made to resolve to the
// gateway is same-origin with it as far as the browser knows, but sends
// Host: evil.example). Requests without an Origin header (curl, servers)
// pass the Origin check. The allowed origins are also granted CORS, so
// their pages can call the HTTP routes with a token, and their preflights
// are answered before authentication. It is off (nil) unless
// AllowedOrigins or AllowedHosts is set.
type originGuard struct {
	origins map[string]bool // scheme://host[:port], lower case, no default port
	hosts   map[string]bool // names, lower case, no port
}

// newOriginGuard validates the lists; nil when both are empty.
func newOriginGuard(origins, hosts []string) (*originGuard, error) {
	if len(origins) == 0 && len(hosts) == 0 {
		return nil, nil
	}
	g := &originGuard{origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("gateway: allowed origin %q is not scheme://host[:port] with scheme http or https", o)
		}
		g.origins[canonicalOrigin(u.Scheme, u.Host)] = true
		g.hosts[hostName(u.Host)] = true
	}
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		if h == "" || strings.ContainsAny(h, ":/ ") {
			return nil, fmt.Errorf("gateway: allowed host %q is not a host name (give names without scheme or port)", h)
		}
		g.hosts[h] = true
	}
	return g, nil
}

// hostName is hostport's host, lower case, without port, brackets or a
// trailing dot.
func hostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// canonicalOrigin is scheme://host[:port] in lower case, the scheme's
// default port left out.
func canonicalOrigin(scheme, hostport string) string {
	scheme, hostport = strings.ToLower(scheme), strings.ToLower(hostport)
	if host, port, err := net.SplitHostPort(hostport); err == nil &&
		((scheme == "http" && port == "80") || (scheme == "https" && port == "443")) {
		hostport = host
		if strings.Contains(host, ":") {
			hostport = "[" + host + "]"
		}
	}
	return scheme + "://" + hostport
}

// hostAllowed reports whether a Host header names this gateway: one of the
// names, localhost, or an IP address (a DNS rebinding needs a name).
func (g *originGuard) hostAllowed(host string) bool {
	h := hostName(host)
	if h == "" {
		return false
	}
	return g.hosts[h] || h == "localhost" || net.ParseIP(h) != nil
}

// originAllowed reports whether origin may make r: it is allowed, or it is
// the gateway's own origin as r reached it (its Host already checked).
func (g *originGuard) originAllowed(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (sandboxed frames, file: pages) among others
	}
	o := canonicalOrigin(u.Scheme, u.Host)
	if g.origins[o] {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return o == canonicalOrigin(scheme, r.Host)
}

// listed reports whether origin is one of the allowed origins (not merely
// the gateway's own, which needs no CORS).
func (g *originGuard) listed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return g.origins[canonicalOrigin(u.Scheme, u.Host)]
}

// CORS grants to the allowed origins. Credentials (the dashboard's session
// cookie) are not granted: a page of another origin authenticates with a
// token in Authorization, which it holds itself, so a visitor's session on
// the gateway's own dashboard is never lent to another site. The exposed
// headers are those a client reads: offsets and watermarks of a fetch, the
// error code, and the throttle.
const (
	corsAllowMethods  = "GET, HEAD, POST, PUT, PATCH, DELETE"
	corsAllowHeaders  = "Authorization, Content-Type, " + api.HeaderClientID
	corsExposeHeaders = "Retry-After, " + api.HeaderErrorCode + ", " + api.HeaderHighWatermark + ", " +
		api.HeaderLogStartOffset + ", " + api.HeaderNextOffset + ", " + api.HeaderLeaderEpoch + ", " + api.HeaderThrottleMs
	corsMaxAgeSeconds = "600"
)

// grantCORS sets the CORS answer for an allowed origin: on a preflight the
// methods and request headers the API takes, on a request the response
// headers the page may read.
func grantCORS(h http.Header, origin string, preflight bool) {
	h.Set("Access-Control-Allow-Origin", origin)
	if preflight {
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Methods", corsAllowMethods)
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAgeSeconds)
		return
	}
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
}

// needsOriginCheck: WebSocket upgrades and methods that may change state.
// A browser sends Origin with both when they cross origins.
func needsOriginCheck(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		for _, v := range r.Header.Values("Upgrade") {
			for _, tok := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
					return true
				}
			}
		}
		return false
	}
	return true
}

// guardOrigins is the middleware of originGuard (a pass-through when it is
// off). The health probes answer whatever the Host, since load balancers
// and orchestrators send addresses or their own names. It does not wrap the
// ResponseWriter.
func (g *Gateway) guardOrigins(next http.Handler) http.Handler {
	og := g.origins
	if og == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !og.hostAllowed(r.Host) {
			g.log.Debug("Host not allowed", "host", r.Host, "path", r.URL.Path)
			apihttp.WriteError(w, api.Errorf(api.CodeHostNotAllowed, "Host %q is not one of this gateway's names", r.Host))
			return
		}
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if (preflight || needsOriginCheck(r)) && !og.originAllowed(origin, r) {
			g.log.Debug("Origin not allowed", "origin", origin, "method", r.Method, "path", r.URL.Path)
			apihttp.WriteError(w, api.Errorf(api.CodeOriginNotAllowed, "Origin %q may not %s %s on this gateway", origin, r.Method, r.URL.Path))
			return
		}
		w.Header().Add("Vary", "Origin")
		if og.listed(origin) {
			grantCORS(w.Header(), origin, preflight)
		}
		if preflight {
			// Answered here, before authentication: a browser sends no
			// credentials with a preflight.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wsAcceptOptions are the WebSocket handshake's options. With the origin
// guard on, the Origin was checked against the allow-list already (the
// library's own check, Origin's host equal to Host, would refuse allowed
// origins and is what DNS rebinding passes); without it the library's check
// stands.
func (g *Gateway) wsAcceptOptions() *websocket.AcceptOptions {
	return &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled, InsecureSkipVerify: g.origins != nil}
}
