package broker

import (
	"testing"

	"github.com/sluice-io/sluice/commitlog"
)

// OffsetForLeaderEpoch for a Kafka consumer: an epoch older than the
// lineage (its records deleted or tiered away) ends where the oldest known
// epoch starts, as Kafka answers, not -1/-1 (records lost, to franz-go).
func TestOlderEpochEnd(t *testing.T) {
	lineage := []commitlog.EpochEntry{{Epoch: 3, StartOffset: 100}, {Epoch: 5, StartOffset: 180}}
	for _, tt := range []struct {
		name     string
		lineage  []commitlog.EpochEntry
		asked, e int32
		end      int64
		wantE    int32
		wantEnd  int64
	}{
		{"older than the lineage", lineage, 1, -1, -1, 1, 100},
		{"epoch 0, deleted", lineage, 0, -1, -1, 0, 100},
		{"known epoch kept", lineage, 3, 3, 180, 3, 180},
		{"between epochs kept", lineage, 4, 3, 180, 3, 180},
		{"no lineage", nil, 2, -1, -1, -1, -1},
		{"no epoch asked", lineage, -1, -1, -1, -1, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if e, end := olderEpochEnd(tt.lineage, tt.asked, tt.e, tt.end); e != tt.wantE || end != tt.wantEnd {
				t.Fatalf("(%d, %d), want (%d, %d)", e, end, tt.wantE, tt.wantEnd)
			}
		})
	}
}
