#!/usr/bin/env bash
# Unpacks Debian 12's own QEMU (7.2, from bookworm: the build that QEMU 10
# from bookworm-backports replaces) into DIR, unless it is there, and prints
# its binary's path. For the test that a pause made by one QEMU build
# resumes after the daemon runs another (tests/e2e/test_qemu_builds.py):
# nothing is installed, the packages are only downloaded and unpacked.
set -euo pipefail
dir=${1:?usage: qemu-other.sh DIR}
bin="$dir/usr/bin/qemu-system-x86_64"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt's download user writes there
(cd "$tmp" && apt-get download -q qemu-system-x86/bookworm qemu-system-common/bookworm \
	qemu-system-data/bookworm >&2)
mkdir -p "$tmp/root"
for deb in "$tmp"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
done
[ -x "$tmp/root/usr/bin/qemu-system-x86_64" ] || { echo "qemu-other: no binary in the packages" >&2; exit 1; }
mkdir -p "$(dirname "$dir")"
rm -rf "$dir"
mv "$tmp/root" "$dir"
echo "$bin"
