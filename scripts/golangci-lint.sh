#!/usr/bin/env bash
# golangci-lint at the version the project pins, built from the Go module proxy
# on first use and cached; then run with the given arguments.
#
#   scripts/golangci-lint.sh run ./...     # what `make lint` does
#   scripts/golangci-lint.sh install       # only build it (if missing); print its path
#
# The binary lives in $SLUICE_CACHE_DIR/bin (default
# ${XDG_CACHE_HOME:-~/.cache}/sluice/bin), next to the test services' tools, and
# is checked with `go version -m` so that a binary of another version is rebuilt.
set -euo pipefail

CACHE_DIR=${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/sluice}
BIN_DIR=$CACHE_DIR/bin

GOLANGCI_MODULE=github.com/golangci/golangci-lint/v2
GOLANGCI_VERSION=v2.15.0
GOLANGCI_BIN=$BIN_DIR/golangci-lint

log() { printf 'golangci-lint.sh: %s\n' "$*" >&2; }
die() { printf 'golangci-lint.sh: error: %s\n' "$*" >&2; exit 1; }

# Run a command up to 3 times, 5 s apart (the module proxy has bad moments).
retry() {
	local i
	for i in 1 2 3; do
		"$@" && return 0
		((i < 3)) || break
		log "failed (attempt $i of 3), retrying in 5s: $*"
		sleep 5
	done
	return 1
}

installed_ok() {
	[[ -x $GOLANGCI_BIN ]] || return 1
	go version -m "$GOLANGCI_BIN" 2>/dev/null |
		awk -v m="$GOLANGCI_MODULE" -v v="$GOLANGCI_VERSION" \
			'$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

install() {
	if installed_ok; then return 0; fi
	command -v go >/dev/null || die "go not found: needed to build golangci-lint"
	mkdir -p "$BIN_DIR"
	local tmp
	tmp=$(mktemp -d "$BIN_DIR/.install.XXXXXX")
	log "go install $GOLANGCI_MODULE/cmd/golangci-lint@$GOLANGCI_VERSION (a few minutes on a cold module cache)"
	# Outside the repo, so that its go.mod and any GOFLAGS=-mod=... play no part.
	if ! (cd / && GOFLAGS="" GOBIN=$tmp retry go install "$GOLANGCI_MODULE/cmd/golangci-lint@$GOLANGCI_VERSION") >&2; then
		rm -rf "$tmp"
		die "building golangci-lint failed"
	fi
	mv -f "$tmp/golangci-lint" "$GOLANGCI_BIN" # atomic: a concurrent run sees old or new
	rm -rf "$tmp"
	installed_ok || die "$GOLANGCI_BIN does not report $GOLANGCI_VERSION"
}

install
if [[ ${1:-} == install ]]; then
	echo "$GOLANGCI_BIN"
	exit 0
fi
exec "$GOLANGCI_BIN" "$@"
