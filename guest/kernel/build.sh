#!/usr/bin/env bash
# Builds the cpuos guest kernel (bzImage) from Debian's linux-source-6.1 and
# cpuos.config, cached outside the repository under $CPUOS_CACHE/kernel/<hash>,
# where <hash> covers the config fragment, this script and the source version.
# Usage: build.sh OUTPUT   (OUTPUT becomes a copy of the cached bzImage)
set -euo pipefail

out=${1:?usage: build.sh OUTPUT}
here=$(cd "$(dirname "$0")" && pwd)
cache=${CPUOS_CACHE:-/var/cache/cpuos}
src_tar=/usr/src/linux-source-6.1.tar.xz

if [ ! -f "$src_tar" ]; then
	echo "kernel: missing $src_tar (apt-get install linux-source-6.1)" >&2
	exit 1
fi
src_ver=$(dpkg-query -W -f='${Version}' linux-source-6.1)
key=$( (echo "$src_ver"; cat "$here/cpuos.config" "$here/build.sh") | sha256sum | cut -c1-16)
dir=$cache/kernel/$key

if [ -f "$dir/bzImage" ]; then
	echo "kernel: cached $dir/bzImage"
else
	mkdir -p "$dir"
	work=$dir/build
	rm -rf "$work" && mkdir -p "$work"
	echo "kernel: unpacking linux-source $src_ver"
	tar -C "$work" -xf "$src_tar"
	ksrc=$work/linux-source-6.1
	make -s -C "$ksrc" allnoconfig KCONFIG_ALLCONFIG="$here/cpuos.config" >/dev/null
	# A symbol that allnoconfig could not honour (missing dependency) would
	# silently vanish; refuse to build a kernel that lacks a requested option.
	missing=0
	while IFS= read -r line; do
		case "$line" in CONFIG_*=y) ;; *) continue ;; esac
		if ! grep -qx "$line" "$ksrc/.config"; then
			echo "kernel: option not set: $line" >&2
			missing=1
		fi
	done <"$here/cpuos.config"
	[ "$missing" = 0 ] || exit 1

	jobs=$(nproc)
	start=$(date +%s)
	echo "kernel: building with $jobs jobs (about 8 minutes on 2 cores)"
	# Progress: one line per 250 objects compiled, so logs stay readable.
	make -C "$ksrc" -j"$jobs" bzImage 2>&1 | awk '
		/^  CC / { n++; if (n % 250 == 0) { printf "kernel: %d objects compiled\n", n; fflush() } }
		/error|Error/ { print; fflush() }'
	test "${PIPESTATUS[0]}" = 0
	cp "$ksrc/arch/x86/boot/bzImage" "$dir/bzImage.tmp"
	mv "$dir/bzImage.tmp" "$dir/bzImage"
	rm -rf "$work"
	echo "kernel: built in $(( $(date +%s) - start ))s: $dir/bzImage"
fi
mkdir -p "$(dirname "$out")"
cp "$dir/bzImage" "$out"
