#!/usr/bin/env bash
# Installs the Debian packages cpuos needs to build and test, if any are
# missing (Debian 12 host; needs root). Fast when everything is there.
set -euo pipefail
pkgs=(
	gcc make libc6-dev libjansson-dev        # host tools and the static agent
	ccache                                   # compiles kept: a clean clone builds in seconds
	libmicrohttpd-dev libsqlite3-dev libssl-dev libcurl4-openssl-dev  # cpuosd, cpuos
	libseccomp-dev                           # cpuosd's own syscall filter
	libldns-dev                              # cpuosd's resolver for the guests
	libzstd-dev                              # pauses compressed in an object store
	qemu-system-x86 qemu-utils               # the hypervisor, qcow2 layers
	e2fsprogs                                # mkfs.ext4 for writable layers
	iproute2 nftables                        # a network namespace per sandbox, its egress rules
	linux-source-6.1 bc bison flex libelf-dev libssl-dev cpio xz-utils  # guest kernel
	mmdebstrap erofs-utils debian-archive-keyring python3-pip  # template images
	libarchive-dev                           # templates from OCI images (src/image)
	docker-registry apache2-utils            # a registry and its htpasswd (tests/e2e/test_images.py)
	busybox-static                           # a small image with a shell, as Alpine is (test_images.py)
	python3 python3-pytest procps curl openssl  # tests, benchmarks
	python3-pytest-timeout                   # a limit per pytest test (tests/e2e/conftest.py)
	tmux                                     # a terminal for cpuos shell (tests/e2e/test_terminals.py)
	# An S3 object store for the tests (scripts/objstore.sh): Swift's
	# s3api, whose tempauth keeps S3 credentials in memcached.
	swift-proxy swift-account swift-container swift-object memcached
	zstd                                     # what a test forges in the store
	# cpuosd --database: its state in PostgreSQL (libpq); the tests run
	# a server of their own (scripts/pg.sh).
	libpq-dev postgresql
	haproxy                                  # in front of the API replicas (scripts/cluster.sh)
	# make fuzz: clang 14 and its libFuzzer (libclang_rt.fuzzer), which
	# clang only recommends, and --no-install-recommends leaves out.
	clang libclang-rt-14-dev
)
# Node.js for the TypeScript SDK (AbortSignal.any: 20.3 or later). Debian 12
# has 18: its npm then installs npm's node@22, a build of Node with its own
# binary, which /usr/local/bin puts first on PATH.
node_ok() {
	command -v node >/dev/null &&
		node -e 'const [a, b] = process.versions.node.split(".").map(Number);
			process.exit(a > 20 || (a === 20 && b >= 3) ? 0 : 1)'
}
node_ok || command -v npm >/dev/null || pkgs+=(nodejs npm)
# Python packages the end-to-end tests use (seed 003 runs on the real
# openai client). Debian's python3 refuses a plain pip install (PEP 668).
pip_install() {
	python3 -c "import $1" 2>/dev/null && return 0
	python3 -m pip install --quiet "$1" 2>/dev/null ||
		python3 -m pip install --quiet --break-system-packages "$1"
}

# QEMU 10 from Debian 12's bookworm-backports (Debian's own 7.2 opens a
# snapshot's RAM for writing even to map it private; 8.2's rom=off opens it
# read-only): the suite added, and QEMU's packages pinned to it so that
# an upgrade takes QEMU from there too. The QEMU a pause was made with is
# kept by cpuosd (src/runner/qemu_build.h): one that replaces it strands
# none. Debian 12's 7.2 stays installable from bookworm (scripts/qemu-other.sh).
qemu_pkgs="qemu-system-x86 qemu-system-common qemu-system-data qemu-system-modules-opengl"
qemu_pkgs+=" qemu-utils qemu-block-extra"
backports_ok() {
	grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ &&
		[ -f /etc/apt/preferences.d/cpuos-qemu ]
}
qemu_ok() {
	dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | grep -q '^1:10\.'
}
if ! backports_ok || ! qemu_ok; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: QEMU 10 from bookworm-backports is missing; run as root to install it" >&2
		exit 1
	fi
	if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		# The mirror the system's sources name, else Debian's.
		mirror=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
			/etc/apt/sources.list.d/ 2>/dev/null | head -1 | tr -d ' ' || true)
		echo "deb ${mirror:-http://deb.debian.org/debian} bookworm-backports main" \
			>/etc/apt/sources.list.d/cpuos-backports.list
	fi
	# The QEMU being replaced, saved for cpuosd to keep as a build at its
	# next start: pauses it made resume on it (docs/architecture.md).
	if [ -x /usr/bin/qemu-system-x86_64 ] && ! qemu_ok; then
		v=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | tr -c 'A-Za-z0-9.\n' _)
		out=/var/cache/cpuos/qemu-outgoing/${v:-unknown}/usr
		mkdir -p "$out/bin" "$out/lib/x86_64-linux-gnu/qemu" "$out/share/qemu"
		cp -L /usr/bin/qemu-system-x86_64 "$out/bin/"
		cp -L /usr/lib/x86_64-linux-gnu/qemu/accel-*.so "$out/lib/x86_64-linux-gnu/qemu/" 2>/dev/null || true
		cp -L /usr/share/qemu/*.bin /usr/share/qemu/*.rom "$out/share/qemu/" 2>/dev/null || true
		echo "deps: QEMU $v saved in $out for cpuosd to keep"
	fi
	printf 'Package: %s\nPin: release n=bookworm-backports\nPin-Priority: 990\n' \
		"$qemu_pkgs" >/etc/apt/preferences.d/cpuos-qemu
	echo "deps: QEMU 10 from bookworm-backports"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-utils
	qemu_ok || { echo "deps: qemu-system-x86 is not 10.x after installing it" >&2; exit 1; }
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} != 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing packages (${missing[*]}); run as root to install them" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# No recommends: qemu-system-x86 would pull in a desktop's worth of them.
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
pip_install openai
pip_install dnslib  # the stand-in internet's DNS server (tests/e2e/internet.py)
pip_install mypy    # the SDK's types are checked (sdk/python/tests/test_unit.py)
# Debian's package above, unless python3 is another than Debian's (pyenv).
pip_install pytest_timeout
if ! node_ok; then
	echo "deps: installing Node.js 22 from npm (node@22)"
	npm install --global --no-audit --no-fund --loglevel=error node@22
	hash -r
	node_ok || { echo "deps: node $(node --version 2>&1) is still older than 20.3" >&2; exit 1; }
fi
