#!/usr/bin/env bash
# Runs every test: C unit tests, then integration tests against real QEMU
# microVMs, then the fuzz corpus replays, then the pytest suite; each prints
# "N passed, N failed" and this script closes with the sum. A test that
# cannot run fails, it never skips: a missing test binary is a failure.
#
# Environment (all optional):
#   BUILD_DIR      the build to test (default build; make test-asan uses
#                  build-asan, make test-tsan build-tsan)
#   CPUOS_TESTS    which suites, of "unit vm fuzz e2e" (default all four)
#   CPUOS_SANITIZER  set by make test-asan and test-tsan: the time bounds
#                  (each C case's, each e2e test's, each suite's) scale by 3,
#                  or 5 for thread
#   CPUOS_SANITIZER_LOGS  a directory the sanitizers write their reports to
#                  (log_path in ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS):
#                  emptied first, and every report found there at the end
#                  is printed and counted as a failure (gcc's UBSan beside
#                  ASan reports on stderr instead: fatal all the same)
#   CPUOSD_BIN, CPUOS_VM_BIN, CPUOS_CLI_BIN, CPUOS_GATEWAY_BIN  the binaries
#                  the end-to-end tests drive (default: those of BUILD_DIR)
# A test source under tests/unit (at any depth), tests/vm or tests/fuzz
# that the lists below do not name fails too, so no new test is silently
# left out.
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CPUOS_TESTS=${CPUOS_TESTS:-unit vm fuzz e2e}
# A sanitized build is slower: tests/lib/tap.c and tests/e2e/conftest.py
# scale their limits by the same factor.
case ${CPUOS_SANITIZER:-} in
"") slow=1 ;;
thread) slow=5 ;;
*) slow=3 ;;
esac
export CPUOS_GUEST_DIR=${CPUOS_GUEST_DIR:-$PWD/$BUILD_DIR/guest}
export CPUOS_RUN_DIR=${CPUOS_RUN_DIR:-/tmp/cpuos-test-run}
export CPUOS_AGENT=${CPUOS_AGENT:-$PWD/$BUILD_DIR/guest/cpuos-agent}
# The binaries the end-to-end tests drive.
export CPUOSD_BIN=${CPUOSD_BIN:-$PWD/$BUILD_DIR/bin/cpuosd}
export CPUOS_VM_BIN=${CPUOS_VM_BIN:-$PWD/$BUILD_DIR/bin/cpuos-vm}
export CPUOS_CLI_BIN=${CPUOS_CLI_BIN:-$PWD/$BUILD_DIR/bin/cpuos}
export CPUOS_GATEWAY_BIN=${CPUOS_GATEWAY_BIN:-$PWD/$BUILD_DIR/bin/cpuos-gateway}
mkdir -p "$CPUOS_RUN_DIR"

# What each suite must find built; keep in step with the Makefile. The unit
# tests by room: tests/unit/ROOM mirrors src/ROOM, binaries keep flat names.
UNIT_TESTS=(
	test_tap                           # harness: tests/lib/tap itself
	test_proto                         # common
	test_agent test_agent_code         # agent
	test_agentc test_disk test_qemu    # runner
	test_cgroup                        # jail
	test_priv                          # priv
	test_store test_store_usage        # daemon/store
	test_policy test_proxy test_secret # daemon/net
	test_ports                         # daemon/ports
	test_gateway test_gateway_store    # gateway
)
VM_TESTS=(test_vm test_snap)
FUZZ_TARGETS=(proto agentc http priv gateway)

passed=0 failed=0
# A test source that none of the lists above names would never run.
listed() { # list name, source files...
	local list=$1 src name
	shift
	for src in "$@"; do
		[ -e "$src" ] || continue
		name=$(basename "$src" .c)
		name=${name#fuzz_}
		case " $list " in *" $name "*) continue ;; esac
		echo "FAIL: $src is not listed in tests/run.sh"
		failed=$((failed + 1))
	done
}
listed "${UNIT_TESTS[*]}" $(find tests/unit -name 'test_*.c' | sort)
# ... and one beside tests/unit's rooms, or named as another, would break
# the mirror of src/ or the flat names of the binaries.
for src in tests/unit/*.c; do
	[ -e "$src" ] || continue
	echo "FAIL: $src is not in a room of tests/unit (tests/unit/ROOM mirrors src/ROOM)"
	failed=$((failed + 1))
done
for name in $(find tests/unit -name 'test_*.c' -printf '%f\n' | sort | uniq -d); do
	echo "FAIL: two unit tests are named $name:" $(find tests/unit -name "$name")
	failed=$((failed + 1))
done
listed "${VM_TESTS[*]}" tests/vm/test_*.c
listed "${FUZZ_TARGETS[*]}" tests/fuzz/fuzz_*.c

logs=${CPUOS_SANITIZER_LOGS:-}
if [ -n "$logs" ]; then
	mkdir -p "$logs"
	rm -f "$logs"/*
	chmod 1777 "$logs" # cpuosd writes its reports there after giving up root
fi

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

# A test binary that should be there and is not: one failure, one line.
have() { # name, path
	[ -x "$2" ] && return 0
	echo "FAIL: $1: missing test binary $2 (build it: make BUILD=$BUILD_DIR all)"
	failed=$((failed + 1))
	return 1
}

wants() { case " $CPUOS_TESTS " in *" $1 "*) return 0 ;; esac; return 1; }

# Each C case has a limit of its own (tests/lib/tap.h); these bound a
# whole binary, should its harness hang.
if wants unit; then
	for t in "${UNIT_TESTS[@]}"; do
		have "$t" "$BUILD_DIR/tests/$t" && run "$t" timeout $((600 * slow)) "$BUILD_DIR/tests/$t"
	done
fi
if wants vm; then
	for t in "${VM_TESTS[@]}"; do
		have "$t" "$BUILD_DIR/tests/$t" && run "$t" timeout $((1800 * slow)) "$BUILD_DIR/tests/$t"
	done
fi
if wants fuzz; then
	for t in "${FUZZ_TARGETS[@]}"; do
		have "replay_$t" "$BUILD_DIR/tests/replay_$t" &&
			run "replay_$t" timeout $((300 * slow)) "$BUILD_DIR/tests/replay_$t" "tests/fuzz/corpus/$t"
	done
fi
# Each test has a limit of its own (tests/e2e/conftest.py); this bounds
# the whole suite.
if wants e2e; then
	out=$(mktemp)
	echo "== pytest"
	timeout $((1800 * slow)) python3 -m pytest -q tests/e2e 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	# pytest's closing line: "N passed, M failed in 3.2s" or "N passed in ..."
	p=$(grep -Eo '[0-9]+ passed' "$out" | tail -n 1 | cut -d' ' -f1)
	f=$(grep -Eo '[0-9]+ (failed|error)' "$out" | awk '{s+=$1} END {print s+0}')
	[ "$rc" != 0 ] && [ "${f:-0}" = 0 ] && f=1
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0}))
	rm -f "$out"
fi
if [ -n "$logs" ]; then
	for r in "$logs"/*; do
		[ -f "$r" ] || continue
		echo "FAIL: sanitizer report $r:"
		head -n 200 "$r"
		failed=$((failed + 1))
	done
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
