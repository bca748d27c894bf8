package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/cluster"
)

// controllerAddr returns the current controller's internal address.
func (g *Gateway) controllerAddr() (string, error) {
	md := g.view.Current()
	if md.Controller.BrokerID < 0 {
		return "", api.Errorf(api.CodeNotController, "the cluster has no controller right now")
	}
	b, ok := md.Brokers[md.Controller.BrokerID]
	if !ok {
		return "", api.Errorf(api.CodeNotController, "controller %d is not registered", md.Controller.BrokerID)
	}
	return b.Address, nil
}

func retriableAdmin(err error) bool {
	code := api.Classify(err).Code
	return brokerapi.NotSent(err) || code == api.CodeNotController
}

// callController runs call against the current controller, following
// controller changes until ctx ends.
func (g *Gateway) callController(ctx context.Context, call func(addr string) error) error {
	_, err := retry(ctx, retriableAdmin, func() (struct{}, error) {
		addr, err := g.controllerAddr()
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, call(addr)
	})
	return err
}

// handleCreateTopic is POST /v1/topics. It answers once every partition's
// leader has opened its log, so a produce right after it succeeds.
func (g *Gateway) handleCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTopicRequest
	if err := decodeStrictJSON(w, r, &req, 1<<20, false); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := api.ValidateTopicName(req.Name); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if !g.allowed(r.Context(), auth.OpCreate, auth.ResourceCluster, auth.ClusterName) {
		if err := g.authorize(r.Context(), auth.OpCreate, auth.ResourceTopic, req.Name); err != nil {
			apihttp.WriteError(w, err)
			return
		}
	}
	if req.Partitions == 0 {
		req.Partitions = 1
	}
	if req.ReplicationFactor == 0 {
		req.ReplicationFactor = min(3, len(g.view.Current().Brokers))
	}
	if _, err := api.ParseTopicConfig(req.Configs, req.ReplicationFactor); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := g.callController(ctx, func(addr string) error { return g.brokers.CreateTopic(ctx, addr, req) })
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := g.view.Refresh(ctx); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	t, err := g.waitTopicReady(ctx, req.Name)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusCreated, t)
}

// waitTopicReady polls the leaders until each partition is open (bounded by 10 s;
// after that the topic is described as it is).
func (g *Gateway) waitTopicReady(ctx context.Context, name string) (api.Topic, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		t, err := g.describeTopic(ctx, name)
		if err != nil {
			return t, err
		}
		ready := true
		for _, p := range t.Partitions {
			if p.Offline || p.HighWatermark < 0 {
				ready = false
			}
		}
		if ready || ctx.Err() != nil {
			return t, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describeTopic combines the metadata with each leader's positions. Positions
// of partitions whose leader does not answer are -1.
func (g *Gateway) describeTopic(ctx context.Context, name string) (api.Topic, error) {
	md := g.view.Current()
	tm, ok := md.Topics[name]
	if !ok {
		return api.Topic{}, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	return g.describe(ctx, md, tm), nil
}

func (g *Gateway) describe(ctx context.Context, md *cluster.Metadata, tm *cluster.TopicMeta) api.Topic {
	t := api.Topic{Name: tm.Name, Configs: tm.Record.Configs, Partitions: make([]api.PartitionInfo, tm.Partitions())}
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	if len(tm.Record.Replicas) > 0 {
		t.ReplicationFactor = len(tm.Record.Replicas[0])
	}
	leaders := map[int32]bool{}
	for p := range t.Partitions {
		st := tm.States[p]
		_, alive := md.Brokers[st.Leader]
		t.Partitions[p] = api.PartitionInfo{
			Partition: int32(p), Leader: st.Leader, LeaderEpoch: st.LeaderEpoch,
			Replicas: nonNil(tm.Record.Replicas[p]), ISR: nonNil(st.ISR), Offline: st.Leader < 0 || !alive,
			OfflineReplicas: offlineReplicas(md, tm.Name, int32(p), tm.Record.Replicas[p]),
			LogStartOffset:  -1, LocalStartOffset: -1, RemoteEndOffset: -1, HighWatermark: -1, LogEndOffset: -1,
			LocalBytes: -1, RemoteBytes: -1, Followers: []api.FollowerPosition{},
		}
		if alive {
			leaders[st.Leader] = true
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id := range leaders {
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			ts, err := g.brokers.TopicStatus(ctx, addr, tm.Name)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ps := range ts.Partitions {
				if ps.Leader && int(ps.Partition) < len(t.Partitions) {
					pi := &t.Partitions[ps.Partition]
					pi.LogStartOffset, pi.HighWatermark, pi.LogEndOffset = ps.LogStartOffset, ps.HighWatermark, ps.LogEndOffset
					pi.LocalStartOffset, pi.RemoteEndOffset = ps.LocalStartOffset, ps.RemoteEndOffset
					pi.LocalBytes, pi.RemoteBytes = ps.LocalBytes, ps.RemoteBytes
					for _, f := range ps.Followers {
						pi.Followers = append(pi.Followers, api.FollowerPosition{Broker: f.Broker, LogEndOffset: f.LogEndOffset})
					}
				}
			}
		}(md.Brokers[id].Address)
	}
	wg.Wait()
	return t
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// handleGetTopic is GET /v1/topics/{topic}.
func (g *Gateway) handleGetTopic(w http.ResponseWriter, r *http.Request) {
	t, err := g.describeTopic(r.Context(), chi.URLParam(r, "topic"))
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, t)
}

// handleListTopics is GET /v1/topics.
func (g *Gateway) handleListTopics(w http.ResponseWriter, r *http.Request) {
	md := g.view.Current()
	res := api.TopicList{Topics: []api.Topic{}}
	for _, name := range md.TopicNames() {
		if !g.allowed(r.Context(), auth.OpDescribe, auth.ResourceTopic, name) {
			continue
		}
		res.Topics = append(res.Topics, g.describe(r.Context(), md, md.Topics[name]))
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// handleDeleteTopic is DELETE /v1/topics/{topic}.
func (g *Gateway) handleDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "topic")
	if _, ok := g.view.Current().Topics[name]; !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", name))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := g.callController(ctx, func(addr string) error { return g.brokers.DeleteTopic(ctx, addr, name) })
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	_ = g.view.Refresh(ctx)
	w.WriteHeader(http.StatusNoContent)
}

// offlineReplicas lists the replicas of a partition that cannot serve: on
// a broker that is not registered, or whose log the broker reports failed.
func offlineReplicas(md *cluster.Metadata, topic string, partition int32, replicas []int32) []api.OfflineReplica {
	out := []api.OfflineReplica{}
	for _, id := range replicas {
		reg, ok := md.Brokers[id]
		if !ok {
			out = append(out, api.OfflineReplica{Broker: id, Reason: api.ReasonBrokerDown})
			continue
		}
		if f, failed := reg.FailedLog(topic, partition); failed {
			out = append(out, api.OfflineReplica{Broker: id, Reason: f.Reason, Error: f.Error})
		}
	}
	return out
}
