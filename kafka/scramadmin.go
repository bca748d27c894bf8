package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// ScramStore is what DescribeUserScramCredentials and
// AlterUserScramCredentials need of the backend: the cluster's SCRAM
// credentials (the auth store's, the same the HTTP API's
// /v1/scram-credentials manages). A Backend that does not implement it
// answers those requests with UNSUPPORTED_VERSION.
type ScramStore interface {
	// ReadScramCredentials lists the credentials in force as the
	// coordinator holds them, of principal ("" for all).
	ReadScramCredentials(ctx context.Context, principal string) ([]auth.ScramCredential, error)
	// SetScramCredential stores c, replacing principal's for its mechanism.
	SetScramCredential(ctx context.Context, c auth.ScramCredential) error
	// DeleteScramCredential removes it; auth.ErrUnknownScramCredential
	// when there is none.
	DeleteScramCredential(ctx context.Context, mechanism, principal string) error
}

// Kafka's SCRAM mechanism numbers.
var scramMechanismOf = map[int8]string{1: auth.ScramSHA256, 2: auth.ScramSHA512}

func scramNumber(mechanism string) int8 {
	for n, m := range scramMechanismOf {
		if m == mechanism {
			return n
		}
	}
	return 0
}

func (s *Server) scramStore() (ScramStore, bool) {
	st, ok := s.opts.Backend.(ScramStore)
	return st, ok
}

// handleDescribeUserScramCredentials lists users' mechanisms and
// iterations (never keys): every user with a credential when none is
// named, else each named one (RESOURCE_NOT_FOUND for a user without any,
// DUPLICATE_RESOURCE for one named twice).
func (s *Server) handleDescribeUserScramCredentials(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	st, ok := s.scramStore()
	if !ok {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp, nil
	}
	all, err := st.ReadScramCredentials(ctx, "")
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.CoordinatorNotAvailable.Code, kmsg.StringPtr(err.Error())
		return resp, nil
	}
	byUser := map[string][]auth.ScramCredential{}
	var users []string
	for _, c := range all {
		u := auth.ScramUser(c.Principal)
		if byUser[u] == nil {
			users = append(users, u)
		}
		byUser[u] = append(byUser[u], c)
	}
	if req.Users != nil {
		users = users[:0]
		for _, u := range req.Users {
			users = append(users, u.Name)
		}
	}
	seen := map[string]int{}
	for _, u := range users {
		seen[u]++
	}
	for _, u := range users {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u
		switch {
		case seen[u] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
		case len(byUser[u]) == 0:
			r.ErrorCode, r.ErrorMessage = kerr.ResourceNotFound.Code, kmsg.StringPtr("no SCRAM credential for the user")
		}
		if r.ErrorCode == 0 {
			for _, c := range byUser[u] {
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = scramNumber(c.Mechanism), int32(c.Iterations)
				r.CredentialInfos = append(r.CredentialInfos, ci)
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// handleAlterUserScramCredentials deletes and sets credentials: a set
// carries the password already salted by the client (Hi(password, salt,
// iterations)), from which the stored and server keys are derived. A user
// named twice in one request is DUPLICATE_RESOURCE.
func (s *Server) handleAlterUserScramCredentials(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	st, hasStore := s.scramStore()
	count := map[string]int{}
	var order []string
	for _, d := range req.Deletions {
		if count[d.Name]++; count[d.Name] == 1 {
			order = append(order, d.Name)
		}
	}
	for _, u := range req.Upsertions {
		if count[u.Name]++; count[u.Name] == 1 {
			order = append(order, u.Name)
		}
	}
	code := map[string]int16{}
	msg := map[string]string{}
	fail := func(user string, c int16, m string) {
		if code[user] == 0 {
			code[user], msg[user] = c, m
		}
	}
	for _, u := range order {
		switch {
		case !hasStore:
			fail(u, kerr.UnsupportedVersion.Code, "this listener keeps no SCRAM credentials")
		case count[u] > 1:
			fail(u, kerr.DuplicateResource.Code, "the user is named more than once")
		case auth.ValidatePrincipal("User:"+u) != nil:
			fail(u, kerr.UnacceptableCredential.Code, "not a user name")
		}
	}
	for _, d := range req.Deletions {
		if code[d.Name] != 0 {
			continue
		}
		m, ok := scramMechanismOf[d.Mechanism]
		if !ok {
			fail(d.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
			continue
		}
		err := st.DeleteScramCredential(ctx, m, "User:"+d.Name)
		switch {
		case errors.Is(err, auth.ErrUnknownScramCredential):
			fail(d.Name, kerr.ResourceNotFound.Code, "no such credential")
		case err != nil:
			fail(d.Name, kerr.CoordinatorNotAvailable.Code, err.Error())
		}
	}
	for _, u := range req.Upsertions {
		if code[u.Name] != 0 {
			continue
		}
		m, ok := scramMechanismOf[u.Mechanism]
		if !ok {
			fail(u.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
			continue
		}
		c, err := auth.ScramCredentialFromSalted("User:"+u.Name, m, u.Salt, u.SaltedPassword, int(u.Iterations), time.Now())
		if err != nil {
			fail(u.Name, kerr.UnacceptableCredential.Code, err.Error())
			continue
		}
		if err := st.SetScramCredential(ctx, c); err != nil {
			fail(u.Name, kerr.CoordinatorNotAvailable.Code, err.Error())
		}
	}
	for _, u := range order {
		r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		r.User, r.ErrorCode = u, code[u]
		if m := msg[u]; m != "" {
			r.ErrorMessage = kmsg.StringPtr(m)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}
