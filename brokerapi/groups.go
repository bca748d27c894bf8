package brokerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// Group routes: served by the broker that leads the group's
// __consumer_offsets partition (its coordinator); any other broker answers
// NOT_COORDINATOR. {group} and {member} are path parameters.
const (
	PathGroups         = "/internal/v1/groups"
	PathGroup          = "/internal/v1/groups/{group}"
	PathGroupJoin      = "/internal/v1/groups/{group}/join"
	PathGroupMember    = "/internal/v1/groups/{group}/members/{member}"
	PathGroupHeartbeat = "/internal/v1/groups/{group}/members/{member}/heartbeat"
	PathGroupPoll      = "/internal/v1/groups/{group}/members/{member}/poll"
	PathGroupPositions = "/internal/v1/groups/{group}/members/{member}/positions"
	PathGroupCommit    = "/internal/v1/groups/{group}/offsets"
	PathGroupSetOffset = "/internal/v1/groups/{group}/offsets/set"
)

// GroupJoin is the internal join: the public request plus the member's kind.
type GroupJoin struct {
	api.JoinGroupRequest
	Kind string `json:"kind"`
}

// GroupPollRequest starts a poll; Cursor is the client's, when it sent one.
type GroupPollRequest struct {
	Cursor string `json:"cursor,omitempty"`
}

// GroupStart is where a poll reads one partition: Offset -1 means the group
// has no position and the reader resolves Reset (earliest, latest, none).
type GroupStart struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reset     string `json:"reset"`
	// Metadata is the committed offset's, when Offset is the committed one.
	Metadata string `json:"metadata,omitempty"`
}

// GroupPollPlan answers a poll start.
type GroupPollPlan struct {
	MemberEpoch      int32                `json:"member_epoch"`
	Assignment       []api.TopicPartition `json:"assignment"`
	Grants           []api.PartitionGrant `json:"grants"`
	Starts           []GroupStart         `json:"starts"`
	SessionTimeoutMs int64                `json:"session_timeout_ms"`
}

// GroupPositions reports where a poll ended.
type GroupPositions struct {
	Positions []api.PartitionOffset `json:"positions"`
}

// GroupSetOffsets writes offsets of an empty group; with Managed, of a
// push subscription's group, members or not (its seek: owned partitions
// are granted again, so their owners restart from the new offsets).
type GroupSetOffsets struct {
	Offsets []api.PartitionOffset `json:"offsets"`
	Managed bool                  `json:"managed,omitempty"`
}

func (c *Client) groupURL(addr, route, group, member string) string {
	p := strings.Replace(route, "{group}", url.PathEscape(group), 1)
	p = strings.Replace(p, "{member}", url.PathEscape(member), 1)
	return c.base(addr) + p
}

func (c *Client) groupCall(ctx context.Context, method, u string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequestWithContext(ctx, method, u, body)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, u, nil)
	}
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.doJSON(req, out)
}

// JoinGroup adds a member through the group's coordinator at addr.
func (c *Client) JoinGroup(ctx context.Context, addr, group string, j GroupJoin) (api.JoinGroupResponse, error) {
	var res api.JoinGroupResponse
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupJoin, group, ""), j, &res)
	return res, err
}

// Heartbeat renews a member's session and returns its assignment.
func (c *Client) Heartbeat(ctx context.Context, addr, group, member string) (api.HeartbeatResponse, error) {
	var res api.HeartbeatResponse
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupHeartbeat, group, member), struct{}{}, &res)
	return res, err
}

// StartPoll returns where a member's poll reads (and auto-commits when the
// member asked for it).
func (c *Client) StartPoll(ctx context.Context, addr, group, member, cursor string) (GroupPollPlan, error) {
	var res GroupPollPlan
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupPoll, group, member), GroupPollRequest{Cursor: cursor}, &res)
	return res, err
}

// EndPoll records where a member's poll ended.
func (c *Client) EndPoll(ctx context.Context, addr, group, member string, positions []api.PartitionOffset) error {
	return c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupPositions, group, member), GroupPositions{Positions: positions}, nil)
}

// LeaveGroup removes a member.
func (c *Client) LeaveGroup(ctx context.Context, addr, group, member string) error {
	return c.groupCall(ctx, http.MethodDelete, c.groupURL(addr, PathGroupMember, group, member), nil, nil)
}

// CommitOffsets commits a member's offsets (explicit, not a cursor).
func (c *Client) CommitOffsets(ctx context.Context, addr, group string, req api.CommitRequest) (api.CommitResponse, error) {
	var res api.CommitResponse
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupCommit, group, ""), req, &res)
	return res, err
}

// SetGroupOffsets writes the offsets of a group with no members.
func (c *Client) SetGroupOffsets(ctx context.Context, addr, group string, offs []api.PartitionOffset) (api.CommitResponse, error) {
	var res api.CommitResponse
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupSetOffset, group, ""), GroupSetOffsets{Offsets: offs}, &res)
	return res, err
}

// SeekManagedGroup writes the offsets of a push subscription's group,
// members or not.
func (c *Client) SeekManagedGroup(ctx context.Context, addr, group string, offs []api.PartitionOffset) (api.CommitResponse, error) {
	var res api.CommitResponse
	err := c.groupCall(ctx, http.MethodPost, c.groupURL(addr, PathGroupSetOffset, group, ""), GroupSetOffsets{Offsets: offs, Managed: true}, &res)
	return res, err
}

// DeleteManagedGroup deletes a push subscription's group with no members.
func (c *Client) DeleteManagedGroup(ctx context.Context, addr, group string) error {
	return c.groupCall(ctx, http.MethodDelete, c.groupURL(addr, PathGroup, group, "")+"?managed=true", nil, nil)
}

// DescribeGroup returns a group as its coordinator holds it (lag not filled).
func (c *Client) DescribeGroup(ctx context.Context, addr, group string) (api.GroupDescription, error) {
	var res api.GroupDescription
	err := c.groupCall(ctx, http.MethodGet, c.groupURL(addr, PathGroup, group, ""), nil, &res)
	return res, err
}

// DeleteGroup deletes a group with no members.
func (c *Client) DeleteGroup(ctx context.Context, addr, group string) error {
	return c.groupCall(ctx, http.MethodDelete, c.groupURL(addr, PathGroup, group, ""), nil, nil)
}

// ListGroups lists the groups a broker coordinates.
func (c *Client) ListGroups(ctx context.Context, addr string) (api.GroupList, error) {
	var res api.GroupList
	err := c.groupCall(ctx, http.MethodGet, c.base(addr)+PathGroups, nil, &res)
	return res, err
}
