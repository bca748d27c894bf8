package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/api"
)

// The cluster's state as the public API (the gateway) describes it.

// HTTP is the client for the public API; its requests time out in 15 s.
func (c *Cluster) HTTP() *http.Client { return c.http }

func (c *Cluster) getJSON(url string, out any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, out)
}

// ClusterInfo is GET /v1/cluster.
func (c *Cluster) ClusterInfo() (api.ClusterInfo, error) {
	var ci api.ClusterInfo
	err := c.getJSON(c.URL+"/v1/cluster", &ci, 5*time.Second)
	return ci, err
}

// Topic is GET /v1/topics/{name}.
func (c *Cluster) Topic(name string) (api.Topic, error) {
	var t api.Topic
	err := c.getJSON(c.URL+"/v1/topics/"+name, &t, 5*time.Second)
	return t, err
}

// Partition is one partition of GET /v1/topics/{name}.
func (c *Cluster) Partition(topic string, p int32) (api.PartitionInfo, error) {
	t, err := c.Topic(topic)
	if err != nil {
		return api.PartitionInfo{}, err
	}
	if int(p) >= len(t.Partitions) {
		return api.PartitionInfo{}, fmt.Errorf("topic %s has %d partitions", topic, len(t.Partitions))
	}
	return t.Partitions[p], nil
}

// CreateTopic is POST /v1/topics with replication factor rf and min.insync.replicas minISR.
func (c *Cluster) CreateTopic(name string, partitions, rf, minISR int) api.Topic {
	c.T.Helper()
	return c.CreateTopicConfigs(name, partitions, rf, map[string]string{"min.insync.replicas": strconv.Itoa(minISR)})
}

// CreateTopicConfigs is POST /v1/topics with any topic configs.
func (c *Cluster) CreateTopicConfigs(name string, partitions, rf int, configs map[string]string) api.Topic {
	c.T.Helper()
	body, _ := json.Marshal(api.CreateTopicRequest{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs})
	resp, err := c.http.Post(c.URL+"/v1/topics", "application/json", bytes.NewReader(body))
	if err != nil {
		c.T.Fatalf("create topic %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		c.T.Fatalf("create topic %s: %d %s", name, resp.StatusCode, b)
	}
	var t api.Topic
	if err := json.Unmarshal(b, &t); err != nil {
		c.T.Fatalf("create topic %s: %v", name, err)
	}
	c.Logf("created topic %s: %s", name, DescribePartitions(t))
	return t
}

// DescribePartitions renders a topic's partitions on one line.
func DescribePartitions(t api.Topic) string {
	var sb strings.Builder
	for i, p := range t.Partitions {
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "p%d leader %d epoch %d isr %v replicas %v hw %d leo %d", p.Partition, p.Leader, p.LeaderEpoch, p.ISR, p.Replicas, p.HighWatermark, p.LogEndOffset)
		if p.Offline {
			sb.WriteString(" OFFLINE")
		}
	}
	return sb.String()
}

// WaitLeader waits until partition p has a live leader for which ok holds
// and returns its description.
func (c *Cluster) WaitLeader(topic string, p int32, timeout time.Duration, ok func(api.PartitionInfo) bool) api.PartitionInfo {
	c.T.Helper()
	var last api.PartitionInfo
	c.WaitFor(fmt.Sprintf("a leader of %s-%d", topic, p), timeout, func() (bool, string) {
		pi, err := c.Partition(topic, p)
		if err != nil {
			return false, err.Error()
		}
		last = pi
		return !pi.Offline && pi.Leader > 0 && (ok == nil || ok(pi)), fmt.Sprintf("%+v", pi)
	})
	return last
}

// WaitFullISR waits until every partition of topic has a leader and all its
// replicas in the ISR, and (with settled) the leader's HW equal to its log
// end: a quiet, converged partition.
func (c *Cluster) WaitFullISR(topic string, timeout time.Duration, settled bool) api.Topic {
	c.T.Helper()
	var last api.Topic
	c.WaitFor(fmt.Sprintf("every replica of %s in the ISR", topic), timeout, func() (bool, string) {
		t, err := c.Topic(topic)
		if err != nil {
			return false, err.Error()
		}
		last = t
		for _, p := range t.Partitions {
			if p.Offline || len(p.ISR) != len(p.Replicas) || (settled && (p.HighWatermark < 0 || p.HighWatermark != p.LogEndOffset)) {
				return false, DescribePartitions(t)
			}
		}
		return true, ""
	})
	return last
}
