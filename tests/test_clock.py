"""The relay's two clocks through the journal: monotonic time for the core, the wall clock for
stamps; both journalled, replayed exactly, continued across a restart; schema-1 journals migrated."""

from __future__ import annotations

import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from mqttkit import parse_url
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay import runtime as shell_module
from relay.core import LogRecord, Publish, RelayConfig
from relay.storage.journal import SCHEMA_VERSION, Msg, SqliteJournal, Tick, open_journal
from relay.ownership import WholeSpace
from relay.runtime import Relay, RelaySettings

T = Topics()
S = 1_000_000_000
WALL = 1_764_000_000 * S  # the wall clock, far from the monotonic one
ADDRESS = parse_url("mqtt://127.0.0.1:1")  # never connected: these tests drive the shell by hand


class Clock:
    """Both of the shell's clocks, set by the test."""

    def __init__(self, mono: int, wall: int) -> None:
        self.mono, self.wall = mono, wall

    def advance(self, ns: int, wall_ns: int | None = None) -> None:
        self.mono += ns
        self.wall += ns if wall_ns is None else wall_ns


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(5 * S, WALL)
    monkeypatch.setattr(shell_module.time, "monotonic_ns", lambda: c.mono)
    monkeypatch.setattr(shell_module.time, "time_ns", lambda: c.wall)
    return c


def _feed(shell: Relay, clock: Clock, topic: str, msg: Any) -> None:
    shell._inbox.append((topic, encode(msg), clock.mono))  # noqa: SLF001 - as the connection task does


async def _step(shell: Relay) -> None:
    await shell.step()


def _run_steps(shell: Relay, clock: Clock, inputs: list[tuple[str, Any]]) -> None:
    import asyncio

    for topic, msg in inputs:
        _feed(shell, clock, topic, msg)
        clock.advance(S // 100)
        asyncio.run(_step(shell))


def test_the_journal_holds_both_clocks_and_replay_reproduces_the_wall_stamps(clock: Clock, tmp_path: Path) -> None:
    journal = open_journal(tmp_path / "data")
    shell = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=5), WholeSpace(journal))
    shell.eventlog.records = []
    shell.recover()
    _run_steps(shell, clock, [(T.req("a"), m.CreateMatch(name="ann")), (T.req("a"), m.Ping(t0=1))])
    code = next(r["match"] for r in shell.eventlog.records if r.get("type") == "match_created")
    clock.advance(0, wall_ns=-3600 * S)  # the wall clock is set back an hour: stamps follow, time does not
    _run_steps(shell, clock, [(T.req("b"), m.JoinMatch(name="bob", match=code))])
    entries = [e for _, e in journal.read()]
    msgs = [e for e in entries if isinstance(e, Msg)]
    assert len(msgs) == 3 and all(e.wall_ns is not None for e in msgs)
    assert all(e.wall_ns is not None and e.wall_ns - e.now_ns > WALL // 2 for e in msgs)  # two different clocks
    assert msgs[2].wall_ns is not None and msgs[1].wall_ns is not None and msgs[2].wall_ns < msgs[1].wall_ns
    assert msgs[2].now_ns > msgs[1].now_ns  # monotonic: never back
    journal.close()

    # A second relay on the same directory replays the entries and makes the same log records
    # (the recovered event log is completed by comparing lines: the stamps must be identical).
    journal = open_journal(tmp_path / "data")
    again = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=5), WholeSpace(journal))
    again.recover()
    replayed: list[dict[str, Any]] = []
    core = again.core
    # Re-run the journal from the start on a fresh core, as recovery does from a snapshot.
    fresh = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=5)).core
    for entry in entries:
        if isinstance(entry, Msg):
            out = fresh.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns)
        else:
            assert isinstance(entry, Tick)
            out = fresh.tick(entry.now_ns, entry.wall_ns)
        replayed.extend(o.record for o in out if isinstance(o, LogRecord))
    original = [r for r in shell.eventlog.records if r.get("kind") != "relay_started"]
    assert replayed == original
    events = [r for r in replayed if r.get("kind") == "event"]
    assert events and all(r["ts"] >= WALL - 3600 * S for r in events)
    assert core.last_clock() == shell.core.last_clock()
    journal.close()


def test_a_restarted_relay_continues_the_cores_monotonic_time(clock: Clock, tmp_path: Path) -> None:
    journal = open_journal(tmp_path / "data")
    shell = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=9), WholeSpace(journal))
    shell.eventlog.records = []
    shell.recover()
    _run_steps(shell, clock, [(T.req("a"), m.CreateMatch(name="ann", settings={"countdown_s": 3}))])
    code = next(r["match"] for r in shell.eventlog.records if r.get("type") == "match_created")
    _run_steps(shell, clock, [(T.req("b"), m.JoinMatch(name="bob", match=code))])
    last_mono, last_wall = shell.core.last_clock()
    countdown_end = shell.core.matches[code].timers
    assert countdown_end, "the countdown is running"
    deadline = shell.core.next_deadline()
    assert deadline is not None and deadline > last_mono
    journal.close()

    # The machine reboots: its monotonic clock starts again near 0; 1 s of wall time has passed.
    clock.mono, clock.wall = 2 * S, last_wall + S
    journal = open_journal(tmp_path / "data")
    again = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=9), WholeSpace(journal))
    again.recover()
    again.whole.resume_clock()  # what run() does after recover()
    now, wall = again.now()
    assert now == last_mono + S and wall == last_wall + S
    assert again.core.next_deadline() == deadline  # the core's deadlines are where they were
    # ... so the countdown ends when it would have, measured from the last input: not at once
    # (the new monotonic clock is far below it), not never.
    assert deadline - now > 0
    clock.advance(deadline - now)
    assert again.now()[0] == deadline
    journal.close()

    # Down longer than the countdown: it is due at once after recovery (time never runs back).
    clock.mono, clock.wall = 7 * S, clock.wall + 60 * S
    journal = open_journal(tmp_path / "data")
    third = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=9), WholeSpace(journal))
    third.recover()
    third.whole.resume_clock()
    assert third.now()[0] >= deadline
    # A wall clock set back before the last input never moves the core's time backwards.
    clock.wall = last_wall - 3600 * S
    fourth_journal = journal
    fourth = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=9), WholeSpace(fourth_journal))
    fourth.core = third.core
    fourth.whole.resume_clock()
    assert fourth.now()[0] >= third.core.last_clock()[0]
    journal.close()


def _old_crc(pos: int, kind: int, now_ns: int, topic: bytes, payload: bytes) -> int:
    head = struct.pack("<qBqI", pos, kind, now_ns, len(topic))
    return zlib.crc32(payload, zlib.crc32(topic, zlib.crc32(head)))


def _schema_1_journal(path: Path, rows: list[tuple[int, int, int, str | None, bytes | None]]) -> None:
    """A journal as schema 1 wrote it (no wall_ns column; the checksum without it)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE entries (pos INTEGER PRIMARY KEY, kind INTEGER NOT NULL, now_ns INTEGER NOT NULL,
                              topic TEXT, payload BLOB, crc INTEGER NOT NULL);
        CREATE TABLE snapshots (pos INTEGER PRIMARY KEY, blob BLOB NOT NULL, crc INTEGER NOT NULL);
        CREATE TABLE discarded (pos INTEGER, kind INTEGER, now_ns INTEGER, topic TEXT, payload BLOB,
                                crc INTEGER, reason TEXT);
        INSERT INTO meta VALUES ('schema', 1);
    """)
    for pos, kind, now_ns, topic, payload in rows:
        crc = _old_crc(pos, kind, now_ns, (topic or "").encode(), payload or b"")
        db.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", (pos, kind, now_ns, topic, payload, crc))
    db.close()


def test_a_schema_1_journal_is_migrated_in_place_and_its_entries_read_as_one_clock(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    _schema_1_journal(path, [(1, 0, WALL, "blink/v1/lobby/req/a", b"\x80"), (2, 1, WALL + 5, None, None),
                             (3, 0, WALL + 9, "blink/v1/lobby/req/b", b"\x81\x01")])
    with SqliteJournal(path) as j:
        assert j.recovery_note is not None and f"migrated from journal schema 1 to {SCHEMA_VERSION}" in j.recovery_note
        assert [e for _, e in j.read()] == [Msg("blink/v1/lobby/req/a", b"\x80", WALL), Tick(WALL + 5),
                                          Msg("blink/v1/lobby/req/b", b"\x81\x01", WALL + 9)]
        assert j.append([Msg("blink/v1/lobby/req/c", b"\x82", 50, WALL + 20), Tick(60, WALL + 30)]) == 5
    with SqliteJournal(path) as j:  # reopened: nothing to migrate, every row (old and new) valid
        assert j.recovery_note is None
        entries = [e for _, e in j.read()]
        assert entries[3:] == [Msg("blink/v1/lobby/req/c", b"\x82", 50, WALL + 20), Tick(60, WALL + 30)]
        assert len(entries) == 5
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_a_damaged_schema_1_row_is_still_caught_after_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    _schema_1_journal(path, [(1, 1, WALL, None, None), (2, 1, WALL + 1, None, None), (3, 1, WALL + 2, None, None)])
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE entries SET now_ns = now_ns + 1 WHERE pos = 2")
    db.close()
    with SqliteJournal(path) as j:
        assert j.recovery_note is not None and "entry 2 failed its checksum" in j.recovery_note
        assert [e for _, e in j.read()] == [Tick(WALL)]
    # A wall stamp changed under a schema-2 row fails its checksum too.
    with SqliteJournal(path) as j:
        j.append([Tick(10, WALL + 10), Tick(11, WALL + 11)])
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE entries SET wall_ns = wall_ns + 1 WHERE pos = 3")
    db.close()
    with SqliteJournal(path) as j:
        assert j.recovery_note is not None and "entry 3 failed its checksum" in j.recovery_note
        assert [e for _, e in j.read()] == [Tick(WALL), Tick(10, WALL + 10)]


def test_a_publish_on_a_dropped_connection_is_counted_not_raised(clock: Clock) -> None:
    """The stepper's publishes go straight to the connection's transport: on a connection that is
    down the shell counts them and logs; nothing is raised out of a step."""
    import asyncio

    from mqttkit.connection import MqttConnection

    async def main() -> Relay:
        shell = Relay(ADDRESS, RelaySettings(T, RelayConfig(), seed=1))
        shell.eventlog.records = []
        client = MqttConnection(lambda msgs: None)  # never connected: no transport
        out = [Publish(T.client("a"), m.Pong(t0=1, t1=2, t2=3)), LogRecord({"kind": "x"}),
               Publish(T.client("b"), m.Pong(t0=1, t1=2, t2=3))]
        shell._client = client  # noqa: SLF001
        shell._emit_all([(None, out)])  # noqa: SLF001
        return shell

    shell = asyncio.run(main())
    assert shell.publish_failures == 2
    assert shell.eventlog.records == [{"kind": "x"}]  # the step's log line is written all the same


@pytest.mark.parametrize("v5", [False, True])
def test_the_shells_packed_publishes_are_the_packets_paho_would_send(v5: bool) -> None:
    """The stepper packs a step's QoS-0 messages itself (one buffer, one send): byte for byte what
    paho's publish would queue, for short and long payloads, retained or not."""
    import paho.mqtt.client as paho

    from mqttkit.packets import pack_publish as _pack_publish

    client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5 if v5 else paho.MQTTv311)
    queued: list[bytes] = []
    client._sock = object()  # type: ignore[assignment]  # noqa: SLF001 - "connected" for _send_publish
    client._packet_queue = lambda command, packet, mid, qos, info=None: queued.append(bytes(packet)) or 0  # type: ignore[method-assign,func-returns-value]  # noqa: E501, SLF001
    for topic, payload, retain in [("blink/v1/c/abc", b"", False), ("blink/v1/m/0/ABCDE/ev", b"x" * 100, False),
                                   ("blink/v1/m/0/ABCDE/snap", b"y" * 300, True), ("t/é", b"z" * 20_000, False)]:
        client._send_publish(0, topic.encode(), payload, 0, retain)  # noqa: SLF001
        buf = bytearray()
        _pack_publish(buf, topic, payload, retain, v5)
        assert bytes(buf) == queued[-1]
    with pytest.raises(ValueError):
        _pack_publish(bytearray(), "a/+/b", b"", False, v5)
    client._sock = None  # noqa: SLF001 - nothing to close
