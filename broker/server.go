package broker

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/api/apihttp"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/brokerapi"
	"github.com/sluice-io/sluice/quota"
)

// Bounds on fetch parameters.
const (
	defaultFetchMaxBytes = 1 << 20
	maxFetchMaxBytes     = 64 << 20
	maxFetchWait         = 30 * time.Second
	defaultProduceWait   = 30 * time.Second
)

// routes builds the internal API. No middleware wraps the ResponseWriter, so
// fetch responses reach the TCP connection through sendfile; the
// middlewares only defer a recover (recoverer), check the caller's
// signature (nodeAuth) and apply the request quota (throttleRequests).
func (b *Broker) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(b.recoverer, b.nodeAuth, b.throttleRequests)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		apihttp.WriteError(w, api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		apihttp.WriteError(w, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
	})
	// Each route maps to the check of the gateway route that calls it
	// (authz.go; a no-op unless Options.Auth.Required); routes whose
	// resource is in the body check in the handler.
	var (
		topic   = func(op auth.Operation) func(http.Handler) http.Handler { return b.check(op, auth.ResourceTopic) }
		cluster = func(op auth.Operation) func(http.Handler) http.Handler { return b.check(op, auth.ResourceCluster) }
	)
	r.With(topic(auth.OpWrite)).Post(brokerapi.PathProduce, b.handleProduce)
	r.With(topic(auth.OpRead)).Get(brokerapi.PathFetch, b.handleFetch) // replica fetches: the named broker only
	r.With(topic(auth.OpDescribe)).Get(brokerapi.PathListOffsets, b.handleListOffsets)
	r.With(b.brokersOnly).Post(brokerapi.PathReplicaFetch, b.handleReplicaFetch)         // and the named broker only (in the handler)
	r.With(b.brokersOnly).Post(brokerapi.PathReplicaFetchWake, b.handleReplicaFetchWake) // likewise
	r.With(b.brokersOnly).Get(brokerapi.PathEpochEnd, b.handleEpochEnd)
	r.Get(brokerapi.PathProducerSnapshot, b.handleProducerSnapshot) // brokers only (in the handler)
	r.With(topic(auth.OpDescribe)).Get(brokerapi.PathTopicStatus, b.handleTopicStatus)
	r.Post(brokerapi.PathTopics, b.handleCreateTopic) // CREATE on the cluster or the topic
	r.With(topic(auth.OpDelete)).Delete(brokerapi.PathTopic, b.handleDeleteTopic)
	r.With(topic(auth.OpAlterConfigs)).Patch(brokerapi.PathTopicConfig, b.handleAlterTopicConfig)
	r.With(topic(auth.OpAlter)).Post(brokerapi.PathTopicPartitions, b.handleCreatePartitions)
	r.Get(brokerapi.PathHealth, b.handleHealth) // any signed node
	r.With(cluster(auth.OpAlter)).Post(brokerapi.PathDrain, b.handleDrain)
	r.With(cluster(auth.OpAlter)).Post(brokerapi.PathStorageRecheck, b.handleStorageRecheck)
	r.With(cluster(auth.OpDescribe)).Get(brokerapi.PathStats, b.handleStats)
	b.groupRoutes(r)
	// Probes for process supervisors: alive, and able to serve.
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		apihttp.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", b.handleHealth)
	r.Method(http.MethodGet, "/metrics", b.metricsHandler())
	return r
}

// partitionFor resolves the {topic}/{partition} path parameters.
func (b *Broker) partitionFor(r *http.Request) (*Partition, error) {
	topic := chi.URLParam(r, "topic")
	n, err := strconv.ParseInt(chi.URLParam(r, "partition"), 10, 32)
	if err != nil {
		return nil, api.Errorf(api.CodeUnknownPartition, "partition %q is not a number", chi.URLParam(r, "partition"))
	}
	return b.parts.get(b.view.Current(), topic, int32(n))
}

func (b *Broker) handleProduce(w http.ResponseWriter, r *http.Request) {
	p, epoch, err := b.partitionAndEpoch(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	acks, err := ParseAcks(r.URL.Query().Get("acks"))
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	timeoutMs, err := apihttp.QueryInt(r.URL.Query(), "timeout_ms", defaultProduceWait.Milliseconds(), 0, 5*60*1000)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if r.ContentLength > b.opts.MaxRequestBytes {
		apihttp.WriteError(w, api.Errorf(api.CodeRequestTooLarge, "body of %d bytes exceeds %d", r.ContentLength, b.opts.MaxRequestBytes))
		return
	}
	bp, err := readBody(r, b.opts.MaxRequestBytes)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	// The log copies the batches into its file; the buffer is free after Produce.
	defer putBody(bp)
	body := *bp
	if err := b.admitProduce(r, len(body)); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	ctx, cancel := contextWithTimeout(r, time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	res, err := p.Produce(ctx, body, acks, epoch)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	b.traffic.produced(res.BaseOffset, res.LastOffset, len(body))
	b.markDebt(w.Header(), r, quota.Produce, quota.Request)
	apihttp.WriteJSON(w, http.StatusOK, res)
}

// bodyPool recycles produce bodies (~100 KiB batches each).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 128<<10); return &b }}

// Body buffer bounds. A declared Content-Length is believed up to
// maxBodyUpfront before a byte arrives; past that the buffer grows with the
// bytes that do arrive, so a client that declares 64 MiB and sends nothing
// holds 1 MiB, not 64. Buffers over maxPooledBody are not kept in the pool.
const (
	maxBodyUpfront = 1 << 20
	maxPooledBody  = 8 << 20
)

// putBody returns a body buffer from readBody to the pool.
func putBody(bp *[]byte) {
	if cap(*bp) > maxPooledBody {
		*bp = nil
	}
	bodyPool.Put(bp)
}

// readBody reads a whole request body of at most limit bytes into a pooled
// buffer; the caller puts it back with putBody.
func readBody(r *http.Request, limit int64) (*[]byte, error) {
	bp := bodyPool.Get().(*[]byte)
	buf := (*bp)[:0]
	if want := min(r.ContentLength, limit, maxBodyUpfront); want > int64(cap(buf)) {
		buf = make([]byte, 0, want)
	}
	lr := http.MaxBytesReader(nil, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			*bp = buf
			return bp, nil
		}
		if err != nil {
			*bp = buf[:0]
			putBody(bp)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, api.Errorf(api.CodeRequestTooLarge, "body exceeds %d bytes", limit)
			}
			return nil, api.Errorf(api.CodeInvalidRequest, "reading body: %v", err)
		}
	}
}

func (b *Broker) handleListOffsets(w http.ResponseWriter, r *http.Request) {
	p, err := b.partitionFor(r)
	if err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := p.checkLeader(-1); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	res := brokerapi.OffsetsResult{Positions: p.positions()}
	switch at := r.URL.Query().Get("at"); at {
	case "earliest":
		res.Offset = res.LogStartOffset
	case "latest", "":
		res.Offset = res.HighWatermark
	default:
		ts, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			apihttp.WriteError(w, api.Errorf(api.CodeInvalidOffset, "at=%q: want earliest, latest or a timestamp in ms", at))
			return
		}
		off, ok, err := b.offsetForTimestamp(r.Context(), p, ts)
		if err != nil {
			apihttp.WriteError(w, err)
			return
		}
		res.Offset = -1
		if ok {
			res.Offset = off
		}
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

func (b *Broker) handleTopicStatus(w http.ResponseWriter, r *http.Request) {
	topic := chi.URLParam(r, "topic")
	if _, ok := b.view.Current().Topics[topic]; !ok {
		apihttp.WriteError(w, api.Errorf(api.CodeUnknownTopic, "topic %q does not exist", topic))
		return
	}
	res := brokerapi.TopicStatus{Partitions: []brokerapi.PartitionStatus{}}
	for _, p := range b.parts.topicPartitions(topic) {
		res.Partitions = append(res.Partitions, p.Status())
	}
	apihttp.WriteJSON(w, http.StatusOK, res)
}

func (b *Broker) handleCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTopicRequest
	if err := apihttp.DecodeJSON(w, r, &req, 1<<20, internalJSON); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if !b.allowed(r.Context(), auth.OpCreate, auth.ResourceCluster, auth.ClusterName) {
		if err := b.authorize(r.Context(), auth.OpCreate, auth.ResourceTopic, req.Name); err != nil {
			apihttp.WriteError(w, err)
			return
		}
	}
	if err := b.ctl.createTopic(r.Context(), req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (b *Broker) handleDeleteTopic(w http.ResponseWriter, r *http.Request) {
	if err := b.ctl.deleteTopic(r.Context(), chi.URLParam(r, "topic")); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (b *Broker) handleAlterTopicConfig(w http.ResponseWriter, r *http.Request) {
	var req api.AlterTopicConfigRequest
	if err := apihttp.DecodeJSON(w, r, &req, 1<<20, internalJSON); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	if err := b.ctl.alterTopicConfig(r.Context(), chi.URLParam(r, "topic"), req); err != nil {
		apihttp.WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleStats answers PathStats: partition counts, sizes and traffic.
func (b *Broker) handleStats(w http.ResponseWriter, r *http.Request) {
	s := brokerapi.Stats{BrokerID: b.opts.ID, Controller: b.ctl.isActive(),
		ProducedRecords: b.traffic.producedRecords.Load(), ProducedBytes: b.traffic.producedBytes.Load(),
		FetchedRecords: b.traffic.fetchedRecords.Load(), FetchedBytes: b.traffic.fetchedBytes.Load()}
	for _, p := range b.parts.all() {
		s.Replicas++
		s.LocalBytes += p.localBytes()
		p.mu.Lock()
		leading := p.leaderLocked() == nil
		p.mu.Unlock()
		if leading {
			s.Leaders++
			s.RemoteBytes += max(0, p.remoteBytes())
		}
	}
	apihttp.WriteJSON(w, http.StatusOK, s)
}

func (b *Broker) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := brokerapi.Health{BrokerID: b.opts.ID, Ready: b.Ready(), Controller: b.ctl.isActive(), Storage: "ok"}
	parts := b.parts.all()
	for _, p := range parts {
		if p.log.Err() != nil {
			h.FailedPartitions = append(h.FailedPartitions, p.String())
		}
	}
	// Some failed logs: the broker serves the rest and the failed ones are
	// handed over, so it stays ready (taking it out would move what still
	// works). All of them: its disk is gone, and it is not ready.
	switch n := len(h.FailedPartitions); {
	case n > 0 && n == len(parts):
		h.Storage, h.Ready = "failed", false
	case n > 0:
		h.Storage = "degraded"
	}
	status := http.StatusOK
	if !h.Ready {
		status = http.StatusServiceUnavailable
	}
	apihttp.WriteJSON(w, status, h)
}
