"""Every event log the relay writes is true to `blink verify`: the lobby's corners, a cluster relay's
shard tags, a relay that served no match, and (a property) matches driven through leaves, grace
expiry, forfeits, rematches and crashes.

The relay's judge runs in process here (``RelayCore``, no broker); its log lines are written by the
relay's own ``relay.storage.eventlog`` as ``blink serve --log`` writes them. The integration suite checks
every real relay's log besides (tests/guards.py).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis import given

from client.cli import main
from protocol import messages as m
from protocol.codec import encode
from protocol.rules import register, unregister
from protocol.topics import Topics
from protocol.verify import parse_log, verify
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.storage.eventlog import EventLog, log_rows
from tests.toygame import TOY

T = Topics()
NS = 1_000_000_000


class Lobby:
    """A relay core and the ``blink serve --log`` rows it wrote."""

    def __init__(self, **config: Any) -> None:
        self.core = RelayCore(T, RelayConfig(**config), seed=3)
        self.now = NS
        self.rows: list[dict[str, Any]] = []
        self.out: list[Any] = []

    def take(self, out: list[Any], shard: str | None = None) -> list[Any]:
        self.out.extend(out)
        self.rows.extend(log_rows([o for o in out if isinstance(o, LogRecord)], shard))
        return out

    def send(self, client: str, msg: Any) -> list[Any]:
        return self.take(self.core.handle(T.req(client), encode(msg), self.now))

    def tick(self, dt_s: float) -> list[Any]:
        self.now += int(dt_s * NS)
        return self.take(self.core.tick(self.now))

    def joined(self, client: str) -> m.MatchJoined:
        return next(o.msg for o in reversed(self.out)
                    if isinstance(o, Publish) and o.topic == T.client(client) and isinstance(o.msg, m.MatchJoined))

    def lines(self) -> list[str]:
        return [json.dumps(r) for r in self.rows]

    def verdict(self) -> str:
        return verify(parse_log(self.lines())).summary()


def test_a_match_its_creator_left_before_anyone_joined() -> None:
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann"))
    code = lobby.joined("a").match
    lobby.send("a", m.Leave(match=code))
    left = [r for r in lobby.rows if r.get("type") == "seat_left"]
    assert left and left[0]["player"] == "ann" and left[0]["seat"] == 0
    assert lobby.verdict() == "true: 1 match, 0 games, 3 events checked"


def test_a_seat_left_while_waiting_names_its_player_and_the_seats_after_it_move_down() -> None:
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann", game="takeaway", seats=3))
    code = lobby.joined("a").match
    lobby.send("b", m.JoinMatch(name="bob", match=code))
    lobby.send("a", m.Leave(match=code))  # ann (seat 0) leaves: bob is seat 0 now
    lobby.send("c", m.JoinMatch(name="cy", match=code))
    lobby.send("b", m.Leave(match=code))
    lobby.send("c", m.Leave(match=code))  # the last one: the relay closes the match
    left = [(r["player"], r["seat"]) for r in lobby.rows if r.get("type") == "seat_left"]
    assert left == [("ann", 0), ("bob", 0), ("cy", 0)]
    assert lobby.verdict().startswith("true: 1 match, 0 games"), lobby.verdict()
    # The relay closed it: nothing of it may follow.
    rows = lobby.rows + [{**lobby.rows[-1], "seq": lobby.rows[-1]["seq"] + 1, "type": "seat_taken", "player": "dan",
                          "name": "dan", "seat": 0}]
    report = verify(parse_log(json.dumps(r) for r in rows))
    assert not report.ok and "closed" in report.summary()


def test_a_waiting_match_that_expires() -> None:
    lobby = Lobby(waiting_ttl_s=5.0)
    lobby.send("a", m.CreateMatch(name="ann"))
    lobby.tick(6.0)
    assert [r["type"] for r in lobby.rows if "type" in r][-1] == "match_expired"
    assert lobby.verdict() == "true: 1 match, 0 games, 3 events checked"


def test_a_cluster_relays_lines_name_their_shard() -> None:
    lobby = Lobby()
    lobby.take(lobby.core.handle(T.req("a"), encode(m.CreateMatch(name="ann")), lobby.now), shard="3")
    code = lobby.joined("a").match
    lobby.take(lobby.core.handle(T.req("a"), encode(m.Leave(match=code)), lobby.now), shard="3")
    assert all(r["shard"] == "3" for r in lobby.rows)
    assert lobby.verdict().startswith("true: 1 match"), lobby.verdict()
    # One match is judged by one shard: a line naming another is false.
    rows = [dict(r) for r in lobby.rows]
    rows[1]["shard"] = "4"
    report = verify(parse_log(json.dumps(r) for r in rows))
    assert not report.ok and report.first is not None and report.first.line == 2 and "shard" in report.summary()


@pytest.mark.parametrize("content", [
    "",
    '{"kind": "relay_started", "seed": 1, "ts": 5, "order": "arrival", "relay": "relay-1"}\n',
    '{"kind": "relay_started", "ts": 5, "relay": "r2", "shards_total": 4, "order": "arrival"}\n'
    '{"kind": "bad_input", "code": "bad_client_id", "ts": 6, "shard": "1"}\n',
])
def test_a_relay_log_with_no_match_is_true(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "relay.jsonl"
    path.write_text(content)
    assert main(["verify", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: true: no matches\n" and err == ""


# ------------------------------------------------------------------------------------------ the guard


def false_rows() -> list[LogRecord]:
    """A waiting match whose seat_left names no seated player (as the lobby once wrote it)."""
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann"))
    lobby.send("a", m.Leave(match=lobby.joined("a").match))
    rows = [dict(r) for r in lobby.rows]
    rows[-1]["player"] = 0
    return [LogRecord(r) for r in rows]


def write_log(path: Path, records: list[LogRecord]) -> None:
    log = EventLog(path)
    log.open()
    log.write(records)
    log.close()


def test_the_guard_verifies_every_log_a_relay_wrote(relay_guard: Any, tmp_path: Path) -> None:
    true_log, false_log = tmp_path / "true.jsonl", tmp_path / "false.jsonl"
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann"))
    write_log(true_log, [LogRecord(r) for r in lobby.rows])
    write_log(false_log, false_rows())
    assert relay_guard.event_logs() == [str(true_log), str(false_log)]
    relay_guard.verify_logs()
    relay_guard.verify_logs()  # once per log and problem
    (problem,) = relay_guard.take()
    assert problem["event_log"] == str(false_log) and "seat_left names no seated player" in problem["problem"]


def test_a_test_that_leaves_a_false_log_says_so(relay_guard: Any, tmp_path: Path) -> None:
    false_log, true_log = tmp_path / "false.jsonl", tmp_path / "true.jsonl"
    write_log(false_log, false_rows())
    write_log(true_log, [])  # a relay that served nothing: true
    relay_guard.expect_false_log(false_log)
    relay_guard.expect_false_log(true_log)
    relay_guard.verify_logs()
    (problem,) = relay_guard.take()
    assert problem["event_log"] == str(true_log) and "said it leaves it false" in problem["problem"]


# ------------------------------------------------------------------------------------------ the property

#: Small, fast settings: every game's timers fire within a few seconds; a dropped seat waits 2 s.
#: The toy pile game (tests/toygame.py) ends in a few plays: results, match ends and rematches.
GAMES: dict[str, tuple[int, dict[str, Any]]] = {
    "pile": (2, {"pile": 4, "grace_s": 2.0}),
    "blink": (2, {"best_of": 1, "countdown_s": 0.5, "stalemate_pause_s": 0.2, "pick_time_s": 0.5, "grace_s": 2.0}),
    "takeaway": (3, {"layout": "random", "size": 12, "turn_timer_s": 2.0, "grace_s": 2.0}),
}
CLIENTS = [f"c{i}" for i in range(6)]
WALL = 1_700_000_000 * NS  # the wall clock's lead over the core's monotonic one


@contextlib.contextmanager
def registered(game: Any) -> Iterator[None]:
    assert register(game) is None
    try:
        yield
    finally:
        unregister(game.name)


class Relays:
    """One shard's judge, journalled in SQLite and logged as the relay runtime logs it, served by a
    relay that may crash (recovered from its journal by the next one, same log) or, in a cluster,
    be replaced by another relay with a log of its own (takeover). The real ``Shard.recover`` and
    ``relay.storage.eventlog`` do the recovering and the logging."""

    def __init__(self, folder: Path, cluster: bool) -> None:
        self.step_start = 0  # where the last step's lines begin in the log
        self.folder = folder
        self.cluster = cluster
        self.name = "3" if cluster else "0"
        self.topics = Topics(shard=self.name)
        self.journal_path = folder / "journal.db"
        self.logs: list[Path] = []
        self.now = NS
        self.ids = 0
        self.tokens: dict[tuple[str, str], str] = {}  # (client, match) -> its seat's token
        self.events_seen: set[str] = set()
        self.relay(new_log=True)

    def config(self) -> RelayConfig:
        return RelayConfig(between_games_s=0.5, waiting_ttl_s=30.0, linger_s=20.0,
                           relay_id=f"shard-{self.name}", shards_total=4 if self.cluster else 0)

    def relay(self, new_log: bool) -> None:
        """A relay process starting: its log (a new file for a relay of its own), then the shard,
        recovered from the journal (written to the log before its own lines, as the runtime does)."""
        from relay.storage import SqliteJournal
        from relay.shard import Shard

        if new_log:
            self.logs.append(self.folder / f"relay{len(self.logs)}.jsonl")
        self.log = EventLog(self.logs[-1])
        self.journal = SqliteJournal(self.journal_path, durable=False)
        self.shard = Shard(self.name, RelayCore(self.topics, self.config(), seed=11), self.journal,
                           log_path=self.logs[-1], tagged=self.cluster)
        if not self.cluster:
            self.shard.recover()  # a single relay recovers before it opens its log
        self.log.open()
        self.log.write([LogRecord({"kind": "relay_started", "ts": self.now + WALL, "relay": f"r{len(self.logs)}"})])
        if self.cluster:
            self.shard.recover()  # a relay of several takes its shards once it runs
        self.core = self.shard.core
        self.step_start = self.logs[-1].stat().st_size  # nothing of a step to cut yet

    def stop(self, cut: float) -> None:
        """The relay killed mid-write: its log loses a part (``cut``) of the last step's bytes."""
        self.log.close()
        self.journal.close()
        path = self.logs[-1]
        size = path.stat().st_size
        keep = self.step_start + int((size - self.step_start) * cut)
        with open(path, "rb+") as f:
            f.truncate(keep)

    def step(self, entry: Any) -> list[Any]:
        from relay.storage import Msg

        self.journal.append([entry])
        self.step_start = self.logs[-1].stat().st_size
        out = (self.core.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns) if isinstance(entry, Msg)
               else self.core.tick(entry.now_ns, entry.wall_ns))
        records = [o for o in out if isinstance(o, LogRecord)]
        self.events_seen.update(str(r.record.get("type")) for r in records if "type" in r.record)
        self.log.write(records, self.name if self.cluster else None)
        for o in out:
            if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined):
                client = o.topic.rsplit("/", 1)[-1]
                self.tokens[(client, o.msg.match)] = o.msg.token
        return out

    def send(self, topic: str, msg: Any) -> list[Any]:
        from relay.storage import Msg

        self.now += NS // 20
        return self.step(Msg(topic, encode(msg), self.now, self.now + WALL))

    def request(self, client: str, msg: Any) -> list[Any]:
        return self.send(self.topics.req(client), msg)

    def wait(self, seconds: float) -> None:
        from relay.storage import Tick

        until = self.now + int(seconds * NS)
        while True:
            due = self.core.next_deadline()
            if due is None or due > until:
                break
            self.now = max(self.now, due)
            self.step(Tick(self.now, self.now + WALL))
        self.now = until
        self.step(Tick(self.now, self.now + WALL))

    def close(self) -> None:
        self.log.close()
        self.journal.close()


def seated(relays: Relays) -> list[tuple[str, Any, int]]:
    """(client, match, seat) of every seat held by a client."""
    return [(s.client, x, i) for x in relays.core.matches.values() for i, s in enumerate(x.players)
            if s.client in CLIENTS]


def drive_relays(relays: Relays, data: st.DataObject, steps: int) -> None:
    """``steps`` things players and operators do, each drawn among those that make sense now
    (weighted so that matches fill, games get played and end, and rematches happen)."""
    for _ in range(steps):
        seats = seated(relays)
        free = [c for c in CLIENTS if c not in {s[0] for s in seats}]
        waiting = [x for x in relays.core.matches.values() if x.status == "waiting"]
        playing = [s for s in seats if s[1].status == "playing" and not s[1].players[s[2]].left]
        dropped = [(c, x) for c, x, i in seats if x.players[i].dropped_at is not None]
        over = [(c, x) for c, x, i in seats if x.status == "over" and not x.players[i].rematch]
        ops = ["wait", "crash"] + ["takeover"] * relays.cluster
        ops += ["create"] * (2 if free and not waiting else 0) + ["join"] * (4 if free and waiting else 0)
        ops += ["leave", "drop"] if seats else []
        ops += ["play"] * (10 if playing else 0) + ["rejoin"] * (2 if dropped else 0) + ["rematch"] * (3 if over else 0)
        op = data.draw(st.sampled_from(ops))
        if op == "create":
            game = data.draw(st.sampled_from(sorted(GAMES)))
            n, settings = GAMES[game]
            relays.request(data.draw(st.sampled_from(free)), m.CreateMatch(name="p", game=game, seats=n,
                                                                        settings=settings))
        elif op == "join":
            match = data.draw(st.sampled_from(waiting))
            relays.request(data.draw(st.sampled_from(free)), m.JoinMatch(name="p", match=match.code))
        elif op in ("leave", "drop"):
            client, match, _ = data.draw(st.sampled_from(seats))
            relays.request(client, m.Leave(match.code, dropped=op == "drop"))
        elif op == "rejoin":
            client, match = data.draw(st.sampled_from(dropped))
            relays.request(client, m.Rejoin(match.code, relays.tokens.get((client, match.code), "")))
        elif op == "play":
            client, match, seat = data.draw(st.sampled_from(playing))
            actions = match.rules.legal_actions(match.state, seat)
            if actions:
                action = actions[data.draw(st.integers(0, len(actions) - 1))]
                relays.ids += 1
                relays.send(relays.topics.act(match.code, client),
                            m.Act(id=relays.ids, seq=match.seq, action=match.rules.action_to_wire(action)))
        elif op == "rematch":
            client, match = data.draw(st.sampled_from(over))
            relays.request(client, m.Rematch(match.code))
        elif op == "wait":
            relays.wait(data.draw(st.sampled_from([0.3, 1.0, 2.5, 40.0])))
        else:  # the relay killed mid-write; the next one recovers the journal (same log, or its own)
            relays.stop(data.draw(st.sampled_from([0.0, 0.5, 1.0])))
            relays.relay(new_log=op == "takeover")


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), cluster=st.booleans(), steps=st.integers(10, 80))
def test_every_log_the_relay_writes_verifies(data: st.DataObject, cluster: bool, steps: int) -> None:
    """Matches driven through leaves before and after joining, dropped seats (back in time or
    not), forfeits, rematches, relay crashes and -- for a relay of several shards -- takeovers:
    every relay's log is true."""
    with tempfile.TemporaryDirectory() as tmp, registered(TOY):
        relays = Relays(Path(tmp), cluster)
        try:
            drive_relays(relays, data, steps)
            relays.wait(60.0)  # every timer, grace and linger runs out
        finally:
            relays.close()
        for path in relays.logs:
            report = verify(parse_log(path.read_text().splitlines()))
            assert report.ok, f"{path.name}: {report.summary()}\n{path.read_text()[-3000:]}"
        for kind in sorted(relays.events_seen):
            hypothesis.event(kind)


# ------------------------------------------------------------------------------------------ real relays


@pytest.mark.integration
def test_real_relays_hand_a_shard_over_and_both_logs_verify(mosquitto: Any, tmp_path: Path, relay_guard: Any) -> None:
    """Two relays of a cluster on a real broker, one after the other: a creator leaves before anyone
    joined, a match starts on relay A, A hands its shards to B (its own log), a player leaves and
    forfeits under B. Both logs are true, and B's holds the whole match (from A's kept events)."""
    import asyncio

    from client import Player
    from relay.hosting import ClusterServer, sqlite_opener
    from relay.cluster import ShardedSpace
    from relay.ownership import StaticOwnership
    from relay.runtime import Relay, RelaySettings
    from tests.helpers import eventually

    deadline = 120.0
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]

    async def serving(relay: Relay) -> ClusterServer:
        server = ClusterServer(relay)
        await server.start()
        await eventually(lambda: not relay._starting and not relay._announce, deadline, "the relay serves its shards")
        return server

    def relay(name: str, log: Path) -> Relay:
        return Relay(mosquitto, RelaySettings(config=RelayConfig(relay_id=name), relay_id=name, log_path=log),
                     ShardedSpace(2, sqlite_opener(tmp_path / "data", durable=False)), StaticOwnership(["0", "1"]))

    async def body() -> str:
        a = await serving(relay("relay-a", logs[0]))
        pub = mosquitto.public()
        async with Player(pub, "ann") as ann, Player(pub, "bob") as bob, Player(pub, "cy") as cy:
            alone = await cy.create("takeaway", {}, timeout=deadline)
            await cy.conn.request(m.Leave(alone))  # the creator leaves before anyone joined
            code = await ann.create("takeaway", {}, timeout=deadline)
            await bob.join(code, timeout=deadline)
            await eventually(lambda: ann.model.state() is not None, deadline, "the first view", ann.wait_change)
            await a.stop()  # A hands its shards over
            b = await serving(relay("relay-b", logs[1]))
            try:
                await bob.conn.request(m.Leave(code))  # a forfeit, judged by B
                await eventually(ann.match_over, deadline, "the match's end", ann.wait_change)
            finally:
                await b.stop()
        return code

    code = asyncio.run(asyncio.wait_for(body(), deadline * 3))
    assert relay_guard.event_logs() == [str(p) for p in logs]
    for path in logs:
        report = verify(parse_log(path.read_text().splitlines()))
        assert report.ok, f"{path.name}: {report.summary()}"
    b_rows = [json.loads(x) for x in logs[1].read_text().splitlines()]
    mine = [r for r in b_rows if r.get("match") == code and "type" in r]
    assert mine[0]["type"] == "match_created" and mine[0]["seq"] == 1 and mine[-1]["type"] == "match_over"
