#!/usr/bin/env bash
# Installs the Debian packages cpuos needs to build and test, if any are
# missing (Debian 12 host; needs root). Fast when everything is there.
set -euo pipefail
pkgs=(
	gcc make libc6-dev libjansson-dev        # host tools and the static agent
	qemu-system-x86 qemu-utils               # the hypervisor, qcow2 layers
	e2fsprogs                                # mkfs.ext4 for writable layers
	linux-source-6.1 bc bison flex libelf-dev libssl-dev cpio xz-utils  # guest kernel
	mmdebstrap erofs-utils debian-archive-keyring python3-pip  # template images
	python3 python3-pytest procps            # tests
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages (${missing[*]}); run as root to install them" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# No recommends: qemu-system-x86 would pull in a desktop's worth of them.
apt-get install -y -q --no-install-recommends "${missing[@]}"
