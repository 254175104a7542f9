#!/usr/bin/env python3
"""QEMU's jail: what it costs and what it holds, each figure beside its baseline in the same run.

- create -> first exec of a base sandbox restored from the template snapshot, and cold-booted,
  on a jailed daemon and on one with --jail off;
- the memory QEMU's cgroup is charged for a 512 MB VM after boot, and after the guest touched all
  of its RAM: peak minus RAM is the overhead the cgroup's limit leaves room for (256 MiB);
- a neighbour that spins its vCPU and keeps taking all its memory: the exec round trip of a second
  sandbox beside it, over the same round trip with the neighbour quiet (target <= 2x), jailed
  and with --jail off (no cgroup around the neighbour).
Run as root on a built tree: python3 bench/bench_jail.py [N]. Prints figures; asserts nothing."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
from bench_net import N, Daemon, create_ms, p50, timed_creates  # noqa: E402
from test_jail import cgroups, qemu_pid, read_cg  # noqa: E402


def cold_ms(d):
    return timed_creates(d, max(3, N // 3))


def peak_mb(pid):
    cg = cgroups(pid)
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    ctl = "" if v2 else "memory"
    return int(read_cg(ctl, cg[ctl], "memory.peak" if v2 else "memory.max_usage_in_bytes")) >> 20


def round_trips(sbx):
    out = []
    for _ in range(N):
        t0 = time.monotonic()
        sbx.exec("true")
        out.append((time.monotonic() - t0) * 1000)
    return out


def neighbour(d):
    """(quiet p50, p50 beside a busy neighbour) of a second sandbox's exec round trip."""
    busy, probe = d.create(), d.create()
    try:
        quiet = p50(round_trips(probe))
        # all of its RAM taken and given back, over and over, and its vCPU never idle
        busy.exec("nohup sh -c 'while :; do head -c 450000000 /dev/zero | tail -n 1 >/dev/null; "
                  "done' >/dev/null 2>&1 & nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &")
        time.sleep(3)
        loud = p50(round_trips(probe))
        return quiet, loud
    finally:
        busy.kill()
        probe.kill()


_RANGE = iter(range(64))


def daemon(*args):
    """A daemon of the run: a network range and no port URLs of its own, so several can run."""
    return Daemon("--url-listen", "none", "--net-range", f"10.{210 + next(_RANGE)}.0.0/16", *args)


def main():
    jailed, free = daemon(), daemon("--jail", "off")
    try:
        a, b = create_ms(jailed), create_ms(free)
        print(f"create -> first exec, restored: {p50(a):.0f} ms jailed, {p50(b):.0f} ms with "
              f"--jail off ({p50(a) - p50(b):+.0f} ms)")
        cj = daemon("--template-snapshots", "off")
        cf = daemon("--template-snapshots", "off", "--jail", "off")
        try:
            a, b = cold_ms(cj), cold_ms(cf)
            print(f"create -> first exec, cold boot: {p50(a):.0f} ms jailed, {p50(b):.0f} ms "
                  f"with --jail off ({p50(a) - p50(b):+.0f} ms)")
            s = cj.create(memory_mb=512)
            pid = qemu_pid(s)
            boot = peak_mb(pid)
            s.exec("head -c 480000000 /dev/zero | tail -n 1 >/dev/null", timeout="5m")
            full = peak_mb(pid)
            print(f"cgroup memory of a 512 MB VM (TCG): peak {boot} MiB after boot, {full} MiB "
                  f"after the guest touched all its RAM: overhead {full - 512} MiB over RAM "
                  f"(limit RAM + 256 MiB)")
            s.kill()
        finally:
            cj.stop()
            cf.stop()
        for name, d in (("jailed", jailed), ("--jail off", free)):
            quiet, loud = neighbour(d)
            print(f"exec round trip beside a neighbour spinning and taking all its memory, "
                  f"{name}: {loud:.0f} ms vs {quiet:.0f} ms quiet ({loud / quiet:.2f}x, "
                  f"target <= 2x)")
    finally:
        jailed.stop()
        free.stop()


if __name__ == "__main__":
    main()
