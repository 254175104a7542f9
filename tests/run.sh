#!/usr/bin/env bash
# Runs every test: C unit tests, then integration tests against real QEMU
# microVMs, then the pytest suite; each prints "N passed, N failed" and this
# script closes with the sum. A test that cannot run fails, it never skips.
set -u
cd "$(dirname "$0")/.."
export CPUOS_GUEST_DIR=${CPUOS_GUEST_DIR:-$PWD/build/guest}
export CPUOS_RUN_DIR=${CPUOS_RUN_DIR:-/tmp/cpuos-test-run}
mkdir -p "$CPUOS_RUN_DIR"

passed=0 failed=0
count() { # reads a runner's output, adds its closing line to the totals
	local out=$1 rc=$2 name=$3 line p f
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
	if [ -z "$line" ]; then
		echo "FAIL: $name printed no summary (exit $rc)"
		failed=$((failed + 1))
		return
	fi
	p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
	f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
	if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
		echo "FAIL: $name exited $rc"
		f=1
	fi
	passed=$((passed + p))
	failed=$((failed + f))
}

run() { # name, command...
	local name=$1 out rc
	shift
	out=$(mktemp)
	echo "== $name"
	"$@" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	count "$out" "$rc" "$name"
	rm -f "$out"
}

for t in build/tests/test_proto build/tests/test_qemu build/tests/test_agent build/tests/test_store; do
	[ -x "$t" ] && run "$(basename "$t")" timeout 300 "$t"
done
run replay_proto timeout 300 build/tests/replay_proto tests/fuzz/corpus/proto
run test_vm timeout 1800 build/tests/test_vm
if [ -d tests/e2e ]; then
	out=$(mktemp)
	echo "== pytest"
	timeout 1800 python3 -m pytest -q tests/e2e 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	# pytest's closing line: "N passed, M failed in 3.2s" or "N passed in ..."
	p=$(grep -Eo '[0-9]+ passed' "$out" | tail -n 1 | cut -d' ' -f1)
	f=$(grep -Eo '[0-9]+ (failed|error)' "$out" | awk '{s+=$1} END {print s+0}')
	[ "$rc" != 0 ] && [ "${f:-0}" = 0 ] && f=1
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0}))
	rm -f "$out"
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
