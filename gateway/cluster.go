package gateway

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/cluster"
)

// brokerStatsTimeout bounds how long GET /v1/cluster waits for a broker's
// stats; a broker slower than this is shown with unknown (-1) sizes and
// counters rather than holding up the answer.
const brokerStatsTimeout = 2 * time.Second

// handleCluster is GET /v1/cluster: the brokers with their partition counts
// (from the metadata) and sizes and traffic counters (asked of each live
// broker at once), and the partitions counted by replication state.
// Registered brokers are alive; brokers named in assignments but not
// registered are listed as not alive.
func (g *Gateway) handleCluster(w http.ResponseWriter, r *http.Request) {
	md := g.view.Current()
	res := api.ClusterInfo{Brokers: []api.BrokerStatus{}, Controller: md.Controller.BrokerID, Version: g.opts.Version,
		Topics: len(md.Topics), Partitions: partitionHealth(md)}
	byID := map[int32]*api.BrokerStatus{}
	add := func(id int32, addr string, alive bool) *api.BrokerStatus {
		failed := md.Brokers[id].FailedLogs
		if failed == nil {
			failed = []api.FailedLog{}
		}
		res.Brokers = append(res.Brokers, api.BrokerStatus{ID: id, Address: addr, Alive: alive,
			Controller: id == md.Controller.BrokerID, FailedLogs: failed,
			LocalBytes: -1, RemoteBytes: -1, ProducedRecords: -1, ProducedBytes: -1, FetchedRecords: -1, FetchedBytes: -1})
		return &res.Brokers[len(res.Brokers)-1]
	}
	for _, id := range md.BrokerIDs() {
		add(id, md.Brokers[id].Address, true)
	}
	for _, tm := range md.Topics {
		for _, rs := range tm.Record.Replicas {
			for _, id := range rs {
				if _, ok := md.Brokers[id]; !ok && !containsBroker(res.Brokers, id) {
					add(id, "", false)
				}
			}
		}
	}
	sort.Slice(res.Brokers, func(i, j int) bool { return res.Brokers[i].ID < res.Brokers[j].ID })
	for i := range res.Brokers {
		byID[res.Brokers[i].ID] = &res.Brokers[i]
	}
	for _, tm := range md.Topics {
		for p, rs := range tm.Record.Replicas {
			for _, id := range rs {
				byID[id].Replicas++
			}
			if p < len(tm.States) {
				if b, ok := byID[tm.States[p].Leader]; ok && b.Alive {
					b.PartitionsLed++
				}
			}
		}
	}
	g.fillBrokerStats(r.Context(), md, byID)
	res.TimeMs = time.Now().UnixMilli()
	apihttp.WriteJSON(w, http.StatusOK, res)
}

func containsBroker(bs []api.BrokerStatus, id int32) bool {
	for _, b := range bs {
		if b.ID == id {
			return true
		}
	}
	return false
}

// fillBrokerStats asks every live broker for its sizes and counters at once.
func (g *Gateway) fillBrokerStats(ctx context.Context, md *cluster.Metadata, byID map[int32]*api.BrokerStatus) {
	ctx, cancel := context.WithTimeout(ctx, brokerStatsTimeout)
	defer cancel()
	var mu sync.Mutex // guards the BrokerStatus values in byID
	var wg sync.WaitGroup
	for id, reg := range md.Brokers {
		wg.Add(1)
		go func(id int32, addr string) {
			defer wg.Done()
			s, err := g.brokers.Stats(ctx, addr)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			b := byID[id]
			b.LocalBytes, b.RemoteBytes = s.LocalBytes, s.RemoteBytes
			b.ProducedRecords, b.ProducedBytes = s.ProducedRecords, s.ProducedBytes
			b.FetchedRecords, b.FetchedBytes = s.FetchedRecords, s.FetchedBytes
		}(id, reg.Address)
	}
	wg.Wait()
}

// partitionHealth counts partitions that are under-replicated, under their
// topic's min.insync.replicas, or without a live leader.
func partitionHealth(md *cluster.Metadata) api.PartitionHealth {
	var h api.PartitionHealth
	for _, tm := range md.Topics {
		rf := 0
		if len(tm.Record.Replicas) > 0 {
			rf = len(tm.Record.Replicas[0])
		}
		minISR := 1
		if cfg, err := api.ParseTopicConfig(tm.Record.Configs, rf); err == nil {
			minISR = cfg.MinInsyncReplicas
		}
		for p, rs := range tm.Record.Replicas {
			h.Total++
			if p >= len(tm.States) {
				h.Offline++
				continue
			}
			st := tm.States[p]
			if _, alive := md.Brokers[st.Leader]; st.Leader < 0 || !alive {
				h.Offline++
			}
			if len(st.ISR) < len(rs) {
				h.UnderReplicated++
			}
			if len(st.ISR) < minISR {
				h.UnderMinISR++
			}
		}
	}
	return h
}
