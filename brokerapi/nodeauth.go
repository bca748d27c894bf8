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
	HeaderNode       = "X-Sluice-Node"      // who calls: "gateway" or "broker:<id>"
	HeaderNodeTime   = "X-Sluice-Node-Time" // Unix ms when the request was signed
	HeaderNodeSig    = "X-Sluice-Node-Sig"  // hex HMAC-SHA256 of the fields below
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

func nodeMAC(secret []byte, node, ts, method, uri string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(node + "\n" + ts + "\n" + method + "\n" + uri))
	return m.Sum(nil)
}

// Sign adds the node headers to req.
func (a *NodeAuth) Sign(req *http.Request, now time.Time) {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	req.Header.Set(HeaderNode, a.Node)
	req.Header.Set(HeaderNodeTime, ts)
	req.Header.Set(HeaderNodeSig, hex.EncodeToString(nodeMAC(a.Secret, a.Node, ts, req.Method, req.URL.RequestURI())))
}

// ErrNodeAuth is returned by VerifyNode for a request that is not signed
// with the cluster secret, or signed too far from now.
var ErrNodeAuth = errors.New("brokerapi: the request is not signed by a node of this cluster")

// VerifyNode checks a received request's signature and returns the calling
// node's name.
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
	if err != nil || !hmac.Equal(got, nodeMAC(secret, node, ts, r.Method, r.RequestURI)) {
		return "", ErrNodeAuth
	}
	return node, nil
}
