"""Healing: seats that survive a dropped connection (grace, tokens, Rejoin), resends with the same
id, reconnects. Pure tests drive the relay core and the client model with time as input; the
process tests (below) run real bots, relays and brokers on free ports."""

from __future__ import annotations

import dataclasses

import asyncio
import json
import time
from typing import Any

import pytest

from protocol import messages as m
from protocol.codec import encode
from protocol.rules import blink
from protocol.verify import parse_log, verify
from relay.core import LogRecord, Publish
from client import ClientModel
from client.model import ASK_AGAIN_FIRST_NS, GIVE_UP_NS, ConnectionLost, Reconnected, Reconnecting, resend_wait_ns
from tests.test_relay_core import S, T, Harness

# ---------------------------------------------------------------------------------- relay core


def joined(h: Harness, client: str, out: list[Any] | None = None) -> m.MatchJoined:
    return [x for x in h.to(client, out) if isinstance(x, m.MatchJoined)][-1]  # the latest


def verified(h: Harness) -> Any:
    lines = [json.dumps(o.record) for o in h.out if isinstance(o, LogRecord) and o.record.get("kind") == "event"]
    return verify(parse_log(lines))


def test_the_seat_token_is_private_and_differs_per_seat() -> None:
    h = Harness()
    code = h.start_match()
    ta, tb = joined(h, "a").token, joined(h, "b").token
    assert len(ta) == 32 and len(tb) == 32 and ta != tb
    for o in h.out:
        if isinstance(o, Publish) and o.msg != b"":
            if o.topic not in (T.client("a"), T.client("b")):
                assert ta.encode() not in encode(o.msg) and tb.encode() not in encode(o.msg), o.topic
    assert h.core.matches[code].status == "playing"


def test_a_dropped_player_rejoins_from_a_new_client_within_the_grace_period() -> None:
    h = Harness()
    code = h.start_match()
    token = joined(h, "b").token
    out = h.send(T.req("b"), m.Leave(dropped=True))  # b's last will
    [ev] = h.events(out)
    assert ev.type == "player_dropped" and ev.data == {"player": "bob", "seat": 1, "grace_s": 30.0}
    assert h.core.matches[code].status == "playing"
    h.tick(29)
    assert h.core.matches[code].status == "playing"
    out = h.send(T.req("c"), m.Rejoin(code, token))
    again = joined(h, "c", out)
    assert (again.match, again.seat, again.token) == (code, 1, token)
    assert any(isinstance(x, m.ViewUpdated) for x in h.to("c", out))
    assert [e.type for e in h.events(out)] == ["player_returned"]
    h.tick(5)  # past the first grace deadline: nothing happens, the player is back
    match = h.core.matches[code]
    assert match.status == "playing" and match.clients == ("a", "c")
    # The old client id holds nothing any more; the new one plays.
    hand = blink.from_wire(next(x for x in reversed(h.to("c")) if isinstance(x, m.ViewUpdated)).state)
    assert hand is not None
    old = h.send(T.act(code, "b"), m.Act(id=1, seq=match.seq, action={"t": "Pick", "pile": 0}))
    assert [x.code for x in h.to("b", old) if isinstance(x, m.ActionRejected)] == ["not_a_player"]
    # A deliberate leave still forfeits at once.
    h.send(T.req("a"), m.Leave())
    assert match.status == "over" and match.winner == 1
    report = verified(h)
    assert report.ok, report.summary()


def test_after_the_grace_period_the_match_is_abandoned() -> None:
    h = Harness()
    code = h.start_match({"grace_s": 5})
    h.send(T.req("a"), m.Leave(dropped=True))
    assert h.core.next_deadline() is not None and h.core.next_deadline() <= h.now + 5 * S
    h.tick(4.9)
    assert h.core.matches[code].status == "playing"
    out = h.tick(0.2)
    over = [e for e in h.events(out) if e.type == "match_over"]
    assert over and over[0].data["reason"] == "abandoned" and over[0].data["winner"] == "bob"
    token = joined(h, "a").token
    late = h.send(T.req("z"), m.Rejoin(code, token))
    assert [x.code for x in h.to("z", late) if isinstance(x, m.RequestRejected)] == ["bad_token"]
    report = verified(h)
    assert report.ok, report.summary()


def test_a_wrong_token_or_match_is_rejected_with_a_reason() -> None:
    h = Harness()
    code = h.start_match()
    out = h.send(T.req("z"), m.Rejoin(code, "0" * 32))
    assert [x.code for x in h.to("z", out) if isinstance(x, m.RequestRejected)] == ["bad_token"]
    out = h.send(T.req("z"), m.Rejoin("ZZZZZ", joined(h, "a").token))
    assert [x.code for x in h.to("z", out) if isinstance(x, m.RequestRejected)] == ["no_such_match"]
    # A seat holder cannot take the other seat too.
    out = h.send(T.req("a"), m.Rejoin(code, joined(h, "b").token))
    assert [x.code for x in h.to("a", out) if isinstance(x, m.RequestRejected)] == ["bad_token"]
    assert h.core.matches[code].clients == ("a", "b")


@pytest.mark.parametrize("grace", [-1, 601, "30", True, None])
def test_grace_s_is_checked(grace: Any) -> None:
    h = Harness()
    settings = {"grace_s": grace}
    out = h.send(T.req("a"), m.CreateMatch(name="ann", settings=settings))
    if grace is None:  # absent in effect: the default
        assert joined(h, "a", out)
        return
    assert [x.code for x in h.to("a", out) if isinstance(x, m.RequestRejected)] == ["bad_settings"]


def test_a_will_in_a_waiting_match_frees_the_seat_and_a_returning_seat_holder_resyncs() -> None:
    h = Harness()
    out = h.send(T.req("a"), m.CreateMatch(name="ann"))
    code = joined(h, "a", out).match
    h.send(T.req("a"), m.Leave(dropped=True))
    assert code not in h.core.matches  # nobody left: closed, as before
    code = h.start_match()
    token = joined(h, "a").token
    h.send(T.req("a"), m.Leave(dropped=True))
    out = h.send(T.req("a"), m.Rejoin(code, token))  # same client id, after a reconnect
    assert joined(h, "a", out).seat == 0 and [e.type for e in h.events(out)] == ["player_returned"]
    assert h.core.matches[code].grace_deadline() is None


def test_a_resent_action_is_answered_again_and_applied_once() -> None:
    h = Harness()
    code = h.start_match()
    match = h.core.matches[code]
    view = blink.view(match.state, 0)  # what seat 0 sees now (whole views only come at game boundaries)
    act = None
    for action in blink.legal_actions(view, 0):
        act = m.Act(id=7, seq=match.seq, action=blink.action_to_wire(action))
        break
    assert act is not None
    first = h.send(T.act(code, "a"), act)
    seq = match.seq
    again = h.send(T.act(code, "a"), act)
    a1 = [x for x in h.to("a", first) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
    a2 = [x for x in h.to("a", again) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
    # (the repeat does not say when the play first arrived: that is the first answer's)
    assert [dataclasses.replace(x, recv_ns=0) for x in a1] == a2 and match.seq == seq and not h.events(again)


# ---------------------------------------------------------------------------------- client model


def playing_model() -> ClientModel:
    h = Harness()
    code = h.start_match()
    model = ClientModel("a", "ann")
    for o in h.out:  # its private topic and the public events (whole views come only at boundaries)
        if getattr(o, "topic", "") in (T.client("a"), T.ev(code)):
            model.on_message(o.msg, 0)
    return model


def test_an_unanswered_action_is_resent_with_the_same_id_then_given_up() -> None:
    model = playing_model()
    state = model.state()
    assert model.predictor is not None and state is not None
    action = next(iter(blink.legal_actions(state, 0)))
    act = model.act(action, 0)
    assert isinstance(act, m.Act)
    sent = [(0, act.id)]
    now = 0
    while now <= GIVE_UP_NS + S:
        now += S // 10
        sent += [(now, a.id) for a in model.resends(now)]
    times = [t for t, _ in sent]
    assert {i for _, i in sent} == {act.id}
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[:4] == [resend_wait_ns(n) for n in (1, 2, 3, 4)] == [S // 2, S, 2 * S, 4 * S]
    assert max(gaps) == 4 * S and times[-1] < GIVE_UP_NS
    assert model.failed == 1 and model.bounces[-1].code == "no_answer" and not model.predictor.pending


def test_an_answered_action_is_not_resent_and_nothing_is_resent_while_reconnecting() -> None:
    model = playing_model()
    state = model.state()
    assert state is not None and model.match
    acts = []
    for action in list(blink.legal_actions(state, 0))[:1]:
        a = model.act(action, 0)
        assert isinstance(a, m.Act)
        acts.append(a)
    model.on_message(Reconnecting("gone"), 1)
    assert model.connection == "reconnecting" and model.resends(S) == []
    out = model.on_message(Reconnected(), 2)
    assert model.connection == "connected"
    assert [type(x) for x in out] == [m.Rejoin, m.Resync] and out[0].token == model.token != ""
    assert [a.id for a in model.resends(S)] == [acts[0].id]
    model.on_message(m.ActionAccepted(model.match, acts[0].id, 10**6), 3)
    assert model.resends(10 * S) == []
    model.on_message(ConnectionLost("for good"), 4)
    assert model.connection == "lost"


def test_the_relay_coming_back_online_asks_for_a_resync() -> None:
    model = playing_model()
    assert model.on_message(m.RelayStatus("relay-0", True), 0) == []  # the first status: nothing missed
    assert model.on_message(m.RelayStatus("relay-0", False), 1) == []
    out = model.on_message(m.RelayStatus("relay-0", True), 2)
    assert any(isinstance(x, m.Resync) for x in out) and any(isinstance(x, m.Rejoin) for x in out)


def test_a_join_whose_answer_was_lost_is_asked_again_and_answered_with_the_same_seat() -> None:
    # The shard's relay seats the joiner (journalled, the game starts) and is killed before its
    # MatchJoined leaves; the new owner answers only what it is asked: the joiner must ask again.
    h = Harness()
    out = h.send(T.req("a"), m.CreateMatch(name="ann"))
    code = joined(h, "a", out).match
    model = ClientModel("b", "bob")
    request = model.ask(m.JoinMatch(name="bob", match=code), 0)
    first = h.send(T.req("b"), request)  # answered, but the answer is lost with its relay
    assert [e.type for e in h.events(first)][-1] == "game_started" and model.match is None
    assert model.asks_again(ASK_AGAIN_FIRST_NS - 1) == []
    model.on_message(m.RelayStatus("shard-0", True), 1)  # the retained status at connect: nothing new
    assert model.asks_again(2) == []
    model.on_message(m.RelayStatus("shard-0", False), 3)
    model.on_message(m.RelayStatus("shard-0", True), 4)  # a new owner serves the shard: ask at once
    assert model.asks_again(5) == [request]
    now, sent = 5, [5]
    while now < 20 * S:  # and on a timer meanwhile: doubling, capped
        now += S // 10
        sent += [now] * len(model.asks_again(now))
    gaps = [b - a for a, b in zip(sent, sent[1:])]
    assert gaps == [4 * S] * 5  # then every 4 s (2 s after the first send, doubling, capped)
    again = h.send(T.req("b"), request)  # the repeat: the same seat, nothing applied twice
    assert joined(h, "b", again) == joined(h, "b", first) and h.events(again) == []
    for x in h.to("b", again):
        model.on_message(x, now)
    assert model.match == code and model.seat == 1 and model.asks_again(100 * S) == []


def test_only_an_unanswered_join_or_rejoin_is_asked_again_and_not_while_reconnecting() -> None:
    model = ClientModel("b", "bob")
    model.ask(m.CreateMatch(name="bob"), 0)  # a second create would make a second match
    assert model.asks_again(100 * S) == []
    model.ask(m.QuickMatch(name="bob"), 0)
    assert model.asks_again(100 * S) == []
    rejoin = model.ask(m.Rejoin("ABCDE", "t" * 32), 0)
    model.on_message(Reconnecting("gone"), 1)
    assert model.asks_again(100 * S) == []
    model.on_message(Reconnected(), 100 * S + 1)
    assert model.asks_again(100 * S + 1) == [rejoin]  # due at once after the reconnect
    model.on_message(m.RequestRejected("bad_token", "no"), 100 * S + 2)  # refused, not lost
    assert model.asks_again(1000 * S) == []
    join = model.ask(m.JoinMatch(name="bob", match="ABCDE"), 0)
    assert model.asks_again(ASK_AGAIN_FIRST_NS) == [join]
    model.stop_asking()  # the caller gave up waiting
    assert model.asks_again(1000 * S) == []


class _Wire:
    """A player's connection that records what it sends (no broker)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def request(self, msg: Any) -> None:
        self.sent.append(msg)

    async def act(self, match: str, act: m.Act) -> None:
        self.sent.append(act)

    async def watch(self, match: str) -> None:
        pass

    async def close(self, leave: bool = True) -> None:
        pass


def test_a_player_joining_asks_again_when_the_shard_is_served_again_and_stops_once_seated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from client import model
    from client import Player
    from mqttkit import parse_url
    from tests.helpers import eventually

    monkeypatch.setattr(model, "ASK_AGAIN_FIRST_NS", 600 * S)  # only the shard's status can make it ask again

    h = Harness()
    code = joined(h, "a", h.send(T.req("a"), m.CreateMatch(name="ann"))).match

    async def scenario() -> list[Any]:
        player = Player(parse_url("mqtt://127.0.0.1:1"), "bob", client_id="b")
        wire = _Wire()
        player.conn = wire  # type: ignore[assignment]
        player.resend_interval_s = 0.01
        player._spawn(player._resender())
        joining = asyncio.ensure_future(player.join(code, timeout=30))
        await eventually(lambda: wire.sent, what="the join")
        answer = h.send(T.req("b"), wire.sent[0])  # seated; the answer is lost with its relay
        assert [e.type for e in h.events(answer)][-1] == "game_started"
        for online in (True, False, True):  # the retained status, then a new owner takes the shard over
            player._on_message(m.RelayStatus("shard-0", online), time.time_ns())
        await eventually(lambda: len(wire.sent) >= 2, 10, what="the join asked again")
        for x in h.to("b", h.send(T.req("b"), wire.sent[1])):
            player._on_message(x, time.time_ns())
        assert await asyncio.wait_for(joining, 5) == code and player.model.seat == 1
        assert player.model.asking is None  # seated: nothing more to ask
        await player.close(leave=False)
        return wire.sent

    sent = asyncio.run(scenario())
    assert [type(x) for x in sent[:2]] == [m.JoinMatch, m.JoinMatch] and sent[0] == sent[1]


def test_the_model_tracks_who_is_away_and_takes_its_own_seat_back() -> None:
    model = playing_model()
    assert model.match and model.seat == 0
    seq = model.last_event_seq
    out = model.on_message(m.Event(model.match, seq + 1, 0, 0, "player_dropped",
                                   {"player": "bob", "seat": 1, "grace_s": 30.0}), 5 * S)
    assert out == [] and model.away == {1: (5 * S, 30.0)}
    out = model.on_message(m.Event(model.match, seq + 2, 0, 0, "player_dropped",
                                   {"player": "ann", "seat": 0, "grace_s": 30.0}), 6 * S)
    assert out == [m.Rejoin(model.match, model.token)]  # a stale will of our own: take the seat back
    model.on_message(m.Event(model.match, seq + 3, 0, 0, "player_returned", {"player": "bob", "seat": 1}), 7 * S)
    assert 1 not in model.away


# ---------------------------------------------------------------------------------- real processes

import asyncio  # noqa: E402
import collections  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from mqttkit import BrokerAddress  # noqa: E402
from relay.hosting import LocalServer  # noqa: E402
from client import Bot  # noqa: E402
from client.net import Impairment  # noqa: E402
from client import Player  # noqa: E402
from tests.helpers import DEADLINE_S, eventually, wait_until  # noqa: E402

BLINK = [sys.executable, "-m", "client.cli"]
QUICK = {"countdown_s": 0.2, "stalemate_pause_s": 0.2, "pick_time_s": 1.0, "best_of": 1}


def applied_once(records: list[dict[str, Any]]) -> collections.Counter[tuple[Any, Any]]:
    applied = collections.Counter((r["client"], r["id"]) for r in records
                                  if r.get("kind") == "applied" and "client" in r)
    twice = [k for k, n in applied.items() if n > 1]
    assert not twice, f"applied more than once: {twice}"
    return applied


@pytest.mark.integration
def test_ten_percent_loss_both_ways_matches_finish_and_nothing_is_applied_twice() -> None:
    async def main() -> tuple[list[dict[str, Any]], list[Player]]:
        async with LocalServer(None, seed=11) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            players = [Player(server.address, name, impairment=Impairment(loss=0.1, seed=i))
                       for i, name in enumerate(("ann", "bob"))]
            for p in players:
                await p.__aenter__()
            try:
                a, b = players
                code = await _retry(lambda: a.create("blink", dict(QUICK), timeout=3))
                await _retry(lambda: b.join(code, timeout=3))
                bots = [Bot(p, reaction_s=0.05, seed=i) for i, p in enumerate(players)]
                # One message in ten lost: slow on a loaded machine, never stuck.
                await asyncio.wait_for(asyncio.gather(*(bot.run() for bot in bots)), DEADLINE_S * 4)
                records = list(server.relay.eventlog.records)
                return records, players
            finally:
                for p in players:
                    await p.close()

    # Which messages the loss takes depends on timing: a short match may lose no answer at all. Every
    # match played must finish, apply each action once and verify; within three, an answer is lost.
    for _ in range(3):
        records, players = asyncio.run(main())
        over = [r for r in records if r.get("kind") == "event" and r.get("type") == "match_over"]
        assert over and over[0]["reason"] in ("won", "game_limit")
        applied_once(records)
        report = verify(parse_log(json.dumps(r) for r in records if r.get("kind") == "event"))
        assert report.ok, report.summary()
        duplicates = [r for r in records if r.get("kind") == "duplicate"]
        if duplicates:
            break
    assert duplicates, "with 10 % loss some answer was lost and its action resent"
    assert sum(p.model.resent for p in players) > 0


async def _retry(call: Any, tries: int = 10) -> Any:
    """A lobby request may be lost on an impaired link: ask again (the relay answers a repeat)."""
    from client import RequestError

    for i in range(tries):
        try:
            return await call()
        except RequestError as exc:
            if exc.code != "timeout" or i == tries - 1:
                raise
    raise AssertionError("unreachable")


class Procs:
    """Child processes a test starts: every one is ended (and its output kept) at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
        self.tmp = tmp_path
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([*BLINK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def read_line(proc: subprocess.Popen[str], needle: str) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the process ended before printing {needle!r}: {proc.stderr.read() if proc.stderr else ''}")
        if needle in line:
            return line.strip()


def log_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def two_bots(procs: Procs, url: str, settings: dict[str, Any]) -> tuple[subprocess.Popen[str], subprocess.Popen[str], str, Path]:
    ann = procs.start("bot", "--server", url, "--create", "--settings", json.dumps(settings), "--reaction", "0.3",
                      "--name", "ann", "--seed", "1")
    code = read_line(ann, " in match ").split(" in match ")[1].split()[0]
    bob = procs.start("bot", "--server", url, "--match", code, "--reaction", "0.1", "--name", "bob", "--seed", "2")
    saved = Path(read_line(bob, "seat saved in ").split("seat saved in ")[1].split(" (")[0])
    return ann, bob, code, saved


def serve(procs: Procs, broker: BrokerAddress, log: Path) -> subprocess.Popen[str]:
    relay = procs.start("serve", "--broker", broker.login_url, "--seed", "5", "--log", str(log))
    wait_until(lambda: any(r.get("kind") == "relay_started" for r in log_records(log)), what="the relay to start")
    return relay


@pytest.mark.integration
def test_a_killed_bot_rejoins_with_its_saved_seat_and_the_match_goes_on(tmp_path: Path,
                                                                         mosquitto: BrokerAddress) -> None:
    procs = Procs(tmp_path)
    log = tmp_path / "relay.log"
    try:
        serve(procs, mosquitto, log)
        ann, bob, code, saved = two_bots(procs, mosquitto.url, dict(QUICK, grace_s=30))
        assert saved.stat().st_mode & 0o077 == 0  # the token is the user's only
        assert json.loads(saved.read_text())["match"] == code
        wait_until(lambda: any(r.get("kind") == "applied" for r in log_records(log)), what="the race to be on")
        bob.send_signal(signal.SIGKILL)
        bob.wait()
        wait_until(lambda: any(r.get("type") == "player_dropped" for r in log_records(log)),
                   what="the relay to see bob's connection drop")
        again = procs.start("bot", "--server", mosquitto.url, "--rejoin", str(saved), "--reaction", "0.1")
        assert f"in match {code} (seat 1)" in read_line(again, " in match ")
        assert again.wait(timeout=DEADLINE_S * 2) == 0 and ann.wait(timeout=DEADLINE_S) == 0
    finally:
        procs.close()
    records = log_records(log)
    types = [r.get("type") for r in records if r.get("kind") == "event"]
    assert types.index("player_dropped") < types.index("player_returned") < types.index("match_over")
    over = next(r for r in records if r.get("type") == "match_over")
    assert over["reason"] in ("won", "game_limit")
    moved = next(r for r in records if r.get("kind") == "seat_moved")
    applied = applied_once(records)
    assert any(client == moved["to"] for client, _ in applied), "the rejoined bot played on"
    report = verify(parse_log(json.dumps(r) for r in records if r.get("kind") == "event"))
    assert report.ok, report.summary()


@pytest.mark.integration
def test_a_killed_bot_that_does_not_return_in_time_abandons_the_match(tmp_path: Path,
                                                                      mosquitto: BrokerAddress) -> None:
    procs = Procs(tmp_path)
    log = tmp_path / "relay.log"
    try:
        serve(procs, mosquitto, log)
        ann, bob, code, saved = two_bots(procs, mosquitto.url, dict(QUICK, grace_s=1))
        wait_until(lambda: any(r.get("kind") == "event" and r.get("type") == "game_started"
                               for r in log_records(log)), what="the game to start")
        bob.send_signal(signal.SIGKILL)
        bob.wait()
        assert ann.wait(timeout=DEADLINE_S) == 0
        assert "match over: winner ann" in (ann.stdout.read() if ann.stdout else "")
        late = procs.start("bot", "--server", mosquitto.url, "--rejoin", str(saved))
        assert late.wait(timeout=DEADLINE_S) != 0
        assert "bad_token" in (late.stderr.read() if late.stderr else "")
    finally:
        procs.close()
    records = log_records(log)
    over = next(r for r in records if r.get("type") == "match_over")
    assert over["reason"] == "abandoned" and over["winner"] == "ann"
    report = verify(parse_log(json.dumps(r) for r in records if r.get("kind") == "event"))
    assert report.ok, report.summary()


@pytest.mark.integration
def test_a_rejoin_with_a_wrong_token_is_refused(tmp_path: Path, mosquitto: BrokerAddress) -> None:
    procs = Procs(tmp_path)
    log = tmp_path / "relay.log"
    try:
        serve(procs, mosquitto, log)
        ann, bob, code, saved = two_bots(procs, mosquitto.url, dict(QUICK, grace_s=30))
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps(dict(json.loads(saved.read_text()), token="f" * 32)))
        wrong = procs.start("bot", "--server", mosquitto.url, "--rejoin", str(forged))
        assert wrong.wait(timeout=DEADLINE_S) == 1
        err = wrong.stderr.read() if wrong.stderr else ""
        assert "bad_token" in err and len(err.strip().splitlines()) == 1
        missing = procs.start("bot", "--server", mosquitto.url, "--rejoin", str(tmp_path / "none.json"))
        assert missing.wait(timeout=DEADLINE_S) != 0
        assert "no saved seat" in (missing.stderr.read() if missing.stderr else "")
    finally:
        procs.close()


# ---------------------------------------------------------------------------------- window and files


def test_the_opponent_view_shows_who_is_being_waited_for_and_how_long() -> None:
    from client.window.viewmodels import TableViewModel
    from client.window.viewmodels.table import waiting_text

    model = playing_model()
    assert model.match and waiting_text(model, 0) is None
    model.on_message(m.Event(model.match, model.last_event_seq + 1, 0, 0, "player_dropped",
                             {"player": "bob", "seat": 1, "grace_s": 30.0}), 10 * S)
    assert waiting_text(model, 15 * S) == "waiting for bob to reconnect (25 s)"
    assert waiting_text(model, 99 * S) == "waiting for bob to reconnect (0 s)"
    band = TableViewModel().band(model, "playing", "", "mqtt://x", 15 * S)
    assert band.sub == "waiting for bob to reconnect (25 s)"
    model.on_message(m.Event(model.match, model.last_event_seq + 1, 0, 0, "player_returned",
                             {"player": "bob", "seat": 1}), 16 * S)
    assert waiting_text(model, 16 * S) is None


def test_a_saved_seat_round_trips_and_bad_files_are_one_clear_error(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from client import seats

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    seat = seats.SavedSeat("mqtt://h:1883", "ABCDE", 1, "bob", "t" * 32)
    path = seats.save(seat, "bot")
    assert path == tmp_path / "blink" / "seats" / "ABCDE-1.json" and path.stat().st_mode & 0o077 == 0
    assert seats.load(path, "bot") == seat == seats.load(None, "bot")
    with pytest.raises(seats.SeatFileError, match="no saved seat"):
        seats.load(None, "play")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(seats.SeatFileError, match="cannot read"):
        seats.load(tmp_path / "bad.json", "bot")
    (tmp_path / "odd.json").write_text("[1]")
    with pytest.raises(seats.SeatFileError, match="not a saved seat"):
        seats.load(tmp_path / "odd.json", "bot")


class RestartableMosquitto:
    """A Mosquitto (configured as ``blink broker-config`` writes it) that a test can stop and start
    again on the same port."""

    def __init__(self, tmp_path: Path) -> None:
        import tempfile

        from mqttkit import free_port
        from relay.hosting import write_mosquitto_config
        from tests.conftest import find_mosquitto

        binary = find_mosquitto()
        if binary is None:
            pytest.fail("mosquitto is not installed (.ci/run installs it)")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="blink-heal-mosquitto-"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.login = write_mosquitto_config(self.dir, "127.0.0.1", self.port)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from tests.conftest import wait_port

        self.proc = subprocess.Popen([self.binary, "-c", str(self.dir / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        import shutil

        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.mark.integration("mosquitto")
def test_a_client_reconnects_after_the_broker_restarts_and_subscribes_again(tmp_path: Path) -> None:
    """The client side of a broker restart: the connection comes back by itself, its private topic
    and the relay status are subscribed again, its requests flow again. (The relay's own reconnect
    is relay/runtime.py's.)"""
    import aiomqtt

    from mqttkit import parse_url
    from protocol.codec import decode

    broker = RestartableMosquitto(tmp_path)

    async def main() -> None:
        player_url = parse_url(f"mqtt://127.0.0.1:{broker.port}")
        async with Player(player_url, "ann", ping_interval_s=0.2) as p:
            broker.stop()
            await eventually(lambda: p.model.connection == "reconnecting", changed=p.wait_change,
                             what="the client to notice the broker is gone")
            broker.start()
            await eventually(lambda: p.model.connection == "connected", changed=p.wait_change,
                             what="the client to reconnect")
            assert p.conn.reconnects == 1 and p.model.lost is None
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="relay-test",
                                      username=broker.login.username, password=broker.login.password) as relay:
                await relay.subscribe(p.topics.req(p.client_id))
                # The status goes offline and online again: the client asks to catch up (it is in no
                # match, so nothing to ask), and its private topic is subscribed again.
                for online in (False, True):
                    await relay.publish(p.topics.relay_status("relay-0"), encode(m.RelayStatus("relay-0", online)),
                                        retain=True, qos=1)
                await eventually(lambda: p.model.relay_online is True, changed=p.wait_change,
                                 what="the relay status on the renewed subscription")
                await relay.publish(p.topics.client(p.client_id), encode(m.Pong(1, 2, 3)), qos=1)
                await eventually(lambda: p.model.clock.rtt_ns is not None, changed=p.wait_change,
                                 what="a message on the renewed private topic")
                async with asyncio.timeout(DEADLINE_S):
                    async for msg in relay.messages:  # the client's pings reach the broker again
                        if isinstance(decode(bytes(msg.payload)), m.Ping):  # type: ignore[arg-type]
                            break
                await relay.publish(p.topics.relay_status("relay-0"), b"", retain=True)

    try:
        broker.start()
        asyncio.run(main())
    finally:
        broker.close()
