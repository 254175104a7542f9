#!/usr/bin/env bash
# A local S3-compatible object store for tests and trials: OpenStack Swift
# from Debian (swift-proxy, -account, -container, -object) with its s3api
# and tempauth (which keeps S3 requests' credentials in memcached, so one
# runs too), one replica, every server on 127.0.0.1 (the S3 endpoint on
# CPUOS_OBJSTORE_LISTEN instead, if set), all state under DIR.
#
#   scripts/objstore.sh up DIR [PORT]   start it (the S3 endpoint on PORT,
#                                       default 18080; the three storage
#                                       servers on PORT+1..PORT+3,
#                                       memcached on PORT+4) and print
#                                       the export lines of its endpoint,
#                                       region, access key and secret
#   scripts/objstore.sh down DIR        stop it
#
# `up` waits until the proxy and the servers answer, at most 120 s. The
# access key (tempauth's "account:user") has a colon: give it to libcurl
# as CURLOPT_USERNAME, never inside a "user:password" string.
# Production stores are named in docs/cluster.md; this one is for tests.
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 up|down DIR [PORT]" >&2; exit 2; }

down() {
	local f pid
	for f in "$dir"/run/*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		# The servers fork workers: the whole group goes.
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
		rm -f "$f"
	done
}

case $cmd in
down) down; exit 0 ;;
up) ;;
*) echo "$0: unknown command $cmd (up or down)" >&2; exit 2 ;;
esac

port=${3:-18080}
for b in memcached swift-proxy-server swift-account-server swift-container-server swift-object-server swift-ring-builder; do
	command -v "$b" >/dev/null || { echo "objstore: $b is missing (scripts/deps.sh installs Swift)" >&2; exit 1; }
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
down
rm -rf "$dir/etc" "$dir/srv" "$dir/run" "$dir/log"
mkdir -p "$dir/etc" "$dir/srv/d1" "$dir/run" "$dir/log"
etc=$dir/etc

cat >"$etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_prefix = cpuos-objstore
swift_hash_path_suffix = cpuos-objstore
[storage-policy:0]
name = Policy-0
default = yes
EOF

# One device, one replica, 2^6 partitions: rings in a fraction of a second.
i=1
for kind in object container account; do
	( cd "$etc" &&
	  swift-ring-builder "$kind.builder" create 6 1 0 >/dev/null &&
	  swift-ring-builder "$kind.builder" add "r1z1-127.0.0.1:$((port + i))/d1" 1 >/dev/null &&
	  swift-ring-builder "$kind.builder" rebalance >/dev/null ) ||
		{ echo "objstore: could not build the $kind ring" >&2; exit 1; }
	i=$((i + 1))
done

host=${CPUOS_OBJSTORE_LISTEN:-127.0.0.1}
common() { # port [address]
	cat <<EOF
[DEFAULT]
bind_ip = ${2:-127.0.0.1}
bind_port = $1
workers = 0
swift_dir = $etc
devices = $dir/srv
mount_check = false
log_facility = LOG_LOCAL1
log_level = WARNING
EOF
}
i=1
for kind in object container account; do
	{ common $((port + i))
	  printf '[pipeline:main]\npipeline = %s-server\n[app:%s-server]\nuse = egg:swift#%s\n' "$kind" "$kind" "$kind"
	  [ "$kind" = container ] && printf '[container-sync]\n'
	  true; } >"$etc/$kind-server.conf"
	i=$((i + 1))
done
# s3api before tempauth; slo for multipart uploads (s3api keeps them as
# static large objects); cache before both: tempauth's S3 check needs it.
{ common "$port" "$host"
  cat <<EOF
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$((port + 4))
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:tempauth]
use = egg:swift#tempauth
user_cpuos_tester = testing .admin
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
} >"$etc/proxy-server.conf"

setsid memcached -l 127.0.0.1 -p $((port + 4)) -U 0 -m 32 -u root \
	>"$dir/log/memcached.log" 2>&1 </dev/null &
echo $! >"$dir/run/memcached.pid"
for kind in object container account proxy; do
	setsid "swift-$kind-server" "$etc/$kind-server.conf" \
		>"$dir/log/$kind.log" 2>&1 </dev/null &
	echo $! >"$dir/run/$kind.pid"
done

# Ready when the proxy and the three servers answer HTTP (any status: the
# servers refuse a bare GET, which is an answer).
answers() {
	local p h
	for p in "$port" $((port + 1)) $((port + 2)) $((port + 3)); do
		h=127.0.0.1
		[ "$p" = "$port" ] && h=$host
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$h:$p/" 2>/dev/null)" != 000 ] || return 1
	done
}
end=$((SECONDS + 120))
until answers; do
	for kind in memcached object container account proxy; do
		kill -0 "$(cat "$dir/run/$kind.pid")" 2>/dev/null && continue
		echo "objstore: $kind exited; its log:" >&2
		tail -n 20 "$dir/log/$kind.log" >&2
		down; exit 1
	done
	if [ $SECONDS -ge $end ]; then
		echo "objstore: the S3 API did not answer in 120 s (logs in $dir/log)" >&2
		down; exit 1
	fi
	sleep 0.2
done
cat <<EOF
export CPUOS_S3_ENDPOINT=http://$host:$port
export CPUOS_S3_REGION=us-east-1
export CPUOS_S3_ACCESS_KEY=cpuos:tester
export CPUOS_S3_SECRET_KEY=testing
EOF
