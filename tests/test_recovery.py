"""The relay survives: ``kill -9`` and a restart on the same data directory, a restarted broker,
and bad data directories (relay/runtime.py, relay/shard.py, relay/storage/journal.py).

Every test starts its own Mosquitto (or uses the ``mosquitto`` fixture) and real ``blink serve``
processes; the players are in-process clients (``client.player.Player`` driven by ``Bot``), so the
test can read what each of them was told. After a restart the relay republishes every match's
snapshot and every player's view: bots that were mid-match carry on from there.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from mqttkit import BrokerAddress, free_port, parse_url
from protocol import messages as m
from protocol.topics import Topics
from client import Bot, Connection, Player, new_client_id
from relay.cluster import shards
from relay.storage.journal import KIND_MSG, SqliteJournal
from relay.hosting import write_mosquitto_config
from tests.conftest import ROOT, find_mosquitto, wait_port

BLINK = [sys.executable, "-m", "client.cli"]


class Relay:
    """One ``blink serve --broker URL --data DIR --log LOG`` process at a time."""

    def __init__(self, login_url: str, data: Path, log: Path, seed: int = 7) -> None:
        self.cmd = [*BLINK, "serve", "--broker", login_url, "--data", str(data), "--log", str(log), "--seed", str(seed)]
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.recovering = False

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert "running" in first, (first, self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else "")
        self.lines = [first, self.proc.stdout.readline()]  # the data directory line
        if self.recovering:
            self.lines.append(self.proc.stdout.readline())  # what was recovered
        self.recovering = True  # the next start is on the same directory

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self._close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None:
            for f in (self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()
            self.proc = None


async def until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def retained(address: BrokerAddress, topic: str, accept: Callable[[Any], bool], timeout: float = 15) -> Any:
    """The first message on ``topic`` (a retained one arrives at once) that ``accept`` takes."""
    import aiomqtt

    from protocol.codec import decode_all

    async with aiomqtt.Client(address.host, address.port, identifier=new_client_id("t"),
                              username=address.username, password=address.password) as client:
        await client.subscribe(topic, qos=0)
        async with asyncio.timeout(timeout):
            async for msg in client.messages:
                bodies = decode_all(bytes(msg.payload)) if isinstance(msg.payload, (bytes, bytearray)) and msg.payload else [None]
                for body in bodies:
                    if accept(body):
                        return body
    raise AssertionError(f"nothing on {topic}")


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_log(records: list[dict[str, Any]], code: str, accepted: set[tuple[str, int]]) -> None:
    """The relay's log across the restart: the match's seqs are 1..N once each, and every play a
    player heard accepted is in it."""
    seqs = [r["seq"] for r in records if r["kind"] == "event" and r["match"] == code]
    assert seqs == list(range(1, len(seqs) + 1)), f"seqs not gap-free and unique: {seqs}"
    applied = {(r["client"], r["id"]) for r in records if r["kind"] == "applied" and r["match"] == code and "client" in r}
    assert accepted <= applied, f"accepted plays missing from the log: {sorted(accepted - applied)}"
    assert sum(1 for r in records if r["kind"] == "relay_started") == 2


KILL_POINTS: dict[str, tuple[str, dict[str, Any], Callable[[list[m.Event]], bool]]] = {
    # the start countdown of game 1: the match has begun, no card is out yet
    "blink-countdown": ("blink", {}, lambda evs: any(e.type == "game_started" for e in evs)),
    "blink-mid-race": ("blink", {}, lambda evs: sum(e.type == "card_played" for e in evs) >= 25),
    "blink-between-games": ("blink", {}, lambda evs: any(e.type == "game_result" for e in evs)),
    "takeaway": ("takeaway", {}, lambda evs: len(evs) >= 12),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_and_restart_on_the_same_data_directory(point: str, mosquitto: BrokerAddress, tmp_path: Path) -> None:
    game, settings, kill_when = KILL_POINTS[point]
    log = tmp_path / "relay.jsonl"
    relay = Relay(mosquitto.login_url, tmp_path / "data", log)
    address = parse_url(mosquitto.url)
    topics = Topics()
    relay.start()

    async def scenario() -> None:
        events: list[m.Event] = []
        spectator = Connection(address, new_client_id("log"), topics,
                               lambda msg, now: events.append(msg) if isinstance(msg, m.Event) else None,
                               ping_interval_s=0)
        players = [Player(address, f"bot{i + 1}", topics) for i in range(2)]
        tasks: list[asyncio.Task[None]] = []
        async with spectator:
            await spectator.watch_all()
            try:
                for p in players:
                    await p.__aenter__()
                code = await players[0].create(game, settings, seats=2)
                await players[1].join(code)
                tasks = [asyncio.create_task(Bot(p, reaction_s=0.05, seed=i).run()) for i, p in enumerate(players)]
                mine = lambda: [e for e in events if e.match == code]  # noqa: E731
                await until(lambda: kill_when(mine()), 180, f"the kill point {point}")
                relay.kill9()
                seen = max(e.seq for e in mine())
                heard = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                relay.start()
                assert "recovered 1 match(es) (1 running)" in relay.lines[-1], relay.lines
                # The recovered relay republished every player's view: nothing they saw is gone.
                await until(lambda: all(p.model.predictor is not None and p.model.predictor.confirmed_seq >= seen
                                        for p in players), 20, "views at or after the last seq seen before the kill")
                await until(lambda: any(e.type == "match_over" for e in mine()), 120, "the end of the match")
                accepted = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                assert heard <= accepted
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for p in players:
                    await p.close()
        relay.stop()
        check_log(read_log(log), code, accepted)

    try:
        asyncio.run(scenario())
    finally:
        relay.stop()
    verify = subprocess.run([*BLINK, "verify", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


class ShardRelay(Relay):
    """One ``blink serve --broker URL --shards LIST --shards-total N --data DIR --log LOG`` process:
    a relay of several shards, each journalled apart under DIR."""

    def __init__(self, login_url: str, data: Path, log: Path, owned: str = "0,1", total: int = 2) -> None:
        super().__init__(login_url, data, log)
        self.cmd = [*BLINK, "serve", "--broker", login_url, "--shards", owned, "--shards-total", str(total),
                    "--data", str(data), "--log", str(log)]

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.lines = []
        while True:  # what it says of its shards, then that it runs
            line = self.proc.stdout.readline()
            assert line, (self.lines, self.proc.stderr.read() if self.proc.stderr else "")
            self.lines.append(line)
            if "running" in line:
                return


def test_kill_9_mid_match_in_a_relay_of_several_shards_and_restart(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    """The same runtime serving shards: killed mid-race, restarted on the same directories, its
    shard's journal replayed; the match finishes and its log (lines tagged by shard) verifies."""
    log = tmp_path / "relay.jsonl"
    relay = ShardRelay(mosquitto.login_url, tmp_path / "data", log)
    address = parse_url(mosquitto.url)
    topics = Topics()
    relay.start()

    async def scenario() -> tuple[str, set[tuple[str, int]]]:
        events: list[m.Event] = []
        spectator = Connection(address, new_client_id("log"), topics,
                               lambda msg, now: events.append(msg) if isinstance(msg, m.Event) else None,
                               ping_interval_s=0)
        players = [Player(address, f"bot{i + 1}", topics) for i in range(2)]
        tasks: list[asyncio.Task[None]] = []
        async with spectator:
            await spectator.watch_all()
            try:
                for p in players:
                    await p.__aenter__()
                code = await players[0].create("blink", {}, seats=2)
                await players[1].join(code)
                tasks = [asyncio.create_task(Bot(p, reaction_s=0.05, seed=i).run()) for i, p in enumerate(players)]
                mine = lambda: [e for e in events if e.match == code]  # noqa: E731
                await until(lambda: sum(e.type == "card_played" for e in mine()) >= 25, 180, "the middle of a race")
                relay.kill9()
                heard = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                relay.start()
                assert any("recovered 1 match(es) (1 running)" in line or "1 match(es)" in line
                           for line in relay.lines), relay.lines
                await until(lambda: any(e.type == "match_over" for e in mine()), 180, "the end of the match")
                accepted = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                assert heard <= accepted
                return code, accepted
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                for p in players:
                    await p.close()

    try:
        code, accepted = asyncio.run(scenario())
    finally:
        relay.stop()
    records = read_log(log)
    check_log(records, code, accepted)
    # Each line says its shard; ``blink verify`` reads one relay's log of one space, without that tag.
    shard = shards.shard_of_code(code, 2)
    assert all(r.get("shard") == shard for r in records if r.get("match") == code)
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "shard"}) + "\n" for r in records))
    verify = subprocess.run([*BLINK, "verify", str(plain)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_player_hears_accepted_only_once_the_journal_holds_the_action(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    data = tmp_path / "data"
    relay = Relay(mosquitto.login_url, data, tmp_path / "relay.jsonl")
    address = parse_url(mosquitto.url)
    relay.start()

    def journalled() -> set[tuple[str, int]]:
        # A second reader of the WAL file sees every committed batch (the relay holds the lock, not the file).
        db = sqlite3.connect(f"file:{data / 'journal.db'}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute("SELECT topic, payload FROM entries WHERE kind=?", (KIND_MSG,)).fetchall()
        finally:
            db.close()
        found: set[tuple[str, int]] = set()
        from protocol.codec import decode

        for topic, payload in rows:
            where = Topics().parse_act(topic)
            act = decode(payload) if where else None
            if where and isinstance(act, m.Act):
                found.add((where[1], act.id))
        return found

    async def scenario() -> None:
        checked = 0
        players = [Player(address, f"p{i}") for i in range(2)]
        for p in players:
            await p.__aenter__()
        try:
            code = await players[0].create("blink", {}, seats=2)
            await players[1].join(code)
            bots = [asyncio.create_task(Bot(p, reaction_s=0.02, seed=i).run()) for i, p in enumerate(players)]
            seen: set[tuple[str, int]] = set()
            deadline = time.monotonic() + 120  # a loaded machine: at least a few plays, up to 20
            while checked < 20 and time.monotonic() < deadline:
                await players[0].wait_change(0.1)
                # Checked the moment the answer is in: its action must already be in the journal.
                new = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok} - seen
                if new:
                    assert new <= journalled()
                    seen |= new
                    checked += len(new)
            for b in bots:
                b.cancel()
            await asyncio.gather(*bots, return_exceptions=True)
        finally:
            for p in players:
                await p.close()
        assert checked >= 5, f"only {checked} plays were accepted in 120 s"

    try:
        asyncio.run(scenario())
    finally:
        relay.stop()


class OwnMosquitto:
    """A Mosquitto of this test's own, so that it can be restarted on the same port."""

    def __init__(self, tmp: Path) -> None:
        binary = find_mosquitto()
        if binary is None:
            pytest.fail("mosquitto is not installed")
        self.binary = binary
        self.port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o755)
        self.login = write_mosquitto_config(tmp, "127.0.0.1", self.port)
        self.conf = tmp / "mosquitto.conf"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


@pytest.mark.integration("mosquitto")
def test_the_relay_reconnects_when_its_broker_restarts(tmp_path: Path) -> None:
    broker_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"blink-mosq-{os.getpid()}-{free_port()}"
    broker = OwnMosquitto(broker_dir)
    broker.start()
    relay = Relay(broker.login.login_url, tmp_path / "data", tmp_path / "relay.jsonl")
    try:
        relay.start()
        broker.stop()
        broker.start()  # a new broker: no sessions, no retained messages

        async def after() -> None:
            address = parse_url(broker.login.url)
            # The relay came back by itself and said so again on its retained status topic (the new
            # broker has no retained message of its own).
            status = await retained(address, Topics().relay_status("relay-0"),
                                    lambda x: isinstance(x, m.RelayStatus) and x.online, timeout=30)
            assert status.online  # published once it has subscribed again: it hears requests
            players = [Player(address, f"p{i}") for i in range(2)]
            for p in players:
                await p.__aenter__()
            if True:
                code = await players[0].create("takeaway", {}, seats=2)
                try:
                    await players[1].join(code)
                    bots = [asyncio.create_task(Bot(p, reaction_s=0.01, seed=i).run()) for i, p in enumerate(players)]
                    await asyncio.wait_for(asyncio.gather(*bots), 60)
                    assert players[0].match_over() and players[1].match_over()
                finally:
                    for p in players:
                        await p.close()

        asyncio.run(after())
        assert relay.proc is not None and relay.proc.poll() is None, "the relay exited instead of reconnecting"
    finally:
        relay.stop()
        broker.stop()
        shutil.rmtree(broker_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------ bad data directories


def serve_once(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, "serve", "--port", str(free_port()), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def one_line_failure(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.integration
def test_a_data_directory_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    one_line_failure(serve_once(["--data", str(tmp_path / "file" / "data")]), "data directory")


@pytest.mark.integration
def test_a_journal_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "journal.db") as j:
        j.append([])
    with sqlite3.connect(tmp_path / "journal.db") as db:
        db.execute("UPDATE meta SET value=99 WHERE key='schema'")
    one_line_failure(serve_once(["--data", str(tmp_path)]), "newer version")


@pytest.mark.integration
def test_a_data_directory_of_pickled_snapshots_is_refused(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "tests" / "fixtures" / "data-snapshot-v2", tmp_path / "data")
    one_line_failure(serve_once(["--data", str(tmp_path / "data")]), "snapshot format 2", "move the data directory")


@pytest.mark.integration
def test_a_second_relay_on_a_held_directory_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    first = subprocess.Popen([*BLINK, "serve", "--port", str(free_port()), "--data", str(tmp_path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and "running" in first.stdout.readline()
        one_line_failure(serve_once(["--data", str(tmp_path)]), f"process {first.pid}")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=20)


def test_a_torn_journal_tail_keeps_the_valid_prefix_and_says_so(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    data = tmp_path / "data"
    log = tmp_path / "relay.jsonl"
    relay = Relay(mosquitto.login_url, data, log)
    address = parse_url(mosquitto.url)
    relay.start()

    async def make_matches() -> list[str]:
        codes = []
        for i in range(3):
            async with Player(address, f"p{i}") as p:
                codes.append(await p.create("blink", {}, seats=2))
                await p.close(leave=False)
        return codes

    codes = asyncio.run(make_matches())
    relay.kill9()
    with sqlite3.connect(data / "journal.db") as db:
        last = db.execute("SELECT max(pos) FROM entries").fetchone()[0]
        db.execute("UPDATE entries SET crc = crc + 1 WHERE pos = ?", (last,))  # the last entry is damaged
    relay.start()
    try:
        assert relay.proc is not None and relay.proc.stderr is not None
        note = relay.proc.stderr.readline()
        assert "journal" in note and f"{last}" in note, note

        async def listed() -> set[str]:
            got = await retained(address, Topics().match_list, lambda x: isinstance(x, m.MatchList))
            return {x["code"] for x in got.matches}

        # The valid prefix is back: the matches whose creation was journalled whole are listed.
        back = asyncio.run(listed())
        assert set(codes[:2]) <= back
    finally:
        relay.stop()


def test_a_ping_changes_the_core_so_every_input_is_journalled_and_replayed_exactly(tmp_path: Path) -> None:
    """A ping spends the sender's request tokens and marks it seen (the limits), so the shell
    journals every input, pings included: replaying the journal gives the very same core."""
    import pickle

    from protocol.codec import encode
    from relay.core import RelayCore
    from relay.storage.journal import Msg, SqliteJournal, replay

    topics = Topics()
    core = RelayCore(topics, seed=3)
    a, b = new_client_id(), new_client_id()
    journal = SqliteJournal(tmp_path / "journal.db")
    journal.save_snapshot(0, pickle.dumps(core))
    inputs = [(topics.req(a), encode(m.CreateMatch(name="a", game="blink", settings={}, seats=2)), 1_000)]
    core.handle(*inputs[0])
    code = next(iter(core.matches))
    inputs.append((topics.req(b), encode(m.JoinMatch(name="b", match=code)), 2_000))
    core.handle(*inputs[-1])
    assert core.matches[code].status == "playing"
    def limits(c: RelayCore) -> tuple[Any, ...]:
        bucket = c.gate.req_buckets[a]
        return bucket.tokens, bucket.at_ns, list(c.gate.clients.seen.items())

    before = limits(core)
    ping = (topics.req(a), encode(m.Ping(t0=5)), 3_000)
    out = core.handle(*ping)
    inputs.append(ping)
    assert [o.msg for o in out if hasattr(o, "msg")] == [m.Pong(t0=5, t1=3_000, t2=3_000)]
    assert limits(core) != before  # so a journal without pings would not replay this core
    journal.append([Msg(t, p, n) for t, p, n in inputs])
    again = replay(journal, lambda: RelayCore(topics, seed=3), restore=pickle.loads)
    assert limits(again) == limits(core)
    assert again.matches[code].seq == core.matches[code].seq
    journal.close()
