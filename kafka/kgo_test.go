package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
	"github.com/sluice-io/sluice/recordbatch"
)

// kafkaCluster starts three brokers serving Kafka, with a topic of three
// partitions replicated to all of them.
func kafkaCluster(t *testing.T, topics ...api.CreateTopicRequest) (*embedtest.Cluster, *client.Client) {
	t.Helper()
	cl := embedtest.Start(t, embedtest.Options{Brokers: 3, Kafka: true})
	hc, err := client.New(cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tr := range topics {
		if _, err := hc.CreateTopic(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	return cl, hc
}

func seeds(cl *embedtest.Cluster) []string {
	var out []string
	for _, b := range cl.Brokers {
		out = append(out, b.KafkaAddr())
	}
	return out
}

func newKgo(t *testing.T, cl *embedtest.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	kc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds(cl)...), kgo.WithLogger(kgoLogger{t})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// kgoLogger sends franz-go's warnings and errors to the test log.
type kgoLogger struct{ t *testing.T }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (l kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	l.t.Logf("kgo %s: %s %v", level, msg, kv)
}

// franz-go reads the cluster as the brokers' view has it: every broker at
// its Kafka address, the controller, each partition's leader, epoch,
// replicas and ISR, and the topic's ID.
func TestKgoMetadata(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	kc := newKgo(t, cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("orders")
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 3 {
		t.Fatalf("%d brokers", len(resp.Brokers))
	}
	for i, b := range resp.Brokers {
		if want := cl.Brokers[i].KafkaAddr(); fmt.Sprintf("%s:%d", b.Host, b.Port) != want || b.NodeID != int32(i+1) {
			t.Fatalf("broker %d at %s:%d, want %d at %s", b.NodeID, b.Host, b.Port, i+1, want)
		}
	}
	if resp.ControllerID < 1 || resp.ControllerID > 3 {
		t.Fatalf("controller %d", resp.ControllerID)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || resp.Topics[0].TopicID == [16]byte{} {
		t.Fatalf("%+v", resp.Topics)
	}
	// Each partition as the HTTP API describes it.
	topic, err := hc.GetTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range resp.Topics[0].Partitions {
		hp := topic.Partitions[i]
		if p.ErrorCode != 0 || p.Partition != int32(i) || p.Leader != hp.Leader || p.LeaderEpoch != hp.LeaderEpoch ||
			!slices.Equal(p.Replicas, hp.Replicas) || !slices.Equal(p.ISR, hp.ISR) || len(p.ISR) != 3 || len(p.OfflineReplicas) != 0 {
			t.Fatalf("partition %d: Kafka %+v, HTTP %+v", i, p, hp)
		}
	}

	// The broker's metrics count the connection franz-go holds.
	testwait.Check(t, 10*time.Second, "sluice_broker_kafka_connections on a broker", func() error {
		for _, b := range cl.Brokers {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.Addr()+"/metrics", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(body), "\n") {
				if n, ok := strings.CutPrefix(line, "sluice_broker_kafka_connections "); ok && n != "0" {
					return nil
				}
			}
		}
		return errors.New("no broker counts an open Kafka connection")
	})

	// The unknown topic is not created by asking.
	rt.Topic = kmsg.StringPtr("never-created")
	req.Topics, req.AllowAutoTopicCreation = []kmsg.MetadataRequestTopic{rt}, true
	resp, err = req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	}
}

// An idempotent franz-go producer with acks=all writes records that the
// HTTP API reads back byte for byte: key, value, headers, timestamp, at
// the offsets the producer was told; and its batches carry its producer id.
func TestKgoProduceIdempotentAcksAll(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 3, ReplicationFactor: 3})
	kc := newKgo(t, cl, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	base := time.UnixMilli(1_700_000_000_000)
	var recs []*kgo.Record
	for i := range 60 {
		r := &kgo.Record{
			Topic: "orders", Partition: int32(i % 3),
			Value:     []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		}
		if i%4 != 0 {
			r.Key = []byte("key-" + strconv.Itoa(i))
		}
		if i%2 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("t-" + strconv.Itoa(i))}, {Key: "empty", Value: []byte{}}}
		}
		recs = append(recs, r)
	}
	if err := kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	for p := int32(0); p < 3; p++ {
		b, err := hc.FetchBatches(ctx, "orders", p, client.Earliest, client.FetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Records(0)
		if err != nil {
			t.Fatal(err)
		}
		var want []*kgo.Record
		for _, r := range recs {
			if r.Partition == p {
				want = append(want, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("partition %d: %d records over HTTP, %d produced", p, len(got), len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Offset != w.Offset || !bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil) || !bytes.Equal(g.Value, w.Value) || g.Timestamp != w.Timestamp.UnixMilli() {
				t.Fatalf("partition %d record %d: got offset %d key %q value %q ts %d; produced offset %d key %q value %q ts %d",
					p, i, g.Offset, g.Key, g.Value, g.Timestamp, w.Offset, w.Key, w.Value, w.Timestamp.UnixMilli())
			}
			if len(g.Headers) != len(w.Headers) {
				t.Fatalf("partition %d record %d: %d headers, want %d", p, i, len(g.Headers), len(w.Headers))
			}
			for j, h := range g.Headers {
				if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) || h.Value == nil {
					t.Fatalf("partition %d record %d header %d: %q=%q, want %q=%q", p, i, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
				}
			}
		}
		// The stored batches are the producer's: idempotent, with its id.
		_, err = recordbatch.Scan(b.Data, true, func(h recordbatch.Header, _ []byte) error {
			if h.ProducerID <= 0 || h.ProducerEpoch != 0 || h.BaseSequence < 0 {
				return fmt.Errorf("batch at %d: producer %d epoch %d sequence %d", h.BaseOffset, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// topicMetadata is a topic as the cluster's Kafka metadata has it.
func topicMetadata(t *testing.T, ctx context.Context, kc *kgo.Client, topic string) kmsg.MetadataResponseTopic {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("metadata of %s: %v", topic, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	}
	return resp.Topics[0]
}

// leaderOf is partition p's leader as the cluster's metadata has it.
func leaderOf(t *testing.T, ctx context.Context, kc *kgo.Client, topic string, p int32) (leader int32, epoch int32) {
	t.Helper()
	part := topicMetadata(t, ctx, kc, topic).Partitions[p]
	return part.Leader, part.LeaderEpoch
}

// produceRaw sends one partition's batch in a Produce request to broker id
// and returns the partition's answer. franz-go sends it at v13, naming the
// topic by its ID, with the acks kc was configured with: it overwrites a
// request's own.
func produceRaw(t *testing.T, ctx context.Context, kc *kgo.Client, broker int32, topic string, p int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.TimeoutMillis = 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicMetadata(t, ctx, kc, topic).TopicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, bytes.Clone(batch)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, kc.Broker(int(broker)))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// A batch sent again with the same producer id, epoch and sequence is
// answered with the offsets it was first written at and is not written
// twice: the same producer table the HTTP producers meet. A follower
// answers NOT_LEADER_OR_FOLLOWER and names the leader.
func TestKafkaProduceRetryGetsItsOriginalOffsets(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 3})
	kc := newKgo(t, cl) // acks=all
	kcLeader := newKgo(t, cl, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ipReq := kmsg.NewPtrInitProducerIDRequest()
	ip, err := ipReq.RequestWith(ctx, kc)
	if err != nil || ip.ErrorCode != 0 || ip.ProducerID <= 0 {
		t.Fatalf("InitProducerId: %+v %v", ip, err)
	}
	leader, epoch := leaderOf(t, ctx, kc, "orders", 0)

	encode := func(seq int32, values ...string) []byte {
		var recs []recordbatch.Record
		for _, v := range values {
			recs = append(recs, recordbatch.Record{Value: []byte(v), Timestamp: time.Now().UnixMilli()})
		}
		b, err := recordbatch.Encode(nil, recs, recordbatch.Options{ProducerID: ip.ProducerID, ProducerEpoch: ip.ProducerEpoch, BaseSequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first, second := encode(0, "a", "b"), encode(2, "c")
	for _, tt := range []struct {
		batch []byte
		want  int64
	}{{first, 0}, {second, 2}, {first, 0}, {second, 2}} {
		got := produceRaw(t, ctx, kc, leader, "orders", 0, tt.batch)
		if got.ErrorCode != 0 || got.BaseOffset != tt.want {
			t.Fatalf("base offset %d, %v; want %d", got.BaseOffset, kerr.ErrorForCode(got.ErrorCode), tt.want)
		}
	}
	// A gap in the sequence is refused.
	if got := produceRaw(t, ctx, kc, leader, "orders", 0, encode(9, "gap")); got.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("sequence gap: %v", kerr.ErrorForCode(got.ErrorCode))
	}
	b, err := hc.FetchBatches(ctx, "orders", 0, client.Earliest, client.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := b.Records(0)
	if err != nil || len(recs) != 3 || string(recs[2].Value) != "c" {
		t.Fatalf("%d records over HTTP, %v", len(recs), err)
	}

	follower := int32(1)
	for follower == leader {
		follower++
	}
	got := produceRaw(t, ctx, kcLeader, follower, "orders", 0, encode(3, "d"))
	if got.ErrorCode != kerr.NotLeaderForPartition.Code || got.CurrentLeader.LeaderID != leader || got.CurrentLeader.LeaderEpoch != epoch {
		t.Fatalf("at a follower: %v, leader %+v", kerr.ErrorForCode(got.ErrorCode), got.CurrentLeader)
	}
}

// Topic configs apply to Kafka producers: max.message.bytes bounds a
// batch, min.insync.replicas refuses acks=all below it and takes acks=1.
func TestKafkaProduceTopicLimits(t *testing.T) {
	cl, _ := kafkaCluster(t,
		api.CreateTopicRequest{Name: "small", Partitions: 1, ReplicationFactor: 3, Configs: map[string]string{api.ConfigMaxMessageBytes: "1000"}},
		api.CreateTopicRequest{Name: "strict", Partitions: 1, ReplicationFactor: 2, Configs: map[string]string{"min.insync.replicas": "2"}},
	)
	kc := newKgo(t, cl) // acks=all
	kcLeader := newKgo(t, cl, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	batch := func(n int) []byte {
		b, err := recordbatch.Encode(nil, []recordbatch.Record{{Value: bytes.Repeat([]byte("x"), n), Timestamp: time.Now().UnixMilli()}}, recordbatch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	leader, _ := leaderOf(t, ctx, kc, "small", 0)
	if got := produceRaw(t, ctx, kcLeader, leader, "small", 0, batch(2000)); got.ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("2000 bytes into max.message.bytes 1000: %v", kerr.ErrorForCode(got.ErrorCode))
	}
	if got := produceRaw(t, ctx, kcLeader, leader, "small", 0, batch(100)); got.ErrorCode != 0 {
		t.Fatalf("100 bytes: %v", kerr.ErrorForCode(got.ErrorCode))
	}

	// One of strict's two replicas stops: its ISR shrinks to the leader.
	strict := topicMetadata(t, ctx, kc, "strict").Partitions[0]
	leader = strict.Leader
	follower := strict.Replicas[0]
	if follower == leader {
		follower = strict.Replicas[1]
	}
	cl.StopBroker(int(follower))
	testwait.For(t, 30*time.Second, "the ISR to shrink to the leader", func() bool {
		return len(topicMetadata(t, ctx, kc, "strict").Partitions[0].ISR) == 1
	})
	// The metadata can name the smaller ISR a moment before the leader
	// applied it: a produce then is appended, and refused after the
	// append once the ISR shrinks under it. Once the leader holds the new
	// ISR, it refuses before appending.
	var appended int64
	for {
		got := produceRaw(t, ctx, kc, leader, "strict", 0, batch(10))
		if got.ErrorCode == kerr.NotEnoughReplicas.Code {
			break
		}
		if got.ErrorCode != kerr.NotEnoughReplicasAfterAppend.Code || ctx.Err() != nil {
			t.Fatalf("acks=all with 1 of min.insync.replicas 2: %v", kerr.ErrorForCode(got.ErrorCode))
		}
		appended++
	}
	if got := produceRaw(t, ctx, kcLeader, leader, "strict", 0, batch(10)); got.ErrorCode != 0 || got.BaseOffset != appended {
		t.Fatalf("acks=1: %v at %d, want offset %d", kerr.ErrorForCode(got.ErrorCode), got.BaseOffset, appended)
	}
}

// ListOffsets answers earliest, latest and by time from the partition's
// leader, as the HTTP offsets route does.
func TestKafkaListOffsets(t *testing.T) {
	cl, hc := kafkaCluster(t, api.CreateTopicRequest{Name: "orders", Partitions: 1, ReplicationFactor: 3})
	kc := newKgo(t, cl, kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "orders", Value: []byte{byte(i)}, Timestamp: start.Add(time.Duration(i) * time.Second)})
	}
	if err := kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, epoch := leaderOf(t, ctx, kc, "orders", 0)
	for _, tt := range []struct {
		ts   int64
		want int64
	}{
		{-2, 0},
		{-1, 10},
		{start.Add(4500 * time.Millisecond).UnixMilli(), 5},
		{start.Add(time.Hour).UnixMilli(), -1},
	} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 4
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "orders"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.CurrentLeaderEpoch = tt.ts, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.Offset != tt.want {
			t.Fatalf("timestamp %d: offset %d, %v; want %d", tt.ts, p.Offset, kerr.ErrorForCode(p.ErrorCode), tt.want)
		}
		if tt.want >= 0 && p.LeaderEpoch != epoch {
			t.Fatalf("timestamp %d: epoch %d, want %d", tt.ts, p.LeaderEpoch, epoch)
		}
	}
	// The same answers as the HTTP route's.
	off, err := hc.OffsetForTime(ctx, "orders", 0, start.Add(4500*time.Millisecond))
	if err != nil || off.Offset != 5 {
		t.Fatalf("HTTP: %+v %v", off, err)
	}
}

// franz-go's compressed batches are stored as compressed, with each codec,
// and read back over HTTP as produced.
func TestKgoProduceCodecs(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{
		"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	var topics []api.CreateTopicRequest
	for name := range codecs {
		topics = append(topics, api.CreateTopicRequest{Name: "codec-" + name, Partitions: 1, ReplicationFactor: 3})
	}
	cl, hc := kafkaCluster(t, topics...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			kc := newKgo(t, cl, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(codec))
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Topic: "codec-" + name, Key: []byte(strconv.Itoa(i)), Value: bytes.Repeat([]byte(name), 20+i)})
			}
			if err := kc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			b, err := hc.FetchBatches(ctx, "codec-"+name, 0, client.Earliest, client.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = recordbatch.Scan(b.Data, true, func(h recordbatch.Header, _ []byte) error {
				if c := h.Compression().String(); c != name {
					return fmt.Errorf("batch at %d stored %s, produced %s", h.BaseOffset, c, name)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Records(0)
			if err != nil || len(got) != len(recs) {
				t.Fatalf("%d records, %v", len(got), err)
			}
			for i, r := range got {
				if !bytes.Equal(r.Key, recs[i].Key) || !bytes.Equal(r.Value, recs[i].Value) {
					t.Fatalf("record %d: %q=%q", i, r.Key, r.Value)
				}
			}
		})
	}
}

// A broker that checks ACLs serves SASL_PLAINTEXT: an unauthenticated
// connection is answered ApiVersions, and a Metadata sent by hand over
// the raw TCP connection closes it unanswered.
func TestKafkaBeforeAuthenticationOnlyApiVersions(t *testing.T) {
	cl := embedtest.Start(t, embedtest.Options{Kafka: true, ClusterSecret: []byte("0123456789abcdef0123456789abcdef"),
		BrokerAuth: broker.AuthOptions{Required: true}})
	nc, err := net.Dial("tcp", cl.Brokers[0].KafkaAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	send := func(req kmsg.Request, corr int32) {
		b := binary.BigEndian.AppendUint32(nil, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
		b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
		b = binary.BigEndian.AppendUint32(b, uint32(corr))
		b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
		b = req.AppendTo(b)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	read := func() ([]byte, error) {
		var size [4]byte
		if _, err := io.ReadFull(nc, size[:]); err != nil {
			return nil, err
		}
		b := make([]byte, binary.BigEndian.Uint32(size[:]))
		_, err := io.ReadFull(nc, b)
		return b, err
	}
	av := kmsg.NewPtrApiVersionsRequest() // v0: no flexible header
	send(av, 1)
	b, err := read()
	if err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := resp.ReadFrom(b[4:]); err != nil || resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions before authentication: %+v %v", resp, err)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 4
	send(md, 2)
	if b, err := read(); err == nil {
		t.Fatalf("Metadata before authentication answered (%d bytes)", len(b))
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection stayed open")
	}
}
