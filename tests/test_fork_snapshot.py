"""The relay's journal snapshots are taken in a forked child while the stepper goes on
(relay/shard.py's Snapshots): a play or ping that arrives while the core is being pickled is
answered without waiting for it; the snapshot stands for the journal position of the fork; a child
that fails leaves the journal as it was and is tried again later; a relay stopped mid-snapshot
leaves no child behind."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Callable

import aiomqtt
import pytest

from client import new_client_id
from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.codec import decode_all, encode
from relay import shard as shell_module
from relay.storage import snapshot
from relay.storage import SqliteJournal, Tick, open_journal
from relay.hosting import LocalServer
from tests.test_snapshot import T, shell_on

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="snapshots are forked only where there is fork")


def gated_dump(gate: Path, real: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A ``snapshot.dump`` that, in a forked child, first waits for ``gate`` to exist: the test
    decides how long the child's pickling takes. (Polling in the child is the fake's own pace, not
    the test's synchronisation: the test waits on what the relay does.)"""
    parent = os.getpid()

    def dump(core: Any) -> bytes:
        if os.getpid() != parent:
            deadline = time.monotonic() + 300
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return real(core)
    return dump


def test_a_forked_snapshot_is_saved_at_the_position_of_the_fork(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "j.db") as j:
        shell = shell_on(j)
        shell.recover()  # a fresh journal: the fresh core's snapshot at 0
        j.append([Tick(1), Tick(2)])

        async def main() -> None:
            shell.whole.fork_snapshot()
            task = shell.whole.snap_task
            assert task is not None
            await asyncio.wait_for(task, 60)

        asyncio.run(main())
        pos, blob = j.latest_snapshot() or (0, b"")
        assert pos == 2 and shell.whole.snap_task is None
        assert snapshot.load(blob).last_clock() == shell.core.last_clock()
        assert shell.whole.snapshot_s >= 0.0  # the child's CPU time, which spaces the next one


def test_a_failing_child_leaves_the_journal_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with SqliteJournal(tmp_path / "j.db") as j:
        shell = shell_on(j)
        shell.recover()
        j.append([Tick(1)])
        parent = os.getpid()
        real = snapshot.dump

        def broken(core: Any) -> bytes:
            if os.getpid() != parent:
                raise MemoryError("no memory for the pickle")
            return real(core)

        monkeypatch.setattr(shell_module.snapshots, "dump", broken)

        async def main() -> None:
            shell.whole.fork_snapshot()
            task = shell.whole.snap_task
            assert task is not None
            await asyncio.wait_for(task, 60)  # the relay itself is not disturbed

        with caplog.at_level("WARNING", logger="blink.relay"):
            asyncio.run(main())
        assert (j.latest_snapshot() or (None,))[0] == 0
        assert "snapshot's child process failed" in caplog.text
        monkeypatch.setattr(shell_module.snapshots, "dump", real)
        asyncio.run(main())  # tried again: now it works
        assert (j.latest_snapshot() or (None,))[0] == 1


def test_the_relay_answers_while_its_snapshot_is_being_taken(mosquitto: BrokerAddress, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    gate = tmp_path / "gate"
    pongs: list[m.Pong] = []
    pinger_id = new_client_id("p")
    got_pong = asyncio.Event

    async def main() -> tuple[int, int, int]:
        arrived = got_pong()
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=pinger_id) as pinger:
            await pinger.subscribe(T.client(pinger_id), qos=0)

            async def read() -> None:
                async for msg in pinger.messages:
                    bodies = decode_all(bytes(msg.payload)) if isinstance(msg.payload, (bytes, bytearray)) else []
                    for body in bodies:
                        if isinstance(body, m.Pong):
                            pongs.append(body)
                            arrived.set()

            async def ping_and_wait(n: int) -> None:
                """``n`` pings, one at a time, each answered (generous deadlines: a busy machine)."""
                for _ in range(n):
                    arrived.clear()
                    before = len(pongs)
                    deadline = time.monotonic() + 60
                    while len(pongs) == before:
                        assert time.monotonic() < deadline, "the relay did not answer a ping"
                        await pinger.publish(T.req(pinger_id), encode(m.Ping(t0=time.time_ns())), qos=0)
                        try:
                            await asyncio.wait_for(arrived.wait(), 2)
                        except asyncio.TimeoutError:
                            pass  # resent: the first may have come before the subscription was live

            async def until(cond: Callable[[], bool], what: str) -> None:
                deadline = time.monotonic() + 120
                while not cond():
                    assert time.monotonic() < deadline, what
                    await asyncio.sleep(0.02)

            reader = asyncio.create_task(read())
            server = LocalServer(mosquitto.login_url, topics=T, data_dir=data)
            relay = server.relay
            assert relay is not None
            try:
                await server.start()
                await ping_and_wait(1)
                # From here a snapshot is due after every step, and its child waits for the gate.
                monkeypatch.setattr(shell_module.snapshots, "dump", gated_dump(gate, snapshot.dump))
                relay.whole.snapshot_every, relay.whole.snapshot_s = 1, 0.0
                await ping_and_wait(1)
                await until(lambda: relay.whole.snap_task is not None, "no snapshot was started")
                journal = relay.journal
                assert journal is not None
                started_at = relay.whole.snapping_at  # (due after a step, or while idle once due)
                # The child is still pickling (it waits for the gate): the relay answers all the same.
                await ping_and_wait(5)
                assert relay.whole.snap_task is not None
                assert (journal.latest_snapshot() or (0,))[0] == 0
                answered_during = journal.last_position()
                gate.touch()
                await until(lambda: (journal.latest_snapshot() or (0,))[0] > 0, "the snapshot was not saved")
                saved = (journal.latest_snapshot() or (0,))[0]
                # Started again after each step while pings went on: stop at a gated one, mid-way.
                gate.unlink()
                await ping_and_wait(1)
                await until(lambda: relay.whole.snap_task is not None, "no second snapshot was started")
                child_pids = children()
                assert child_pids, "no snapshot child to be seen"
            finally:
                reader.cancel()
                await server.stop()
                gate.touch()
            assert not (set(child_pids) & set(children())), "a snapshot's child outlived the relay"
            return started_at, answered_during, saved

    started_at, answered_during, saved = asyncio.run(asyncio.wait_for(main(), 300))
    assert answered_during > started_at  # the pings answered meanwhile were journalled after the fork
    assert saved >= started_at
    # A restart from that journal: the snapshot (at the fork's position) plus the entries after it.
    journal = open_journal(data)
    try:
        again = shell_on(journal)
        again.recover()
        assert again.recovered is not None and " entries replayed" in again.recovered
    finally:
        journal.close()


def children() -> list[int]:
    """This process's live forks (children with its own command line; the test's Mosquitto is not one)."""
    me = os.getpid()
    with open(f"/proc/{me}/cmdline", "rb") as f:
        mine = f.read()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) != me or fields[0] == "Z":
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() == mine:
                    found.append(int(entry))
        except OSError:
            continue
    return found
