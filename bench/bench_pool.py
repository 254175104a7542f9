#!/usr/bin/env python3
"""Warm pools: what a sandbox claimed from the python pool answers first, beside what it answers
next (the same VM, warm: the baseline in the same run).

For N claims: the create (a claim of a pooled VM), its first exec of `true` and its second, its
first run_code of `1` and its second; the p50s, and first/second for exec and run_code. Then a
shell loop timed in the sandbox while the pool refills behind it (the claim just took its VM)
and again once it is full (3 s later), side by side. A pooled
VM is restored from the template snapshot, so under TCG it starts with nothing translated; a pool
that runs the exec path once before it offers a VM should bring the first exec near the second.
With CPUOSD_BEFORE=PATH (a cpuosd built before the pools did that) the same on that daemon,
alternating, side by side. Creates that found the pool empty (restored instead) are not counted.
Run as root on a built tree: python3 bench/bench_pool.py [N]. Prints figures; asserts nothing."""

import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_net  # noqa: E402
import cpuos  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
WORK = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"  # ~0.3 s of a TCG vCPU


class Daemon(bench_net.Daemon):
    """bench_net's daemon with a python pool of one VM, and its claims' figures."""

    def __init__(self, name, binary):
        super().__init__("--pool-python", "1", "--url-listen", "none", binary=binary)
        self.name = name
        self.log = os.path.join(self.dir, "log")
        self.samples = []

    def pooled(self, sid):
        """Whether sandbox sid was claimed from the pool (its start line says so)."""
        with open(self.log, "rb") as f:
            return re.search(rb"sandbox " + sid.encode() + rb" started .*warm pool", f.read())

    def claim(self):
        """One timed claim, or None when the pool was empty (the sandbox is killed either way)."""
        t0 = time.monotonic()
        s = cpuos.Sandbox.create(template="python", timeout="10m", api_key=self.key,
                                 api_url=self.url)
        t = [time.monotonic()]
        for step in (lambda: s.exec("true"), lambda: s.exec("true"),
                     lambda: s.run_code("1"), lambda: s.run_code("1"), lambda: s.exec(WORK)):
            step()
            t.append(time.monotonic())
        time.sleep(3)  # the pool refilled meanwhile
        t1 = time.monotonic()
        s.exec(WORK)
        quiet = (time.monotonic() - t1) * 1000
        s.kill()
        if not self.pooled(s.id):
            return None
        return [(t[0] - t0) * 1000] + [(b - a) * 1000 for a, b in zip(t, t[1:])] + [quiet]


def main():
    daemons = []
    try:
        daemons.append(Daemon("this cpuosd", os.path.join(ROOT, "build", "bin", "cpuosd")))
        if os.environ.get("CPUOSD_BEFORE"):
            daemons.append(Daemon("before", os.environ["CPUOSD_BEFORE"]))
        deadline = time.monotonic() + 1800
        while any(len(d.samples) < N for d in daemons) and time.monotonic() < deadline:
            for d in daemons:
                if len(d.samples) < N:
                    got = d.claim()
                    if got:
                        d.samples.append(got)
            time.sleep(1)  # the pools refill in the background
        print(f"warm pool claim -> first answers (python, 1 vCPU, 512 MB, over HTTP; p50 of each)")
        for d in daemons:
            if not d.samples:
                print(f"  {d.name}: no claim found the pool filled")
                continue
            m = [statistics.median(c) for c in zip(*d.samples)]
            print(f"  {d.name} ({len(d.samples)} claims): create {m[0]:.1f} ms; exec true first "
                  f"{m[1]:.1f} ms, second {m[2]:.1f} ms ({m[1] / m[2]:.2f}x); run_code first "
                  f"{m[3]:.1f} ms, second {m[4]:.1f} ms ({m[3] / m[4]:.2f}x); create -> first exec "
                  f"{m[0] + m[1]:.1f} ms; a shell loop while the pool refills {m[5]:.0f} ms, once "
                  f"full {m[6]:.0f} ms ({m[5] / m[6]:.2f}x)")
    finally:
        for d in daemons:
            d.stop()


if __name__ == "__main__":
    main()
