#!/usr/bin/env bash
# Dev/CI MongoDB-wire server for the writeback sidecar: FerretDB (SQLite
# backend) on loopback, built once from the Go module proxy, no Docker.
#
#   scripts/ferretdb.sh up      build (once, cached) and start; idempotent
#   scripts/ferretdb.sh down    stop the server this script started
#   scripts/ferretdb.sh status  one line; non-zero exit if nothing answers
#
# The binary is built from github.com/FerretDB/FerretDB@$FERRETDB_VERSION into
# $FERRETDB_CACHE/ferretdb (default ${XDG_CACHE_HOME:-$HOME/.cache}/writeback/
# ferretdb-<version>); later runs reuse it. Data, pid file and log live in
# $FERRETDB_RUN_DIR (default $FERRETDB_CACHE/run-<port>).
#
# If something already answers MongoDB's ping on the address (a server
# started by hand, or a real mongod), `up` leaves it alone and `down` refuses
# to stop what this script did not start.
#
# Env: FERRETDB_ADDR (default 127.0.0.1:27017), FERRETDB_VERSION (v1.24.0),
#      FERRETDB_CACHE, FERRETDB_RUN_DIR, WAIT_SECS (default 30).
set -euo pipefail
set -o errtrace

FERRETDB_VERSION=${FERRETDB_VERSION:-v1.24.0}
FERRETDB_ADDR=${FERRETDB_ADDR:-127.0.0.1:27017}
FERRETDB_CACHE=${FERRETDB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/writeback/ferretdb-$FERRETDB_VERSION}
HOST=${FERRETDB_ADDR%:*}
PORT=${FERRETDB_ADDR##*:}
FERRETDB_RUN_DIR=${FERRETDB_RUN_DIR:-$FERRETDB_CACHE/run-$PORT}
WAIT_SECS=${WAIT_SECS:-30}
MODULE=github.com/FerretDB/FerretDB

BIN=$FERRETDB_CACHE/ferretdb
DATA_DIR=$FERRETDB_RUN_DIR/data
PID_FILE=$FERRETDB_RUN_DIR/ferretdb.pid
LOG_FILE=$FERRETDB_RUN_DIR/ferretdb.log

prog=${0##*/}
say() { printf '%s: %s\n' "$prog" "$*"; }
die() { printf '%s: ERROR: %s\n' "$prog" "$*" >&2; exit 1; }
on_err() {
	printf '%s: ERROR: command failed (line %s: %s); fix the cause above and rerun %s.\n' \
		"$prog" "$1" "$2" "$0" >&2
}
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR

have() { command -v "$1" >/dev/null 2>&1; }

# mongo_ping: send MongoDB's {ping: 1, $db: "admin"} as an OP_MSG over
# /dev/tcp and succeed if the reply carries ok: 1.0 -- a real wire-protocol
# check that needs no MongoDB client.
mongo_ping() {
	local reply
	# shellcheck disable=SC2016 # the inner script expands its own arguments
	reply=$(
		timeout 3 bash -c '
			exec 3<>"/dev/tcp/$1/$2" || exit 1
			# OP_MSG: length 51, requestID 1, responseTo 0, opCode 2013, flags 0,
			# section kind 0, BSON {ping: int32 1, $db: "admin"} (30 bytes).
			printf "\x33\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00\x00\x00\x00\x00\x00\x1e\x00\x00\x00\x10ping\x00\x01\x00\x00\x00\x02\$db\x00\x06\x00\x00\x00admin\x00\x00" >&3
			# The reply starts with its length (int32, little-endian); dd bs=1
			# reads exactly that many bytes, so nothing waits for more.
			n=$(dd bs=1 count=4 <&3 2>/dev/null | od -An -tu4 | tr -d " ")
			[ -n "$n" ] && [ "$n" -gt 4 ] && [ "$n" -lt 65536 ] || exit 1
			dd bs=1 count=$((n - 4)) <&3 2>/dev/null | od -An -v -tx1
		' _ "$HOST" "$PORT" 2>/dev/null
	) || return 1
	# "ok" as a double 1.0: type 0x01, "ok\0", 00 00 00 00 00 00 f0 3f.
	tr -d ' \n' <<<"$reply" | grep -q '016f6b00000000000000f03f'
}

# our_pid: the pid of the server this script started, if it still runs.
our_pid() {
	local pid
	[ -f "$PID_FILE" ] || return 1
	pid=$(cat "$PID_FILE" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$BIN")" ] || return 1
	# Same binary and listening on this address (the pid file may be left
	# over from a run with another FERRETDB_ADDR).
	tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--listen-addr=$FERRETDB_ADDR" || return 1
	echo "$pid"
}

built() { [ -x "$BIN" ] && [ "$(cat "$FERRETDB_CACHE/version" 2>/dev/null)" = "$FERRETDB_VERSION" ]; }

build() {
	if built; then
		say "ferretdb $FERRETDB_VERSION: cached at $BIN"
		return 0
	fi
	have go || die "go is not on PATH; install Go (see go.mod) and rerun $0 up."
	mkdir -p "$FERRETDB_CACHE"
	local lock=$FERRETDB_CACHE/.build.lock
	exec 9>"$lock"
	if have flock; then
		flock 9 || die "could not lock $lock."
		if built; then # another run built it while we waited
			say "ferretdb $FERRETDB_VERSION: cached at $BIN"
			return 0
		fi
	fi
	local start=$SECONDS json dir tmp
	say "ferretdb $FERRETDB_VERSION: building from the Go module proxy (once; about a minute)"
	json=$(go mod download -json "$MODULE@$FERRETDB_VERSION") ||
		die "go mod download $MODULE@$FERRETDB_VERSION failed; check GOPROXY and network access, then rerun."
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	if [ -z "$dir" ] || [ ! -d "$dir" ]; then
		die "go mod download did not report the module directory; output was: $json"
	fi
	tmp=$(mktemp -d "$FERRETDB_CACHE/.src.XXXXXX")
	# The module cache is read-only and the build wants a version stamp
	# (build/version panics without it), so build from a writable copy.
	cp -R "$dir/." "$tmp/"
	chmod -R u+w "$tmp"
	printf '%s\n' "$FERRETDB_VERSION" >"$tmp/build/version/version.txt"
	if ! (cd "$tmp" && GOFLAGS=-buildvcs=false go build -trimpath -o "$BIN.tmp" ./cmd/ferretdb); then
		rm -rf "$tmp" "$BIN.tmp"
		die "go build of FerretDB $FERRETDB_VERSION failed; see the compiler output above."
	fi
	rm -rf "$tmp"
	mv -f "$BIN.tmp" "$BIN"
	printf '%s\n' "$FERRETDB_VERSION" >"$FERRETDB_CACHE/version"
	say "ferretdb $FERRETDB_VERSION: built in $((SECONDS - start))s: $BIN"
}

cmd_up() {
	local pid
	if mongo_ping; then
		if pid=$(our_pid); then
			say "ferretdb: already up at $FERRETDB_ADDR (pid $pid)"
		else
			say "ferretdb: something already answers MongoDB's ping at $FERRETDB_ADDR (not started by $prog); leaving it alone"
		fi
		return 0
	fi
	build
	if pid=$(our_pid); then
		# Ours, alive and wedged (seen with the SQLite backend under heavy
		# concurrent writes): restart it once rather than leave every
		# MongoDB test failing.
		say "ferretdb: pid $pid runs but does not answer at $FERRETDB_ADDR; restarting it (its log: $LOG_FILE)"
		cmd_down
	fi
	if pid=$(our_pid); then
		die "ferretdb (pid $pid) runs but does not answer at $FERRETDB_ADDR and did not stop; see $LOG_FILE, stop it with $0 down and rerun."
	fi
	mkdir -p "$DATA_DIR"
	say "ferretdb: starting at $FERRETDB_ADDR (SQLite data in $DATA_DIR, log $LOG_FILE)"
	# setsid + nohup: the server outlives this shell and the caller's terminal.
	setsid nohup "$BIN" --listen-addr="$FERRETDB_ADDR" --handler=sqlite \
		--sqlite-url="file:$DATA_DIR/" --state-dir="$FERRETDB_RUN_DIR" \
		--debug-addr=- --telemetry=disable --log-level=warn \
		</dev/null >>"$LOG_FILE" 2>&1 &
	echo $! >"$PID_FILE"
	local deadline=$((SECONDS + WAIT_SECS))
	until mongo_ping; do
		if ! our_pid >/dev/null; then
			die "ferretdb exited during start; see $LOG_FILE (tail: $(tail -n 3 "$LOG_FILE" | tr '\n' ' '))."
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "ferretdb did not answer at $FERRETDB_ADDR within ${WAIT_SECS}s; see $LOG_FILE."
		fi
		sleep 0.2
	done
	say "ferretdb: up at $FERRETDB_ADDR (pid $(cat "$PID_FILE"))"
}

cmd_down() {
	local pid
	if ! pid=$(our_pid); then
		if mongo_ping; then
			say "ferretdb: the server at $FERRETDB_ADDR was not started by $prog; leaving it running"
		else
			say "ferretdb: already down"
		fi
		return 0
	fi
	say "ferretdb: stopping pid $pid"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + WAIT_SECS))
	local killed=0
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			if [ "$killed" = 1 ]; then
				die "ferretdb (pid $pid) still runs after SIGTERM and SIGKILL; stop it by hand (kill -9 $pid)."
			fi
			say "ferretdb: pid $pid ignored SIGTERM for ${WAIT_SECS}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			killed=1
			deadline=$((SECONDS + 5))
		fi
		sleep 0.2
	done
	rm -f "$PID_FILE"
	say "ferretdb: down"
}

cmd_status() {
	local pid
	if mongo_ping; then
		if pid=$(our_pid); then
			printf '%-11s %-5s %s  (pid %s)\n' ferretdb up "$FERRETDB_ADDR" "$pid"
		else
			printf '%-11s %-5s %s  (%s)\n' ferretdb up "$FERRETDB_ADDR" "not started by $prog"
		fi
		return 0
	fi
	printf '%-11s %-5s %s\n' ferretdb down "$FERRETDB_ADDR"
	return 1
}

CMD=${1:-}
case "$CMD" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status || exit 1 ;;
*)
	echo "usage: $0 up|down|status" >&2
	exit 2
	;;
esac
