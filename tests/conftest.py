"""Shared fixtures: brokers started by the tests themselves, on free loopback ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from mqttkit import BrokerAddress, free_port
from relay.mosquitto import write_mosquitto_config

ROOT = Path(__file__).resolve().parent.parent

# Every test fails on a relay internal_error or a traceback, here or in a child (tests/guards.py).
pytest_plugins = ["tests.guards"]


@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """`blink serve` journals to the per-user data directory by default: every test (and the
    processes it starts) gets its own, so tests never share a journal, a lock or recovered matches."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port}")


def find_mosquitto() -> str | None:
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).exists()), None)


@pytest.fixture
def mosquitto() -> Iterator[BrokerAddress]:
    """A real Mosquitto on a free port, configured by ``blink broker-config`` (the shipped ACL, a
    relay password, size limits). The address it yields is the relay's login: ``.url`` (no
    credentials) is for players, ``.login_url`` for the relay."""
    binary = find_mosquitto()
    if binary is None:
        pytest.fail("mosquitto is not installed (.ci/run installs it)")
    port = free_port()
    # Started as root, Mosquitto drops to its own user: its files must be readable to it, and
    # pytest's tmp_path (mode 700) is not.
    tmp_path = Path(tempfile.mkdtemp(prefix="blink-mosquitto-"))
    tmp_path.chmod(0o755)
    login = write_mosquitto_config(tmp_path, "127.0.0.1", port)
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(conf.read_text() + "log_dest stderr\nlog_type error\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port("127.0.0.1", port)
        yield login
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp_path, ignore_errors=True)
