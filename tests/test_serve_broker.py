"""``blink serve``'s own broker (relay/hosting/servebroker.py): an installed Mosquitto in a child process by
default, the embedded one with the relay inside it (one process) with ``--embedded``; a bot match is
served through either,
and whatever way serve ends (Ctrl-C, SIGTERM, its broker dying), no process and no configuration
is left behind (and what a killed serve cannot remove is for the broker's user alone). What serve
says: where each listener is and, on loopback alone, how to open it; a taken TLS port by its
number and option; times as people read them."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mqttkit import BrokerAddress, free_port, parse_url
from protocol.topics import Topics
from relay.runtime import Relay, RelaySettings, clock_time
from relay.hosting import ServeError, ServeOptions, serve_relay
from relay.hosting.servebroker import BrokerChild, _last_line, choose, listeners_text
from tests.conftest import find_mosquitto
from tests.helpers import wait_until
from tests.test_broker_trust import bot_match

BLINK = [sys.executable, "-m", "client.cli"]
RUNNING = re.compile(r"running with (Mosquitto broker \((?P<binary>\S+), |the embedded broker \(the relay inside it, )"
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
    if found["binary"]:
        assert _children(proc.pid) == [int(found["pid"])]  # the broker, and nothing else
    else:
        assert int(found["pid"]) == proc.pid and _children(proc.pid) == []  # one process: nothing else
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
        if config_dir is not None:  # left behind: its log and secrets for the broker's user alone
            left = {f.name: f.stat().st_mode & 0o777 for f in config_dir.iterdir()}
            assert left["mosquitto.log"] == left["passwd"] == 0o600, left
            assert all(mode & 0o022 == 0 for mode in left.values()), left  # nothing others may write
    finally:
        if _alive(broker):
            os.kill(broker, signal.SIGKILL)
        if config_dir is not None and config_dir.name.startswith("blink-serve-mosquitto-"):
            shutil.rmtree(config_dir, ignore_errors=True)  # what a killed serve could not remove


@pytest.mark.integration("mosquitto")
def test_a_broker_that_dies_ends_serve_with_one_line_and_1() -> None:
    """(The embedded broker has no process of its own to die: the relay is inside it.)"""
    proc, found, _ = _start()
    assert found["binary"], "Mosquitto is installed: the default runs it in a child"
    os.kill(int(found["pid"]), signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "stopped unexpectedly (killed by signal 9)" in lines[0], err
    assert _children(proc.pid) == []


def test_embedded_is_chosen_when_asked_and_refused_with_a_broker() -> None:
    assert choose(True) is None  # the embedded broker, with the relay inside it
    assert choose(False) == find_mosquitto()
    with pytest.raises(ServeError) as refused:
        asyncio.run(serve_relay(ServeOptions(broker="mqtt://127.0.0.1:1883", embedded=True), Topics()))
    assert refused.value.status == 2 and "--embedded" in str(refused.value)


@pytest.mark.integration
@pytest.mark.parametrize("args", [(), ("--embedded",)], ids=["default", "embedded"])
def test_a_taken_tls_port_is_one_line_naming_it_and_its_option(args: tuple[str, ...], tmp_path: Path) -> None:
    from tests.tlscerts import make_certs

    certs = make_certs(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*BLINK, "serve", "--no-journal", "--port", str(free_port()), "--tls-port", str(port),
                               "--tls-cert", certs.good.cert, "--tls-key", certs.good.key, *args],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"blink serve: TLS port {port} on 127.0.0.1 is already in use (another program, perhaps a "
                     "broker, listens there): pick another with --tls-port"], proc.stderr


def test_the_tls_listener_goes_with_a_certificate_and_its_own_port() -> None:
    for options, says in [(ServeOptions(tls_host="0.0.0.0"), "--tls-host goes with --tls-cert"),
                          (ServeOptions(tls_port=8883), "--tls-port goes with --tls-cert")]:
        with pytest.raises(ServeError) as refused:
            asyncio.run(serve_relay(options, Topics()))
        assert refused.value.status == 2 and says in str(refused.value)


def test_the_running_line_says_where_each_listener_is_and_how_to_open_loopback() -> None:
    alone = listeners_text([("mqtt", "127.0.0.1", 1883)])
    assert alone == ("mqtt://127.0.0.1:1883 (loopback: this machine only; other machines: --host 0.0.0.0 or --lan; "
                     "the internet, over TLS only: --tls-host 0.0.0.0 --tls-cert FILE --tls-key FILE)")
    both = listeners_text([("mqtt", "127.0.0.1", 1883), ("mqtts", "localhost", 8883)])
    assert both.startswith("mqtt://127.0.0.1:1883 and mqtts://localhost:8883 (loopback: this machine only;")
    assert both.endswith("the internet, over TLS only: --tls-host 0.0.0.0)")
    assert listeners_text([("mqtt", "127.0.0.1", 1883), ("mqtts", "0.0.0.0", 8883)]) == \
        "mqtt://127.0.0.1:1883 (this machine only) and mqtts://0.0.0.0:8883 (every interface)"
    assert listeners_text([("mqtt", "0.0.0.0", 1883)]) == "mqtt://0.0.0.0:1883 (every interface)"
    assert listeners_text([("mqtt", "192.168.1.5", 1883)]) == "mqtt://192.168.1.5:1883"
    child = BrokerChild("127.0.0.1", 1883, tls=("c.pem", "k.pem", 8884), tls_host="0.0.0.0")
    assert child.listeners == [("mqtt", "127.0.0.1", 1883), ("mqtts", "0.0.0.0", 8884)]
    assert BrokerChild("10.0.0.1", 1883, tls=("c.pem", "k.pem", 8884)).listeners[1] == \
        ("mqtts", "10.0.0.1", 8884)  # on the plain listener's address unless told


def test_mosquittos_reason_at_start_is_worded_without_its_timestamp(tmp_path: Path) -> None:
    log = tmp_path / "mosquitto.log"
    log.write_text("1796326538: Opening ipv4 listen socket on port 8883.\n1796326538: Error: Address already in use\n")
    assert _last_line(log) == "Error: Address already in use"
    child = BrokerChild("127.0.0.1", 1883, tls=("c.pem", "k.pem", 8883), tls_host="0.0.0.0")
    assert child._why(_last_line(log)) == (": port 1883 on 127.0.0.1 or TLS port 8883 on 0.0.0.0 is already in use "
                                           "(taken since it was checked): pick another with --port/--tls-port")
    log.write_text("1796326538: Error: Unable to open pwfile\n")
    assert child._why(_last_line(log)) == ": Error: Unable to open pwfile"
    assert _last_line(tmp_path / "none") == "" and child._why("") == ""


def test_a_relay_says_when_it_gains_a_shard_in_local_time_not_seconds_since_1970() -> None:
    said: list[str] = []
    relay = Relay(parse_url("mqtt://127.0.0.1:1"), RelaySettings(Topics()), say=said.append)
    relay._tell("serves shard 3")
    assert len(said) == 1 and re.fullmatch(
        r"relay \S+ serves shard 3 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", said[0]), said
    assert clock_time(0.25).endswith(".250") and clock_time(59.9996)[-4:] == ".999"
