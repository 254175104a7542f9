#!/usr/bin/env bash
# Packs cpuos-agent as /init into an uncompressed newc initramfs. Uncompressed
# because the kernel unpacks it on every boot and, under TCG, decompressing
# costs more than reading the extra bytes.
# Usage: mkinitramfs.sh AGENT OUTPUT
set -euo pipefail
agent=${1:?usage: mkinitramfs.sh AGENT OUTPUT}
out=${2:?usage: mkinitramfs.sh AGENT OUTPUT}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{dev,proc,sys,mnt}
install -m 0755 "$agent" "$stage/init"
# The same bytes from the same agent, wherever and whenever it is packed:
# template snapshots are named by the initramfs's checksum, and one that
# differs means each is made again (minutes under TCG).
find "$stage" -mindepth 1 -exec touch -h -d @0 {} +
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
	cpio --quiet -o -H newc -R 0:0 --reproducible) >"$out.tmp"
mv "$out.tmp" "$out"
