#!/usr/bin/env bash
# Which calls cpuosd, cpuos-netd and the programs they run make that their
# seccomp filter (src/daemon/sysfilter.c) does not name: runs end-to-end
# modules (default all) with CPUOS_SYSFILTER_LOG=1, under which such a call
# is allowed and logged by the kernel, then prints each one found with the
# program that made it and how often. Nothing printed after the tests: the
# list covers what they did. Root; sets kernel.printk_ratelimit to 0 while
# it runs (the log is rate-limited otherwise) and puts it back.
set -euo pipefail
cd "$(dirname "$0")/../.."
was=$(cat /proc/sys/kernel/printk_ratelimit)
trap 'echo "$was" >/proc/sys/kernel/printk_ratelimit' EXIT
echo 0 >/proc/sys/kernel/printk_ratelimit
log=$(mktemp)
# Followed as it comes: the ring buffer is too small to hold a whole run.
dmesg --follow-new >"$log" &
follower=$!
trap 'echo "$was" >/proc/sys/kernel/printk_ratelimit; kill $follower 2>/dev/null; rm -f "$log"' EXIT
CPUOS_SYSFILTER_LOG=1 python3 -m pytest -q --rootdir=. "${@:-tests/e2e}" || true
echo "== calls the filter does not name (count, program, call):"
grep 'type=1326' "$log" | grep 'code=0x7ffc0000' |
	sed -n 's/.*exe="\([^"]*\)".*syscall=\([0-9]*\).*/\1 \2/p' | sort | uniq -c |
	python3 -c '
import ctypes, sys
lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
for line in sys.stdin:
    n, exe, nr = line.split()
    p = lib.seccomp_syscall_resolve_num_arch(0, int(nr))  # 0: the native architecture
    print(n, exe, ctypes.string_at(p).decode() if p else nr)
'
