#!/usr/bin/env python3
"""The code interpreter: one seed-003 tool call (load the CSV, group by month, plot, save the
chart) run two ways in the same python sandbox, alternating, each figure beside its baseline:

- the baseline, as seed 003's run_python does it: write /work/main.py, exec `cd /work && python
  main.py` (a new Python process that imports pandas and matplotlib every time);
- the same code through `POST .../code` in the sandbox's default context, whose kernel the python
  template's snapshot holds with numpy, pandas and matplotlib already imported (its figure also
  comes back as a PNG result), alternating with the baseline, then N calls back to back as a
  model's loop makes them. Target: <= 0.15x the baseline under TCG.
After one warm-up round of each (under TCG a VM's first runs of any code also pay its translation).
Also the first call of a new sandbox each way (create -> the tool call's answer). Run as root on a
built tree: python3 bench/bench_code.py [N]. Prints figures; asserts nothing."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "e2e"))
from bench_net import Daemon, p50  # noqa: E402  (it puts the tree's SDK first on the path)
import cpuos  # noqa: E402
from fake_openai import ANALYSIS_CODE, sales_csv  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def create(d):
    return cpuos.Sandbox.create(template="python", timeout="30m", api_key=d.key, api_url=d.url)


def ready(d):
    """Creates until one is restored from the python template snapshot (built on first use)."""
    for _ in range(300):
        create(d).kill()
        if b"(python, restored)" in open(os.path.join(d.dir, "log"), "rb").read():
            return
        time.sleep(1)


def by_exec(sbx):
    t0 = time.monotonic()
    sbx.files.write("/work/main.py", ANALYSIS_CODE)
    r = sbx.exec("cd /work && python main.py", timeout="5m")
    ms = (time.monotonic() - t0) * 1000
    assert r.exit_code == 0 and "GREW_MOST" in r.stdout, r.stderr[-500:]
    return ms


def by_code(sbx):
    t0 = time.monotonic()
    x = sbx.run_code(ANALYSIS_CODE, timeout="5m")
    ms = (time.monotonic() - t0) * 1000
    assert x.error is None and "GREW_MOST" in "".join(x.logs.stdout), x.error
    assert any(r.png for r in x.results), "no chart among the results"
    return ms


def first_call(d, how):
    t0 = time.monotonic()
    sbx = create(d)
    sbx.files.write("/work/sales.csv", sales_csv())
    how(sbx)
    ms = (time.monotonic() - t0) * 1000
    sbx.kill()
    return ms


def main():
    d = Daemon()
    try:
        ready(d)
        first = {"exec": first_call(d, by_exec), "code": first_call(d, by_code)}
        sbx = create(d)
        sbx.files.write("/work/sales.csv", sales_csv())
        by_exec(sbx)  # a warm-up round: under TCG a VM's first runs also translate the code
        by_code(sbx)
        runs = {"exec": [], "code": [], "code_only": []}
        for _ in range(N):
            runs["exec"].append(by_exec(sbx))
            runs["code"].append(by_code(sbx))
        # As a model's loop calls it: one call after another, no new Python process between
        # (whose imports, under TCG, also push the drawing code out of QEMU's translations).
        for _ in range(N):
            runs["code_only"].append(by_code(sbx))
        sbx.kill()
    finally:
        d.stop()
    e, c, b = p50(runs["exec"]), p50(runs["code"]), p50(runs["code_only"])
    print(f"code: seed-003 tool call, {N} runs each after a warm-up round, alternating in one python sandbox")
    print(f"  exec python main.py (baseline)  p50 {e:8.0f} ms  max {max(runs['exec']):8.0f} ms")
    print(f"  run_code, warm context          p50 {c:8.0f} ms  max {max(runs['code']):8.0f} ms"
          f"  = {c / e:.3f}x the baseline (target <= 0.15x)")
    print(f"  run_code, {N} calls back to back  p50 {b:8.0f} ms  max {max(runs['code_only']):8.0f} ms"
          f"  = {b / e:.3f}x the baseline")
    print(f"  a new sandbox's first call: create -> exec {first['exec']:.0f} ms, "
          f"create -> run_code {first['code']:.0f} ms ({first['code'] / first['exec']:.3f}x)")


if __name__ == "__main__":
    main()
