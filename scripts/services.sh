#!/usr/bin/env bash
# Dev/CI backing services for the writeback sidecar: Redis, PostgreSQL, MariaDB
# on loopback, no systemd, no Docker (Debian 12).
#
#   scripts/services.sh up      install (apt) / start / configure, idempotent
#   scripts/services.sh down    stop all three servers (nothing is uninstalled)
#   scripts/services.sh status  one line per service; non-zero exit if any is down
#
# Addresses are fixed: Redis 127.0.0.1:6379, PostgreSQL 127.0.0.1:5432 (user
# postgres, trust), MariaDB 127.0.0.1:3306 (root, empty password). `up` also
# creates the database `writeback` in both SQL servers and makes sure
# max_connections is >= 200 (PostgreSQL) / >= 500 (MariaDB), and that Redis
# uses maxmemory-policy noeviction.
#
# `up`, `down` and `status` also run scripts/ferretdb.sh: a MongoDB-wire server
# (FerretDB, SQLite backend) on 127.0.0.1:27017, built once from the Go module
# proxy into ~/.cache/writeback.
#
# Env: WAIT_SECS (default 30) -- how long to wait for a server to answer.
set -euo pipefail
set -o errtrace

REDIS_HOST=127.0.0.1 REDIS_PORT=6379
PG_HOST=127.0.0.1 PG_PORT=5432 PG_USER=postgres
MY_HOST=127.0.0.1 MY_PORT=3306 MY_USER=root
DB_NAME=writeback
PG_MIN_CONNS=200
MY_MIN_CONNS=500
WAIT_SECS=${WAIT_SECS:-30}
HBA_MARK='# writeback dev services (scripts/services.sh)'
MY_MARK='# writeback dev services (scripts/services.sh)'

export DEBIAN_FRONTEND=noninteractive
export PGCONNECT_TIMEOUT=3

prog=${0##*/}
say() { printf '%s: %s\n' "$prog" "$*"; }
die() { printf '%s: ERROR: %s\n' "$prog" "$*" >&2; exit 1; }
on_err() {
	printf '%s: ERROR: command failed (line %s: %s); fix the cause above and rerun %s.\n' \
		"$prog" "$1" "$2" "$0" >&2
}
trap 'on_err "$LINENO" "$BASH_COMMAND"' ERR

have() { command -v "$1" >/dev/null 2>&1; }

need_root() {
	[ "$(id -u)" -eq 0 ] || die "$1 needs root; rerun as root (e.g. sudo $0 ${CMD:-up})."
}

# wait_for <what> <hint> <cmd...>: poll cmd until it succeeds or WAIT_SECS pass.
wait_for() {
	local what=$1 hint=$2
	shift 2
	local deadline=$((SECONDS + WAIT_SECS))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "$what did not answer within ${WAIT_SECS}s; $hint"
		fi
		sleep 0.25
	done
}

# wait_gone <what> <cmd...>: poll until cmd fails (server stopped answering).
wait_gone() {
	local what=$1
	shift
	local deadline=$((SECONDS + WAIT_SECS))
	while "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "$what is still answering ${WAIT_SECS}s after the stop request; stop it by hand and rerun."
		fi
		sleep 0.25
	done
}

APT_UPDATED=
apt_install() {
	need_root "installing $*"
	if [ -z "$APT_UPDATED" ]; then
		say "apt-get update"
		apt-get update -qq </dev/null ||
			die "apt-get update failed; check /etc/apt/sources.list* and network access, then rerun."
		APT_UPDATED=1
	fi
	say "apt-get install -y $*"
	apt-get install -y -qq "$@" </dev/null >/dev/null ||
		die "apt-get install $* failed; run 'apt-get install -y $*' by hand to see why, then rerun."
}

# ---------------------------------------------------------------- Redis

rcli() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" "$@" </dev/null; }
redis_ping() { [ "$(rcli ping 2>/dev/null)" = PONG ]; }

redis_up() {
	if ! have redis-server || ! have redis-cli; then
		apt_install redis-server redis-tools
	fi
	if redis_ping; then
		say "redis: already up at $REDIS_HOST:$REDIS_PORT"
	else
		need_root "starting Redis"
		mkdir -p /var/lib/redis /var/log/redis
		say "redis: starting"
		redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" \
			--save "" --appendonly no --maxmemory-policy noeviction \
			--dir /var/lib/redis --logfile /var/log/redis/ci.log </dev/null >/dev/null ||
			die "redis-server failed to start; see /var/log/redis/ci.log, fix it and rerun."
		wait_for "Redis at $REDIS_HOST:$REDIS_PORT" \
			"see /var/log/redis/ci.log, fix it and rerun $0 up." redis_ping
		say "redis: up at $REDIS_HOST:$REDIS_PORT"
	fi
	local policy
	policy=$(rcli config get maxmemory-policy | sed -n 2p) ||
		die "could not read Redis maxmemory-policy (CONFIG GET); is CONFIG disabled or auth required?"
	if [ "$policy" != noeviction ]; then
		say "redis: maxmemory-policy was '$policy'; the sidecar needs noeviction -- CONFIG SET maxmemory-policy noeviction (runtime only)"
		[ "$(rcli config set maxmemory-policy noeviction)" = OK ] ||
			die "CONFIG SET maxmemory-policy noeviction failed on Redis; set it in the Redis config and restart Redis."
	fi
}

redis_down() {
	if ! have redis-cli || ! redis_ping; then
		say "redis: already down"
		return 0
	fi
	say "redis: stopping"
	rcli shutdown >/dev/null 2>&1 || true # the connection drops on success
	wait_gone "Redis" redis_ping
	say "redis: down"
}

# ----------------------------------------------------------- PostgreSQL

pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2; }
pg_tcp() { psql -X -w -q -At -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$@" </dev/null; }

# Sets PG_VER/PG_CLUSTER/PG_STATUS for the cluster on PG_PORT (empty if none).
pg_find_cluster() {
	PG_VER='' PG_CLUSTER='' PG_STATUS=''
	have pg_lsclusters || return 0
	read -r PG_VER PG_CLUSTER PG_STATUS < <(pg_lsclusters -h 2>/dev/null |
		awk -v p="$PG_PORT" '$3 == p { print $1, $2, $4; exit }') || true
}

pg_log() { echo "/var/log/postgresql/postgresql-${PG_VER:-*}-${PG_CLUSTER:-main}.log"; }
pg_ctl() { pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_CLUSTER" "$@" </dev/null; }

# Put trust rules for loopback TCP at the top of pg_hba.conf (first match wins).
pg_ensure_hba() {
	local hba=/etc/postgresql/$PG_VER/$PG_CLUSTER/pg_hba.conf
	[ -f "$hba" ] || die "PostgreSQL cluster $PG_VER/$PG_CLUSTER has no $hba; fix the cluster (pg_lsclusters) and rerun."
	HBA_CHANGED=
	if grep -qF "$HBA_MARK" "$hba"; then return 0; fi
	need_root "editing $hba"
	say "postgresql: adding loopback trust rules (127.0.0.1/32, ::1/128) to the top of $hba"
	local tmp
	tmp=$(mktemp)
	awk -v mark="$HBA_MARK" '
		function block() {
			print mark " -- loopback trust for dev/CI"
			print "host    all             all             127.0.0.1/32            trust"
			print "host    all             all             ::1/128                 trust"
			print "# end " substr(mark, 3)
			done = 1
		}
		!done && $0 !~ /^[[:space:]]*(#|$)/ { block() }
		{ print }
		END { if (!done) block() }' "$hba" >"$tmp"
	cat "$tmp" >"$hba" # keep owner/mode of the original
	rm -f "$tmp"
	HBA_CHANGED=1
}

pg_up() {
	if ! have psql || ! have pg_isready || ! have pg_ctlcluster || ! have pg_createcluster ||
		! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		apt_install postgresql postgresql-client
	fi
	pg_find_cluster
	if [ -z "$PG_VER" ]; then
		need_root "creating a PostgreSQL cluster"
		PG_VER=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' |
			awk -F/ '{ print $5 }' | sort -n | tail -1)
		[ -n "$PG_VER" ] || die "no PostgreSQL server binary under /usr/lib/postgresql; run 'apt-get install -y postgresql' and rerun."
		if [ -d "/etc/postgresql/$PG_VER/main" ]; then
			die "PostgreSQL cluster $PG_VER/main exists but not on port $PG_PORT; set 'port = $PG_PORT' in /etc/postgresql/$PG_VER/main/postgresql.conf (or drop the cluster) and rerun."
		fi
		say "postgresql: no cluster on port $PG_PORT; pg_createcluster $PG_VER main"
		pg_createcluster -p "$PG_PORT" "$PG_VER" main </dev/null >/dev/null ||
			die "pg_createcluster $PG_VER main failed; see its output above, fix it and rerun."
		pg_find_cluster
		[ -n "$PG_VER" ] || die "pg_createcluster did not produce a cluster on port $PG_PORT; check pg_lsclusters and rerun."
	fi

	pg_ensure_hba

	if pg_ready; then
		say "postgresql: already up at $PG_HOST:$PG_PORT (cluster $PG_VER/$PG_CLUSTER)"
		if [ -n "$HBA_CHANGED" ]; then pg_ctl reload >/dev/null; fi
	else
		need_root "starting PostgreSQL"
		if [ "$PG_STATUS" != online ]; then
			say "postgresql: starting cluster $PG_VER/$PG_CLUSTER"
			pg_ctl start ||
				die "pg_ctlcluster $PG_VER $PG_CLUSTER start failed; see $(pg_log), fix it and rerun."
		fi
		wait_for "PostgreSQL at $PG_HOST:$PG_PORT" \
			"see $(pg_log) and check listen_addresses/port in /etc/postgresql/$PG_VER/$PG_CLUSTER/postgresql.conf." pg_ready
		say "postgresql: up at $PG_HOST:$PG_PORT"
	fi

	local info
	info=$(pg_tcp -F ' ' -d postgres -c \
		"SELECT current_setting('max_connections'), EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB_NAME')" 2>&1) ||
		die "psql -h $PG_HOST -U $PG_USER cannot log in without a password ($info); make pg_hba.conf trust 127.0.0.1/32 for $PG_USER and reload."
	local conns exists
	read -r conns exists <<<"$info"

	if [ "$conns" -lt "$PG_MIN_CONNS" ]; then
		need_root "restarting PostgreSQL"
		say "postgresql: max_connections=$conns < $PG_MIN_CONNS; ALTER SYSTEM SET max_connections = $PG_MIN_CONNS and restart"
		pg_tcp -d postgres -c "ALTER SYSTEM SET max_connections = $PG_MIN_CONNS" >/dev/null
		pg_ctl restart ||
			die "restarting PostgreSQL $PG_VER/$PG_CLUSTER failed; see $(pg_log), fix it and rerun."
		wait_for "PostgreSQL at $PG_HOST:$PG_PORT (after restart)" "see $(pg_log)." pg_ready
		conns=$(pg_tcp -d postgres -c 'SHOW max_connections')
		[ "$conns" -ge "$PG_MIN_CONNS" ] ||
			die "PostgreSQL max_connections is still $conns after restart; check postgresql.auto.conf / postgresql.conf and rerun."
	fi

	if [ "$exists" != t ]; then
		say "postgresql: creating database $DB_NAME (owner $PG_USER)"
		pg_tcp -d postgres -c "CREATE DATABASE $DB_NAME OWNER $PG_USER" >/dev/null 2>&1 ||
			[ "$(pg_tcp -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" = 1 ] ||
			die "could not create PostgreSQL database $DB_NAME; run: psql -h $PG_HOST -U $PG_USER -c 'CREATE DATABASE $DB_NAME'"
	fi
}

pg_down() {
	pg_find_cluster
	if [ -z "$PG_VER" ] || [ "$PG_STATUS" != online ]; then
		if have pg_isready && pg_ready; then
			die "something answers on $PG_HOST:$PG_PORT but it is not a pg_lsclusters cluster; stop it by hand."
		fi
		say "postgresql: already down"
		return 0
	fi
	need_root "stopping PostgreSQL"
	say "postgresql: stopping cluster $PG_VER/$PG_CLUSTER"
	pg_ctl stop || die "pg_ctlcluster $PG_VER $PG_CLUSTER stop failed; see $(pg_log)."
	say "postgresql: down"
}

# -------------------------------------------------------------- MariaDB

my_ping() { mariadb-admin --no-defaults -h"$MY_HOST" -P"$MY_PORT" -u"$MY_USER" --connect-timeout=2 ping </dev/null; }
# my_alive: the server answers on TCP. `mariadb-admin ping` already succeeds on
# "Access denied", but fails on "Host ... is not allowed to connect" (fresh
# install + skip-name-resolve: no root@127.0.0.1 yet), which is still an answer.
my_alive() {
	local out
	out=$(my_ping 2>&1) && return 0
	case $out in *"is not allowed to connect"*) return 0 ;; esac
	return 1
}
my_tcp() { mariadb --no-defaults -h"$MY_HOST" -P"$MY_PORT" -u"$MY_USER" --connect-timeout=5 -N -B "$@" </dev/null; }
my_sock() { mariadb --protocol=socket -uroot -N -B "$@" </dev/null; }

my_opt() { # value of a [mysqld] option as mariadbd would see it from config files
	my_print_defaults --mysqld 2>/dev/null | sed -n "s/^--$1=//p" | tail -1
}

my_errlog() {
	local l
	l=$(my_opt log-error || true)
	[ -n "$l" ] || l=$(my_opt log_error || true)
	echo "${l:-the MariaDB error log (datadir/*.err)}"
}

# Make root@localhost/127.0.0.1/::1 accept an empty password over TCP.
# A fresh Debian install only lets root in through unix_socket auth.
my_fix_root() {
	local err
	if err=$(my_tcp -e 'SELECT 1' 2>&1); then return 0; fi
	need_root "fixing MariaDB root login"
	say "mariadb: root cannot log in over TCP with an empty password ($err); fixing via the unix socket"
	my_sock -e "
		ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
		ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
		CREATE USER IF NOT EXISTS 'root'@'::1';
		ALTER USER 'root'@'::1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'::1' WITH GRANT OPTION;
		FLUSH PRIVILEGES;" ||
		die "could not fix MariaDB root over the unix socket; log in as an admin and give root@127.0.0.1 an empty password, then rerun."
	err=$(my_tcp -e 'SELECT 1' 2>&1) ||
		die "MariaDB root still cannot log in over TCP after the fix ($err); check mysql.global_priv for root and rerun."
}

# Persist max_connections so a plain restart of mariadbd keeps it.
my_persist_max_conns() {
	local cur
	cur=$(my_opt max_connections)
	[ -n "$cur" ] || cur=$(my_opt max-connections)
	if [ -n "$cur" ] && [ "$cur" -ge "$MY_MIN_CONNS" ] 2>/dev/null; then return 0; fi
	need_root "editing the MariaDB config"
	local dropin_dir=/etc/mysql/mariadb.conf.d file
	if [ -d "$dropin_dir" ] && cat /etc/mysql/my.cnf /etc/mysql/mariadb.cnf 2>/dev/null |
		grep -qE "^[[:space:]]*!includedir[[:space:]]+$dropin_dir/?[[:space:]]*$"; then
		file=$dropin_dir/99-writeback.cnf
		printf '%s\n[mysqld]\nmax_connections = %s\n' "$MY_MARK" "$MY_MIN_CONNS" >"$file"
	else
		file=/etc/mysql/my.cnf
		[ -f "$file" ] || die "no /etc/mysql/my.cnf to persist max_connections in; add 'max_connections = $MY_MIN_CONNS' under [mysqld] by hand."
		printf '\n%s\n[mysqld]\nmax_connections = %s\n' "$MY_MARK" "$MY_MIN_CONNS" >>"$file"
	fi
	say "mariadb: persisted max_connections = $MY_MIN_CONNS in $file"
}

my_up() {
	if ! have mariadbd || ! have mariadb || ! have mariadb-admin; then
		apt_install mariadb-server mariadb-client
	fi
	if my_alive; then
		say "mariadb: already up at $MY_HOST:$MY_PORT"
	else
		need_root "starting MariaDB"
		if [ ! -d /run/mysqld ]; then
			install -d -o mysql -g mysql -m 0755 /run/mysqld
		fi
		local logfile datadir
		logfile=$(my_opt log-error || true)
		if [ -n "$logfile" ] && [ ! -d "$(dirname "$logfile")" ]; then
			install -d -o mysql -g adm -m 2750 "$(dirname "$logfile")"
		fi
		datadir=$(my_opt datadir || true)
		datadir=${datadir:-/var/lib/mysql}
		if [ ! -d "$datadir/mysql" ]; then
			say "mariadb: initializing data directory $datadir"
			mariadb-install-db --user=mysql --datadir="$datadir" --skip-test-db </dev/null >/dev/null ||
				die "mariadb-install-db --datadir=$datadir failed; fix the data directory and rerun."
		fi
		say "mariadb: starting"
		start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql </dev/null ||
			die "could not launch /usr/sbin/mariadbd; see $(my_errlog)."
		wait_for "MariaDB at $MY_HOST:$MY_PORT" "see $(my_errlog), fix it and rerun $0 up." my_alive
		say "mariadb: up at $MY_HOST:$MY_PORT"
	fi

	my_fix_root

	local info conns exists
	info=$(my_tcp -e "SELECT @@GLOBAL.max_connections, COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '$DB_NAME'")
	read -r conns exists <<<"$info"
	if [ "$conns" -lt "$MY_MIN_CONNS" ]; then
		say "mariadb: max_connections=$conns < $MY_MIN_CONNS; SET GLOBAL max_connections = $MY_MIN_CONNS"
		my_tcp -e "SET GLOBAL max_connections = $MY_MIN_CONNS"
	fi
	my_persist_max_conns
	if [ "$exists" = 0 ]; then
		say "mariadb: creating database $DB_NAME"
		my_tcp -e "CREATE DATABASE IF NOT EXISTS $DB_NAME CHARACTER SET utf8mb4"
	fi
}

my_down() {
	if ! have mariadb-admin || ! my_alive; then
		say "mariadb: already down"
		return 0
	fi
	say "mariadb: stopping"
	mariadb-admin --no-defaults -h"$MY_HOST" -P"$MY_PORT" -u"$MY_USER" shutdown </dev/null >/dev/null 2>&1 ||
		mariadb-admin --protocol=socket -uroot shutdown </dev/null ||
		die "mariadb-admin shutdown failed; stop mariadbd by hand (mariadb-admin -uroot shutdown)."
	wait_gone "MariaDB" my_alive
	say "mariadb: down"
}

# --------------------------------------------------------------- status

status_line() { printf '%-11s %-5s %s%s\n' "$1" "$2" "$3" "${4:+  ($4)}"; }

cmd_status() {
	local bad=0
	if ! have redis-cli; then
		status_line redis down "$REDIS_HOST:$REDIS_PORT" "redis-cli not installed"; bad=1
	elif redis_ping; then
		status_line redis up "$REDIS_HOST:$REDIS_PORT"
	else
		status_line redis down "$REDIS_HOST:$REDIS_PORT"; bad=1
	fi
	if ! have pg_isready; then
		status_line postgresql down "$PG_HOST:$PG_PORT" "pg_isready not installed"; bad=1
	elif pg_ready; then
		status_line postgresql up "$PG_HOST:$PG_PORT"
	else
		status_line postgresql down "$PG_HOST:$PG_PORT"; bad=1
	fi
	if ! have mariadb-admin; then
		status_line mariadb down "$MY_HOST:$MY_PORT" "mariadb-admin not installed"; bad=1
	elif my_alive; then
		status_line mariadb up "$MY_HOST:$MY_PORT"
	else
		status_line mariadb down "$MY_HOST:$MY_PORT"; bad=1
	fi
	bash "$FERRETDB_SH" status || bad=1
	if [ "$bad" -ne 0 ]; then
		say "some services are down; run: bash scripts/services.sh up" >&2
		return 1
	fi
}

FERRETDB_SH=${BASH_SOURCE[0]%/*}/ferretdb.sh

CMD=${1:-}
case "$CMD" in
up)
	redis_up
	pg_up
	my_up
	bash "$FERRETDB_SH" up
	say "all services up (redis $REDIS_HOST:$REDIS_PORT, postgresql $PG_HOST:$PG_PORT db $DB_NAME, mariadb $MY_HOST:$MY_PORT db $DB_NAME, mongodb-wire ${FERRETDB_ADDR:-127.0.0.1:27017})"
	;;
down)
	redis_down
	pg_down
	my_down
	bash "$FERRETDB_SH" down
	;;
status)
	cmd_status || exit 1
	;;
*)
	echo "usage: $0 up|down|status" >&2
	exit 2
	;;
esac
