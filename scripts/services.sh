#!/usr/bin/env bash
# Real services for Sluice's tests: ZooKeeper, Redis, an S3 server (versitygw),
# headless Chromium and two Kafka clients (kcat; kafkajs, run by Node). Used by
# `make test`, `.ci/run` and developers.
#
#   scripts/services.sh install [zookeeper redis versitygw chromium kcat kafkajs]
#   scripts/services.sh start   [zookeeper redis versitygw chromium kcat kafkajs]
#   scripts/services.sh stop
#   scripts/services.sh status
#   scripts/services.sh up      [names...]   # install, then start
#
# With no names, every service is meant. Every server listens on 127.0.0.1 only,
# on a free port picked at start. State (PIDs, data, logs) lives in the state dir,
# $SLUICE_SERVICES_DIR (default: <repo>/.services); `start` writes <state>/env,
# a file of `export` lines for the tests to source. `stop` ends exactly the
# processes that `start` recorded, by PID, and removes what it created.
#
# Settings (environment):
#   SLUICE_SERVICES_DIR   state dir (default <repo>/.services)
#   SLUICE_CACHE_DIR      cache for built tools (default ${XDG_CACHE_HOME:-~/.cache}/sluice)
#   SLUICE_START_TIMEOUT  seconds to wait for each service to be ready (default 60)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=${SLUICE_SERVICES_DIR:-$REPO/.services}
CACHE_DIR=${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/sluice}
BIN_DIR=$CACHE_DIR/bin
START_TIMEOUT=${SLUICE_START_TIMEOUT:-60}

ALL_SERVICES=(zookeeper redis versitygw chromium kcat kafkajs)

VERSITYGW_MODULE=github.com/versity/versitygw
VERSITYGW_VERSION=v1.8.0
VERSITYGW_BIN=$BIN_DIR/versitygw

ZK_JAR=/usr/share/java/zookeeper.jar
SLF4J_SIMPLE_JAR=/usr/share/java/slf4j-simple.jar
ZK_CLASSPATH=$ZK_JAR:$SLF4J_SIMPLE_JAR
ZK_MAIN=org.apache.zookeeper.server.ZooKeeperServerMain

CHROMIUM_BIN=/usr/bin/chromium
KCAT_BIN=/usr/bin/kcat

# kafkajs (npm), installed into a node_modules of its own under the cache dir.
KAFKAJS_VERSION=2.2.4
KAFKAJS_DIR=$CACHE_DIR/kafkajs-$KAFKAJS_VERSION

# Fixed credentials of the throwaway test S3 server (loopback only).
S3_ACCESS_KEY=sluicetestaccess
S3_SECRET_KEY=sluicetestsecret0123456789
S3_BUCKET=sluice-test
S3_REGION=us-east-1

# Ports are picked below the kernel's ephemeral range (32768-60999 by default),
# so that outgoing connections do not take them between the pick and the bind.
PORT_MIN=20000
PORT_MAX=32767

# Run a command up to 3 times, 5 s apart (registries have bad moments).
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

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

now_ms() { local s; s=$(date +%s%N); echo $((s / 1000000)); }
elapsed() { local t=$(( $(now_ms) - $1 )); printf '%d.%03ds' $((t / 1000)) $((t % 1000)); }

check_names() {
	local n
	for n in "$@"; do
		case $n in
		zookeeper | redis | versitygw | chromium | kcat | kafkajs) ;;
		*) die "unknown service '$n' (known: ${ALL_SERVICES[*]})" ;;
		esac
	done
}

# ---------------------------------------------------------------- install

apt_installed() { # pkg
	[[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true) == "install ok installed" ]]
}

APT_UPDATED=0
apt_install() { # [--no-install-recommends] pkg...
	local opts=() pkgs=() p missing=()
	for p in "$@"; do
		if [[ $p == --* ]]; then opts+=("$p"); else pkgs+=("$p"); fi
	done
	for p in "${pkgs[@]}"; do apt_installed "$p" || missing+=("$p"); done
	((${#missing[@]} > 0)) || return 0
	command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
	if [[ ! -x /usr/sbin/policy-rc.d ]]; then
		log "note: no /usr/sbin/policy-rc.d: the Debian package may also start its own system service"
	fi
	if ((APT_UPDATED == 0)); then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=600 -qq update >&2 ||
			die "apt-get update failed"
		APT_UPDATED=1
	fi
	log "apt-get install ${opts[*]:+${opts[*]} }${missing[*]}"
	DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=600 -qq -y \
		install "${opts[@]}" "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
}

install_zookeeper() {
	apt_install zookeeper
	[[ -r $ZK_JAR ]] || die "$ZK_JAR missing after installing zookeeper"
	[[ -r $SLF4J_SIMPLE_JAR ]] || apt_install libslf4j-java
	[[ -r $SLF4J_SIMPLE_JAR ]] || die "$SLF4J_SIMPLE_JAR missing (package libslf4j-java)"
	command -v java >/dev/null || apt_install default-jre-headless
	command -v java >/dev/null || die "java not found after installing zookeeper"
}

install_redis() {
	apt_install redis-server redis-tools
	command -v redis-server >/dev/null || die "redis-server not found after install"
}

install_chromium() {
	apt_install --no-install-recommends chromium
	[[ -x $CHROMIUM_BIN ]] || die "$CHROMIUM_BIN not found after install"
}

install_kcat() {
	apt_install kcat
	[[ -x $KCAT_BIN ]] || die "$KCAT_BIN not found after install"
}

kafkajs_ok() {
	[[ -r $KAFKAJS_DIR/node_modules/kafkajs/package.json ]] || return 1
	[[ $(node -p 'require(process.argv[1]).version' "$KAFKAJS_DIR/node_modules/kafkajs/package.json" 2>/dev/null || true) == "$KAFKAJS_VERSION" ]]
}

# Once installed, kafkajs is taken from the cache: no registry is asked again.
install_kafkajs() {
	command -v node >/dev/null || apt_install nodejs
	command -v npm >/dev/null || apt_install npm
	command -v node >/dev/null || die "node not found after installing nodejs"
	if kafkajs_ok; then return 0; fi
	mkdir -p "$CACHE_DIR"
	local tmp
	tmp=$(mktemp -d "$CACHE_DIR/.kafkajs.XXXXXX")
	log "npm install kafkajs@$KAFKAJS_VERSION"
	if ! (cd "$tmp" && retry npm install --prefix "$tmp" --no-audit --no-fund --no-save \
		--no-package-lock "kafkajs@$KAFKAJS_VERSION") >&2; then
		rm -rf "$tmp"
		die "npm install kafkajs@$KAFKAJS_VERSION failed"
	fi
	rm -rf "$KAFKAJS_DIR"
	mv -f "$tmp" "$KAFKAJS_DIR"
	kafkajs_ok || die "$KAFKAJS_DIR does not hold kafkajs $KAFKAJS_VERSION"
}

versitygw_ok() {
	[[ -x $VERSITYGW_BIN ]] || return 1
	go version -m "$VERSITYGW_BIN" 2>/dev/null |
		awk -v m="$VERSITYGW_MODULE" -v v="$VERSITYGW_VERSION" \
			'$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

install_versitygw() {
	if versitygw_ok; then return 0; fi
	command -v go >/dev/null || die "go not found: needed to build versitygw"
	mkdir -p "$BIN_DIR"
	local tmp
	tmp=$(mktemp -d "$BIN_DIR/.install.XXXXXX")
	log "go install $VERSITYGW_MODULE/cmd/versitygw@$VERSITYGW_VERSION (a few minutes on a cold module cache)"
	# Outside the repo, so that its go.mod and any GOFLAGS=-mod=... play no part.
	if ! (cd / && GOFLAGS="" GOBIN=$tmp retry go install "$VERSITYGW_MODULE/cmd/versitygw@$VERSITYGW_VERSION") >&2; then
		rm -rf "$tmp"
		die "building versitygw failed"
	fi
	mv -f "$tmp/versitygw" "$VERSITYGW_BIN" # atomic: a concurrent run sees old or new
	rm -rf "$tmp"
	versitygw_ok || die "$VERSITYGW_BIN does not report $VERSITYGW_VERSION"
}

cmd_install() {
	local names=("$@") n t
	((${#names[@]} > 0)) || names=("${ALL_SERVICES[@]}")
	check_names "${names[@]}"
	for n in "${names[@]}"; do
		t=$(now_ms)
		"install_$n"
		log "$n: installed ($(elapsed "$t"))"
	done
}

# ---------------------------------------------------------------- processes

# Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat),
# recorded with the PID so that a recycled PID is never taken for ours.
proc_start() { # pid
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }              # drop "pid (comm) ", comm may hold spaces
	awk '{ print $20 }' <<<"$stat" # field 22 overall
}

proc_state() { # pid
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	echo "${stat%% *}"
}

# True if the process recorded in DIR runs (and is not a zombie).
svc_alive() { # dir
	local dir=$1 pid start st
	[[ -r $dir/pid && -r $dir/pid.start ]] || return 1
	pid=$(<"$dir/pid")
	start=$(<"$dir/pid.start")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ $(proc_start "$pid" || true) == "$start" ]] || return 1
	st=$(proc_state "$pid" || true)
	[[ -n $st && $st != Z && $st != X ]]
}

# Launch a command in its own session with cwd DIR, output to DIR/log,
# and record its PID and start time.
launch() { # dir cmd...
	local dir=$1 pid start
	shift
	(cd "$dir" && exec setsid "$@") </dev/null >>"$dir/log" 2>&1 &
	pid=$!
	start=$(proc_start "$pid") || start=gone
	echo "$pid" >"$dir/pid"
	echo "$start" >"$dir/pid.start"
}

# Stop the process recorded in DIR: SIGTERM, then SIGKILL after 15 s.
stop_proc() { # name dir
	local name=$1 dir=$2 pid i
	svc_alive "$dir" || return 0
	pid=$(<"$dir/pid")
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 150; i++)); do
		svc_alive "$dir" || { log "$name: stopped (pid $pid)"; return 0; }
		sleep 0.1
	done
	log "$name: still running 15s after SIGTERM, sending SIGKILL to pid $pid"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		svc_alive "$dir" || return 0
		sleep 0.1
	done
	die "$name: pid $pid did not exit"
}

# ---------------------------------------------------------------- ports

PICKED_PORTS=" "

port_in_use() { # port
	local port=$1 hex used
	hex=$(printf '%04X' "$port")
	# Any socket on that local port, in any state, IPv4 or IPv6.
	used=$(awk 'FNR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null || true)
	[[ $'\n'$used$'\n' == *$'\n'$hex$'\n'* ]] && return 0
	# And nothing answers on it.
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
	return 1
}

pick_port() {
	local i port
	for ((i = 0; i < 500; i++)); do
		port=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % (PORT_MAX - PORT_MIN + 1)))
		[[ $PICKED_PORTS == *" $port "* ]] && continue
		port_in_use "$port" && continue
		PICKED_PORTS+="$port "
		echo "$port"
		return 0
	done
	die "no free loopback port found in $PORT_MIN-$PORT_MAX"
}

# ---------------------------------------------------------------- probes
# Each probe runs in a subshell, uses bash's /dev/tcp only, and bounds every read.

probe_zookeeper() ( # port
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'srvr' >&3 || exit 1
	out=""
	while IFS= read -r -t 2 -u 3 line; do out+="$line"$'\n'; done
	[[ $out == *"Mode: "* ]]
) 2>/dev/null

probe_redis() ( # port
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'PING\r\n' >&3 || exit 1
	IFS= read -r -t 2 -u 3 line || exit 1
	[[ $line == "+PONG"* ]]
) 2>/dev/null

probe_versitygw() ( # port
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'GET / HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$1" >&3 || exit 1
	IFS= read -r -t 2 -u 3 line || exit 1
	[[ $line == "HTTP/1."[01]" "[0-9][0-9][0-9]* ]] # any answer (403 to anonymous) means up
) 2>/dev/null

# Wait until PROBE answers on PORT, or the process dies, or the deadline passes.
wait_ready() { # name dir port
	local name=$1 dir=$2 port=$3 deadline
	deadline=$(($(now_ms) + START_TIMEOUT * 1000))
	while :; do
		if "probe_$name" "$port"; then return 0; fi
		if ! svc_alive "$dir"; then
			log "$name: process exited before it was ready; last lines of $dir/log:"
			tail -n 20 "$dir/log" >&2 || true
			return 1
		fi
		if (($(now_ms) > deadline)); then
			log "$name: not ready after ${START_TIMEOUT}s on 127.0.0.1:$port; last lines of $dir/log:"
			tail -n 20 "$dir/log" >&2 || true
			return 1
		fi
		sleep 0.1
	done
}

# ---------------------------------------------------------------- start

# Fresh service dir; a port; launch; wait; on failure retry on another port
# (another process may have taken the port between the pick and the bind).
start_service() { # name
	local name=$1 dir=$STATE_DIR/$1 attempt port t
	if svc_alive "$dir"; then
		log "$name: already running (pid $(<"$dir/pid"), $(<"$dir/addr"))"
		return 0
	fi
	"check_$name"
	for attempt in 1 2 3; do
		rm -rf "$dir"
		mkdir -p "$dir"
		port=$(pick_port)
		t=$(now_ms)
		"launch_$name" "$dir" "$port"
		if wait_ready "$name" "$dir" "$port"; then
			echo "127.0.0.1:$port" >"$dir/addr"
			"env_$name" "$dir" "$port" >"$dir/env"
			log "$name: ready on 127.0.0.1:$port (pid $(<"$dir/pid"), $(elapsed "$t"))"
			return 0
		fi
		stop_proc "$name" "$dir"
		log "$name: start attempt $attempt failed"
	done
	die "$name: could not be started; see $dir/log"
}

# zookeeper

check_zookeeper() {
	if [[ ! -r $ZK_JAR || ! -r $SLF4J_SIMPLE_JAR ]] || ! command -v java >/dev/null; then
		die "zookeeper is not installed: run scripts/services.sh install zookeeper"
	fi
}

launch_zookeeper() { # dir port
	local dir=$1 port=$2
	mkdir -p "$dir/data"
	cat >"$dir/zoo.cfg" <<-EOF
		tickTime=2000
		initLimit=10
		syncLimit=5
		dataDir=$dir/data
		clientPort=$port
		clientPortAddress=127.0.0.1
		maxClientCnxns=0
		admin.enableServer=false
		4lw.commands.whitelist=ruok,srvr,stat,mntr
		autopurge.purgeInterval=0
	EOF
	launch "$dir" java -Xmx512m -Dzookeeper.admin.enableServer=false \
		-cp "$ZK_CLASSPATH" "$ZK_MAIN" "$dir/zoo.cfg"
}

env_zookeeper() { # dir port
	printf 'export SLUICE_TEST_ZK=%q\n' "127.0.0.1:$2"
	printf 'export SLUICE_TEST_ZK_JAVA=%q\n' "$(command -v java)"
	printf 'export SLUICE_TEST_ZK_CLASSPATH=%q\n' "$ZK_CLASSPATH"
}

# redis

check_redis() {
	command -v redis-server >/dev/null ||
		die "redis is not installed: run scripts/services.sh install redis"
}

launch_redis() { # dir port
	local dir=$1 port=$2
	launch "$dir" "$(command -v redis-server)" --bind 127.0.0.1 --port "$port" \
		--save '' --appendonly no --dir "$dir" --daemonize no --protected-mode yes
}

env_redis() { printf 'export SLUICE_TEST_REDIS=%q\n' "127.0.0.1:$2"; }

# versitygw

check_versitygw() {
	versitygw_ok || die "versitygw $VERSITYGW_VERSION is not installed: run scripts/services.sh install versitygw"
}

launch_versitygw() { # dir port
	local dir=$1 port=$2 v
	# Its flags also read VGW_* variables (e.g. VGW_PPROF, VGW_ADMIN_PORT would
	# open more listeners): none from the caller's environment may leak in.
	for v in $(compgen -e); do
		[[ $v == VGW_* || $v == LOGFILE ]] && unset "$v"
	done
	# The posix backend maps each bucket to a directory of DIR and keeps its
	# metadata in xattrs; a bucket made as a plain directory is served as is.
	mkdir -p "$dir/root/$S3_BUCKET"
	ROOT_ACCESS_KEY=$S3_ACCESS_KEY ROOT_SECRET_KEY=$S3_SECRET_KEY \
		launch "$dir" "$VERSITYGW_BIN" --port "127.0.0.1:$port" --region "$S3_REGION" --quiet \
		posix "$dir/root"
}

env_versitygw() { # dir port
	printf 'export SLUICE_TEST_S3_ENDPOINT=%q\n' "127.0.0.1:$2"
	printf 'export SLUICE_TEST_S3_ACCESS_KEY=%q\n' "$S3_ACCESS_KEY"
	printf 'export SLUICE_TEST_S3_SECRET_KEY=%q\n' "$S3_SECRET_KEY"
	printf 'export SLUICE_TEST_S3_BUCKET=%q\n' "$S3_BUCKET"
	printf 'export SLUICE_TEST_S3_REGION=%q\n' "$S3_REGION"
}

# chromium: no server, the tests launch it; start only checks and records it.

start_chromium() {
	[[ -x $CHROMIUM_BIN ]] || die "chromium is not installed: run scripts/services.sh install chromium"
	mkdir -p "$STATE_DIR/chromium"
	printf 'export SLUICE_TEST_CHROMIUM=%q\n' "$CHROMIUM_BIN" >"$STATE_DIR/chromium/env"
	log "chromium: $CHROMIUM_BIN"
}

# kcat: no server either, the Kafka listener's tests run it.

start_kcat() {
	[[ -x $KCAT_BIN ]] || die "kcat is not installed: run scripts/services.sh install kcat"
	mkdir -p "$STATE_DIR/kcat"
	printf 'export SLUICE_TEST_KCAT=%q\n' "$KCAT_BIN" >"$STATE_DIR/kcat/env"
	log "kcat: $KCAT_BIN"
}

# kafkajs: a library the tests run under node; NODE_PATH finds it.

start_kafkajs() {
	kafkajs_ok || die "kafkajs is not installed: run scripts/services.sh install kafkajs"
	local node
	node=$(command -v node) || die "node not found: run scripts/services.sh install kafkajs"
	mkdir -p "$STATE_DIR/kafkajs"
	{
		printf 'export SLUICE_TEST_NODE=%q\n' "$node"
		printf 'export SLUICE_TEST_KAFKAJS=%q\n' "$KAFKAJS_DIR/node_modules"
	} >"$STATE_DIR/kafkajs/env"
	log "kafkajs: $KAFKAJS_DIR/node_modules (node $node)"
}

# is_tool: a "service" with no process, only a binary the tests run.
is_tool() { [[ $1 == chromium || $1 == kcat || $1 == kafkajs ]]; }

write_env() {
	local tmp=$STATE_DIR/.env.tmp n
	{
		echo "# Written by scripts/services.sh start; source it before go test."
		for n in "${ALL_SERVICES[@]}"; do
			if [[ -r $STATE_DIR/$n/env ]] && { is_tool "$n" || svc_alive "$STATE_DIR/$n"; }; then
				cat "$STATE_DIR/$n/env"
			fi
		done
	} >"$tmp"
	mv -f "$tmp" "$STATE_DIR/env"
}

cmd_start() {
	local names=("$@") n
	((${#names[@]} > 0)) || names=("${ALL_SERVICES[@]}")
	check_names "${names[@]}"
	mkdir -p "$STATE_DIR"
	for n in "${names[@]}"; do
		if is_tool "$n"; then "start_$n"; else start_service "$n"; fi
	done
	write_env
	log "env file: $STATE_DIR/env"
}

cmd_stop() {
	local n
	[[ -d $STATE_DIR ]] || { log "nothing to stop ($STATE_DIR does not exist)"; return 0; }
	for n in "${ALL_SERVICES[@]}"; do
		[[ -d $STATE_DIR/$n ]] || continue
		stop_proc "$n" "$STATE_DIR/$n"
		rm -rf "${STATE_DIR:?}/$n"
	done
	rm -f "$STATE_DIR/env" "$STATE_DIR/.env.tmp"
	# Only what start created: a state dir holding anything else is left in place.
	rmdir "$STATE_DIR" 2>/dev/null || log "left $STATE_DIR in place: it holds files not made by start"
}

cmd_status() {
	local n dir rc=0
	for n in "${ALL_SERVICES[@]}"; do
		dir=$STATE_DIR/$n
		if [[ $n == chromium ]]; then
			[[ -r $dir/env ]] && echo "chromium   $CHROMIUM_BIN"
		elif [[ $n == kcat ]]; then
			[[ -r $dir/env ]] && echo "kcat       $KCAT_BIN"
		elif [[ $n == kafkajs ]]; then
			[[ -r $dir/env ]] && echo "kafkajs    $KAFKAJS_DIR/node_modules"
		elif svc_alive "$dir"; then
			echo "$(printf '%-10s' "$n") running  pid $(<"$dir/pid")  $(<"$dir/addr")"
		elif [[ -d $dir ]]; then
			echo "$(printf '%-10s' "$n") DEAD     see $dir/log"
			rc=1
		fi
	done
	[[ -r $STATE_DIR/env ]] && echo "env file:  $STATE_DIR/env"
	return "$rc"
}

main() {
	(($# > 0)) || usage
	local cmd=$1
	shift
	case $cmd in
	install) cmd_install "$@" ;;
	start) cmd_start "$@" ;;
	up) cmd_install "$@" && cmd_start "$@" ;;
	stop | down) cmd_stop ;;
	status) cmd_status ;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
