package bench

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/embedded"
	"github.com/sluice-io/sluice/tier"
)

// clusterSpec says which cluster a scenario drives.
type clusterSpec struct {
	url       string      // a running gateway; empty starts a cluster
	brokers   int         // of a started cluster
	processes bool        // start it as processes of binary, through the ZooKeeper at zk
	zk        string      // host:port of that ZooKeeper
	binary    string      // the sluice binary; default: this process's executable
	bucket    tier.Bucket // the object store of an embedded cluster; nil: a local directory
	// remoteCache bounds an embedded broker's disk cache of remote
	// segments; 0: none.
	remoteCache int64
}

// benchCluster is the cluster a scenario drives, through the gateway at url.
type benchCluster struct {
	url      string
	embedded *embedded.Cluster // started in this process, else nil
	stop     func()            // stops what was started; nothing for a given url
}

// startCluster returns the cluster spec names: the given gateway, or one
// started for the run.
func startCluster(ctx context.Context, spec clusterSpec) (benchCluster, error) {
	switch {
	case spec.url != "":
		return benchCluster{url: spec.url, stop: func() {}}, nil
	case spec.processes:
		url, stop, err := startProcessCluster(ctx, spec.binary, spec.brokers, spec.zk)
		if err != nil {
			return benchCluster{}, err
		}
		return benchCluster{url: url, stop: stop}, nil
	}
	cl, err := startEmbedded(ctx, spec.brokers, spec.bucket, spec.remoteCache)
	if err != nil {
		return benchCluster{}, err
	}
	return benchCluster{url: cl.URL(), embedded: cl, stop: func() { _ = cl.Close() }}, nil
}

// warnLogger is the clusters' logger: warnings and errors on stderr.
func warnLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startEmbedded runs a cluster of n brokers in this process on a temporary
// directory, for benchmarking without a separate server. Tiered topics go
// to bucket, or to a local directory when it is nil; remoteCache bounds
// each broker's disk cache of them (0: none).
func startEmbedded(ctx context.Context, n int, bucket tier.Bucket, remoteCache int64) (*embedded.Cluster, error) {
	return embedded.Start(ctx, embedded.Options{Brokers: n, Bucket: bucket, LocalBucket: bucket == nil,
		Logger: warnLogger(),
		Broker: func(_ int, o *broker.Options) {
			o.TierInterval = 200 * time.Millisecond
			// A cache smaller than the data the cold bench reads, so that it
			// measures the object store and not memory.
			o.ColdRead = tier.ColdReaderOptions{CacheBytes: 8 << 20}
			o.RemoteCacheBytes = remoteCache
		}})
}
