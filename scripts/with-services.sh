#!/usr/bin/env bash
# Run a command with the real test services up, then stop them whatever happens.
#
#   scripts/with-services.sh go test -race ./...
#
# Installs what is missing, starts the services in a private state dir
# (<repo>/.services/run-<pid>, so a developer's `make services-up` set is left
# alone), exports the variables of its env file, runs the command, stops the
# services on exit, failure, Ctrl-C or SIGTERM, and exits with the command's status.
# SLUICE_TEST_SERVICES overrides the list (default: zookeeper redis versitygw chromium kcat kafkajs).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES_SH=$REPO/scripts/services.sh
read -r -a SERVICES <<<"${SLUICE_TEST_SERVICES:-zookeeper redis versitygw chromium kcat kafkajs}"

(($# > 0)) || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

# Leftovers of runs that were killed before they could clean up (SIGKILL):
# stop what they recorded, by PID, if the run that made them is gone.
for dir in "$REPO"/.services/run-*; do
	[[ -d $dir ]] || continue
	owner=${dir##*/run-}
	[[ $owner =~ ^[0-9]+$ ]] || continue
	stat=$(cat "/proc/$owner/stat" 2>/dev/null || true)
	stat=${stat##*) }
	[[ -z $stat || $stat == [ZX]* ]] || continue # the run is still going
	echo "with-services: cleaning up $dir, left by an earlier run" >&2
	SLUICE_SERVICES_DIR=$dir "$SERVICES_SH" stop || true
	rm -rf "$dir"
done

"$SERVICES_SH" install "${SERVICES[@]}"

export SLUICE_SERVICES_DIR=$REPO/.services/run-$$
# shellcheck disable=SC2317 # called by the EXIT trap
stop_services() {
	"$SERVICES_SH" stop || echo "with-services: warning: stopping the services failed" >&2
	rmdir "$REPO/.services" 2>/dev/null || true
}
trap stop_services EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

"$SERVICES_SH" start "${SERVICES[@]}"
# shellcheck source=/dev/null
source "$SLUICE_SERVICES_DIR/env"

set +e
"$@"
status=$?
set -e
exit "$status"
