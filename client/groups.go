package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// The consumer-group routes, one call each. GroupConsumer and GroupWS build
// members on them; operators and tests call them directly.

func groupPath(group string) string { return "/v1/groups/" + escape(group) }

func memberPath(group, member string) string {
	return groupPath(group) + "/members/" + escape(member)
}

// JoinGroup adds a member to group (POST /v1/groups/{group}/members) and
// returns its id, epoch, assignment and heartbeat interval. The group is
// created on first use.
//
// A join is retried only when the failure proves no member was added
// (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a refused connection), or
// on any retriable failure when req.InstanceID is set: a static member's
// second join takes over the first, so nothing is left behind. Errors:
// INVALID_GROUP_ID, UNKNOWN_TOPIC, INVALID_REQUEST, FENCED_INSTANCE_ID.
func (c *Client) JoinGroup(ctx context.Context, group string, req api.JoinGroupRequest) (api.JoinGroupResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return api.JoinGroupResponse{}, err
	}
	r := &request{method: http.MethodPost, path: groupPath(group) + "/members", body: body, ctype: "application/json", safety: retryUnapplied}
	if req.InstanceID != "" {
		r.safety = retryRetriable
	}
	var out api.JoinGroupResponse
	err = c.doJSON(ctx, r, &out)
	return out, err
}

// PollOptions bound a group poll. Zero fields take the server's defaults.
type PollOptions struct {
	// MaxRecords is the most records to return (1 to 10000). Default 500.
	MaxRecords int
	// MaxBytes bounds the batches read from the leaders (1 to 64 MiB),
	// shared among the assigned partitions. Default 1 MiB.
	MaxBytes int64
	// MaxWait is how long the poll may wait for a first record (at most
	// 30 s). Default 0: answer at once. The client waits this long on top
	// of its own per-attempt timeout.
	MaxWait time.Duration
	// Cursor is the previous poll's cursor: the poll reads from its
	// positions (and, for an auto-commit member, commits them). Empty: from
	// where the member's last poll ended as the coordinator remembers it,
	// else the committed offsets.
	Cursor string
}

// PollGroup reads records of the member's assigned partitions (GET
// /v1/groups/{group}/members/{member}/records); it also renews the member's
// session. It blocks up to opts.MaxWait when there is nothing to read.
//
// Retried on every retriable failure with the same cursor: a poll with a
// cursor returns the same records when sent again, so an answer lost on the
// way is read again rather than skipped. (A poll without a cursor is not so
// safe: the coordinator may have remembered where the lost answer ended.)
// Errors: UNKNOWN_MEMBER_ID (join again), FENCED_INSTANCE_ID,
// NO_OFFSET_FOR_PARTITION, INVALID_REQUEST for a cursor this API did not issue.
func (c *Client) PollGroup(ctx context.Context, group, member string, opts PollOptions) (api.GroupPollResponse, error) {
	q := url.Values{}
	if opts.MaxRecords > 0 {
		q.Set("max_records", strconv.Itoa(opts.MaxRecords))
	}
	if opts.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(opts.MaxBytes, 10))
	}
	if opts.MaxWait > 0 {
		q.Set("max_wait_ms", strconv.FormatInt(max(1, opts.MaxWait.Milliseconds()), 10))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	var out api.GroupPollResponse
	err := c.doJSON(ctx, &request{method: http.MethodGet, path: memberPath(group, member) + "/records", query: q, extra: opts.MaxWait}, &out)
	return out, err
}

// GroupBatches is a raw group poll: the poll's cursor, epoch, assignment
// and grants, and each partition's stored batches, undecoded.
type GroupBatches struct {
	Cursor      string
	MemberEpoch int32
	Assignment  []api.TopicPartition
	Grants      []api.PartitionGrant
	// Partitions are the partitions that returned bytes, in the poll's
	// order.
	Partitions []PartitionBatches
}

// PartitionBatches is one partition's share of a raw group poll.
type PartitionBatches struct {
	Topic     string
	Partition int32
	// Batches holds whole RecordBatch v2 batches; the first may begin
	// before From. NextOffset is the cursor's position for the partition.
	Batches
	From int64
}

// Records decodes the partition's batches, checking every CRC, and returns
// the records at or after From.
func (p PartitionBatches) Records() ([]recordbatch.Record, error) { return p.Batches.Records(p.From) }

// PollGroupBatches is PollGroup that leaves the records as stored (GET
// .../members/{member}/batches): the gateway relays each partition's
// batches without decoding or rendering them, the cheapest group read.
// opts.MaxRecords bounds each partition's share, at whole batches.
// Retries and errors are PollGroup's.
func (c *Client) PollGroupBatches(ctx context.Context, group, member string, opts PollOptions) (GroupBatches, error) {
	q := url.Values{}
	if opts.MaxRecords > 0 {
		q.Set("max_records", strconv.Itoa(opts.MaxRecords))
	}
	if opts.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(opts.MaxBytes, 10))
	}
	if opts.MaxWait > 0 {
		q.Set("max_wait_ms", strconv.FormatInt(max(1, opts.MaxWait.Milliseconds()), 10))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	resp, err := c.do(ctx, &request{method: http.MethodGet, path: memberPath(group, member) + "/batches", query: q, extra: opts.MaxWait})
	if err != nil {
		return GroupBatches{}, err
	}
	return decodeGroupBatches(resp.body)
}

// decodeGroupBatches splits a raw group poll's body (api.ContentTypeGroupBatches).
func decodeGroupBatches(body []byte) (GroupBatches, error) {
	bad := func(format string, a ...any) (GroupBatches, error) {
		return GroupBatches{}, fmt.Errorf("client: raw group poll answer: "+format, a...)
	}
	if len(body) < 4 {
		return bad("%d bytes, shorter than its head's length", len(body))
	}
	n := int64(binary.BigEndian.Uint32(body))
	if n > api.MaxGroupBatchesMeta || n > int64(len(body)-4) {
		return bad("head of %d bytes in a body of %d", n, len(body))
	}
	var meta api.GroupBatchesMeta
	if err := json.Unmarshal(body[4:4+n], &meta); err != nil {
		return bad("head: %v", err)
	}
	out := GroupBatches{Cursor: meta.Cursor, MemberEpoch: meta.MemberEpoch, Assignment: meta.Assignment, Grants: meta.Grants}
	rest := body[4+n:]
	for _, p := range meta.Partitions {
		if p.Bytes < 0 || p.Bytes > int64(len(rest)) {
			return bad("%s/%d says %d bytes, %d are left", p.Topic, p.Partition, p.Bytes, len(rest))
		}
		out.Partitions = append(out.Partitions, PartitionBatches{
			Topic: p.Topic, Partition: p.Partition, From: p.From,
			Batches: Batches{Data: rest[:p.Bytes:p.Bytes], NextOffset: p.NextOffset, HighWatermark: p.HighWatermark},
		})
		rest = rest[p.Bytes:]
	}
	if len(rest) != 0 {
		return bad("%d bytes after the last partition", len(rest))
	}
	return out, nil
}

// Heartbeat renews the member's session (POST
// .../members/{member}/heartbeat) and returns its epoch and assignment. A
// member that polls or commits within its heartbeat interval need not send
// heartbeats. Retried on every retriable failure. Errors: UNKNOWN_MEMBER_ID
// when the session expired or the member left.
func (c *Client) Heartbeat(ctx context.Context, group, member string) (api.HeartbeatResponse, error) {
	var out api.HeartbeatResponse
	err := c.doJSON(ctx, &request{method: http.MethodPost, path: memberPath(group, member) + "/heartbeat"}, &out)
	return out, err
}

// LeaveGroup removes a member (DELETE /v1/groups/{group}/members/{member});
// its partitions move to the other members at once. Retried on every
// retriable failure; UNKNOWN_MEMBER_ID after a retry means an earlier
// attempt removed it, and is returned as success.
func (c *Client) LeaveGroup(ctx context.Context, group, member string) error {
	var maybe maybeApplied
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: memberPath(group, member), observe: maybe.observe})
	if bool(maybe) && errors.Is(err, &api.Error{Code: api.CodeUnknownMemberID}) {
		return nil
	}
	return err
}

// CommitOffsets commits a member's positions (POST /v1/groups/{group}/offsets):
// req.Offsets, and the positions of req.Cursor when given. With a cursor and
// a zero MemberEpoch the cursor's epoch is checked against the partitions'
// ownership. It returns what was committed. Retried on every retriable
// failure (committing the same offsets twice is harmless). Errors:
// FENCED_MEMBER_EPOCH when a partition moved to another member since (its
// records will be delivered there), UNKNOWN_MEMBER_ID, INVALID_OFFSET.
func (c *Client) CommitOffsets(ctx context.Context, group string, req api.CommitRequest) (api.CommitResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return api.CommitResponse{}, err
	}
	var out api.CommitResponse
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: groupPath(group) + "/offsets", body: body, ctype: "application/json"}, &out)
	return out, err
}

// ListGroups lists every group the brokers coordinate, sorted by id (GET
// /v1/groups). Retried on every retriable failure.
func (c *Client) ListGroups(ctx context.Context) ([]api.GroupSummary, error) {
	var out api.GroupList
	err := c.getJSON(ctx, "/v1/groups", nil, &out)
	return out.Groups, err
}

// DescribeGroup returns a group's state, members, committed offsets and lag
// (GET /v1/groups/{group}). Retried on every retriable failure. Errors:
// UNKNOWN_GROUP, INVALID_GROUP_ID.
func (c *Client) DescribeGroup(ctx context.Context, group string) (api.GroupDescription, error) {
	var out api.GroupDescription
	err := c.getJSON(ctx, groupPath(group), nil, &out)
	return out, err
}

// ResetOffsets sets the committed offsets of every partition of the topics
// (POST /v1/groups/{group}/offsets/reset). to is "earliest", "latest",
// "offset:N" or "timestamp:MS". Only for a group without members
// (GROUP_NOT_EMPTY otherwise). Retried on every retriable failure
// ("latest" is then resolved again, which only moves it forward).
func (c *Client) ResetOffsets(ctx context.Context, group string, req api.ResetOffsetsRequest) (api.CommitResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return api.CommitResponse{}, err
	}
	var out api.CommitResponse
	err = c.doJSON(ctx, &request{method: http.MethodPost, path: groupPath(group) + "/offsets/reset", body: body, ctype: "application/json"}, &out)
	return out, err
}

// DeleteGroup deletes a group without members and its offsets (DELETE
// /v1/groups/{group}). Retried on every retriable failure; UNKNOWN_GROUP
// after an attempt that may have been applied means that attempt deleted it, and is returned as
// success. Errors: GROUP_NOT_EMPTY, UNKNOWN_GROUP.
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	var maybe maybeApplied
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: groupPath(group), observe: maybe.observe})
	if bool(maybe) && errors.Is(err, &api.Error{Code: api.CodeUnknownGroup}) {
		return nil
	}
	return err
}

// maybeApplied records whether some attempt of a call failed in a way that
// leaves open whether it took effect: then a later "no such member" or "no
// such group" is that attempt's doing.
type maybeApplied bool

func (m *maybeApplied) observe(_ *response, err error) {
	if err != nil && IsRetriable(err) && !provesUnapplied(err) {
		*m = true
	}
}
