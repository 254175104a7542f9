#!/usr/bin/env bash
# A cpuos cluster on this one machine, to try it or test against: a
# PostgreSQL (scripts/pg.sh), an object store (scripts/objstore.sh), N node
# daemons (cpuosd --node, default 3), two cpuos-api replicas and HAProxy in
# front of them, all state under DIR. Each node runs in a network namespace
# of its own, joined to a bridge of this cluster (10.199.X.0/24, X from
# DIR; the host is .1, node i is .10+i), where PostgreSQL and the object
# store listen too; the replicas and HAProxy are on the host (HAProxy on
# 127.0.0.1). Needs root (the nodes run VMs) and a built tree (make all
# guest).
#
#   scripts/cluster.sh up DIR [N]          start it and print the export
#                                          lines of its API (CPUOS_API_URL,
#                                          CPUOS_API_KEY)
#   scripts/cluster.sh stop-node DIR NAME  end node NAME (node-1...) as a
#                                          host loss would: SIGKILL of its
#                                          daemon and of every QEMU it runs
#   scripts/cluster.sh start-node DIR NAME start it again (it rejoins)
#   scripts/cluster.sh cut-node DIR NAME   cut its network off (its link to
#                                          the bridge down): a partition;
#                                          it runs on, unable to renew
#   scripts/cluster.sh heal-node DIR NAME  its link up again
#   scripts/cluster.sh down DIR            end everything
#
# The nodes' lease from CPUOS_CLUSTER_LEASE (seconds, default 15); the
# programs from CPUOS_BIN_DIR (default build/bin). Ports from
# CPUOS_CLUSTER_PORT (default 17000): HAProxy on it (port URLs on +3),
# the replicas on +1 and +2 (their port URLs on +4 and +5), node i on
# +10+i (its port URLs' proxy on +40+i),
# PostgreSQL on +80, the object store on +90..+94. The nodes share the
# host's cache (template snapshots, the egress CA under it, and one jail
# uid, as the tests' daemons do) and a cluster secret made at `up`. A node
# is entered with nsenter --net, not ip netns exec, which would remount
# /sys and hide the cgroups the jail uses.
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || {
	echo "usage: $0 up DIR [N] | stop-node|start-node|cut-node|heal-node DIR NAME | down DIR" >&2
	exit 2
}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CPUOS_BIN_DIR:-$root/build/bin}
guest=${CPUOS_GUEST_DIR:-$root/build/guest}
base=${CPUOS_CLUSTER_PORT:-17000}

say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# The cluster's names and addresses, from DIR (absolute by now).
net_of() {
	local h
	h=$(printf '%s' "$dir" | sha256sum | cut -c1-4)
	tag=$h
	bridge=cpcl$h
	subnet=10.199.$((16#${h:0:2})) # .0/24
	host_ip=$subnet.1
}
ns_of() { echo "cpcl-$tag-$1"; }     # a node's namespace
veth_of() { echo "cpcl$tag${1#node-}"; } # its link's host end

# The bridge, once.
bridge_up() {
	net_of
	ip link show "$bridge" >/dev/null 2>&1 && return 0
	ip link add "$bridge" type bridge
	ip addr add "$host_ip/24" dev "$bridge"
	ip link set "$bridge" up
}

# Node i's namespace and link, once.
node_net() { # name i
	local ns veth
	ns=$(ns_of "$1") veth=$(veth_of "$1")
	[ -e "/var/run/netns/$ns" ] && return 0
	ip netns add "$ns"
	ip link add "$veth" type veth peer name eth0 netns "$ns"
	ip link set "$veth" master "$bridge" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "$subnet.$((10 + $2))/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route add default via "$host_ip"
}

# Waits until URL answers 2xx (with curl's extra arguments), at most $2 s.
wait_http() {
	local url=$1 limit=$2 i
	shift 2
	for ((i = 0; i < limit * 5; i++)); do
		curl -sf -o /dev/null "$@" "$url" && return 0
		sleep 0.2
	done
	return 1
}

node_start() { # name
	local name=$1 i=${1#node-} nd="$dir/$1"
	[[ $i =~ ^[1-9][0-9]?$ ]] && ((i <= 29)) || die "no node $name (node-1 ... node-29)"
	# shellcheck disable=SC1091
	. "$dir/env"
	mkdir -p "$nd"
	chmod 0711 "$nd"
	bridge_up
	node_net "$name" "$i"
	local ip=$subnet.$((10 + i)) lease=${CPUOS_CLUSTER_LEASE:-15}
	# a node cut off from the database learns it within about a lease, not
	# lib/sql's 30 s of TCP patience (the URL's settings win)
	local db="${CPUOS_PG_URL/127.0.0.1/$host_ip}?tcp_user_timeout=$((lease * 1000))"
	db+="&connect_timeout=$((lease > 2 ? lease : 2))"
	nsenter --net="/var/run/netns/$(ns_of "$name")" setsid "$bin/cpuosd" \
		--state-dir "$nd/state" --socket "$nd/run/cpuosd.sock" \
		--guest-dir "$guest" --jail-ids 1900000000:65536 \
		--listen "$ip:$((base + 10 + i))" --url-listen "$ip:$((base + 40 + i))" \
		--url-public "127.0.0.1:$((base + 3))" \
		--net-range "10.$((200 + i)).0.0/20" --pool-python 0 \
		--database "$db" --node "$name" \
		--node-lease "$lease" --cluster-secret "$dir/cluster.secret" \
		--s3-endpoint "$CPUOS_S3_ENDPOINT" --s3-bucket cpuos \
		>>"$nd/cpuosd.log" 2>&1 </dev/null &
	echo $! >"$nd/pid"
	wait_http "http://$ip:$((base + 10 + i))/v1/health" 120 -H "@$dir/cluster.header" ||
		{ tail -5 "$nd/cpuosd.log" >&2; die "$name did not start ($nd/cpuosd.log)"; }
	say "$name up on $ip:$((base + 10 + i)) (network namespace $(ns_of "$name"))"
}

node_kill() { # name
	local nd="$dir/$1" pid
	[ -f "$nd/pid" ] || return 0
	pid=$(cat "$nd/pid")
	kill -KILL "$pid" 2>/dev/null || true
	# its QEMUs (their command lines name its state directory), its
	# helper and cpuos-netd
	pkill -KILL -f -- "$(printf '%s' "$nd/state/" | sed 's/[].[^$*\\]/\\&/g')" 2>/dev/null || true
	rm -f "$nd/pid"
}

up() {
	local n=${3:-3} i
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 20)) || die "N is 1 to 20"
	[ -x "$bin/cpuosd" ] && [ -x "$bin/cpuos-api" ] || die "$bin lacks cpuosd or cpuos-api: make all guest"
	command -v haproxy >/dev/null || die "haproxy is missing (scripts/deps.sh installs it)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[ -f "$dir/env" ] && die "$dir holds a cluster already: $0 down $dir first"
	chmod 0711 "$dir" # for PostgreSQL's user, and cpuosd once it gave root up
	umask 077 # the passwords and the secret below are root's alone
	bridge_up
	say "PostgreSQL..."
	CPUOS_PG_LISTEN=$host_ip "$root/scripts/pg.sh" up "$dir/pg" $((base + 80)) >"$dir/env"
	say "object store..."
	CPUOS_OBJSTORE_LISTEN=$host_ip "$root/scripts/objstore.sh" up "$dir/s3" $((base + 90)) >>"$dir/env"
	[ -f "$dir/cluster.secret" ] || head -c 32 /dev/urandom | base64 >"$dir/cluster.secret"
	# for curl's -H @file: the secret never on a command line
	echo "cpuos-cluster: $(cat "$dir/cluster.secret")" >"$dir/cluster.header"
	umask 022
	for ((i = 1; i <= n; i++)); do
		node_start "node-$i"
	done
	# shellcheck disable=SC1091
	. "$dir/env"
	for i in 1 2; do
		setsid "$bin/cpuos-api" --listen "127.0.0.1:$((base + i))" --database "$CPUOS_PG_URL" \
			--url-listen "127.0.0.1:$((base + 3 + i))" \
			--cluster-secret "$dir/cluster.secret" >>"$dir/api-$i.log" 2>&1 </dev/null &
		echo $! >"$dir/api-$i.pid"
	done
	cat >"$dir/haproxy.cfg" <<-EOF
		global
		    pidfile $dir/haproxy.pid
		# TCP, not HTTP: a replica ends each connection after one request,
		# and a client that goes away (closing its side) must reach the
		# replica at once, so that an exec it no longer waits for is killed
		# on its node; in HTTP mode HAProxy keeps waiting for the answer
		defaults
		    mode tcp
		    timeout connect 5s
		    timeout client 1h
		    timeout server 1h
		frontend cpuos
		    bind 127.0.0.1:$base
		    default_backend api
		backend api
		    option httpchk GET /v1/health
		    balance roundrobin
		    server api-1 127.0.0.1:$((base + 1)) check inter 1s
		    server api-2 127.0.0.1:$((base + 2)) check inter 1s
		frontend ports
		    bind 127.0.0.1:$((base + 3))
		    default_backend ports
		backend ports
		    balance roundrobin
		    server ports-1 127.0.0.1:$((base + 4)) check inter 1s
		    server ports-2 127.0.0.1:$((base + 5)) check inter 1s
	EOF
	haproxy -D -f "$dir/haproxy.cfg" || die "haproxy did not start"
	wait_http "http://127.0.0.1:$base/v1/health" 60 || die "the API does not answer on $base"
	local key
	key=$(curl -sf --unix-socket "$dir/node-1/run/cpuosd.sock" -X POST http://x/v1/keys \
		-d '{"name":"cluster"}' | sed -n 's/.*"key": *"\([^"]*\)".*/\1/p')
	[ -n "$key" ] || die "no key from node-1"
	say "up: HAProxy on 127.0.0.1:$base (port URLs on $((base + 3))), replicas on" \
		"$((base + 1)) and $((base + 2)), $n nodes"
	echo "export CPUOS_API_URL=http://127.0.0.1:$base"
	echo "export CPUOS_API_KEY=$key"
}

down() {
	local f
	[ -d "$dir" ] || return 0
	dir=$(cd "$dir" && pwd) # the QEMUs name its absolute path
	[ -f "$dir/haproxy.pid" ] && kill "$(cat "$dir/haproxy.pid")" 2>/dev/null || true
	for f in "$dir"/api-*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	for f in "$dir"/node-*/pid; do
		[ -f "$f" ] || continue
		# SIGTERM: each stops its helper; its QEMUs are ended next
		kill "$(cat "$f")" 2>/dev/null || true
	done
	for f in "$dir"/node-*; do
		[ -d "$f" ] || continue
		for _ in $(seq 1 100); do
			[ -f "$f/pid" ] && kill -0 "$(cat "$f/pid")" 2>/dev/null || break
			sleep 0.1
		done
		node_kill "$(basename "$f")"
	done
	"$root/scripts/objstore.sh" down "$dir/s3" || true
	"$root/scripts/pg.sh" down "$dir/pg" || true
	net_of
	for f in /var/run/netns/"cpcl-$tag"-*; do
		[ -e "$f" ] && ip netns del "$(basename "$f")"
	done
	ip link del "$bridge" 2>/dev/null || true
	rm -f "$dir/env" "$dir/haproxy.pid"
	say "down"
}

case $cmd in
up) up "$@" ;;
down) down ;;
stop-node)
	[ -n "${3:-}" ] || die "stop-node DIR NAME"
	dir=$(cd "$dir" && pwd)
	[ -d "$dir/$3" ] || die "no node $3 in $dir"
	node_kill "$3"
	say "$3 stopped (SIGKILL)"
	;;
start-node)
	[ -n "${3:-}" ] || die "start-node DIR NAME"
	dir=$(cd "$dir" && pwd)
	node_start "$3"
	;;
cut-node | heal-node)
	[ -n "${3:-}" ] || die "$cmd DIR NAME"
	dir=$(cd "$dir" && pwd)
	net_of
	ip link show "$(veth_of "$3")" >/dev/null 2>&1 || die "no node $3 in $dir"
	ip link set "$(veth_of "$3")" "$([ "$cmd" = cut-node ] && echo down || echo up)"
	say "$3 $([ "$cmd" = cut-node ] && echo cut off || echo reachable again)"
	;;
*) die "unknown command $cmd" ;;
esac
