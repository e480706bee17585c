"""``blink play`` runs its local broker + relay in a child process, and neither side outlives the other.

The command-line tests start ``blink play --autoplay`` under the window tests' Xvfb, find its child
(``python -m relay.hosting.localchild <pid>``) through /proc, and kill one side: a SIGKILLed ``blink play``
takes its child with it (PR_SET_PDEATHSIG, and the child's stdin reaching EOF); a SIGKILLed child
ends ``blink play`` with status 1 and one line, no traceback; Ctrl-C (SIGINT to the whole process
group, as a terminal sends it) ends both. The in-process tests drive the same ``Session`` the window
uses with ``relay_process=True``. Every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.test_window import LONG, SCENARIO_S, xdisplay  # noqa: F401 - the Xvfb fixture

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(SCENARIO_S)]  # relay children


def alive(pid: int) -> bool:
    """Is ``pid`` a running process (a zombie waiting to be reaped counts as gone)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def connected_to(pid: int) -> int:
    """How many TCP connections come in to the port ``pid`` listens on (its broker's)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")}
        rows = [line.split() for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]]
    except OSError:
        return 0
    ports = {r[1].split(":")[1] for r in rows if r[3] == "0A" and r[9] in inodes}  # LISTEN, the child's own
    return sum(1 for r in rows if r[3] == "01" and r[1].split(":")[1] in ports)  # ESTABLISHED, server side


def wait_for(predicate: Any, what: str, timeout: float = LONG) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout:g} s: {what}")
        time.sleep(0.1)  # polling /proc for a condition, with a deadline


class Play:
    """A ``blink play --autoplay`` process (its own process group) and its relay child."""

    def __init__(self, display: str, tmp: Path, game: str = "sequence") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "client.cli", "play", "--autoplay", "--game", game, "--mute", "--no-record",
             "--quit-after", str(int(SCENARIO_S))],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "DISPLAY": display, "XDG_DATA_HOME": str(tmp / "data")})
        self.child = wait_for(self._child, "blink play started its relay child")

    def _child(self) -> int | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"blink play ended early ({self.proc.returncode}): {self.proc.stderr.read()}")  # type: ignore[union-attr]
        return next((c for c in children(self.proc.pid) if "relay.hosting.localchild" in cmdline(c)), None)

    def cleanup(self) -> None:
        for pid in (self.proc.pid, self.child):
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.communicate(timeout=LONG)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def play(xdisplay: str, tmp_path: Path) -> Iterator[Any]:  # noqa: F811 - the fixture from test_window
    started: list[Play] = []

    def start(game: str = "sequence") -> Play:
        p = Play(xdisplay, tmp_path, game)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            p.cleanup()


@pytest.mark.integration
def test_the_relay_runs_in_another_process_that_dies_when_blink_play_is_killed(play: Any) -> None:
    p = play()
    assert p.child != p.proc.pid and f"relay.hosting.localchild {p.proc.pid}" in cmdline(p.child)
    os.kill(p.proc.pid, signal.SIGKILL)
    p.proc.wait(timeout=LONG)
    wait_for(lambda: not alive(p.child), "the relay child died with its parent")


@pytest.mark.integration
def test_killing_the_relay_child_ends_blink_play_with_one_line(play: Any) -> None:
    p = play()
    # Wait until the game runs against the child (the window's player is connected to it), then kill it.
    wait_for(lambda: connected_to(p.child) >= 2, "the window's players connected to the child's broker")
    os.kill(p.child, signal.SIGKILL)
    out, err = p.proc.communicate(timeout=LONG)
    assert p.proc.returncode == 1, (p.proc.returncode, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("blink play: the local relay stopped unexpectedly (killed by signal 9"), err
    assert len(lines) == 1, err


@pytest.mark.integration
def test_ctrl_c_ends_blink_play_and_its_relay_child(play: Any) -> None:
    p = play("takeaway")
    os.killpg(p.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    out, err = p.proc.communicate(timeout=LONG)
    assert "Traceback" not in err, err
    assert p.proc.returncode == 130, (p.proc.returncode, err)
    wait_for(lambda: not alive(p.child), "the relay child ended with blink play")


# ------------------------------------------------------------------ the session, in this process


def test_a_session_plays_against_a_relay_in_a_child_process_and_stops_it() -> None:
    from client.window import Session, SessionConfig

    async def scenario() -> None:
        session = Session(SessionConfig(game="takeaway", relay_process=True, seed=4))
        await session.start()
        server = session.server
        try:
            assert server.pid is not None and server.pid != os.getpid() and alive(server.pid)
            assert session.local and session.address.host == "127.0.0.1"
            await session.play_bot(0.05)
            deadline = time.monotonic() + LONG
            while not (session.model.state() is not None and session.model.state().claims):
                assert time.monotonic() < deadline, "no Blink was claimed against the child's relay"
                await session.player.wait_change(timeout=1.0)
        finally:
            await session.close()
        assert server.proc.returncode == 0  # asked to stop: it stopped in order
        assert server.lost is None and session.server_lost is None

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_a_session_notices_its_relay_child_dying() -> None:
    from client.window import Session, SessionConfig

    async def scenario() -> None:
        session = Session(SessionConfig(game="sequence", relay_process=True))
        await session.start()
        try:
            os.kill(session.server.pid, signal.SIGKILL)
            deadline = time.monotonic() + LONG
            while session.server_lost is None:
                assert time.monotonic() < deadline, "the session did not notice"
                await asyncio.sleep(0.05)  # polling the session's flag, with a deadline
            assert session.status == "error" and "killed by signal 9" in session.message
        finally:
            await session.close()

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_a_child_that_cannot_start_says_why_in_one_line() -> None:
    import socket

    from relay.hosting import ChildServer

    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = ChildServer(port=taken.getsockname()[1])
            with pytest.raises(ConnectionError) as err:
                await server.__aenter__()
            assert "could not start" in str(err.value) and "\n" not in str(err.value)
            assert server.proc is not None and server.proc.returncode is not None  # nothing left running

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_hosting_on_the_lan_moves_the_relay_child_onto_every_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    """``blink play --host``: the loopback child is replaced by one listening on every interface
    (advertised -- here to a recorder, no multicast); a friend joins through it."""
    import relay.hosting.lanhost as lanmod
    from client import Player
    from client.window import Session, SessionConfig
    from mqttkit import BrokerAddress

    adverts: list[tuple[int, str]] = []

    class Recorder:  # the advertiser, without multicast
        def __init__(self, port: int, relay_id: str, broker_host: str, *rest: Any) -> None:
            adverts.append((port, broker_host))

        async def __aenter__(self) -> Any:
            return self

        async def __aexit__(self, *exc: Any) -> None:
            adverts.append((-1, "closed"))

    monkeypatch.setattr(lanmod, "advertise", Recorder)

    async def scenario() -> None:
        from mqttkit import free_port

        # A port of its own (not 1883): other tests on this machine host on the LAN at the same time.
        session = Session(SessionConfig(game="takeaway", relay_process=True, lan=True, request_timeout_s=LONG,
                                        lan_port=free_port("0.0.0.0")))
        await session.start()
        first = session.server
        try:
            code = await session.host()
            server = session.server
            assert server is not first and first.proc.returncode == 0  # the loopback one stopped in order
            assert server.pid != os.getpid() and server.broker.host == "0.0.0.0"
            assert session.lan_urls and adverts[0] == (server.broker.port, "0.0.0.0")
            friend = Player(BrokerAddress("127.0.0.1", server.broker.port), "friend")
            await friend.__aenter__()
            try:
                await friend.join(code, timeout=LONG)
            finally:
                await friend.close()
            assert session.server_lost is None
        finally:
            await session.close()
        assert server.proc.returncode == 0 and adverts[-1] == (-1, "closed")

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
