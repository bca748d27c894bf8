package push

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/recordbatch"
)

// Cluster is what a pusher needs of the gateway it runs in. Every method
// retries what is safe to retry until ctx ends, and returns the api.Error
// of the answer that ended it otherwise.
type Cluster interface {
	// Join joins group as a pusher (member kind push).
	Join(ctx context.Context, group string, req api.JoinGroupRequest) (api.JoinGroupResponse, error)
	// Heartbeat renews the member's session; the answer holds its grants.
	Heartbeat(ctx context.Context, group, member string) (api.HeartbeatResponse, error)
	// Starts is where each partition the member owns begins: the committed
	// offset with its metadata, or, without one, the log start.
	Starts(ctx context.Context, group, member string) ([]Start, error)
	// Commit commits offsets (with metadata) for the member.
	Commit(ctx context.Context, group string, req api.CommitRequest) error
	// Leave takes the member out of the group.
	Leave(ctx context.Context, group, member string) error
	// Fetch reads records of tp at offset or after it, waiting up to wait
	// for some, and returns them and the offset after them.
	// api.ErrOffsetOutOfRange when offset fell out of the log.
	Fetch(ctx context.Context, tp api.TopicPartition, offset int64, maxBytes int64, wait time.Duration) ([]recordbatch.Record, int64, error)
	// Resolve finds earliest, latest (the high watermark) or the first
	// offset at or after timestamp:MS in tp.
	Resolve(ctx context.Context, tp api.TopicPartition, spec string) (int64, error)
	// Produce appends one record to topic, partitioned by its key, with
	// acks=all.
	Produce(ctx context.Context, topic string, rec recordbatch.Record) error
	// Render is the record as the fetch API renders it.
	Render(rec *recordbatch.Record) api.FetchedRecord
	// Partitions is the partition count of topic (false: no such topic).
	Partitions(topic string) (int, bool)
}

// Start is where a pusher begins one partition.
type Start struct {
	api.TopicPartition
	Offset   int64
	Metadata string
}

// attempts is the commit metadata of a partition: the attempts counted
// against records at or after the committed offset that are not yet
// delivered, so a new owner continues the count.
//
//	{"v":1,"r":[[offset, attempts, first_attempt_unix_ms], ...]}
type attempts struct {
	V int        `json:"v"`
	R [][3]int64 `json:"r"`
}

// attemptState is one record's retry history.
type attemptState struct {
	attempts int
	firstMs  int64
}

// maxAttemptEntries keeps the metadata under api.MaxCommitMetadataBytes
// (an entry is at most about 50 bytes).
const maxAttemptEntries = 64

func encodeAttempts(m map[int64]attemptState) string {
	if len(m) == 0 {
		return ""
	}
	offs := make([]int64, 0, len(m))
	for o := range m {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	if len(offs) > maxAttemptEntries {
		offs = offs[:maxAttemptEntries] // the lowest: the head is what blocks
	}
	a := attempts{V: 1}
	for _, o := range offs {
		a.R = append(a.R, [3]int64{o, int64(m[o].attempts), m[o].firstMs})
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// decodeAttempts reads commit metadata; anything unreadable is no history.
func decodeAttempts(s string) map[int64]attemptState {
	out := map[int64]attemptState{}
	var a attempts
	if s == "" || json.Unmarshal([]byte(s), &a) != nil || a.V != 1 {
		return out
	}
	for _, r := range a.R {
		if r[1] > 0 {
			out[r[0]] = attemptState{attempts: int(r[1]), firstMs: r[2]}
		}
	}
	return out
}

// HeadAttempts is the attempts a partition's commit metadata counts
// against the record at the committed offset.
func HeadAttempts(metadata string, committed int64) int {
	return decodeAttempts(metadata)[committed].attempts
}
