"""The examples run as written against the daemon (the model through the scripted server)."""

import os
import subprocess
import sys
from pathlib import Path

from fake_openai import FakeOpenAI, grew_most, png_size

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name, cwd, env, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "sdk" / "python"), **env)
    return subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_quickstart(daemon, tmp_path):
    r = run_example("quickstart.py", tmp_path, {})
    assert r.returncode == 0, r.stdout + r.stderr
    month = grew_most((tmp_path / "sales.csv").read_bytes())
    assert f"the month that grew the most: {month} (+" in r.stdout, r.stdout
    assert png_size((tmp_path / "chart.png").read_bytes())[0] > 0


def test_code_interpreter_example(daemon, tmp_path):
    with FakeOpenAI() as fake:
        r = run_example("code_interpreter.py", tmp_path,
                        {"OPENAI_BASE_URL": fake.base_url, "GPUOS_API_KEY": "k"})
    assert r.returncode == 0, r.stdout + r.stderr
    month = grew_most((tmp_path / "sales.csv").read_bytes())
    assert f"grew the most in {month}" in r.stdout, r.stdout
    assert png_size((tmp_path / "chart.png").read_bytes())[0] > 0


def test_code_interpreter_example_needs_a_model(tmp_path, monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "GPUOS_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    r = run_example("code_interpreter.py", tmp_path, {}, timeout=60)
    assert r.returncode == 2 and "OPENAI_BASE_URL" in r.stderr, r.stdout + r.stderr
