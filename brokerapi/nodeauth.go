package brokerapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of an authenticated internal request.
const (
	HeaderNode     = "X-Sluice-Node"      // who calls: "gateway" or "broker:<id>"
	HeaderNodeTime = "X-Sluice-Node-Time" // Unix ms when the request was signed
	HeaderNodeSig  = "X-Sluice-Node-Sig"  // hex HMAC-SHA256 of the fields below
	// HeaderPrincipal names the principal a gateway calls for (signed with
	// the rest, so a captured signature does not pass for another
	// principal). Absent: a broker calls as itself, a gateway as
	// User:ANONYMOUS.
	HeaderPrincipal  = "X-Sluice-Principal"
	NodeGateway      = "gateway"
	nodeBrokerPrefix = "broker:"
)

// MaxNodeClockSkew is how far a signed request's time may be from the
// receiver's clock.
const MaxNodeClockSkew = 5 * time.Minute

// NodeAuth signs internal requests with the cluster secret that every broker
// and gateway of a cluster shares, so a broker can tell its peers and
// gateways from anyone else who reaches its port, and which broker a
// replication fetch comes from.
type NodeAuth struct {
	Secret []byte
	Node   string // NodeGateway or BrokerNode(id)
}

// BrokerNode is the node name of broker id.
func BrokerNode(id int32) string { return nodeBrokerPrefix + strconv.Itoa(int(id)) }

// BrokerID returns the broker id of a node name, ok false for a gateway.
func BrokerID(node string) (int32, bool) {
	s, ok := strings.CutPrefix(node, nodeBrokerPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 32)
	return int32(id), err == nil
}

// NodePrincipal is the principal a node acts as where it calls for no user:
// "Node:gateway" or "Node:broker:<id>". User principals are "User:<name>",
// so a token can never name one.
func NodePrincipal(node string) string { return nodePrincipalPrefix + node }

const nodePrincipalPrefix = "Node:"

// IsNodePrincipal reports whether p is a node's principal, not a user's.
func IsNodePrincipal(p string) bool { return strings.HasPrefix(p, nodePrincipalPrefix) }

// PrincipalGateway is the principal of a gateway's calls for no single
// user (a long poll shared by the streams of several).
var PrincipalGateway = NodePrincipal(NodeGateway)

// nodeMAC signs the fields of a request. The principal is appended only when
// there is one (a request line holds no newline, so the forms cannot be
// confused).
func nodeMAC(secret []byte, node, ts, method, uri, principal string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(node + "\n" + ts + "\n" + method + "\n" + uri))
	if principal != "" {
		m.Write([]byte("\n" + principal))
	}
	return m.Sum(nil)
}

// Sign adds the node headers to req, covering its HeaderPrincipal (set it
// first).
func (a *NodeAuth) Sign(req *http.Request, now time.Time) {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	req.Header.Set(HeaderNode, a.Node)
	req.Header.Set(HeaderNodeTime, ts)
	req.Header.Set(HeaderNodeSig, hex.EncodeToString(nodeMAC(a.Secret, a.Node, ts, req.Method, req.URL.RequestURI(), req.Header.Get(HeaderPrincipal))))
}

// ErrNodeAuth is returned by VerifyNode for a request that is not signed
// with the cluster secret, or signed too far from now.
var ErrNodeAuth = errors.New("brokerapi: the request is not signed by a node of this cluster")

// VerifyNode checks a received request's signature (its HeaderPrincipal
// included) and returns the calling node's name.
func VerifyNode(secret []byte, r *http.Request, now time.Time) (string, error) {
	node, ts, sig := r.Header.Get(HeaderNode), r.Header.Get(HeaderNodeTime), r.Header.Get(HeaderNodeSig)
	ms, err := strconv.ParseInt(ts, 10, 64)
	if node == "" || err != nil {
		return "", ErrNodeAuth
	}
	if d := now.Sub(time.UnixMilli(ms)); d > MaxNodeClockSkew || d < -MaxNodeClockSkew {
		return "", ErrNodeAuth
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, nodeMAC(secret, node, ts, r.Method, r.RequestURI, r.Header.Get(HeaderPrincipal))) {
		return "", ErrNodeAuth
	}
	return node, nil
}
