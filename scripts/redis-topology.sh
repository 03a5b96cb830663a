#!/usr/bin/env bash
# Local Redis topologies for the durability tests, on loopback, idempotent:
#
#   scripts/redis-topology.sh sentinel up|down|status
#       primary 127.0.0.1:6390, replicas :6391 :6392, sentinels :26390-:26392
#       monitoring master "wbmaster" with quorum 2
#   scripts/redis-topology.sh cluster up|down|status
#       Redis Cluster of 3 primaries × 1 replica on :7000-:7005
#
# Every server keeps AOF on (appendfsync everysec) in $WRITEBACK_REDIS_DIR
# (default /tmp/writeback-redis) and runs with maxmemory-policy noeviction.
# Needs redis-server, redis-sentinel and redis-cli (`make services` installs
# them).
set -euo pipefail

dir=${WRITEBACK_REDIS_DIR:-/tmp/writeback-redis}
host=127.0.0.1
master=wbmaster

say() { echo "redis-topology: $*"; }
die() { echo "redis-topology: $*" >&2; exit 1; }

command -v redis-server >/dev/null || die "redis-server is not installed; run make services"
command -v redis-cli >/dev/null || die "redis-cli is not installed; run make services"

answers() { redis-cli -h "$host" -p "$1" ping 2>/dev/null | grep -q PONG; }

wait_for() { # port what
	for _ in $(seq 1 100); do
		answers "$1" && return 0
		sleep 0.1
	done
	die "$2 on port $1 did not answer within 10s; see $dir/$1/log"
}

server() { # port [extra args...]
	local port=$1
	shift
	if answers "$port"; then
		return 0
	fi
	mkdir -p "$dir/$port"
	redis-server --port "$port" --bind "$host" --daemonize yes --dir "$dir/$port" \
		--logfile "$dir/$port/log" --pidfile "$dir/$port/pid" \
		--appendonly yes --appendfsync everysec --save "" \
		--repl-diskless-sync-delay 0 --maxmemory-policy noeviction "$@"
	wait_for "$port" "redis-server"
}

stop() { # port
	if answers "$1"; then
		redis-cli -h "$host" -p "$1" shutdown nosave >/dev/null 2>&1 || true
	fi
}

sentinel_up() {
	server 6390
	server 6391 --replicaof "$host" 6390
	server 6392 --replicaof "$host" 6390
	for port in 26390 26391 26392; do
		if answers "$port"; then
			continue
		fi
		mkdir -p "$dir/$port"
		# Sentinel rewrites its config file, so it must be a file of its own.
		cat >"$dir/$port/sentinel.conf" <<EOF
port $port
bind $host
daemonize yes
dir $dir/$port
logfile $dir/$port/log
pidfile $dir/$port/pid
sentinel monitor $master $host 6390 2
sentinel down-after-milliseconds $master 1000
sentinel failover-timeout $master 5000
sentinel parallel-syncs $master 1
EOF
		if command -v redis-sentinel >/dev/null; then
			redis-sentinel "$dir/$port/sentinel.conf"
		else
			redis-server "$dir/$port/sentinel.conf" --sentinel
		fi
		wait_for "$port" "redis-sentinel"
	done
	# Both replicas synced (state=online), not merely connected?
	local n=0
	for _ in $(seq 1 300); do
		n=$(redis-cli -h "$host" -p "$(sentinel_primary_port)" info replication | grep -c 'state=online' || true)
		[ "${n:-0}" -ge 2 ] && break
		sleep 0.1
	done
	[ "${n:-0}" -ge 2 ] || die "the replicas did not finish syncing within 30s; see $dir/*/log"
	say "sentinel: primary $host:$(sentinel_primary_port), sentinels $host:26390,26391,26392 (master $master)"
}

sentinel_primary_port() {
	local addr
	addr=$(redis-cli -h "$host" -p 26390 sentinel get-master-addr-by-name "$master" 2>/dev/null | tail -1)
	echo "${addr:-6390}"
}

sentinel_down() {
	for port in 26390 26391 26392 6390 6391 6392; do stop "$port"; done
	rm -rf "$dir"/6390 "$dir"/6391 "$dir"/6392 "$dir"/26390 "$dir"/26391 "$dir"/26392
	say "sentinel: stopped"
}

cluster_ports=(7000 7001 7002 7003 7004 7005)

cluster_up() {
	for port in "${cluster_ports[@]}"; do
		server "$port" --cluster-enabled yes --cluster-config-file "$dir/$port/nodes.conf" --cluster-node-timeout 2000
	done
	if redis-cli -h "$host" -p 7000 cluster info | grep -q 'cluster_state:ok'; then
		say "cluster: already up on $host:7000-7005"
		return 0
	fi
	local nodes=()
	for port in "${cluster_ports[@]}"; do nodes+=("$host:$port"); done
	redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/cluster-create.log" 2>&1 ||
		die "creating the cluster failed; see $dir/cluster-create.log"
	# Every node must see the cluster whole: each converges on its own, and
	# a node that has not yet answers CLUSTERDOWN (7000 alone is not enough).
	every_node cluster_whole "the cluster did not reach cluster_state:ok on every node"
	# cluster_state:ok comes before the replicas' first full sync ends: a
	# sidecar with redis.replicas would refuse writes until it does.
	every_node replicas_synced "the cluster's replicas did not finish syncing; see $dir/*/log"
	say "cluster: up on $host:7000-7005 (3 primaries, 3 replicas)"
}

# every_node check message: waits up to 30 s for check to pass on every
# Cluster node (check gets the port), and dies with message if it does not.
every_node() {
	local port ok
	for _ in $(seq 1 300); do
		ok=1
		for port in "${cluster_ports[@]}"; do
			"$1" "$port" || { ok=0; break; }
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.1
	done
	die "$2 within 30 s"
}

cluster_whole() { grep -q 'cluster_state:ok' <<<"$(redis-cli -h "$host" -p "$1" cluster info)"; }

# replicas_synced port: the node is a replica, or a primary whose replica is
# online.
replicas_synced() {
	local info
	info=$(redis-cli -h "$host" -p "$1" info replication)
	! grep -q '^role:master' <<<"$info" || grep -q 'state=online' <<<"$info"
}

cluster_down() {
	for port in "${cluster_ports[@]}"; do stop "$port"; done
	for port in "${cluster_ports[@]}"; do rm -rf "${dir:?}/$port"; done
	say "cluster: stopped"
}

status() { # ports...
	local rc=0
	for port in "$@"; do
		if answers "$port"; then echo "up   $host:$port"; else echo "down $host:$port"; rc=1; fi
	done
	return $rc
}

case "${1:-}/${2:-}" in
sentinel/up) sentinel_up ;;
sentinel/down) sentinel_down ;;
sentinel/status) status 6390 6391 6392 26390 26391 26392 ;;
cluster/up) cluster_up ;;
cluster/down) cluster_down ;;
cluster/status) status "${cluster_ports[@]}" ;;
*)
	echo "usage: $0 sentinel|cluster up|down|status" >&2
	exit 2
	;;
esac
