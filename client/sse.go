package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/api"
)

// Event is one Server-Sent Event.
type Event struct {
	ID    string // the cursor after it: give it to a reconnect
	Event string // "" for a record, "error" for the error that ended the stream
	Data  []byte
}

// Record decodes a record event's data.
func (e Event) Record() (api.GroupRecord, error) {
	var r api.GroupRecord
	err := json.Unmarshal(e.Data, &r)
	return r, err
}

// SSEStream reads one text/event-stream answer.
type SSEStream struct {
	resp *http.Response
	r    *bufio.Reader
	// LastID is the id of the last event read (what a reconnect sends).
	LastID string
}

// maxSSELine bounds one line of an event stream (a record of 1 MB,
// rendered, with room to spare).
const maxSSELine = 8 << 20

// PartitionSSE opens GET /v1/topics/{topic}/partitions/{partition}/sse:
// from offset (earliest, latest or a number) or, with lastEventID, right
// after the event of that id.
func (c *Client) PartitionSSE(ctx context.Context, topic string, partition int32, offset, lastEventID string) (*SSEStream, error) {
	q := url.Values{}
	if offset != "" {
		q.Set("offset", offset)
	}
	return c.openSSE(ctx, "/v1/topics/"+escape(topic)+"/partitions/"+strconv.Itoa(int(partition))+"/sse", q, lastEventID)
}

// TopicSSE opens GET /v1/topics/{topic}/sse: every partition, from offset
// (earliest or latest) or after the event lastEventID names.
func (c *Client) TopicSSE(ctx context.Context, topic, offset, lastEventID string) (*SSEStream, error) {
	q := url.Values{}
	if offset != "" {
		q.Set("offset", offset)
	}
	return c.openSSE(ctx, "/v1/topics/"+escape(topic)+"/sse", q, lastEventID)
}

func (c *Client) openSSE(ctx context.Context, path string, q url.Values, lastEventID string) (*SSEStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path, q), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if c.clientID != "" {
		req.Header.Set(api.HeaderClientID, c.clientID)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, decodeError(resp.StatusCode, resp.Header, body)
	}
	return &SSEStream{resp: resp, r: bufio.NewReaderSize(resp.Body, 64<<10), LastID: lastEventID}, nil
}

// Next returns the next event (comments and retry fields are skipped). An
// "error" event is returned as the *Error it carries.
func (s *SSEStream) Next() (Event, error) {
	var ev Event
	var data []string
	seen := false
	for {
		line, err := s.readLine()
		if err != nil {
			return ev, err
		}
		if line == "" {
			if !seen {
				continue
			}
			ev.Data = []byte(strings.Join(data, "\n"))
			if ev.Event == "error" {
				return ev, decodeError(0, nil, ev.Data)
			}
			if ev.ID != "" {
				s.LastID = ev.ID
			}
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID, seen = value, true
		case "event":
			ev.Event, seen = value, true
		case "data":
			data, seen = append(data, value), true
		}
	}
}

func (s *SSEStream) readLine() (string, error) {
	var sb strings.Builder
	for {
		chunk, isPrefix, err := s.r.ReadLine()
		if err != nil {
			return "", err
		}
		sb.Write(chunk)
		if sb.Len() > maxSSELine {
			return "", errors.New("sse: a line longer than 8 MiB")
		}
		if !isPrefix {
			return sb.String(), nil
		}
	}
}

// Close ends the stream.
func (s *SSEStream) Close() error { return s.resp.Body.Close() }

// ContentType is the answer's media type.
func (s *SSEStream) ContentType() string { return s.resp.Header.Get("Content-Type") }
