#!/usr/bin/env bash
# A local PostgreSQL server for tests and trials: Debian's postgresql, a
# cluster of its own under DIR (initdb), run as the postgres user (the
# server refuses root), on 127.0.0.1 (and the addresses in
# CPUOS_PG_LISTEN, a comma-separated list, if set) and a socket in DIR/run.
#
#   scripts/pg.sh up DIR [PORT]   start it (default port 15432) and print
#                                 the export lines of its URL
#                                 (CPUOS_PG_URL, database cpuos, role
#                                 cpuos, which may create databases) and
#                                 password (PGPASSWORD, which libpq reads)
#   scripts/pg.sh down DIR        stop it
#
# Connections over TCP need the password (scram-sha-256). fsync is off:
# a test's data need not outlive a crash of the machine, and every commit
# would wait for the disk. `up` waits until the server answers, at most
# 60 s. A production database is named in docs/cluster.md; this one is
# for tests.
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 up|down DIR [PORT]" >&2; exit 2; }
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] && [ -x "$bin/initdb" ] ||
	{ echo "pg: PostgreSQL is missing (scripts/deps.sh installs postgresql)" >&2; exit 1; }

# As the postgres user when root, as oneself otherwise.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case $cmd in
down)
	[ -f "$dir/data/postmaster.pid" ] || exit 0
	as_pg "$bin/pg_ctl" stop -D "$dir/data" -m fast -w -t 30 >/dev/null
	exit 0
	;;
up) ;;
*) echo "$0: unknown command $cmd (up or down)" >&2; exit 2 ;;
esac

port=${3:-15432}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
[ "$(id -u)" = 0 ] && chown postgres: "$dir"
chmod 0700 "$dir"
if [ -f "$dir/data/postmaster.pid" ]; then
	as_pg "$bin/pg_ctl" stop -D "$dir/data" -m immediate -w >/dev/null 2>&1 || true
fi
rm -rf "$dir/data" "$dir/run"
as_pg mkdir -p "$dir/run"
password=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
as_pg sh -c "umask 077; printf '%s\n' '$password' > '$dir/pwfile'"
as_pg "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" -E UTF8 --locale=C.UTF-8 \
	--auth-local=trust --auth-host=scram-sha-256 >"$dir/initdb.log" 2>&1 ||
	{ echo "pg: initdb failed:" >&2; tail -5 "$dir/initdb.log" >&2; exit 1; }
# from the other addresses' networks too (scripts/cluster.sh's nodes)
[ -z "${CPUOS_PG_LISTEN:-}" ] ||
	as_pg sh -c "echo 'host all all samenet scram-sha-256' >> '$dir/data/pg_hba.conf'"
as_pg "$bin/pg_ctl" start -D "$dir/data" -l "$dir/server.log" -w -t 60 \
	-o "-p $port -k $dir/run -c listen_addresses=127.0.0.1${CPUOS_PG_LISTEN:+,$CPUOS_PG_LISTEN} -c fsync=off -c full_page_writes=off" \
	>/dev/null ||
	{ echo "pg: the server did not start:" >&2; tail -5 "$dir/server.log" >&2; exit 1; }
as_pg "$bin/psql" -q -X -v ON_ERROR_STOP=1 -h "$dir/run" -p "$port" -U postgres -d postgres \
	-c "CREATE ROLE cpuos LOGIN CREATEDB PASSWORD '$password'" \
	-c "CREATE DATABASE cpuos OWNER cpuos" >/dev/null
echo "export CPUOS_PG_URL=postgresql://cpuos@127.0.0.1:$port/cpuos"
echo "export PGPASSWORD=$password"
