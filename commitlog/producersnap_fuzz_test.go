package commitlog

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/recordbatch"
)

// FuzzDecodeProducerSnapshot: a producer snapshot comes from disk and from
// the leader (a follower that starts over at the leader's log start).
// Decoding never panics; a snapshot it accepts encodes to one it accepts
// again, equal, and survives the trip through the producer table.
func FuzzDecodeProducerSnapshot(f *testing.F) {
	// Real snapshots: producer tables as appends build them.
	var ps producerState
	for i, h := range []recordbatch.Header{
		{BaseOffset: 0, LastOffsetDelta: 2, ProducerID: 11, ProducerEpoch: 0, BaseSequence: 0, MaxTimestamp: 1_700_000_000_000},
		{BaseOffset: 3, LastOffsetDelta: 0, ProducerID: 12, ProducerEpoch: 3, BaseSequence: 0},
		{BaseOffset: 4, LastOffsetDelta: 4, ProducerID: 11, ProducerEpoch: 0, BaseSequence: 3, MaxTimestamp: 1_700_000_000_100},
		{BaseOffset: 9, LastOffsetDelta: 1, ProducerID: 12, ProducerEpoch: 4, BaseSequence: 0},
	} {
		ps.record(h)
		data, err := json.Marshal(snapshotOf(ps, h.LastOffset()+1))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, h.LastOffset()+1)
		if i == 0 {
			f.Add(data, int64(0)) // as of another offset
		}
	}
	for i := range producerBatches + 2 {
		ps.record(recordbatch.Header{BaseOffset: int64(11 + i), ProducerID: 13, BaseSequence: int32(i)})
	}
	data, err := json.Marshal(snapshotOf(ps, 11+producerBatches+2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, int64(11+producerBatches+2))
	f.Add([]byte(`{"offset":0,"producers":{}}`), int64(0))
	f.Add([]byte(`{"offset":100,"producers":{"4":{"epoch":0,"batches":[]}}}`), int64(100))
	f.Add([]byte(`{"offset":5,"producers":{"-1":{"epoch":0,"batches":[{"first_seq":0,"last_seq":0,"first_offset":0,"last_offset":0}]}}}`), int64(5))
	f.Add([]byte(`{"offset":`), int64(0))

	f.Fuzz(func(t *testing.T, data []byte, offset int64) {
		snap, err := decodeProducerSnapshot(data, offset)
		if err != nil {
			return
		}
		again, err := json.Marshal(snap)
		if err != nil {
			t.Fatalf("encoding an accepted snapshot: %v", err)
		}
		back, err := decodeProducerSnapshot(again, offset)
		if err != nil {
			t.Fatalf("the snapshot re-encoded is refused: %v\n%s", err, again)
		}
		if !equalSnapshots(snap, back) {
			t.Fatalf("decode(encode(s)) differs:\n%+v\n%+v", snap, back)
		}
		// Through the table and back, as a log loads and saves it.
		if table := snapshotOf(snap.state(), snap.Offset); !equalSnapshots(snap, table) {
			t.Fatalf("the producer table of a snapshot differs from it:\n%+v\n%+v", snap, table)
		}
	})
}

// equalSnapshots compares snapshots, a missing producer map equal to an
// empty one.
func equalSnapshots(a, b producerSnapshot) bool {
	if a.Offset != b.Offset || len(a.Producers) != len(b.Producers) {
		return false
	}
	for id, e := range a.Producers {
		if o, ok := b.Producers[id]; !ok || !reflect.DeepEqual(e, o) {
			return false
		}
	}
	return true
}
