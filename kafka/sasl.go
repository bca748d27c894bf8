package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// SASL mechanisms the listener can serve.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = auth.ScramSHA256
	MechanismScramSHA512 = auth.ScramSHA512
)

// Mechanisms is every mechanism the listener can serve.
var Mechanisms = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}

// Authenticator checks Kafka clients' credentials and requests against the
// cluster's tokens, SCRAM credentials and ACLs (the broker's copy of the
// auth store). Its methods read an in-memory copy and never block for long.
type Authenticator interface {
	// Token returns the principal of a Sluice API token (PLAIN's
	// password), or an error when the token is malformed, unknown, revoked
	// or expired.
	Token(ctx context.Context, token string) (principal string, err error)
	// ScramCredential returns principal's stored credential for mechanism
	// (auth.ScramSHA256 or auth.ScramSHA512); false when it has none.
	ScramCredential(mechanism, principal string) (auth.ScramCredential, bool)
	// Allowed reports whether principal may perform op on the resource.
	// It is true for everything when the cluster checks no ACLs.
	Allowed(principal string, op auth.Operation, rt auth.ResourceType, name string) bool
}

// The SASL state machine of a connection on a listener that requires
// authentication (Options.RequireAuth). Kafka's, without re-authentication:
//
//	saslHandshake ──SaslHandshake(mechanism served)──▶ saslAuthenticate
//	saslAuthenticate ──SaslAuthenticate(...)──▶ saslAuthenticate (SCRAM's first step)
//	saslAuthenticate ──last step accepted──▶ saslDone (authenticated: everything served)
//
// Before saslDone only ApiVersions, SaslHandshake and SaslAuthenticate
// are served; any other request closes the connection without an answer,
// as Kafka does. A refused step (wrong credentials, an unserved mechanism,
// a request out of order: SASL_AUTHENTICATION_FAILED,
// UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE) is answered, and then
// the connection closes. After SaslHandshake v0 the tokens come as bare
// size-prefixed frames, not SaslAuthenticate requests (rawSASL).
type saslStep int8

const (
	saslHandshake saslStep = iota
	saslAuthenticate
	saslDone
)

// saslState is a connection's place in the exchange; only the connection's
// goroutine touches it.
type saslState struct {
	step      saslStep
	mechanism string
	raw       bool           // SaslHandshake v0: tokens are bare frames
	scram     *scramExchange // the exchange under way, for a SCRAM mechanism
}

func (s *Server) handleSASLHandshake(_ context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = slices.Clone(s.opts.Mechanisms)
	if resp.SupportedMechanisms == nil {
		resp.SupportedMechanisms = []string{}
	}
	switch {
	case c.sasl.step != saslHandshake:
		resp.ErrorCode = kerr.IllegalSaslState.Code
	case !slices.Contains(s.opts.Mechanisms, req.Mechanism):
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	}
	if resp.ErrorCode != 0 {
		c.closeAfterAnswer = true
		s.saslFailed.Add(1)
		s.log.Info("kafka SASL handshake refused", "client", c.nc.RemoteAddr().String(), "mechanism", req.Mechanism,
			"err", kerr.ErrorForCode(resp.ErrorCode))
		return resp, nil
	}
	c.sasl = saslState{step: saslAuthenticate, mechanism: req.Mechanism, raw: req.Version == 0}
	if x, ok := newScramExchange(req.Mechanism, s.opts.Authenticator); ok {
		c.sasl.scram = x
	}
	return resp, nil
}

func (s *Server) handleSASLAuthenticate(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.sasl.step != saslAuthenticate || c.sasl.raw {
		s.saslFailed.Add(1)
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.ErrorMessage = kmsg.StringPtr("SaslAuthenticate is served once after SaslHandshake v1")
		c.closeAfterAnswer = true
		return resp, nil
	}
	out, err := c.saslStep(ctx, req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr(err.Error())
		c.closeAfterAnswer = true
		return resp, nil
	}
	resp.SASLAuthBytes = out
	// SessionLifetimeMillis 0: no re-authentication (KIP-368) is asked for;
	// a session lasts as long as its connection.
	return resp, nil
}

// saslStep runs one step of the mechanism under way and returns the
// server's token; the connection is authenticated after the last step.
func (c *conn) saslStep(ctx context.Context, in []byte) ([]byte, error) {
	var (
		out       []byte
		principal string
		done      bool
		err       error
	)
	if c.sasl.scram != nil {
		out, principal, done, err = c.sasl.scram.next(in)
	} else {
		principal, err = c.plain(ctx, in)
		done = err == nil
	}
	log := c.s.log.With("client", c.nc.RemoteAddr().String(), "mechanism", c.sasl.mechanism)
	if err != nil {
		c.s.saslFailed.Add(1)
		c.sasl.step = saslDone + 1 // nothing more is served; the connection closes
		log.Info("kafka SASL authentication failed", "err", err)
		return nil, err
	}
	if done {
		c.sasl.step = saslDone
		c.principal, c.authenticated = principal, true
		log.Debug("kafka client authenticated", "principal", principal)
	}
	return out, nil
}

// plain checks a PLAIN message (RFC 4616: authzid NUL authcid NUL passwd):
// the password is a Sluice API token, whose principal the connection acts
// for. The user name, when given, must be that principal's ("alice" or
// "User:alice"), and so must the authorization id.
func (c *conn) plain(ctx context.Context, msg []byte) (string, error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 || len(parts[2]) == 0 {
		return "", errors.New("malformed PLAIN message")
	}
	principal, err := c.s.opts.Authenticator.Token(ctx, string(parts[2]))
	if err != nil {
		return "", errors.New("authentication failed: invalid token")
	}
	for _, name := range [][]byte{parts[0], parts[1]} {
		if n := string(name); n != "" && n != principal && "User:"+n != principal {
			return "", fmt.Errorf("authentication failed: the token is %s's, not %q's", principal, n)
		}
	}
	return principal, nil
}

// rawSASL answers a bare SASL token (after SaslHandshake v0): the answer
// is the server's token, size-prefixed; an error closes the connection,
// which is how Kafka tells such a client its authentication failed.
func (c *conn) rawSASL(ctx context.Context, frame []byte) ([]byte, error) {
	if c.sasl.step != saslAuthenticate {
		return nil, errors.New("a SASL token out of order")
	}
	out, err := c.saslStep(ctx, frame)
	if err != nil {
		return nil, err
	}
	if c.sasl.step == saslDone {
		c.sasl.raw = false
	}
	return append(binary.BigEndian.AppendUint32(c.wbuf[:0], uint32(len(out))), out...), nil
}

// errSASLRefused ends a connection after a refused SASL step's answer.
var errSASLRefused = errors.New("SASL authentication refused")

// answerRaw answers a bare SASL token frame.
func (c *conn) answerRaw(ctx context.Context, frame []byte) error {
	out, err := c.rawSASL(ctx, frame)
	if err != nil {
		return err
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.lim.WriteTimeout))
	_, err = c.nc.Write(out)
	if cap(out) <= maxKeptBuffer {
		c.wbuf = out[:0]
	}
	return err
}

// checkSASL validates the SASL options.
func (o Options) checkSASL() error {
	for _, m := range o.Mechanisms {
		if !slices.Contains(Mechanisms, m) {
			return fmt.Errorf("kafka: SASL mechanism %q is not served (%v are)", m, Mechanisms)
		}
	}
	if o.RequireAuth && (len(o.Mechanisms) == 0 || o.Authenticator == nil) {
		return errors.New("kafka: RequireAuth needs SASL mechanisms and an Authenticator")
	}
	if len(o.Mechanisms) > 0 && o.Authenticator == nil {
		return errors.New("kafka: SASL mechanisms need an Authenticator")
	}
	return nil
}
