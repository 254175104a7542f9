"""cpuosd with its state in a real PostgreSQL server (--database; scripts/pg.sh starts one on
loopback): keys, sandboxes and their metadata, exec, pause and resume across a restart of the
daemon, checkpoints, secrets and usage, all in PostgreSQL's tables; a single host's SQLite state
copied into PostgreSQL (--copy-state-to) and served from there; a database it cannot use stops it at
the start with one clear line."""

import os
import subprocess

import pytest

import cpuos
from conftest import DAEMON_BIN, Daemon, PgServer


@pytest.fixture(scope="module")
def pg():
    s = PgServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def pgd(pg):
    d = Daemon(extra_args=["--database", pg.url])
    try:
        d.start(env={"PGPASSWORD": pg.env["PGPASSWORD"]})
        d.key_a = d.create_key("postgres")
        yield d
    finally:
        d.close()


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout="60s")
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def test_a_daemon_on_postgresql_keeps_everything_there(pgd, pg):
    kw = {"api_key": pgd.key_a, "api_url": pgd.url}
    sbx = cpuos.Sandbox.create(template="base", metadata={"user": "pg"}, **kw)
    sh(sbx, "echo kept > /work/k")
    assert pg.query(f"SELECT state FROM sandboxes WHERE id = '{sbx.id}'") == "running"
    assert pg.query(f"SELECT value FROM sandbox_meta WHERE sbx_id = '{sbx.id}'") == "pg"
    listed = cpuos.Sandbox.list(metadata={"user": "pg"}, **kw)
    assert [s.id for s in listed] == [sbx.id]

    ckp = sbx.checkpoint("pg-step")
    assert pg.query(f"SELECT name FROM checkpoints WHERE id = '{ckp.id}'") == "pg-step"
    sbx.pause()
    assert pg.query(f"SELECT state FROM sandboxes WHERE id = '{sbx.id}'") == "paused"

    # Everything it knows is in PostgreSQL: a new daemon on the same state resumes it.
    pgd.restart(kill=True, env={"PGPASSWORD": pg.env["PGPASSWORD"]})
    s2 = cpuos.Sandbox.connect(sbx.id, **kw)
    assert s2.state == "paused"
    assert sh(s2, "cat /work/k") == "kept"
    assert pg.query(f"SELECT generation FROM sandboxes WHERE id = '{sbx.id}'") == "1"

    c = cpuos.Sandbox.create(checkpoint="pg-step", **kw)
    assert sh(c, "cat /work/k") == "kept"
    c.kill()
    s2.kill()
    assert pg.query(f"SELECT state FROM sandboxes WHERE id = '{sbx.id}'") == "stopped"
    u = cpuos.usage(**kw)
    assert u.sandboxes == 2 and u.running_seconds > 0
    assert int(pg.query("SELECT count(*) FROM usage_events")) >= 5

    r = pgd.http("PUT", "/v1/secrets/PG_TOKEN", body={"value": "s3cr3t-value", "hosts": ["example.com"]},
                 key=pgd.key_a)
    assert r.status in (200, 201), r
    sealed = pg.query("SELECT value FROM secrets WHERE name = 'PG_TOKEN'")
    assert sealed.startswith("sealed1:") and "s3cr3t" not in sealed


def test_a_single_hosts_state_moves_to_postgresql(pg, monkeypatch):
    monkeypatch.delenv("CPUOS_E2E_PG", raising=False)  # it starts on SQLite, whatever the suite does
    d = Daemon()
    try:
        d.start()
        d.key_a = d.create_key("moving")
        kw = {"api_key": d.key_a, "api_url": d.url}
        sbx = cpuos.Sandbox.create(template="base", metadata={"move": "yes"}, **kw)
        sh(sbx, "echo moved > /work/m")
        sbx.checkpoint("before-move")
        sbx.pause()
        before = cpuos.usage(**kw)
        d.stop()
        pg.query("CREATE DATABASE moved")
        url = pg.url.rsplit("/", 1)[0] + "/moved"
        env = {**os.environ, **pg.env}
        # Not started on the database while the state is still in the SQLite file.
        d.extra_args += ["--database", url]
        with pytest.raises(pytest.fail.Exception) as e:
            d.start(env=pg.env)
        assert "exited with 1" in str(e.value) and "copy it with --copy-state-to" in d.log_tail(5)
        del d.extra_args[-2:]
        out = subprocess.run([str(DAEMON_BIN), "--state-dir", d.state_dir, "--copy-state-to", url],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert "copied 1 accounts, 1 keys, 1 sandboxes, 1 checkpoints" in out.stdout, out.stdout
        # Copied once: the file is set aside, so no daemon takes it for the state again.
        assert os.path.exists(os.path.join(d.state_dir, "cpuos.db.copied"))
        again = subprocess.run([str(DAEMON_BIN), "--state-dir", d.state_dir, "--copy-state-to", url],
                               capture_output=True, text=True, timeout=60, env=env)
        assert again.returncode == 1 and "no state to copy" in again.stderr

        d.extra_args += ["--database", url]
        d.start(env=pg.env)
        s2 = cpuos.Sandbox.connect(sbx.id, **kw)  # the same key, from PostgreSQL now
        assert s2.state == "paused" and s2.metadata == {"move": "yes"}
        after = cpuos.usage(**kw)
        assert after.running_seconds == pytest.approx(before.running_seconds, abs=0.01)
        assert sh(s2, "cat /work/m") == "moved"
        assert sh(cpuos.Sandbox.create(checkpoint="before-move", **kw), "cat /work/m") == "moved"
    finally:
        d.close()


def test_a_database_it_cannot_use_stops_it_at_the_start(pg):
    d = Daemon(extra_args=["--database", pg.url])
    try:
        with pytest.raises(pytest.fail.Exception) as e:
            d.start(env={"PGPASSWORD": "wrong"})
        assert "exited with 1" in str(e.value)
        assert "cannot connect to PostgreSQL" in d.log_tail(5)
        assert "password authentication failed" in d.log_tail(5)
    finally:
        d.close()
    d = Daemon(extra_args=["--database", "/tmp/not-a-url"])
    try:
        with pytest.raises(pytest.fail.Exception) as e:
            d.start()
        assert "exited with 2" in str(e.value)
        assert "is not a PostgreSQL URL" in d.log_tail(5)
    finally:
        d.close()
