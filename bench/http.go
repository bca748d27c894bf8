package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/client"
)

// ndjsonBody builds one produce body: batch lines {"value":"xxx..."} whose
// stored value (the JSON string with its quotes) is exactly size bytes.
func ndjsonBody(batch, size int) []byte {
	var b bytes.Buffer
	val := strings.Repeat("x", size-2)
	for i := 0; i < batch; i++ {
		b.WriteString(`{"value":"`)
		b.WriteString(val)
		b.WriteString("\"}\n")
	}
	return b.Bytes()
}

// benchClient is an HTTP client of at most conns connections to a host,
// without compression: the load generator's.
func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// setupTimeout bounds each call a bench makes to prepare or inspect the
// cluster (topic metadata, creating a topic), so a gateway that stops
// answering fails the bench instead of hanging it.
const setupTimeout = time.Minute

// getJSON GETs url and decodes its JSON answer into out.
func getJSON(url string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return apihttp.ReadError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// ensureTopic creates topic unless it exists (then it is left as it is).
func ensureTopic(base, topic string, partitions, rf int, configs map[string]string) error {
	b, _ := json.Marshal(api.CreateTopicRequest{Name: topic, Partitions: partitions, ReplicationFactor: rf, Configs: configs})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/topics", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusConflict {
		return nil
	}
	return apihttp.ReadError(resp)
}

// newClient is a Go client of the gateway at base.
func newClient(base string) (*client.Client, error) {
	return client.New(base, client.WithUserAgent("sluice-bench"))
}
