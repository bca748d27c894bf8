package brokerapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
)

// Client calls brokers' internal APIs. It is safe for concurrent use and keeps
// connections to each broker alive across calls.
type Client struct {
	// HTTP carries produce requests: large bodies, so large write buffers.
	HTTP *http.Client
	// Reads carries everything else: fetches (long polls, many at once, each
	// holding its connection while it waits), offsets, groups, admin. Small
	// write buffers, since these requests have small bodies, keep an idle
	// long poll cheap.
	Reads *http.Client
	// Auth, when set, signs every request with the cluster secret (set it
	// before the first call).
	Auth *NodeAuth
	// scheme is that of addresses given without one: https after UseTLS.
	scheme string
	// OnThrottle, when set, is called with the request's context and the
	// throttle time of every THROTTLED answer (set it before the first
	// call); it must not block.
	OnThrottle func(ctx context.Context, d time.Duration)
}

// UseTLS makes the client call brokers over TLS with cfg (call it before
// the first call): an address given as host:port is then dialled with
// https. An address may also carry its scheme (a registration of a broker
// with TLS on its listener reads https://host:port), which wins.
func (c *Client) UseTLS(cfg *tls.Config) {
	c.scheme = "https"
	for _, hc := range []*http.Client{c.HTTP, c.Reads} {
		hc.Transport.(*http.Transport).TLSClientConfig = cfg
	}
}

// base is the URL of addr's root: addr itself when it carries a scheme,
// else the client's scheme (http unless UseTLS) and addr.
func (c *Client) base(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	if c.scheme == "" {
		return "http://" + addr
	}
	return c.scheme + "://" + addr
}

// NewClient returns a client with transports tuned for many concurrent calls
// to a handful of brokers on a fast network.
func NewClient() *Client {
	dial := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	produce := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		// A burst of produces leaves up to MaxIdleConnsPerHost idle
		// connections per broker, each with its buffers (over 256 KiB)
		// and two goroutines: they go after 30 s, not 90.
		IdleConnTimeout: 30 * time.Second,
		// Raw batches are already compressed where the producer asked for it.
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // produce waits for acks; ctx bounds it
		// Produce bodies are ~100 KiB batches: a large write buffer sends one
		// in a few syscalls instead of 4 KiB at a time.
		WriteBufferSize: 256 << 10,
		ReadBufferSize:  16 << 10,
	}
	reads := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // long polls set their own deadlines via ctx
		WriteBufferSize:       4 << 10,
		ReadBufferSize:        64 << 10,
	}
	return &Client{HTTP: &http.Client{Transport: produce}, Reads: &http.Client{Transport: reads}}
}

// Close drops idle connections.
func (c *Client) Close() {
	c.HTTP.CloseIdleConnections()
	c.Reads.CloseIdleConnections()
}

func (c *Client) expand(addr, route string, topic string, partition int32) string {
	p := strings.Replace(route, "{topic}", url.PathEscape(topic), 1)
	p = strings.Replace(p, "{partition}", strconv.Itoa(int(partition)), 1)
	return c.base(addr) + p
}

// prepare names the principal (auth.WithPrincipal) and the client id
// (WithClientID) of req's context in their headers and signs req when the
// client has the cluster secret.
func (c *Client) prepare(req *http.Request) {
	if p, ok := auth.PrincipalIn(req.Context()); ok {
		req.Header.Set(HeaderPrincipal, p)
	}
	if id := ClientIDFrom(req.Context()); id != "" {
		req.Header.Set(api.HeaderClientID, id)
	}
	if c.Auth != nil {
		c.Auth.Sign(req, time.Now())
	}
}

// do runs a request, naming the principal in its context (auth.WithPrincipal)
// in HeaderPrincipal, and classifies transport failures as BROKER_UNAVAILABLE
// (or the ctx's error) and non-2xx answers as the *api.Error they carry.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	hc := c.Reads
	if req.Method == http.MethodPost && req.Header.Get("Content-Type") == api.ContentTypeBatches {
		hc = c.HTTP
	}
	c.prepare(req)
	resp, err := hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w: %v", api.ErrRequestTimedOut, ctxErr)
		}
		// Keep the transport error in the chain: NotSent tells a dial failure
		// (safe to retry anything) from a failure after the request went out.
		return nil, fmt.Errorf("%w: %w", &api.Error{Code: api.CodeBrokerUnavailable}, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		e := apihttp.ReadError(resp)
		if e.Code == api.CodeThrottled && c.OnThrottle != nil {
			c.OnThrottle(req.Context(), e.Throttle)
		}
		return nil, e
	}
	return resp, nil
}

func (c *Client) doJSON(req *http.Request, out any) error {
	_, err := c.doJSONHeader(req, out)
	return err
}

// doJSONHeader is doJSON that also returns the answer's headers.
func (c *Client) doJSONHeader(req *http.Request, out any) (http.Header, error) {
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return resp.Header, decodeJSONBody(req, resp, out)
}

func decodeJSONBody(req *http.Request, resp *http.Response, out any) error {
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return api.Errorf(api.CodeBrokerUnavailable, "%s: bad answer: %v", req.URL.Host, err)
	}
	return nil
}

// NotSent reports whether err is a failure to connect, so the request never
// reached the broker and retrying it cannot duplicate anything.
func NotSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Produce sends raw batches for one partition. acks is "0", "1" or "all".
// leaderEpoch, when >= 0, is the epoch the sender believes the leader holds:
// a leader in another epoch refuses the batches (fencing a stale route).
func (c *Client) Produce(ctx context.Context, addr, topic string, partition int32, acks string, timeout time.Duration, leaderEpoch int32, batches []byte) (ProduceResult, error) {
	u := c.expand(addr, PathProduce, topic, partition) + "?acks=" + acks + "&timeout_ms=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(batches))
	if err != nil {
		return ProduceResult{}, err
	}
	req.Header.Set("Content-Type", api.ContentTypeBatches)
	if leaderEpoch >= 0 {
		req.Header.Set(api.HeaderLeaderEpoch, strconv.Itoa(int(leaderEpoch)))
	}
	var res ProduceResult
	h, err := c.doJSONHeader(req, &res)
	if err == nil {
		res.Throttle = apihttp.ThrottleOf(h)
	}
	return res, err
}

// FetchParams select what a fetch returns.
type FetchParams struct {
	Offset   int64
	MaxBytes int64
	MinBytes int64
	MaxWait  time.Duration
	// MaxRecords, when > 0, ends the answer with the batch that brings
	// the records from Offset to this many (batches are sent whole).
	MaxRecords int64
	// ReplicaID is set by followers (they read up to the log end, not the HW).
	ReplicaID int32
	// LeaderEpoch, when >= 0, fences the fetch against a stale leader.
	LeaderEpoch int32
}

// FetchResponse is a fetch's answer. Body holds Size bytes of whole batches and
// must be closed; the position headers are parsed into the other fields.
type FetchResponse struct {
	Body           io.ReadCloser
	Size           int64
	NextOffset     int64
	HighWatermark  int64
	LogStartOffset int64
	// Throttle is how long the caller should pause before its next fetch:
	// the answer left its fetch or request quota in debt (0: it did not).
	Throttle time.Duration
}

// Fetch reads raw batches. The caller relays or decodes Body and closes it.
func (c *Client) Fetch(ctx context.Context, addr, topic string, partition int32, p FetchParams) (*FetchResponse, error) {
	req, err := c.fetchRequest(ctx, addr, topic, partition, p)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	fr, err := fetchAnswer(addr, resp)
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	fr.Body = resp.Body
	return fr, nil
}

// fetchRequest is the GET of a fetch (unsigned).
func (c *Client) fetchRequest(ctx context.Context, addr, topic string, partition int32, p FetchParams) (*http.Request, error) {
	q := url.Values{}
	q.Set("offset", strconv.FormatInt(p.Offset, 10))
	if p.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(p.MaxBytes, 10))
	}
	if p.MinBytes > 0 {
		q.Set("min_bytes", strconv.FormatInt(p.MinBytes, 10))
	}
	q.Set("max_wait_ms", strconv.FormatInt(p.MaxWait.Milliseconds(), 10))
	if p.MaxRecords > 0 {
		q.Set("max_records", strconv.FormatInt(p.MaxRecords, 10))
	}
	if p.ReplicaID > 0 {
		q.Set("replica_id", strconv.Itoa(int(p.ReplicaID)))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.expand(addr, PathFetch, topic, partition)+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if p.LeaderEpoch >= 0 {
		req.Header.Set(api.HeaderLeaderEpoch, strconv.Itoa(int(p.LeaderEpoch)))
	}
	return req, nil
}

// fetchAnswer reads a fetch answer's size and positions (not its body).
func fetchAnswer(addr string, resp *http.Response) (*FetchResponse, error) {
	fr := &FetchResponse{Size: resp.ContentLength}
	var perr error
	parse := func(h string) int64 {
		n, err := strconv.ParseInt(resp.Header.Get(h), 10, 64)
		if err != nil {
			perr = errors.Join(perr, fmt.Errorf("header %s: %v", h, err))
		}
		return n
	}
	fr.NextOffset = parse(api.HeaderNextOffset)
	fr.HighWatermark = parse(api.HeaderHighWatermark)
	fr.LogStartOffset = parse(api.HeaderLogStartOffset)
	fr.Throttle = apihttp.ThrottleOf(resp.Header)
	if perr != nil || fr.Size < 0 {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "%s: bad fetch answer: %v", addr, perr)
	}
	return fr, nil
}

// ListOffsets resolves "earliest", "latest" or a timestamp (ms) to an offset.
func (c *Client) ListOffsets(ctx context.Context, addr, topic string, partition int32, spec string) (OffsetsResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.expand(addr, PathListOffsets, topic, partition)+"?at="+url.QueryEscape(spec), nil)
	if err != nil {
		return OffsetsResult{}, err
	}
	var res OffsetsResult
	err = c.doJSON(req, &res)
	return res, err
}

// EpochEnd asks the leader (in its leaderEpoch) where epoch ends in its log.
func (c *Client) EpochEnd(ctx context.Context, addr, topic string, partition, epoch, leaderEpoch int32) (EpochEndResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.expand(addr, PathEpochEnd, topic, partition)+"?epoch="+strconv.Itoa(int(epoch)), nil)
	if err != nil {
		return EpochEndResult{}, err
	}
	req.Header.Set(api.HeaderLeaderEpoch, strconv.Itoa(int(leaderEpoch)))
	var res EpochEndResult
	err = c.doJSON(req, &res)
	return res, err
}

// MaxProducerSnapshot bounds the producer snapshot a follower takes from its
// leader (a table of about 100 bytes per producer id: over half a million
// ids, whose expiry keeps far fewer).
const MaxProducerSnapshot = 64 << 20

// ProducerSnapshot asks the leader for its producer table as of offset (its
// log start, for a follower that starts over there). An answer with code
// NOT_FOUND means the leader has no snapshot there.
func (c *Client) ProducerSnapshot(ctx context.Context, addr, topic string, partition int32, offset int64, leaderEpoch int32) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.expand(addr, PathProducerSnapshot, topic, partition)+"?offset="+strconv.FormatInt(offset, 10), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(api.HeaderLeaderEpoch, strconv.Itoa(int(leaderEpoch)))
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxProducerSnapshot+1))
	if err != nil {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "%s: producer snapshot cut short: %v", addr, err)
	}
	if len(b) > MaxProducerSnapshot {
		return nil, api.Errorf(api.CodeBrokerUnavailable, "%s: producer snapshot larger than %d bytes", addr, MaxProducerSnapshot)
	}
	return b, nil
}

// TopicStatus asks a broker for the positions of the partitions it holds.
func (c *Client) TopicStatus(ctx context.Context, addr, topic string) (TopicStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.expand(addr, PathTopicStatus, topic, 0), nil)
	if err != nil {
		return TopicStatus{}, err
	}
	var res TopicStatus
	err = c.doJSON(req, &res)
	return res, err
}

// CreateTopic asks the controller to create a topic.
func (c *Client) CreateTopic(ctx context.Context, controller string, t api.CreateTopicRequest) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base(controller)+PathTopics, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.doJSON(req, nil)
}

// DeleteTopic asks the controller to delete a topic.
func (c *Client) DeleteTopic(ctx context.Context, controller, topic string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.expand(controller, PathTopic, topic, 0), nil)
	if err != nil {
		return err
	}
	return c.doJSON(req, nil)
}

// AlterTopicConfig asks the controller to apply an alteration to a topic's
// configs.
func (c *Client) AlterTopicConfig(ctx context.Context, controller, topic string, alter api.AlterTopicConfigRequest) error {
	b, err := json.Marshal(alter)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, c.expand(controller, PathTopicConfig, topic, 0), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.doJSON(req, nil)
}

// Health asks a broker whether it can serve.
func (c *Client) Health(ctx context.Context, addr string) (Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base(addr)+PathHealth, nil)
	if err != nil {
		return Health{}, err
	}
	var h Health
	err = c.doJSON(req, &h)
	return h, err
}

// Drain asks the broker at addr to hand its leaderships to other replicas
// before it is stopped (a controlled shutdown), waiting up to timeout.
func (c *Client) Drain(ctx context.Context, addr string, timeout time.Duration) (DrainResult, error) {
	u := c.base(addr) + PathDrain + "?timeout_ms=" + strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return DrainResult{}, err
	}
	var r DrainResult
	err = c.doJSON(req, &r)
	return r, err
}

// Stats asks a broker for its partition counts, sizes and traffic counters.
func (c *Client) Stats(ctx context.Context, addr string) (Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base(addr)+PathStats, nil)
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	err = c.doJSON(req, &s)
	return s, err
}
