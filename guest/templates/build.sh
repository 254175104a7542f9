#!/usr/bin/env bash
# Builds a read-only erofs template image (Debian trixie rootfs made by
# mmdebstrap from NAME.recipe on top of base.recipe), cached outside the repo
# as $CPUOS_CACHE/templates/NAME-<hash>.erofs, and symlinks OUTPUT to it.
# Usage: build.sh NAME OUTPUT   (NAME: base, python or node)
set -euo pipefail
set -f  # recipe lists hold dpkg path globs; never expand them against the host

name=${1:?usage: build.sh NAME OUTPUT}
out=${2:?usage: build.sh NAME OUTPUT}
here=$(cd "$(dirname "$0")" && pwd)
cache=${CPUOS_CACHE:-/var/cache/cpuos}/templates
mirror=http://deb.debian.org/debian

# Prints variable $2 of recipe file $1 (recipes are sh fragments; see base.recipe).
field() {
	# shellcheck disable=SC1090
	(. "$1"; echo "${!2:-}")
}

recipes=("$here/base.recipe")
[ "$name" = base ] || recipes+=("$here/$name.recipe")
if [ ! -f "${recipes[-1]}" ]; then
	echo "template $name: no recipe ${recipes[-1]}" >&2
	exit 1
fi
needs=$(for r in "${recipes[@]}"; do field "$r" NEEDS; done)
for tool in mmdebstrap mkfs.erofs $needs; do
	if ! command -v "$tool" >/dev/null; then
		echo "template $name: missing $tool (apt-get install mmdebstrap erofs-utils python3-pip)" >&2
		exit 1
	fi
done

key=$(cat "${recipes[@]}" "$here/build.sh" | sha256sum | cut -c1-16)
img=$cache/$name-$key.erofs

if [ -f "$img" ]; then
	echo "template $name: cached $img"
else
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.$name-build.XXXXXX")
	chmod 755 "$tmp"  # apt downloads as _apt, which must reach the rootfs
	# --one-file-system: never descend into a mount left behind by a crash.
	trap 'rm -rf --one-file-system "$tmp"' EXIT
	start=$(date +%s)

	packages=() excludes=() hooks=()
	for r in "${recipes[@]}"; do
		# shellcheck disable=SC2207  # word-splitting the lists is intended
		packages+=($(field "$r" PACKAGES)) excludes+=($(field "$r" EXCLUDE))
		hooks+=(--customize-hook="set -e; . '$r'; if command -v customize >/dev/null; then customize \"\$1\"; fi")
	done
	about=$(field "${recipes[-1]}" ABOUT)

	echo "template $name: mmdebstrap (about ${about:-a few minutes})"
	# unshare mode (as root: mount namespace only, real ownership) so that the
	# chroot's /proc, /sys and /dev mounts vanish even if we are killed.
	# Paths in the recipes' EXCLUDE (docs, man pages, ...) are never unpacked;
	# the copyright files are kept.
	mmdebstrap --mode=unshare --variant=minbase \
		--include="$(IFS=,; echo "${packages[*]}")" \
		--aptopt='Acquire::Languages "none"' \
		"${excludes[@]/#/--dpkgopt=path-exclude=}" \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		"${hooks[@]}" \
		trixie "$tmp/root" "$mirror"

	echo "template $name: mkfs.erofs"
	# Uncompressed: guests run under TCG (~18x slower than native), where
	# decompression costs more than lz4hc's 1.8-2.1x saving (python: 563 MB
	# plain, 316 MB lz4hc, 267 MB lz4hc -C65536). mtimes are kept, because
	# Python's .pyc files are only used while their source mtime matches.
	# /dev is populated by the guest's devtmpfs; ship it empty.
	mkfs.erofs --quiet --exclude-regex='^dev/.+' "$tmp/image.tmp" "$tmp/root"
	mv "$tmp/image.tmp" "$img"  # same filesystem: atomic
	echo "template $name: done in $(($(date +%s) - start))s, $(($(stat -c %s "$img") / 1000000)) MB"
fi
mkdir -p "$(dirname "$out")"
ln -sfn "$img" "$out"
