"""The SDK's own tests: no daemon, a local fake of its HTTP side (test_unit.py), and mypy --strict.
They test the SDK of this tree (sdk/python), and take the scripted model server from the end-to-end
suite (tests/e2e/fake_openai.py). tests/run.sh runs them as its "sdk" part:
`python3 -m pytest -q sdk/python/tests`."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

# Each of these takes well under a second (mypy a few): one that hangs fails alone.
TEST_TIMEOUT = 60


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("these tests need pytest-timeout "
                                "(apt-get install python3-pytest-timeout, or scripts/deps.sh)")
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = TEST_TIMEOUT
