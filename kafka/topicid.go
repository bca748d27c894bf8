package kafka

import (
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/cluster"
)

// Topic IDs. Kafka names a topic by a 16-byte UUID as well as by name
// (Metadata v10+, Produce v13+, Fetch v13+), and franz-go resends a request
// whose answer lacks it. A Sluice topic record already carries an ID that
// tells the topic from an earlier one of the same name: 16 random bytes in
// hex, written once at creation. That is the Kafka topic ID, as it is; an
// ID in any other form (none is written so) is hashed to 16 bytes, so
// every topic has a stable one.

// topicID is the Kafka topic ID of a topic record.
func topicID(rec api.TopicRecord) [16]byte {
	var id [16]byte
	if b, err := hex.DecodeString(rec.ID); err == nil && len(b) == len(id) {
		copy(id[:], b)
		return id
	}
	sum := sha256.Sum256([]byte(rec.ID))
	copy(id[:], sum[:])
	return id
}

// topicIDIndex maps topic IDs to names for one metadata snapshot.
type topicIDIndex struct {
	md    *cluster.Metadata
	names map[[16]byte]string
}

// topicIDs caches the index of the latest snapshot asked about.
type topicIDs struct{ cur atomic.Pointer[topicIDIndex] }

// name returns the topic of id in md.
func (t *topicIDs) name(md *cluster.Metadata, id [16]byte) (string, bool) {
	idx := t.cur.Load()
	if idx == nil || idx.md != md {
		idx = &topicIDIndex{md: md, names: make(map[[16]byte]string, len(md.Topics))}
		for name, tm := range md.Topics {
			idx.names[topicID(tm.Record)] = name
		}
		t.cur.Store(idx)
	}
	name, ok := idx.names[id]
	return name, ok
}
