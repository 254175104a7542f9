"""Privilege separation, seen from the host: the daemon that parses HTTP and JSON runs as the
jail range's first id with no capabilities; its helper ("cpuosd: priv" in ps) is root and
holds the rest; run directories are the daemon's group's, so each side reads what the other
writes; jailed QEMUs outlive a daemon restart and are still signalled through the helper."""

import base64
import ctypes
import os
import shutil
import signal
import stat
import subprocess

import cpuos
from conftest import DAEMON_BIN, GUEST_DIR, started_daemon
from procmem import memory_has, netd_of

T = 60
DAEMON_ID = 1900000000  # the default --jail-ids range's first id


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def helper_of(pid):
    """The daemon's helper: its child whose command line ps shows as "cpuosd: priv --priv-helper"."""
    out = subprocess.run(["ps", "-o", "pid=,ppid=,uid=,args=", "-e"], capture_output=True,
                         text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        p, pp, uid, args = line.split(None, 3)
        if int(pp) == pid and args == "cpuosd: priv --priv-helper":
            found.append((int(p), int(uid)))
    assert len(found) == 1, f"helpers of {pid} in ps: {found}\n{out}"
    return found[0]


def qemu_of(sbx):
    want = f"/vms/{sbx.id}/".encode()
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        argv0 = cmd.split(b"\0", 1)[0]  # a kept build's: <cache>/qemu/<id>/bin/qemu-system-x86_64
        if os.path.basename(argv0).startswith(b"qemu-system") and want in cmd:
            return int(p)
    return None


def no_caps(s):
    return all(int(s[c], 16) == 0 for c in ("CapInh", "CapPrm", "CapEff", "CapAmb"))


def test_http_process_has_no_root_and_the_helper_has(daemon):
    s = status(daemon.proc.pid)
    assert s["Uid"].split() == [str(DAEMON_ID)] * 4, s["Uid"]
    assert s["Gid"].split() == [str(DAEMON_ID)] * 4, s["Gid"]
    assert s["Groups"].strip() == "", s["Groups"]
    assert no_caps(s), {c: s[c] for c in ("CapInh", "CapPrm", "CapEff", "CapAmb")}
    assert s["NoNewPrivs"] == "1"
    # its own seccomp filter (sysfilter.h), on every thread; the helper has none
    assert s["Seccomp"] == "2" and int(s["Seccomp_filters"]) >= 1, s["Seccomp"]
    for t in os.listdir(f"/proc/{daemon.proc.pid}/task"):
        assert status(f"{daemon.proc.pid}/task/{t}")["Seccomp"] == "2", t
    hpid, huid = helper_of(daemon.proc.pid)
    assert huid == 0
    assert int(status(hpid)["CapEff"], 16) != 0
    assert status(hpid)["Seccomp"] == "0"
    # what the daemon writes is its own: the store, the state directory
    for p in (daemon.state_dir, os.path.join(daemon.state_dir, "cpuos.db")):
        assert os.stat(p).st_uid == DAEMON_ID, p


def ca_key_scalar(path):
    """The egress CA's private key (P-256, PKCS#8 PEM): its 32-byte scalar, from the
    ECPrivateKey inside (version 1, then an OCTET STRING of 32)."""
    der = base64.b64decode("".join(l for l in open(path).read().splitlines() if "-----" not in l))
    at = der.index(b"\x02\x01\x01\x04\x20") + 5
    return der[at:at + 32]


def test_the_network_side_runs_apart_and_cpuosd_holds_no_ca_key(daemon, make_sandbox):
    """cpuos-netd holds the resolver, the proxy and the CA's key: a uid of its own (the
    block's last), no capabilities, a seccomp filter; the key's directory is root's, and
    cpuosd's memory, with a sandbox on a network running, holds the CA's certificate but not
    its key."""
    npid = netd_of(daemon.proc.pid)
    s = status(npid)
    assert s["Uid"].split() == [str(DAEMON_ID + 65535)] * 4, s["Uid"]
    assert no_caps(s) and s["NoNewPrivs"] == "1" and s["Seccomp"] == "2", s
    ca = "/var/cache/cpuos/egress-ca"  # the suite's daemons' cache (the default)
    for p, mode in ((ca, 0o700), (os.path.join(ca, "ca.key"), 0o600)):
        st = os.stat(p)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), (p, st)
    sbx = make_sandbox(template="base")
    assert sbx.exec("true", timeout=T).exit_code == 0
    key = ca_key_scalar(os.path.join(ca, "ca.key"))
    cert = open(os.path.join(ca, "ca.pem")).read().splitlines()[1].encode()
    # the key as DER and as OpenSSL's BIGNUM keeps it (little-endian words)
    forms = {key, key[::-1]}
    assert memory_has(daemon.proc.pid, forms | {cert}) == {cert}
    assert memory_has(npid, forms), "the scan finds no key in cpuos-netd either"


def test_run_directory_is_shared_with_the_jail(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    run = os.path.join(daemon.state_dir, "vms", sbx.id)
    st = os.stat(run)
    assert (st.st_uid, st.st_gid) == (DAEMON_ID, DAEMON_ID)
    assert stat.S_IMODE(st.st_mode) == 0o2770
    qemu = qemu_of(sbx)
    quid = int(status(qemu)["Uid"].split()[0])
    assert quid not in (0, DAEMON_ID)
    # QEMU's sockets are its own, and the daemon's group's: it connects to them
    for name in os.listdir(run):
        p = os.path.join(run, name)
        if stat.S_ISSOCK(os.lstat(p).st_mode):
            sst = os.lstat(p)
            assert sst.st_uid == quid and sst.st_gid == DAEMON_ID, name
            assert sst.st_mode & 0o060 == 0o060, (name, oct(sst.st_mode))
    assert sbx.exec("echo ok", timeout=T).stdout == "ok\n"


def test_restart_keeps_sandboxes_and_their_qemu_is_still_killed():
    gen = started_daemon("--template-snapshots", "off")
    d = next(gen)
    try:
        sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        qemu = qemu_of(sbx)
        old_helper, _ = helper_of(d.proc.pid)
        d.restart(kill=False)
        new_helper, _ = helper_of(d.proc.pid)
        assert new_helper != old_helper
        assert not os.path.exists(f"/proc/{old_helper}")  # ended with its daemon
        sbx = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
        assert sbx.exec("echo again", timeout=T).stdout == "again\n"
        # not the new helper's child, and another uid's: the helper signals it
        assert int(status(qemu)["PPid"]) != new_helper
        sbx.kill()
        for _ in range(100):
            if not os.path.exists(f"/proc/{qemu}") or status(qemu).get("State", "").startswith("Z"):
                break
            subprocess.run(["sleep", "0.05"])
        assert not os.path.exists(f"/proc/{qemu}") or status(qemu)["State"].startswith("Z")
    finally:
        gen.close()


def pidfd_getfd(pid, fd):
    """A copy of process pid's descriptor fd (pidfd_getfd(2); root may take any)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd
        if got < 0:
            raise OSError(ctypes.get_errno(), f"pidfd_getfd({pid}, {fd})")
        return got
    finally:
        os.close(pidfd)


def daemon_end_of_helper(daemon_pid, helper_pid):
    """The daemon's descriptor of its socket to the helper: the peer of the helper's fd 3
    (ss -x names each socketpair end with its peer's inode)."""
    inode = os.readlink(f"/proc/{helper_pid}/fd/3")  # socket:[N]
    out = subprocess.run(["ss", "-x", "-a", "-n"], capture_output=True, text=True,
                         check=True).stdout
    peer = None
    for line in out.splitlines():
        f = line.split()
        # Netid State Recv-Q Send-Q Local-Address Port Peer-Address Port
        if len(f) >= 8 and f[0] == "u_seq" and f[5] == inode[8:-1]:
            peer = f[7]
    assert peer, f"no u_seq socket of inode {inode} in ss:\n{out}"
    for fd in os.listdir(f"/proc/{daemon_pid}/fd"):
        try:
            if os.readlink(f"/proc/{daemon_pid}/fd/{fd}") == f"socket:[{peer}]":
                return int(fd)
        except OSError:
            pass
    raise AssertionError(f"cpuosd {daemon_pid} holds no socket:[{peer}]")


def test_a_malformed_helper_request_ends_the_daemon_and_its_sandboxes_run_on():
    """What a daemon taken over could send its helper (bytes that are no request) ends the
    helper, which ends the daemon cleanly; the sandbox's QEMU runs on, and the next daemon
    takes it over."""
    gen = started_daemon("--template-snapshots", "off")
    d = next(gen)
    try:
        sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        assert sbx.exec("echo one > /work/f", timeout=T).exit_code == 0
        qemu = qemu_of(sbx)
        helper, _ = helper_of(d.proc.pid)
        sock = pidfd_getfd(d.proc.pid, daemon_end_of_helper(d.proc.pid, helper))
        try:
            os.write(sock, b"\x00" * 5 + b"not a request of the helper's")
        finally:
            os.close(sock)
        assert d.proc.wait(30) == 0, d.log_tail()
        log = d.log_tail(200)
        assert "a request the daemon would never send (not a frame)" in log, log
        assert "shutting down" in log or "stopping" in log, log
        assert not os.path.exists(f"/proc/{helper}")
        assert status(qemu)["State"][0] in "SR", status(qemu)
        d.start()
        sbx = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
        assert sbx.exec("cat /work/f", timeout=T).stdout == "one\n"
        assert qemu_of(sbx) == qemu
        sbx.kill()
    finally:
        gen.close()


def test_a_dead_netd_ends_the_daemon_and_the_next_one_serves_the_network():
    """cpuos-netd killed (as a crash would end it): cpuosd sees it end and shuts down at once,
    the sandbox runs on, and the next daemon, with a netd of its own, serves its network."""
    gen = started_daemon("--template-snapshots", "off")
    d = next(gen)
    try:
        sbx = cpuos.Sandbox.create(template="base", timeout="5m",
                                   network={"mode": "custom", "allowedHosts": ["allowed.test"]},
                                   api_key=d.key_a, api_url=d.url)
        # a name the policy refuses: the resolver answers at once (a dead one: glibc's 5 s
        # timeouts, twice)
        lookup = ("s=$(date +%s%N); getent hosts denied.test; e=$(date +%s%N); "
                  "echo $(( (e - s) / 1000000 ))")
        assert int(sbx.exec(lookup, timeout=T).stdout.split()[-1]) < 3000
        qemu = qemu_of(sbx)
        os.kill(netd_of(d.proc.pid), signal.SIGKILL)
        assert d.proc.wait(30) == 0, d.log_tail()
        assert "cpuos-netd ended: shutting down" in d.log_tail(200)
        assert status(qemu)["State"][0] in "SR", status(qemu)
        d.start()
        sbx = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
        # the new netd answers for it
        out = sbx.exec(lookup, timeout=T).stdout
        assert int(out.split()[-1]) < 3000, out
        sbx.kill()
    finally:
        gen.close()


def test_a_booted_sandboxs_checkpoint_starts_a_jailed_qemu():
    """A booted VM's RAM is a file of its own, so its checkpoint keeps RAM in `mem`, which a
    sandbox made from it maps and QEMU 7.2 opens for writing: the helper lets a jail have it."""
    gen = started_daemon("--template-snapshots", "off")
    d = next(gen)
    try:
        sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        sbx.files.write("/work/k", "kept\n")
        ckp = sbx.checkpoint("booted")
        assert os.path.getsize(os.path.join(d.state_dir, "checkpoints", ckp.id, "mem")) > 0
        child = cpuos.Sandbox.create(checkpoint=ckp, timeout="5m", api_key=d.key_a,
                                     api_url=d.url)
        assert child.exec("cat /work/k", timeout=T).stdout == "kept\n"
    finally:
        gen.close()


def test_a_port_below_1024_is_bound_before_root_is_dropped():
    """--listen and --url-listen on privileged ports: bound while cpuosd is root, served after."""
    import socket
    from conftest import Daemon
    def free_low():
        for p in range(990, 900, -1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                    return p
                except OSError:
                    continue
        raise AssertionError("no free port below 1024 on 127.0.0.1")
    d = Daemon(["--template-snapshots", "off", "--net", "off"])
    d.port = free_low()
    d.url = f"http://127.0.0.1:{d.port}"
    url_port = d.port - 1
    d.extra_args = [a for a in d.extra_args if not a.startswith("127.0.0.1:")]
    d.extra_args = [a for a in d.extra_args if a != "--url-listen"] + ["--url-listen", f"127.0.0.1:{url_port}"]
    try:
        d.start()
        assert status(d.proc.pid)["Uid"].split()[0] == str(DAEMON_ID)
        assert d.http("GET", "/v1/health").status == 200
        with socket.create_connection(("127.0.0.1", url_port), timeout=5):
            pass
    finally:
        d.close()


def test_jail_off_keeps_root():
    """Unjailed QEMUs need root to join their namespaces and open /dev/kvm: the daemon keeps it."""
    gen = started_daemon("--jail", "off", "--template-snapshots", "off")
    d = next(gen)
    try:
        assert status(d.proc.pid)["Uid"].split()[0] == "0"
    finally:
        gen.close()


def test_a_shared_directory_is_not_taken_for_the_socket(tmp_path):
    """--socket in /run: the daemon would have to own /run to make its socket there; it refuses
    with one line and /run stays root's."""
    before = os.stat("/run")
    r = subprocess.run([str(DAEMON_BIN), "--state-dir", str(tmp_path / "state"), "--socket",
                        "/run/cpuos-privsep-test.sock", "--listen", "none", "--net", "off",
                        "--guest-dir", str(GUEST_DIR)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "is not cpuosd's to take" in r.stderr, r.stderr
    after = os.stat("/run")
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid,
                                                           before.st_mode)


def test_a_guest_directory_closed_to_others_is_staged(tmp_path):
    """A clone under /root (0700): the daemon without root cannot read the guest's files there, so
    they are staged in the cache first, and a sandbox boots from the copy."""
    guest = tmp_path / "closed" / "guest"
    (guest / "templates").mkdir(parents=True)
    os.chmod(tmp_path / "closed", 0o700)
    for name in ("bzImage", "initramfs.cpio"):
        shutil.copy2(GUEST_DIR / name, guest / name)
    os.symlink(os.path.realpath(GUEST_DIR / "templates" / "base.erofs"),
               guest / "templates" / "base.erofs")
    # A copy no daemon holds, left by a guest directory gone since: pruned at the next start.
    stale = "/var/cache/cpuos/guest/0badc0de"
    os.makedirs(stale + "/templates", exist_ok=True)
    open(stale + "/bzImage", "w").close()
    os.symlink(os.path.realpath(GUEST_DIR / "templates" / "base.erofs"), stale + "/templates/base.erofs")
    gen = started_daemon("--guest-dir", str(guest), "--template-snapshots", "off", "--net", "off")
    d = next(gen)
    staged = None
    try:
        log = d.log_tail(200)
        assert "staged in '" in log, log
        staged = log.split("staged in '", 1)[1].split("'", 1)[0]
        assert not os.path.exists(stale), os.listdir(stale)
        assert os.path.exists(os.path.realpath(GUEST_DIR / "templates" / "base.erofs"))
        # Another daemon's start leaves a copy in use alone.
        other = started_daemon("--template-snapshots", "off", "--net", "off")
        next(other)
        other.close()
        assert os.path.exists(staged + "/bzImage")
        sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        assert sbx.exec("echo staged", timeout=T).stdout == "staged\n"
        cmd = open(f"/proc/{qemu_of(sbx)}/cmdline", "rb").read()
        assert staged.encode() in cmd and str(guest).encode() not in cmd
        sbx.kill()
        gen.close()
        # Its daemon gone, the next start removes it.
        other = started_daemon("--template-snapshots", "off", "--net", "off")
        next(other)
        other.close()
        assert not os.path.exists(staged)
    finally:
        gen.close()
        if staged:
            shutil.rmtree(staged, ignore_errors=True)


def test_two_daemons_on_a_host_have_ids_of_their_own():
    """Without --jail-ids each state directory gets a block of ids of its own: two daemons run as
    different uids, their QEMUs' group is their own daemon's, and neither daemon can signal or
    read the other's QEMU (or the other daemon). A restart finds its block again."""
    import tempfile
    caches = tempfile.mkdtemp(prefix="cpuos-caches-", dir="/tmp")
    os.chmod(caches, 0o711)  # for the daemons, which give up root
    gens, ds, sbxs = [], [], []
    try:
        for name in ("a", "b"):
            g = started_daemon("--jail-ids", "auto", "--cache-dir", os.path.join(caches, name),
                               "--template-snapshots", "off", "--net", "off")
            gens.append(g)
            ds.append(next(g))
        for d in ds:
            sbxs.append(cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a,
                                             api_url=d.url))
        uids = [int(status(d.proc.pid)["Uid"].split()[0]) for d in ds]
        assert uids[0] != uids[1] and all(u >= 1900000000 and (u - 1900000000) % 65536 == 0
                                          for u in uids), uids
        qemus = [qemu_of(s) for s in sbxs]
        for d, uid, q in zip(ds, uids, qemus):
            s = status(q)
            quid = int(s["Uid"].split()[0])
            assert uid < quid < uid + 65536, (uid, quid)
            assert s["Groups"].split() == [str(uid)], s["Groups"]
        # As daemon b's uid: daemon a's QEMU and daemon a itself are out of reach.
        def as_uid(uid, *cmd):
            return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                   *cmd], capture_output=True, text=True, timeout=30)
        run_a = os.path.join(ds[0].state_dir, "vms", sbxs[0].id)
        for who, other in ((1, 0), (0, 1)):
            r = as_uid(uids[who], "kill", "-0", str(qemus[other]))
            assert r.returncode != 0 and "not permitted" in r.stderr, r
            r = as_uid(uids[who], "kill", "-0", str(ds[other].proc.pid))
            assert r.returncode != 0 and "not permitted" in r.stderr, r
        r = as_uid(uids[1], "ls", run_a)
        assert r.returncode != 0 and "denied" in r.stderr, r
        assert as_uid(uids[0], "ls", run_a).returncode == 0  # its own daemon reaches it
        # A restart keeps the block and takes its QEMU over.
        ds[0].restart(kill=False)
        assert int(status(ds[0].proc.pid)["Uid"].split()[0]) == uids[0]
        again = cpuos.Sandbox.connect(sbxs[0].id, api_key=ds[0].key_a, api_url=ds[0].url)
        assert again.exec("echo mine", timeout=T).stdout == "mine\n"
    finally:
        for g in gens:
            g.close()
        shutil.rmtree(caches, ignore_errors=True)
