// Package push delivers records to HTTP endpoints: push subscriptions. A
// subscription's settings live in the coordinator (Store); each gateway
// runs a Pusher per active subscription, a static member of the
// subscription's managed group push.<name>, which delivers the partitions
// the group grants it and commits past a record only once the endpoint
// acknowledged it or it was written to the dead-letter topic.
//
// The package reaches the log only through the Cluster interface its host
// (the gateway) implements: group calls, fetches and acks=all produces.
package push

import (
	"bytes"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
)

// Defaults and bounds of a subscription's settings (api.PushConfig).
const (
	DefaultFormat          = api.PushFormatBinary
	DefaultType            = "sluice.record"
	DefaultOrdering        = api.PushOrderPartition
	DefaultMaxInFlight     = 16
	MaxMaxInFlight         = 1000
	DefaultTimeout         = 30 * time.Second
	MaxTimeout             = 15 * time.Minute
	DefaultMinBackoff      = time.Second
	DefaultMaxBackoff      = time.Minute
	MaxBackoffBound        = time.Hour
	DefaultMaxAttempts     = 10
	MaxMaxAttempts         = 1000
	DefaultRetryAfterMax   = 5 * time.Minute
	DefaultDisableAfter    = 72 * time.Hour
	DefaultBatchMaxBytes   = 1 << 20
	MaxBatchRecords        = 1000
	MaxBatchBytes          = 16 << 20
	MaxBatchWait           = time.Minute
	MaxEndpointLen         = 2048
	MaxTopicsPerPush       = 100
	DeadLetterSuffix       = ".dlt"
	DefaultRotationGrace   = 24 * time.Hour
	MaxRotationGrace       = 7 * 24 * time.Hour
	MaxSubscriptions       = 1000
	maxSubscriptionNameLen = 200
)

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ValidateName checks a subscription name: the group id rule, short enough
// that push.<name> and <name>.dlt are valid too.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > maxSubscriptionNameLen || !nameRE.MatchString(name) || name == "." || name == ".." {
		return api.Errorf(api.CodeInvalidRequest, "subscription name %q must match [a-zA-Z0-9._-]{1,%d}", name, maxSubscriptionNameLen)
	}
	return nil
}

// Group is the managed consumer group of subscription name.
func Group(name string) string { return api.PushGroupPrefix + name }

// Normalize checks a subscription's settings and fills every default, so a
// stored config states all it does. It checks the endpoint's form, not
// where it resolves (that is the gateway's guard, at create and at dial).
func Normalize(c api.PushConfig) (api.PushConfig, error) {
	bad := func(format string, args ...any) (api.PushConfig, error) {
		return c, api.Errorf(api.CodeInvalidRequest, format, args...)
	}
	if err := ValidateName(c.Name); err != nil {
		return c, err
	}
	if len(c.Topics) == 0 || len(c.Topics) > MaxTopicsPerPush {
		return bad("topics: want 1 to %d topic names", MaxTopicsPerPush)
	}
	topics := make([]string, 0, len(c.Topics))
	for _, t := range c.Topics {
		if err := api.ValidateTopicName(t); err != nil {
			return c, err
		}
		if strings.HasPrefix(t, "__") {
			return bad("topics: %q is internal", t)
		}
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	c.Topics = topics
	if err := checkEndpoint(c.Endpoint); err != nil {
		return c, err
	}
	if _, _, err := ParseStart(c.Start); err != nil {
		return c, err
	}
	if c.Start == "" {
		c.Start = api.ResetEarliest
	}
	switch c.Format {
	case "":
		c.Format = DefaultFormat
	case api.PushFormatBinary, api.PushFormatStructured, api.PushFormatJSON, api.PushFormatRaw:
	default:
		return bad("format %q: want binary, structured, json or raw", c.Format)
	}
	if c.Type == "" {
		c.Type = DefaultType
	}
	if len(c.Type) > 255 || !validHeaderValue(c.Type) {
		return bad("type: want at most 255 printable characters")
	}
	switch c.Ordering {
	case "":
		c.Ordering = DefaultOrdering
	case api.PushOrderPartition, api.PushOrderKey, api.PushOrderNone:
	default:
		return bad("ordering %q: want partition, key or none", c.Ordering)
	}
	switch {
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxMaxInFlight:
		return bad("max_in_flight=%d: want 1 to %d", c.MaxInFlight, MaxMaxInFlight)
	case c.Ordering == api.PushOrderPartition:
		c.MaxInFlight = 1
	case c.MaxInFlight == 0:
		c.MaxInFlight = DefaultMaxInFlight
	}
	b := &c.Batch
	switch {
	case b.MaxRecords < 0 || b.MaxRecords > MaxBatchRecords:
		return bad("batch.max_records=%d: want 1 to %d", b.MaxRecords, MaxBatchRecords)
	case b.MaxBytes < 0 || b.MaxBytes > MaxBatchBytes:
		return bad("batch.max_bytes=%d: want 1 to %d", b.MaxBytes, MaxBatchBytes)
	case b.MaxWaitMs < 0 || b.MaxWaitMs > MaxBatchWait.Milliseconds():
		return bad("batch.max_wait_ms=%d: want 0 to %d", b.MaxWaitMs, MaxBatchWait.Milliseconds())
	}
	if b.MaxRecords == 0 {
		b.MaxRecords = 1
	}
	if b.MaxBytes == 0 {
		b.MaxBytes = DefaultBatchMaxBytes
	}
	if b.MaxRecords > 1 && c.Format == api.PushFormatRaw {
		return bad("batch.max_records=%d: the raw format sends one record per request", b.MaxRecords)
	}
	if b.MaxRecords > 1 && c.Ordering == api.PushOrderKey {
		return bad("batch.max_records=%d: batches are sent with ordering partition or none", b.MaxRecords)
	}
	if c.TimeoutMs == 0 {
		c.TimeoutMs = DefaultTimeout.Milliseconds()
	}
	if c.TimeoutMs < 100 || c.TimeoutMs > MaxTimeout.Milliseconds() {
		return bad("timeout_ms=%d: want 100 to %d", c.TimeoutMs, MaxTimeout.Milliseconds())
	}
	r := &c.Retry
	if r.MinBackoffMs == 0 {
		r.MinBackoffMs = DefaultMinBackoff.Milliseconds()
	}
	if r.MaxBackoffMs == 0 {
		r.MaxBackoffMs = max(DefaultMaxBackoff.Milliseconds(), r.MinBackoffMs)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.RetryAfterMaxMs == 0 {
		r.RetryAfterMaxMs = DefaultRetryAfterMax.Milliseconds()
	}
	switch {
	case r.MinBackoffMs < 1 || r.MinBackoffMs > MaxBackoffBound.Milliseconds():
		return bad("retry.min_backoff_ms=%d: want 1 to %d", r.MinBackoffMs, MaxBackoffBound.Milliseconds())
	case r.MaxBackoffMs < r.MinBackoffMs || r.MaxBackoffMs > MaxBackoffBound.Milliseconds():
		return bad("retry.max_backoff_ms=%d: want min_backoff_ms to %d", r.MaxBackoffMs, MaxBackoffBound.Milliseconds())
	case r.MaxAttempts < 1 || r.MaxAttempts > MaxMaxAttempts:
		return bad("retry.max_attempts=%d: want 1 to %d", r.MaxAttempts, MaxMaxAttempts)
	case r.RetryAfterMaxMs < 1 || r.RetryAfterMaxMs > MaxBackoffBound.Milliseconds():
		return bad("retry.retry_after_max_ms=%d: want 1 to %d", r.RetryAfterMaxMs, MaxBackoffBound.Milliseconds())
	}
	if c.DeadLetter.Topic == "" {
		c.DeadLetter.Topic = c.Name + DeadLetterSuffix
	}
	if err := api.ValidateTopicName(c.DeadLetter.Topic); err != nil {
		return c, err
	}
	if slices.Contains(c.Topics, c.DeadLetter.Topic) {
		return bad("dead_letter.topic %q is one of the subscription's topics", c.DeadLetter.Topic)
	}
	if c.Rate.MaxPerSecond < 0 || c.Rate.MaxPerSecond > 1e6 {
		return bad("rate.max_per_second=%g: want 0 (unbounded) to 1000000", c.Rate.MaxPerSecond)
	}
	if c.Outage.DisableAfterMs == 0 {
		c.Outage.DisableAfterMs = DefaultDisableAfter.Milliseconds()
	}
	if c.Outage.DisableAfterMs < 1000 {
		return bad("outage.disable_after_ms=%d: want at least 1000", c.Outage.DisableAfterMs)
	}
	return c, nil
}

// Patch applies a PATCH body (any subset of the settings) to cur. The name
// and start are fixed at creation.
func Patch(cur api.PushConfig, body []byte) (api.PushConfig, error) {
	next := cur
	next.Topics = slices.Clone(cur.Topics)
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&next); err != nil {
		return cur, api.Errorf(api.CodeInvalidRequest, "bad JSON body: %v", err)
	}
	if d.More() {
		return cur, api.Errorf(api.CodeInvalidRequest, "bad JSON body: data after the object")
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields)
	if next.Name != cur.Name {
		return cur, api.Errorf(api.CodeInvalidRequest, "name is fixed at creation")
	}
	if next.Start != cur.Start {
		return cur, api.Errorf(api.CodeInvalidRequest, "start is used at creation only; seek instead (POST /v1/push/{name}/seek)")
	}
	if _, set := fields["max_in_flight"]; !set && next.Ordering != cur.Ordering && cur.Ordering == api.PushOrderPartition {
		next.MaxInFlight = 0 // partition's 1 was not asked for: the default
	}
	return Normalize(next)
}

func checkEndpoint(endpoint string) error {
	if endpoint == "" || len(endpoint) > MaxEndpointLen {
		return api.Errorf(api.CodeInvalidRequest, "endpoint: want an http or https URL of at most %d bytes", MaxEndpointLen)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return api.Errorf(api.CodeInvalidRequest, "endpoint: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return api.Errorf(api.CodeInvalidRequest, "endpoint %q: want an http or https URL", endpoint)
	case u.Host == "" || u.Hostname() == "":
		return api.Errorf(api.CodeInvalidRequest, "endpoint %q has no host", endpoint)
	case u.User != nil:
		return api.Errorf(api.CodeInvalidRequest, "endpoint %q carries credentials; the requests are signed instead", endpoint)
	case u.Fragment != "":
		return api.Errorf(api.CodeInvalidRequest, "endpoint %q has a fragment", endpoint)
	}
	return nil
}

// ParseStart reads a start or seek target: earliest, latest or
// timestamp:MS. The empty string is earliest.
func ParseStart(s string) (spec string, ts int64, err error) {
	switch {
	case s == "" || s == api.ResetEarliest:
		return api.ResetEarliest, 0, nil
	case s == api.ResetLatest:
		return api.ResetLatest, 0, nil
	case strings.HasPrefix(s, "timestamp:"):
		ts, err := strconv.ParseInt(strings.TrimPrefix(s, "timestamp:"), 10, 64)
		if err != nil || ts < 0 {
			return "", 0, api.Errorf(api.CodeInvalidRequest, "start %q: want timestamp:<unix ms>", s)
		}
		return "timestamp", ts, nil
	}
	return "", 0, api.Errorf(api.CodeInvalidRequest, "start %q: want earliest, latest or timestamp:<unix ms>", s)
}

// validHeaderValue: printable ASCII, no CR or LF.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
