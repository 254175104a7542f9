"""QEMU's jail, seen from the host: the uid, seccomp, capabilities, mount namespace and cgroup of
each sandbox's QEMU process, read from /proc as root."""

import os
import stat

import pytest

import cpuos
from conftest import GUEST_DIR, started_daemon

T = 60


def qemu_pid(sbx, binary=None):
    """The QEMU whose command line names this sandbox's run directory (binary: its exact
    argv[0]; else any named qemu-system-*, as the kept builds' are)."""
    want = f"/vms/{sbx.id}/".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        argv0 = cmd.split(b"\0", 1)[0]
        named = argv0 == binary if binary else os.path.basename(argv0).startswith(b"qemu-system")
        if named and want in cmd:
            return int(pid)
    pytest.fail(f"no QEMU process found for {sbx.id}")


def wrapped_qemu_pid(sbx):
    """The same, for a QEMU that a wrapper script exec'ed by its full path."""
    return qemu_pid(sbx, b"/usr/bin/qemu-system-x86_64")


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def cgroups(pid):
    """{controller: path} from /proc/PID/cgroup (v1 lines; the v2 line as "")."""
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctls, path = line.rstrip("\n").split(":", 2)
            for c in ctls.split(",") if ctls else [""]:
                out[c] = path
    return out


def read_cg(ctl, path, name):
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        base = "/sys/fs/cgroup" + path
    else:
        base = f"/sys/fs/cgroup/{ctl}{path}"
    with open(os.path.join(base, name)) as f:
        return f.read().strip()


def test_own_uid_seccomp_no_capabilities(make_sandbox):
    a, b = make_sandbox(template="base"), make_sandbox(template="base")
    sa, sb = status(qemu_pid(a)), status(qemu_pid(b))
    uids = []
    for s in (sa, sb):
        uid = s["Uid"].split()
        gid = s["Gid"].split()
        assert len(set(uid)) == 1 and uid[0] != "0", s["Uid"]  # real, effective, saved, fs
        assert len(set(gid)) == 1 and gid[0] != "0", s["Gid"]
        assert s["Seccomp"] == "2", s.get("Seccomp")
        assert s["NoNewPrivs"] == "1"
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(s[cap], 16) == 0, f"{cap} {s[cap]}"
        uids.append(uid[0])
    assert uids[0] != uids[1]
    # a network namespace of its own: not the host's
    host_net = os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{qemu_pid(a)}/ns/net") != host_net
    # ids are the host's: a second daemon, with the same range, gives its QEMU another one
    gen = started_daemon("--template-snapshots", "off")
    d = next(gen)
    try:
        c = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        uid = status(qemu_pid(c))["Uid"].split()[0]
        assert uid not in uids and uid != "0", (uid, uids)
        c.kill()
    finally:
        gen.close()
    # and the guest works through all of it
    assert a.exec("echo ok", timeout=T).stdout == "ok\n"


def test_mount_namespace_holds_only_its_files(daemon, make_sandbox):
    a, b = make_sandbox(template="base"), make_sandbox(template="base")
    pa, pb = qemu_pid(a), qemu_pid(b)
    assert os.readlink(f"/proc/{pa}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    root = f"/proc/{pa}/root"
    # its own run directory, its kernel, nothing of the host's or the daemon's
    mine = os.path.join(daemon.state_dir, "vms", a.id)
    assert os.path.isdir(root + mine)
    assert any(n.endswith(".sock") for n in os.listdir(root + mine))
    for gone in ("/etc/shadow", "/etc/passwd", "/root", "/home",
                 os.path.join(daemon.state_dir, "cpuos.db"),
                 os.path.join(daemon.state_dir, "vms", b.id)):
        assert not os.path.exists(root + gone), gone
    assert not os.path.exists(f"/proc/{pb}/root" + mine)
    # the system and the kernel read-only, the run directory not; /dev holds the nodes QEMU
    # opens and no disk of the host's
    kernel = str(GUEST_DIR / "bzImage")
    for ro in ("/usr", kernel):
        assert os.statvfs(root + ro).f_flag & os.ST_RDONLY, ro
    assert not os.statvfs(root + mine).f_flag & os.ST_RDONLY
    assert os.statvfs(root + mine).f_flag & os.ST_NOEXEC
    assert set(os.listdir(root + "/dev")) - {"kvm"} == {"net", "null", "random", "urandom", "zero"}
    env = open(f"/proc/{pa}/environ", "rb").read()
    assert env == b"", env[:200]


def test_cgroup_limits(daemon, make_sandbox):
    sbx = make_sandbox(template="base", vcpus=1, memory_mb=256)
    pid = qemu_pid(sbx)
    cg = cgroups(pid)
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    mem_ctl, pids_ctl, cpu_ctl = ("", "", "") if v2 else ("memory", "pids", "cpu")
    for ctl in (mem_ctl, pids_ctl, cpu_ctl):
        assert "/cpuos/" in cg[ctl] and sbx.id in cg[ctl], cg
    kvm = b"\0-accel\0kvm\0" in open(f"/proc/{pid}/cmdline", "rb").read()
    limit = 256 + (128 if kvm else 256) << 20  # RAM and QEMU's share (jail.c)
    if v2:
        assert int(read_cg("", cg[""], "memory.max")) == limit
        assert read_cg("", cg[""], "cpu.max") == "200000 100000"
    else:
        assert int(read_cg("memory", cg["memory"], "memory.limit_in_bytes")) == limit
        assert read_cg("cpu", cg["cpu"], "cpu.cfs_quota_us") == "200000"
        assert read_cg("cpu", cg["cpu"], "cpu.cfs_period_us") == "100000"
    assert int(read_cg(pids_ctl, cg[pids_ctl], "pids.max")) == 257
    # A guest that takes all its memory and spins its vCPU: what it used was charged here (the
    # RAM file's pages are the cgroup's), and it goes on answering within the limit.
    sbx.exec("head -c 200000000 /dev/zero | tail -n 1 > /dev/null; "
             "(timeout 3 sh -c 'while :; do :; done' || true)", timeout=T)
    peak_file = "memory.peak" if v2 else "memory.max_usage_in_bytes"
    peak = int(read_cg(mem_ctl, cg[mem_ctl], peak_file))
    assert peak > 150 << 20, peak
    assert sbx.exec("echo alive", timeout=T).stdout == "alive\n"
    leaf = cg[pids_ctl]
    sbx.kill()
    base = "/sys/fs/cgroup" + leaf if v2 else f"/sys/fs/cgroup/pids{leaf}"
    assert not os.path.exists(base), f"{base} left after the kill"


def write_wrapper(path, extra):
    """A QEMU that adds -blockdev arguments of its own: it runs jailed like the real one."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/qemu-system-x86_64 \"$@\" " + extra + "\n")
    os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


@pytest.mark.parametrize("inside", [True, False], ids=["inside", "outside"])
def test_a_path_outside_the_jail_cannot_be_opened(tmp_path, inside):
    """With a host file outside its jail on the command line QEMU fails to start; the same
    argument on a file inside it (the kernel) starts, so it is the jail that refuses."""
    kernel = str(GUEST_DIR / "bzImage")
    target = kernel if inside else "/etc/hostname"
    wrapper = tmp_path / "qemu-wrapper"
    write_wrapper(wrapper, f"-blockdev driver=file,node-name=probe,filename={target},read-only=on")
    # without networks, so that QEMU's empty network namespace is seen too
    gen = started_daemon("--qemu", str(wrapper), "--template-snapshots", "off", "--net", "off")
    d = next(gen)
    try:
        if inside:
            sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a,
                                       api_url=d.url)
            assert sbx.exec("echo ok", timeout=T).stdout == "ok\n"
            pid = wrapped_qemu_pid(sbx)
            assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
            sbx.kill()
        else:
            with pytest.raises(cpuos.CpuosError) as e:
                cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a,
                                     api_url=d.url)
            assert "/etc/hostname" in str(e.value) and "No such file" in str(e.value), str(e.value)
    finally:
        gen.close()
