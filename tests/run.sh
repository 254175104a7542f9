#!/usr/bin/env bash
# Runs every test, in parts: C unit tests (unit), integration tests against
# real QEMU microVMs (vm), the fuzz corpus replays (fuzz), the SDKs' own
# tests that need no daemon (sdk: pytest over sdk/python/tests, node over
# @cpuos/sdk's unit suite), then the end-to-end pytest suite against a real
# cpuosd (e2e). Each runner prints "N passed, N failed" and this script
# closes with the sum. A test that cannot run fails, it never skips: a
# missing test binary is a failure. docs/testing.md says more.
#
# Each part's duration is printed after it; at the end come the ten
# slowest tests, and both go to $BUILD_DIR/test-durations.txt (every test's
# time to $BUILD_DIR/test-times.tsv: seconds, part, test).
#
# Environment (all optional):
#   BUILD_DIR      the build to test (default build; make test-asan uses
#                  build-asan, make test-tsan build-tsan)
#   CPUOS_TESTS    which parts, of "unit vm fuzz sdk e2e" (default all five)
#   CPUOS_E2E      the end-to-end modules to run (default all of tests/e2e;
#                  make test-tsan names the ones whose daemon threads race)
#   CPUOS_SANITIZER  set by make test-asan and test-tsan: the time bounds
#                  (each C case's, each e2e test's, each part's) scale by 3,
#                  or 5 for thread
#   CPUOS_SANITIZER_LOGS  a directory the sanitizers write their reports to
#                  (log_path in ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS):
#                  emptied first, and every report found there at the end
#                  is printed and counted as a failure (gcc's UBSan beside
#                  ASan reports on stderr instead: fatal all the same)
#   CPUOSD_BIN, CPUOS_VM_BIN, CPUOS_CLI_BIN, CPUOS_GATEWAY_BIN, CPUOS_API_BIN, CPUOS_E2B_BIN  the binaries
#                  the end-to-end tests drive (default: those of BUILD_DIR)
# A test source under tests/unit (at any depth), tests/vm or tests/fuzz
# that the lists below do not name fails too, so no new test is silently
# left out.
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CPUOS_TESTS=${CPUOS_TESTS:-unit vm fuzz sdk e2e}
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
export CPUOS_API_BIN=${CPUOS_API_BIN:-$PWD/$BUILD_DIR/bin/cpuos-api}
export CPUOS_E2B_BIN=${CPUOS_E2B_BIN:-$PWD/$BUILD_DIR/bin/cpuos-e2b}
mkdir -p "$CPUOS_RUN_DIR"

# What each suite must find built; keep in step with the Makefile. The unit
# tests by room: tests/unit/ROOM mirrors src/ROOM, binaries keep flat names.
UNIT_TESTS=(
	test_tap                           # harness: tests/lib/tap itself
	test_proto test_buf test_unixsock test_http1 # common
	test_agent test_agent_code         # agent
	test_agentc test_disk test_qemu test_ramdiff # runner
	test_cgroup                        # jail
	test_priv                          # priv
	test_workers test_loop test_db     # lib
	test_httpd test_opts               # lib
	test_s3                            # lib, with a real object store
	test_sysfilter                     # daemon
	test_sbx                           # daemon/sandbox
	test_api                           # daemon/api
	test_place                         # api
	test_store test_store_usage        # daemon/store
	test_policy test_proxy test_rules test_secret test_netd test_seal # daemon/net
	test_ports                         # daemon/ports
	test_snapblob                      # daemon/blob, with a real object store
	test_gateway test_gateway_store    # gateway
	test_e2b                           # e2b
	test_image                         # image
)
VM_TESTS=(test_vm test_snap)
FUZZ_TARGETS=(proto agentc http priv gateway dns proxy_sni proxy_head netd ramdiff image e2b)

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

# Every test's time, and each part's.
TIMES=$BUILD_DIR/test-times.tsv
DURATIONS=$BUILD_DIR/test-durations.txt
mkdir -p "$BUILD_DIR"
: >"$TIMES"
part_names=() part_secs=()
part_t0=
part_begin() { part_t0=$EPOCHREALTIME; }
part_end() { # part
	local secs
	secs=$(awk -v a="$part_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	part_names+=("$1")
	part_secs+=("$secs")
	echo "== $1 took $secs s"
}

run() { # part, name, command...
	local part=$1 name=$2 out rc
	shift 2
	out=$(mktemp)
	echo "== $name"
	"$@" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	count "$out" "$rc" "$name"
	# tests/lib/tap's verdict lines: "ok - case (1.23 s)"
	sed -nE "s/^(not )?ok - (.*) \(([0-9.]+) s\)\$/\3\t$part\t$name \2/p" "$out" >>"$TIMES"
	rm -f "$out"
}

# pytest over paths, its closing line counted, each test's time taken
# from a JUnit XML file beside the build (test ids from the repository's
# root: what `python3 -m pytest ID` runs).
run_pytest() { # part, time limit, paths...
	local part=$1 limit=$2 out rc line p f xml=$BUILD_DIR/junit-$1.xml
	shift 2
	out=$(mktemp)
	rm -f "$xml"
	echo "== $part: pytest $*"
	timeout "$limit" python3 -m pytest -q --rootdir=. -o junit_family=xunit1 --junitxml="$xml" "$@" 2>&1 |
		tee "$out"
	rc=${PIPESTATUS[0]}
	# The closing line: "N passed, M failed, K errors in 3.2s" (or "... in 3.20s (0:00:03)").
	line=$(grep -E '^(=+ )?[0-9]+ [a-z].* in [0-9.]+s' "$out" | tail -n 1)
	p=$(echo "$line" | grep -Eo '[0-9]+ passed' | cut -d' ' -f1)
	f=$(echo "$line" | grep -Eo '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
	[ "$rc" != 0 ] && [ "${f:-0}" = 0 ] && f=1
	[ "$rc" != 0 ] && [ -z "$line" ] && echo "FAIL: pytest $* exited $rc"
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0}))
	rm -f "$out"
	[ -f "$xml" ] && python3 - "$xml" "$part" >>"$TIMES" <<-'EOF'
		import sys
		import xml.etree.ElementTree as ET
		for tc in ET.parse(sys.argv[1]).iter("testcase"):
		    path, cls, name = tc.get("file") or "", tc.get("classname") or "", tc.get("name")
		    module = path[:-3].replace("/", ".")
		    if cls.startswith(module + "."):  # a test class's
		        name = cls[len(module) + 1:].replace(".", "::") + "::" + name
		    test = f"{path}::{name}" if path else f"{cls}.{name}"
		    print(f"{float(tc.get('time') or 0):.2f}\t{sys.argv[2]}\t{test}")
	EOF
}

# A package's node test file, from its folder, without a daemon in sight:
# node's own summary counted ("ℹ pass 9", "ℹ fail 0"), each test's time
# taken from its spec lines ("✔ name (12.3ms)"; a suite's line, after its
# "▶ name", is not a test).
run_node() { # part, folder, test file
	local part=$1 dir=$2 file=$3 out rc p f exe
	out=$(mktemp)
	echo "== $part: node --test $dir/$file"
	exe=$(command -v node)
	if [ -z "$exe" ] || [ ! -f "$dir/dist/index.js" ]; then
		echo "FAIL: $dir/$file: no node, or $dir/dist is not built (scripts/deps.sh, make all)"
		failed=$((failed + 1))
		return
	fi
	(cd "$dir" && env -u CPUOS_API_URL -u CPUOS_API_KEY -u CPUOS_TEST_KEY_B \
		timeout $((300 * slow)) "$exe" --test --test-reporter=spec --test-concurrency=1 "$file") 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	p=$(grep -E '^ℹ pass [0-9]+$' "$out" | tail -n 1 | awk '{print $3}')
	f=$(grep -E '^ℹ (fail|cancelled) [0-9]+$' "$out" | awk '{s+=$3} END {print s+0}')
	if [ -z "$p" ] || { [ "$rc" != 0 ] && [ "$f" = 0 ]; }; then
		echo "FAIL: node --test $dir/$file exited $rc"
		f=$((f + 1))
	fi
	passed=$((passed + ${p:-0}))
	failed=$((failed + f))
	awk -v part="$part" -v where="$dir/$file" '
		/^ *▶ / { sub(/^ *▶ /, ""); suite[$0] = 1; next }
		/^ *(✔|✖) .* \([0-9.]+ms\)$/ {
			line = $0; sub(/^ *(✔|✖) /, "", line)
			ms = line; sub(/.* \(/, "", ms); sub(/ms\)$/, "", ms)
			sub(/ \([0-9.]+ms\)$/, "", line)
			if (!(line in suite)) printf "%.2f\t%s\t%s: %s\n", ms / 1000, part, where, line
		}' "$out" >>"$TIMES"
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
	part_begin
	for t in "${UNIT_TESTS[@]}"; do
		have "$t" "$BUILD_DIR/tests/$t" && run unit "$t" timeout $((600 * slow)) "$BUILD_DIR/tests/$t"
	done
	part_end unit
fi
if wants vm; then
	part_begin
	for t in "${VM_TESTS[@]}"; do
		have "$t" "$BUILD_DIR/tests/$t" && run vm "$t" timeout $((1800 * slow)) "$BUILD_DIR/tests/$t"
	done
	part_end vm
fi
if wants fuzz; then
	part_begin
	for t in "${FUZZ_TARGETS[@]}"; do
		have "replay_$t" "$BUILD_DIR/tests/replay_$t" &&
			run fuzz "replay_$t" timeout $((300 * slow)) "$BUILD_DIR/tests/replay_$t" "tests/fuzz/corpus/$t"
	done
	part_end fuzz
fi
# No C code of ours runs here: the sanitized runs leave this part out.
if wants sdk; then
	part_begin
	run_pytest sdk $((300 * slow)) sdk/python/tests
	run_node sdk sdk/typescript test/unit.test.mjs
	part_end sdk
fi
# Each test has a limit of its own (tests/e2e/conftest.py); this bounds
# the whole part.
if wants e2e; then
	part_begin
	# shellcheck disable=SC2086 # a list of paths
	run_pytest e2e $((1800 * slow)) ${CPUOS_E2E:-tests/e2e}
	part_end e2e
fi
if [ -n "$logs" ]; then
	for r in "$logs"/*; do
		[ -f "$r" ] || continue
		echo "FAIL: sanitizer report $r:"
		head -n 200 "$r"
		failed=$((failed + 1))
	done
fi

{
	echo "tests/run.sh on $BUILD_DIR${CPUOS_SANITIZER:+ (sanitizer: $CPUOS_SANITIZER)}, $(date -u +%Y-%m-%dT%H:%MZ): $passed passed, $failed failed"
	for i in "${!part_names[@]}"; do
		printf '  %-5s %8s s\n' "${part_names[$i]}" "${part_secs[$i]}"
	done
	if [ -s "$TIMES" ]; then
		echo "the ten slowest tests:"
		sort -t "$(printf '\t')" -k1,1 -rn "$TIMES" | head -n 10 |
			awk -F '\t' '{ printf "  %8.2f s  %-5s %s\n", $1, $2, $3 }'
	fi
} >"$DURATIONS"
echo "== durations ($DURATIONS)"
cat "$DURATIONS"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
