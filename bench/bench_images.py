#!/usr/bin/env python3
"""Templates from OCI images: what an import of a ~200 MB image costs, and what a sandbox of the
imported template costs beside the built-in ones, in one run.

The image is the base template's tree (tarred from its erofs) plus a layer of one file, as an OCI
layout with gzip layers and as a gzipped `docker save` tar. Each is imported N times with
`cpuos templates import`; beside them, mkfs.erofs alone over the same tree (the floor: what every
template costs to make). Then one daemon on a guest directory holding base, python and the imported
template: after each template's snapshot is made, N creates of each, timed to the answer of the
first exec of `true` (p50), and the imported template's ratio to base and to python. Then the
layout imported through the API (upload and the daemon's helper) beside the CLI's import, and a
Dockerfile build FROM base: first, unchanged (every step cached), and with its COPY changed, by
the CLI and by the daemon (--remote).
Run as root on a built tree: python3 bench/bench_images.py [N]. Prints figures; asserts nothing."""

import gzip
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_net  # noqa: E402
import cpuos  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
GUEST = os.environ.get("CPUOS_GUEST_DIR", os.path.join(ROOT, "build", "guest"))
CLI = os.path.join(ROOT, "build", "bin", "cpuos")


def sha(d):
    return hashlib.sha256(d).hexdigest()


def make_images(top):
    mnt = os.path.join(top, "mnt")
    os.makedirs(mnt)
    base = os.path.realpath(os.path.join(GUEST, "templates", "base.erofs"))
    subprocess.run(["mount", "-t", "erofs", "-o", "loop,ro", base, mnt], check=True)
    try:
        layer = subprocess.run(["tar", "-C", mnt, "--numeric-owner", "-cf", "-", "."],
                               capture_output=True, check=True).stdout
        subprocess.run(["cp", "-a", mnt + "/.", os.path.join(top, "tree")], check=False)
    finally:
        subprocess.run(["umount", mnt])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("etc/marker")
        info.size = 6
        t.addfile(info, io.BytesIO(b"bench\n"))
    layers = [layer, buf.getvalue()]
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(x) for x in layers]}}).encode()
    lay = os.path.join(top, "layout")
    os.makedirs(os.path.join(lay, "blobs", "sha256"))

    def blob(d, mt):
        with open(os.path.join(lay, "blobs", "sha256", sha(d)), "wb") as f:
            f.write(d)
        return {"mediaType": mt, "digest": "sha256:" + sha(d), "size": len(d)}

    descs = [blob(gzip.compress(x, 1), "application/vnd.oci.image.layer.v1.tar+gzip") for x in layers]
    man = json.dumps({"schemaVersion": 2, "config": blob(cfg, "application/vnd.oci.image.config.v1+json"),
                      "layers": descs}).encode()
    with open(os.path.join(lay, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [blob(man, "application/vnd.oci.image.manifest.v1+json")]}, f)
    with tarfile.open(os.path.join(top, "saved.tar.gz"), "w:gz", compresslevel=1) as t:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        add(sha(cfg) + ".json", cfg)
        names = [f"l{i}/layer.tar" for i in range(len(layers))]
        for n, x in zip(names, layers):
            add(n, x)
        add("manifest.json", json.dumps([{"Config": sha(cfg) + ".json", "Layers": names}]).encode())
    return len(layer)


def restored(d, sid):
    """Whether sandbox sid started from its template's snapshot (its start line says so)."""
    with open(os.path.join(d.dir, "log"), "rb") as f:
        return any(sid.encode() in ln and b"started" in ln and b"restored" in ln for ln in f)


def timed(fn):
    t0 = time.monotonic()
    fn()
    return (time.monotonic() - t0) * 1000


def main():
    top = tempfile.mkdtemp(prefix="cpuos-bench-images-")
    os.chmod(top, 0o755)
    guest = os.path.join(top, "guest")
    os.makedirs(os.path.join(guest, "templates"))
    for f in ("bzImage", "initramfs.cpio"):
        os.symlink(os.path.realpath(os.path.join(GUEST, f)), os.path.join(guest, f))
    for t in ("base", "python"):
        os.symlink(os.path.realpath(os.path.join(GUEST, "templates", t + ".erofs")),
                   os.path.join(guest, "templates", t + ".erofs"))
    env = {**os.environ, "CPUOS_GUEST_DIR": guest, "CPUOS_CACHE": os.path.join(top, "cache")}
    d = None
    try:
        size = make_images(top)
        print(f"image: {size / 1e6:.0f} MB Debian layer + 1 file, {N} runs each")
        res = {}
        for what, src in (("oci layout", "layout"), ("docker save", "saved.tar.gz")):
            res[what] = [timed(lambda: subprocess.run([CLI, "templates", "import", "img", os.path.join(top, src)],
                                                      env=env, check=True, capture_output=True))
                         for _ in range(N)]
        res["mkfs.erofs alone"] = []
        for i in range(N):
            out = os.path.join(top, f"floor{i}.erofs")
            res["mkfs.erofs alone"].append(timed(lambda: subprocess.run(
                ["mkfs.erofs", "--quiet", out, os.path.join(top, "tree")], check=True)))
            os.unlink(out)
        floor = statistics.median(res["mkfs.erofs alone"])
        for k, v in res.items():
            p = statistics.median(v)
            print(f"import {k:18s} p50 {p:8.0f} ms  ({p / floor:.2f}x mkfs.erofs alone)")
        # the uid the tests' daemons run as: the cache's template snapshots are its
        d = bench_net.Daemon("--guest-dir", guest, "--url-listen", "none", "--jail-ids", "1900000000:65536")
        first = {}
        for t in ("base", "python", "img"):
            # the template's snapshot is made on first use: wait for it
            for _ in range(60):
                s = cpuos.Sandbox.create(template=t, timeout="10m", api_key=d.key, api_url=d.url)
                s.kill()
                if restored(d, s.id):
                    break
                time.sleep(2)
            xs = []
            for _ in range(N):
                t0 = time.monotonic()
                s = cpuos.Sandbox.create(template=t, timeout="10m", api_key=d.key, api_url=d.url)
                s.exec("true")
                xs.append((time.monotonic() - t0) * 1000)
                s.kill()
            first[t] = statistics.median(xs)
        for t, v in first.items():
            print(f"create -> first exec {t:7s} p50 {v:6.0f} ms  ({v / first['base']:.2f}x base, "
                  f"{v / first['python']:.2f}x python)")
        # The same image through the API: uploaded, then imported by the daemon's root helper.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            t.add(os.path.join(top, "layout"), arcname=".")
        data = buf.getvalue()
        xs = []
        for i in range(N):
            req = urllib.request.Request(f"{d.url}/v1/templates?name=api{i}&wait=true", data=data,
                                         method="POST", headers={"Authorization": f"Bearer {d.key}",
                                                                 "Content-Type": "application/x-tar"})
            xs.append(timed(lambda: urllib.request.urlopen(req, timeout=1800).read()))
        api = statistics.median(xs)
        cli = statistics.median(res["oci layout"])
        print(f"import through the API p50 {api:8.0f} ms  ({api / cli:.2f}x cpuos templates import, "
              f"{len(data) >> 20} MB uploaded)")
        # A Dockerfile build (cpuos templates build): FROM base, a RUN and a COPY; then the same
        # again (every step cached: nothing exported), then with the COPY's file changed.
        ctx = os.path.join(top, "ctx")
        os.makedirs(ctx)
        with open(os.path.join(ctx, "page.txt"), "w") as f:
            f.write("one\n")
        with open(os.path.join(top, "Dockerfile"), "w") as f:
            f.write("FROM base\nRUN echo built > /etc/built\nCOPY page.txt /srv/page.txt\n")
        benv = {**os.environ, "CPUOS_API_URL": d.url, "CPUOS_API_KEY": d.key}

        def build(*extra):
            subprocess.run([CLI, "templates", "build", "built", "-f", os.path.join(top, "Dockerfile"), ctx,
                            *extra], env=benv, check=True, capture_output=True)
        first_build = timed(build)
        same = timed(build)
        with open(os.path.join(ctx, "page.txt"), "w") as f:
            f.write("two\n")
        changed = timed(build)
        print(f"build FROM base       first {first_build:8.0f} ms  unchanged {same:6.0f} ms  "
              f"last COPY changed {changed:6.0f} ms ({changed / first_build:.2f}x first)")
        # The same change built by the daemon (--remote: POST /v1/templates/built/build, the log
        # followed), against the CLI's own run just above.
        with open(os.path.join(ctx, "page.txt"), "w") as f:
            f.write("three\n")
        remote = timed(lambda: build("--remote"))
        print(f"build by the daemon   last COPY changed {remote:6.0f} ms ({remote / changed:.2f}x "
              f"the CLI's)")
    finally:
        if d:
            d.stop()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
