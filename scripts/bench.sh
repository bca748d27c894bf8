#!/usr/bin/env bash
# Every `sluice bench` scenario, each against its baseline measured in the
# same command (alternating rounds, medians), each appending its row to the
# Markdown table in $BENCH_RESULTS. Run by `make bench` under
# scripts/with-services.sh (ZooKeeper, Redis and versitygw up, their
# SLUICE_TEST_* variables set); bin/sluice must be built.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLUICE=$REPO/bin/sluice
RESULTS=${BENCH_RESULTS:?set BENCH_RESULTS to the Markdown file to append to}
: "${SLUICE_TEST_ZK:?needs ZooKeeper (scripts/with-services.sh)}" "${SLUICE_TEST_REDIS:?needs Redis}" "${SLUICE_TEST_S3_ENDPOINT:?needs versitygw}"

step() { echo; echo "== $*"; }

step 'produce through the gateway vs a plain append-to-file HTTP server (acks=1, RF=1)'
"$SLUICE" bench produce --results "$RESULTS"

step 'acks=all on RF=3 vs acks=1 on RF=1, three brokers in one process'
"$SLUICE" bench produce --brokers 3 --replication-factor 3 --acks all --baseline rf1 --results "$RESULTS"

step 'acks=all on RF=3 vs acks=1 on RF=1, three `sluice broker` processes + a gateway + ZooKeeper'
"$SLUICE" bench produce --brokers 3 --processes --replication-factor 3 --acks all --baseline rf1 --results "$RESULTS"

step 'end-to-end latency, produce acks=all RF=3 → WebSocket consumers, at 1,000 and 50,000 records/s (processes + ZooKeeper)'
"$SLUICE" bench e2e --processes --results "$RESULTS"

step 'raw /batches consume through the gateway vs a plain sendfile HTTP server on the same segment files'
"$SLUICE" bench consume --raw --baseline sendfile --records 100000 --size 1000 --results "$RESULTS"

step 'JSON /records consume vs Redis XREAD COUNT 1000 of the same records'
"$SLUICE" bench consume --baseline redis --records 200000 --results "$RESULTS"

step 'raw consume from offset 0: all in the object store (versitygw) vs local disk'
SLUICE_S3_SECRET_KEY=$SLUICE_TEST_S3_SECRET_KEY "$SLUICE" bench consume --cold --raw \
	--s3-endpoint "$SLUICE_TEST_S3_ENDPOINT" --s3-bucket "$SLUICE_TEST_S3_BUCKET" \
	--s3-access-key "$SLUICE_TEST_S3_ACCESS_KEY" --s3-prefix "bench-cold-$$" --results "$RESULTS"

step 'consume through a consumer group (cursors, commits beside the polls) vs plain partition fetches, RF=3'
"$SLUICE" bench consume --group --brokers 3 --replication-factor 3 --records 200000 --rounds 5 --results "$RESULTS"

step 'push subscriptions to an endpoint process (one record a request vs plain POSTs of the same bodies; batches of 100, 500, 1,000 vs group polls of the same records); delivery latency at 1,000 records/s'
"$SLUICE" bench push --results "$RESULTS"

step 'Kafka clients: franz-go through the Kafka listener vs the Go client through the gateway (produce), vs raw /batches (consume); acks=1 RF 1 and acks=all RF 3'
"$SLUICE" bench kafka --brokers 1 --replication-factor 1 --acks 1 --results "$RESULTS"
"$SLUICE" bench kafka --results "$RESULTS"

step 'idle WebSocket streams with credit on empty partitions: RSS of a `sluice dev` process from outside, 2,000 and 10,000 streams'
# 10,000 streams are 10,000 descriptors in the gateway and as many in the client.
ulimit -n "$(ulimit -Hn)"
"$SLUICE" bench ws --dev --connections 2000 --credit 100 --hold 10s --results "$RESULTS"
"$SLUICE" bench ws --dev --connections 10000 --credit 100 --hold 10s --results "$RESULTS"

step 'sinks: Redis vs XADD pipelines of the same depth (and redis-benchmark); S3 (gzipped, then uncompressed objects) vs plain PUTs of the same objects'
"$SLUICE" bench sink redis --redis "redis://$SLUICE_TEST_REDIS/0" --results "$RESULTS"
SLUICE_S3_SECRET_KEY=$SLUICE_TEST_S3_SECRET_KEY "$SLUICE" bench sink s3 --size 1000 --records 100000 --max-records 5000 \
	--s3-endpoint "$SLUICE_TEST_S3_ENDPOINT" --s3-bucket "$SLUICE_TEST_S3_BUCKET" \
	--s3-access-key "$SLUICE_TEST_S3_ACCESS_KEY" --s3-prefix "bench-sink-$$" --results "$RESULTS"
SLUICE_S3_SECRET_KEY=$SLUICE_TEST_S3_SECRET_KEY "$SLUICE" bench sink s3 --size 1000 --records 100000 --max-records 5000 --compression none \
	--s3-endpoint "$SLUICE_TEST_S3_ENDPOINT" --s3-bucket "$SLUICE_TEST_S3_BUCKET" \
	--s3-access-key "$SLUICE_TEST_S3_ACCESS_KEY" --s3-prefix "bench-sink-none-$$" --results "$RESULTS"
