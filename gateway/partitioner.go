package gateway

import (
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
)

// stickyPartitioner picks one partition for all keyless records of a request,
// moving round-robin from request to request (Kafka's sticky partitioner
// sticks per batch; a request is the gateway's batch).
type stickyPartitioner struct {
	next atomic.Uint64
}

func (s *stickyPartitioner) pick(n int) int32 {
	return int32((s.next.Add(1) - 1) % uint64(n))
}

// assignPartitions fills in each record's partition: an explicit one wins (it
// must exist), then murmur2 of the key as Kafka's default partitioner does,
// then the request's sticky partition.
func (g *Gateway) assignPartitions(topic string, recs []pendingRecord, n int) error {
	sticky := int32(-1)
	for i := range recs {
		r := &recs[i]
		switch {
		case r.partition >= 0:
			if int(r.partition) >= n {
				return api.Errorf(api.CodeUnknownPartition, "record %d: topic %q has no partition %d (it has %d)", i, topic, r.partition, n)
			}
		case r.key != nil:
			r.partition = int32(api.KeyPartition(r.key, n))
		default:
			if sticky < 0 {
				sticky = g.sticky.pick(n)
			}
			r.partition = sticky
		}
	}
	return nil
}
