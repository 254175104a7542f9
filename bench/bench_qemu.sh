#!/usr/bin/env bash
# The two QEMU builds side by side in one run (issue 23): the installed one
# (QEMU 10 from bookworm-backports) and Debian 12's own 7.2, unpacked by
# scripts/qemu-other.sh (relocatable: it finds its modules and firmware
# beside its binary). For each: cold boot and template-snapshot create
# -> first exec, and pause/resume cycles (bench_snap), then the ratios of
# their p50s. Nothing is asserted.
# Usage: bench/bench_qemu.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
export CPUOS_GUEST_DIR=${CPUOS_GUEST_DIR:-$PWD/build/guest}
export CPUOS_RUN_DIR=${CPUOS_RUN_DIR:-/tmp/cpuos-bench-run}
mkdir -p "$CPUOS_RUN_DIR"
other=$(scripts/qemu-other.sh /var/cache/cpuos/qemu-debian12 2>/dev/null)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for which in installed other; do
	if [ "$which" = other ]; then
		path="$(dirname "$other"):$PATH"
	else
		path=$PATH
	fi
	echo "== $which: $(PATH=$path qemu-system-x86_64 --version | head -1)"
	for only in create pause; do
		PATH=$path build/bench/bench_snap --only "$only" --runs "$runs" | tee -a "$out/$which"
	done
done
# The p50 of each line both runs printed, and installed / other.
echo "== installed / other, p50"
join -t'|' <(sed -n 's/^  \(.*[A-Za-z)]\)  *p50  *\([0-9.]*\) ms.*/\1|\2/p' "$out/installed" | sort -t'|' -k1,1) \
	<(sed -n 's/^  \(.*[A-Za-z)]\)  *p50  *\([0-9.]*\) ms.*/\1|\2/p' "$out/other" | sort -t'|' -k1,1) |
	awk -F'|' '$3 > 0 { printf "  %-42s %9.1f / %9.1f ms  %.2fx\n", $1, $2, $3, $2 / $3 }'
