package broker

import (
	"slices"
	"sync"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/offsets"
)

// topicNames is the cluster's topic names as the group coordinators
// resolve subscriptions by regular expression against them: listed again
// once per published metadata snapshot (a snapshot changes for partition
// states too), and given a new version only when a name came or went, so
// a group resolves its expressions again only then.
type topicNames struct {
	mu  sync.Mutex        // guards md and set
	md  *cluster.Metadata // the snapshot set was listed from
	set offsets.TopicSet  // its Names are never modified once published
}

// current returns the topic set of md.
func (t *topicNames) current(md *cluster.Metadata) offsets.TopicSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	if md == t.md {
		return t.set
	}
	t.md = md
	if names := md.TopicNames(); !slices.Equal(names, t.set.Names) {
		t.set = offsets.TopicSet{Version: t.set.Version + 1, Names: names}
	}
	return t.set
}
