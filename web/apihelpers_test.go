package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/sluice-io/sluice/api"
)

// apiClient calls the gateway's public API for the dashboard test: to set
// up data, and to read the numbers the pages must show.
type apiClient struct {
	t     *testing.T
	base  string
	token string // sent as a bearer token when set
}

func (c apiClient) do(method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// must calls the API and fails the test unless it answers 2xx.
func (c apiClient) must(method, path string, body any, out any) {
	c.t.Helper()
	if st := c.do(method, path, body, out); st >= 300 {
		c.t.Fatalf("%s %s: HTTP %d", method, path, st)
	}
}

func (c apiClient) createTopic(name string, partitions int) {
	c.t.Helper()
	c.must(http.MethodPost, "/v1/topics", api.CreateTopicRequest{Name: name, Partitions: partitions}, nil)
}

func (c apiClient) produce(topic string, recs []api.ProduceRecord) []api.RecordOffset {
	c.t.Helper()
	var res api.ProduceResponse
	c.must(http.MethodPost, "/v1/topics/"+topic+"/records?acks=all", api.ProduceRequest{Records: recs}, &res)
	return res.Offsets
}

// produceRaw sends one binary value with Content-Type application/octet-stream.
func (c apiClient) produceRaw(topic string, partition int, key string, value []byte) {
	c.t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/v1/topics/%s/records?partition=%d&key=%s", c.base, topic, partition, key),
		"application/octet-stream", bytes.NewReader(value))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		c.t.Fatalf("raw produce: HTTP %d", resp.StatusCode)
	}
}

func (c apiClient) topic(name string) api.Topic {
	c.t.Helper()
	var t api.Topic
	c.must(http.MethodGet, "/v1/topics/"+name, nil, &t)
	return t
}

func (c apiClient) cluster() api.ClusterInfo {
	c.t.Helper()
	var ci api.ClusterInfo
	c.must(http.MethodGet, "/v1/cluster", nil, &ci)
	return ci
}

func (c apiClient) group(name string) api.GroupDescription {
	c.t.Helper()
	var d api.GroupDescription
	c.must(http.MethodGet, "/v1/groups/"+name, nil, &d)
	return d
}
