"""``blink serve``'s own broker (relay/servebroker.py): an installed Mosquitto by default, the
embedded one with ``--embedded``, each in a child process; a bot match is served through either,
and whatever way serve ends (Ctrl-C, SIGTERM, its broker dying), no process and no configuration
is left behind."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mqttkit import BrokerAddress, free_port
from protocol.topics import Topics
from relay.serve import ServeError, ServeOptions, serve
from relay.servebroker import choose
from tests.conftest import find_mosquitto
from tests.helpers import wait_until
from tests.test_broker_trust import bot_match

BLINK = [sys.executable, "-m", "client.cli"]
RUNNING = re.compile(r"running with (Mosquitto broker \((?P<binary>\S+), |embedded broker \(its own process, )"
                     r"pid (?P<pid>\d+)\) on mqtt://127\.0\.0\.1:(?P<port>\d+)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _start(*args: str) -> tuple[subprocess.Popen[str], re.Match[str], str]:
    port = free_port()
    proc = subprocess.Popen([*BLINK, "serve", "--port", str(port), "--no-journal", "--seed", "3", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = RUNNING.search(line)
    assert found is not None and int(found["port"]) == port, line + (proc.communicate()[1] if proc.poll() else "")
    assert _children(proc.pid) == [int(found["pid"])]  # the broker, and nothing else
    return proc, found, line


def _stops(proc: subprocess.Popen[str], broker: int, sig: int) -> tuple[str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    wait_until(lambda: not _alive(broker), timeout=30, what="the broker gone")
    return out, err


@pytest.mark.integration
@pytest.mark.parametrize("args", [(), ("--embedded",)], ids=["default", "embedded"])
def test_serve_serves_a_bot_match_through_its_broker_and_leaves_nothing(args: tuple[str, ...]) -> None:
    proc, found, line = _start(*args)
    broker = int(found["pid"])
    try:
        mosquitto = find_mosquitto()
        if args or mosquitto is None:
            assert "embedded broker" in line
        else:
            assert "Mosquitto broker" in line and os.path.realpath(found["binary"]) == os.path.realpath(mosquitto)
            conf = Path(f"/proc/{broker}/cmdline").read_bytes().split(b"\0")[2].decode()
            config_dir = Path(conf).parent
            assert config_dir.is_dir() and (config_dir / "mosquitto.acl").exists()
            assert (config_dir / "passwd").stat().st_mode & 0o077 == 0
        result = asyncio.run(bot_match(BrokerAddress("127.0.0.1", int(found["port"])), 3))
        assert result.summary()["winner"] in result.summary()["players"]
    finally:
        out, err = _stops(proc, broker, signal.SIGINT)
    assert proc.returncode == 130, err
    assert "blink relay stopped." in out and "Traceback" not in err
    if not args and find_mosquitto() is not None:
        assert not config_dir.exists()  # the generated configuration and password are gone


@pytest.mark.integration
def test_sigterm_stops_serve_and_its_broker_with_0() -> None:
    proc, found, _ = _start()
    out, err = _stops(proc, int(found["pid"]), signal.SIGTERM)
    assert proc.returncode == 0 and "blink relay stopped." in out, err


@pytest.mark.integration
@pytest.mark.parametrize("args", [(), ("--embedded",)], ids=["default", "embedded"])
def test_a_killed_serve_leaves_no_broker_behind(args: tuple[str, ...]) -> None:
    """SIGKILL gives serve no chance to stop its broker: the kernel ends it (the parent-death signal),
    a Mosquitto started by root included -- dropping to its own user by itself would lose that."""
    proc, found, _ = _start(*args)
    broker = int(found["pid"])
    cmdline = Path(f"/proc/{broker}/cmdline").read_bytes().split(b"\0")
    config_dir = Path(cmdline[2].decode()).parent if not args and len(cmdline) > 2 else None
    try:
        proc.kill()
        proc.communicate(timeout=60)
        wait_until(lambda: not _alive(broker), timeout=30, what="the broker gone after serve was killed")
    finally:
        if _alive(broker):
            os.kill(broker, signal.SIGKILL)
        if config_dir is not None and config_dir.name.startswith("blink-serve-mosquitto-"):
            shutil.rmtree(config_dir, ignore_errors=True)  # what a killed serve could not remove


@pytest.mark.integration
@pytest.mark.parametrize("args", [(), ("--embedded",)], ids=["default", "embedded"])
def test_a_broker_that_dies_ends_serve_with_one_line_and_1(args: tuple[str, ...]) -> None:
    proc, found, _ = _start(*args)
    os.kill(int(found["pid"]), signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "stopped unexpectedly (killed by signal 9)" in lines[0], err
    assert _children(proc.pid) == []


def test_embedded_is_chosen_when_asked_and_refused_with_a_broker() -> None:
    assert choose(True) == ("embedded", None)
    kind, binary = choose(False)
    assert kind == ("mosquitto" if find_mosquitto() else "embedded") and (binary is None) == (kind == "embedded")
    with pytest.raises(ServeError) as refused:
        asyncio.run(serve(ServeOptions(broker="mqtt://127.0.0.1:1883", embedded=True), Topics()))
    assert refused.value.status == 2 and "--embedded" in str(refused.value)
