package broker

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/offsets"
)

// maxGroupBody bounds a group request body (a commit of a few thousand partitions).
const maxGroupBody = 1 << 20

func (b *Broker) groupRoutes(r chi.Router) {
	// The gateway's checks again (authz.go): READ on the group for a
	// member's calls, and on the topics a join names or a commit writes.
	group := func(op auth.Operation) func(http.Handler) http.Handler { return b.check(op, auth.ResourceGroup) }
	r.Get(brokerapi.PathGroups, b.handleListGroups) // lists what the caller may DESCRIBE
	r.With(group(auth.OpDescribe)).Get(brokerapi.PathGroup, b.handleDescribeGroup)
	r.With(group(auth.OpDelete)).Delete(brokerapi.PathGroup, b.handleDeleteGroup)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupJoin, b.handleJoinGroup)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupHeartbeat, b.handleHeartbeat)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupPoll, b.handleStartPoll)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupPositions, b.handleEndPoll)
	r.With(group(auth.OpRead)).Delete(brokerapi.PathGroupMember, b.handleLeaveGroup)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupCommit, b.handleCommit)
	r.With(group(auth.OpRead)).Post(brokerapi.PathGroupSetOffset, b.handleSetOffsets)
}

// internalJSON is how the internal API reads JSON bodies: apihttp's rules,
// with fields this broker does not know ignored (a gateway a version ahead,
// during a rolling upgrade).
var internalJSON = apihttp.JSONRules{AllowUnknownFields: true}

func decodeGroupBody(w http.ResponseWriter, r *http.Request, v any) error {
	return apihttp.DecodeJSON(w, r, v, maxGroupBody, internalJSON)
}

func newMemberID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (b *Broker) handleJoinGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req brokerapi.GroupJoin
	if err := decodeGroupBody(w, r, &req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	switch req.Kind {
	case api.MemberKindWS, api.MemberKindPush: // push: a gateway's pusher (gateways never forward a public join as one)
	default:
		req.Kind = api.MemberKindHTTP
	}
	if err := b.authorizeTopics(r.Context(), auth.OpRead, req.Topics); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	meta := b.groupMeta()
	p, err := offsets.ValidateJoin(req.JoinGroupRequest, req.Kind, meta)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	id := newMemberID()
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		var res api.JoinGroupResponse
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.Join(group, id, p, meta, now)
		}, func(st *offsets.State) error {
			m, err := st.Member(group, id)
			if err != nil {
				return err
			}
			res = api.JoinGroupResponse{MemberID: id, MemberEpoch: m.Epoch, Assignment: m.Assignment(), Grants: m.Grants(),
				HeartbeatIntervalMs: offsets.HeartbeatInterval(m.SessionTimeoutMs), Cursor: api.Cursor{Epoch: m.Epoch}.Encode()}
			return nil
		})
		if err == nil {
			apihttp.WriteJSON(w, http.StatusCreated, res)
		}
		return err
	})
}

func (b *Broker) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		var res api.HeartbeatResponse
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.Heartbeat(group, member, b.groupMeta(), now)
		}, func(st *offsets.State) error {
			m, err := st.Member(group, member)
			if err != nil {
				return err
			}
			res = api.HeartbeatResponse{MemberEpoch: m.Epoch, Assignment: m.Assignment(), Grants: m.Grants()}
			return nil
		})
		if err == nil {
			apihttp.WriteJSON(w, http.StatusOK, res)
		}
		return err
	})
}

func (b *Broker) handleStartPoll(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	var req brokerapi.GroupPollRequest
	if err := decodeGroupBody(w, r, &req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	var cursor *api.Cursor
	if req.Cursor != "" {
		c, err := api.DecodeCursor(req.Cursor)
		if err != nil {
			apihttp.WriteError(w, err)
			return
		}
		cursor = &c
	}
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		var res brokerapi.GroupPollPlan
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.StartPoll(group, member, cursor, b.groupMeta(), now)
		}, func(st *offsets.State) error {
			plan, err := st.Plan(group, member, cursor)
			if err != nil {
				return err
			}
			res = brokerapi.GroupPollPlan{MemberEpoch: plan.MemberEpoch, Assignment: plan.Assignment, Grants: plan.Grants,
				Starts: make([]brokerapi.GroupStart, len(plan.Starts)), SessionTimeoutMs: plan.SessionTimeout.Milliseconds()}
			for i, s := range plan.Starts {
				res.Starts[i] = brokerapi.GroupStart{Topic: s.Topic, Partition: s.Partition, Offset: s.Offset, Reset: s.Reset, Metadata: s.Metadata}
			}
			return nil
		})
		if err == nil {
			apihttp.WriteJSON(w, http.StatusOK, res)
		}
		return err
	})
}

func (b *Broker) handleEndPoll(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	var req brokerapi.GroupPositions
	if err := decodeGroupBody(w, r, &req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		err := gc.read(r.Context(), func(st *offsets.State) error {
			st.EndPoll(group, member, req.Positions, time.Now())
			return nil
		})
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
		return err
	})
}

func (b *Broker) handleLeaveGroup(w http.ResponseWriter, r *http.Request) {
	group, member := chi.URLParam(r, "group"), chi.URLParam(r, "member")
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.Leave(group, member, b.groupMeta())
		}, nil)
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
		return err
	})
}

func (b *Broker) handleCommit(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req api.CommitRequest
	if err := decodeGroupBody(w, r, &req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if req.Cursor != "" {
		c, err := api.DecodeCursor(req.Cursor)
		if err != nil {
			apihttp.WriteError(w, err)
			return
		}
		if req.MemberEpoch == 0 {
			req.MemberEpoch = c.Epoch
		}
		req.Offsets = append(req.Offsets, c.Positions...)
	}
	if len(req.Offsets) == 0 && req.Cursor == "" {
		apihttp.WriteError(w, api.Errorf(api.CodeInvalidRequest, "nothing to commit: give offsets or a cursor"))
		return
	}
	if req.Offsets == nil {
		req.Offsets = []api.PartitionOffset{} // a cursor of a member with no partitions: a heartbeat
	}
	if err := b.authorizeTopics(r.Context(), auth.OpRead, offsetTopics(req.Offsets)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.Commit(group, req.MemberID, req.MemberEpoch, req.Offsets, b.groupMeta(), now)
		}, nil)
		if err == nil {
			apihttp.WriteJSON(w, http.StatusOK, api.CommitResponse{Committed: req.Offsets})
		}
		return err
	})
}

func (b *Broker) handleSetOffsets(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	var req brokerapi.GroupSetOffsets
	if err := decodeGroupBody(w, r, &req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := b.authorizeTopics(r.Context(), auth.OpRead, offsetTopics(req.Offsets)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			if req.Managed {
				return st.SeekManaged(group, req.Offsets, now)
			}
			return st.SetOffsets(group, req.Offsets, now)
		}, nil)
		if err == nil {
			apihttp.WriteJSON(w, http.StatusOK, api.CommitResponse{Committed: req.Offsets})
		}
		return err
	})
}

func (b *Broker) handleDescribeGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		var res api.GroupDescription
		err := gc.read(r.Context(), func(st *offsets.State) error {
			d, ok := st.Describe(group)
			if !ok {
				return api.Errorf(api.CodeUnknownGroup, "group %q does not exist", group)
			}
			res = d
			return nil
		})
		if err == nil {
			apihttp.WriteJSON(w, http.StatusOK, res)
		}
		return err
	})
}

func (b *Broker) handleDeleteGroup(w http.ResponseWriter, r *http.Request) {
	group := chi.URLParam(r, "group")
	managed := r.URL.Query().Get("managed") == "true"
	b.withCoordinator(w, r, group, func(gc *groupCoordinator) error {
		err := gc.run(r.Context(), func(st *offsets.State, now time.Time) ([]offsets.Record, error) {
			return st.Delete(group, managed)
		}, nil)
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
		return err
	})
}

// handleListGroups lists the groups of every __consumer_offsets partition
// this broker leads.
func (b *Broker) handleListGroups(w http.ResponseWriter, r *http.Request) {
	res := api.GroupList{Groups: []api.GroupSummary{}}
	for _, p := range b.parts.topicPartitions(api.OffsetsTopic) {
		if _, _, leading := p.leaderState(); !leading {
			continue
		}
		_ = b.groups.coordinator(p).read(r.Context(), func(st *offsets.State) error {
			for _, g := range st.Groups() {
				if !b.allowed(r.Context(), auth.OpDescribe, auth.ResourceGroup, g) {
					continue
				}
				res.Groups = append(res.Groups, st.Summary(g))
			}
			return nil
		})
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}
