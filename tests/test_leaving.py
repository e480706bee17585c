"""A player leaving a dice match of three or more: out of play, the game goes on for the others, and
the last side standing wins by forfeit -- in each engine, through the relay's judge (a leave and a
grace running out alike), in the views the clients rebuild from events, in ``blink verify``, and
once through a real relay and broker."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from client import event_line
from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.chance import SeededChance
from protocol.codec import encode
from protocol.rules import AnyGame, game_for
from protocol.match import FORFEIT
from protocol.rules.base import SYSTEM, Accepted, PlayerLeft, Rejected
from protocol.verify import parse_log, verify
from relay.core import Publish
from tests.helpers import DEADLINE_S, maps, wait_until
from tests.test_heal import Procs, log_records, read_line, serve
from tests.test_send_less import T, Table
from tests.test_window import xdisplay  # noqa: F401 - the Xvfb fixture

S = 1_000_000_000

#: Short games of each kind (the timers on, so a turn nobody takes still ends).
QUICK: dict[str, dict[str, Any]] = {
    "takeaway": {"layout": "random", "size": 12, "turn_timer_s": 2.0},
    "sequence": {"sequence_length": 3, "board": [[2, 3, 4, 5], [6, 7, 8, 9], [12, 2, 3, 4], [5, 6, 7, 8]],
                 "turn_timer_s": 2.0},
    "ryo": {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 2, "turn_timer_s": 2.0},
}


def standing(rules: AnyGame, state: Any) -> list[int]:
    gone = set(getattr(state, "gone"))
    return [p for p in range(state.players) if p not in gone]


def play_engine(name: str, seats: int, seed: int, leave_at: list[int]) -> tuple[Any, list[int], list[dict[str, Any]]]:
    """A whole game by the engine alone: the relay's timers first, else a random legal action, and
    at each step of ``leave_at`` a random seat still playing leaves. Returns the final state, the
    leavers and every event."""
    rules = game_for(name)
    rng = random.Random(seed)
    chance = SeededChance(seed)
    state = rules.new_game(rules.check_settings(QUICK[name], seats), seats, chance)
    left: list[int] = []
    events: list[dict[str, Any]] = []
    for step in range(20_000):
        if rules.outcome(state) is not None:
            break
        timers = rules.timers(state)
        rolling = any(t.delay_ns == 0 for t in timers)  # a roll: the relay makes it before anything else
        if not rolling and sum(at <= step for at in leave_at) > len(left):
            seat = rng.choice(standing(rules, state))
            result = rules.apply(state, SYSTEM, PlayerLeft(seat))
            left.append(seat)
        elif timers and (rolling or rng.random() < 0.2):
            action = rules.complete(state, SYSTEM, timers[0].action, chance)
            result = rules.apply(state, SYSTEM, action)
        else:
            options: list[tuple[int | None, Any]] = [(p, a) for p in range(seats) for a in rules.legal_actions(state, p)]
            if not options:  # (a turn timer's default move)
                options = [(SYSTEM, rules.complete(state, SYSTEM, timers[0].action, chance))]
            p, action = rng.choice(options)
            result = rules.apply(state, p, action)
        assert isinstance(result, Accepted), result
        state = result.state
        events.extend(maps(result.events))
        for seat in left:  # a leaver is out: nothing to do, nothing accepted from them
            assert rules.legal_actions(state, seat) == []
            assert rules.bot_action(rules.view(state, seat), seat, chance.copy()) is None
            assert isinstance(rules.apply(state, SYSTEM, PlayerLeft(seat)), Rejected)
        assert rules.to_wire(rules.from_wire(rules.to_wire(state))) == rules.to_wire(state)
    else:
        raise AssertionError(f"{name}: the game did not end")
    return state, left, events


@pytest.mark.parametrize("name", sorted(QUICK))
@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seats=st.integers(3, 4), seed=st.integers(0, 2**32),
       leave_at=st.lists(st.integers(0, 60), min_size=1, max_size=4))
def test_an_engine_plays_on_without_its_leavers(name: str, seats: int, seed: int, leave_at: list[int]) -> None:
    rules = game_for(name)
    state, left, events = play_engine(name, seats, seed, leave_at)
    outcome = rules.outcome(state)
    assert outcome is not None
    assert not set(outcome.winners) & set(left), "a leaver is never a winner"
    assert [e["player"] for e in events if e["type"] == "player_left"] == left
    still = standing(rules, state)
    if outcome.reason == FORFEIT:
        assert list(outcome.winners) == still
    # turns and rolls after a leave never name the leaver
    out: set[int] = set()
    for e in events:
        if e["type"] == "player_left":
            out.add(e["player"])
        elif e["type"] in ("turn_started", "dice_rolled", "blink_claimed", "chip_placed", "die_built", "roll_won"):
            assert e.get("player") not in out, e


def started(name: str, seats: int, seed: int = 3) -> tuple[AnyGame, Any, SeededChance]:
    rules = game_for(name)
    chance = SeededChance(seed)
    state = rules.new_game(rules.check_settings(QUICK[name], seats), seats, chance)
    while (due := [t for t in rules.timers(state) if t.delay_ns == 0]) and rules.outcome(state) is None:
        action = rules.complete(state, SYSTEM, due[0].action, chance)
        result = rules.apply(state, SYSTEM, action)
        assert isinstance(result, Accepted)
        state = result.state
    return rules, state, chance


def left(rules: AnyGame, state: Any, seat: int) -> Accepted[Any]:
    result = rules.apply(state, SYSTEM, PlayerLeft(seat))
    assert isinstance(result, Accepted), result
    return result


def test_takeaway_the_turn_of_a_leaver_passes_and_the_order_keeps_its_cycle() -> None:
    rules, state, _ = started("takeaway", 4)
    order, now = list(state.order), state.current
    after = left(rules, state, now)
    assert [e["type"] for e in maps(after.events)] == ["player_left", "turn_started"]
    assert after.state.current == order[(order.index(now) + 1) % 4]
    rest = [p for p in order if p != now]
    cycle = [after.state.order[(after.state.turn + i) % 3] for i in range(3)]
    assert cycle == rest[rest.index(after.state.current):] + rest[:rest.index(after.state.current)]
    # someone else leaving keeps the turn where it is
    other = next(p for p in after.state.order if p != after.state.current)
    again = left(rules, after.state, other)
    assert again.state.current == after.state.current and again.state.turn == after.state.turn
    last = left(rules, again.state, again.state.current)
    outcome = rules.outcome(last.state)
    assert outcome is not None and outcome.reason == FORFEIT and len(outcome.winners) == 1
    assert outcome.winners[0] not in (now, other, again.state.current)


def test_takeaway_two_players_are_left_to_the_relay_forfeit() -> None:
    rules, state, _ = started("takeaway", 2)
    assert isinstance(rules.apply(state, SYSTEM, PlayerLeft(0)), Rejected)


def test_sequence_a_team_plays_on_for_its_leaver_and_loses_only_when_both_are_gone() -> None:
    rules, state, _ = started("sequence", 4)
    mate = {0: 2, 1: 3, 2: 0, 3: 1}
    seat = state.current
    one = left(rules, state, seat)
    assert rules.outcome(one.state) is None and one.state.current != seat
    two = left(rules, one.state, mate[seat])
    outcome = rules.outcome(two.state)
    assert outcome is not None and outcome.reason == FORFEIT
    assert sorted(outcome.winners) == sorted({0, 1, 2, 3} - {seat, mate[seat]})
    assert maps(two.events)[-1]["type"] == "game_over" and maps(two.events)[-1]["reason"] == FORFEIT


def test_sequence_three_players_the_leavers_chips_stay_and_turns_skip_them() -> None:
    rules, state, chance = started("sequence", 3)
    seat = state.current
    after = left(rules, state, seat)
    assert after.state.chips == state.chips and after.state.current == (seat + 1) % 3
    state = after.state
    for _ in range(30):  # the turns go round the two left
        if rules.outcome(state) is not None:
            break
        if any(t.delay_ns == 0 for t in rules.timers(state)):
            state = left_or_timer(rules, state, chance)
            continue
        p = state.current
        assert p != seat
        state = rules.apply(state, p, rules.legal_actions(state, p)[0]).state  # type: ignore[union-attr]


def left_or_timer(rules: AnyGame, state: Any, chance: SeededChance) -> Any:
    """The state after the relay's first due timer (a roll)."""
    action = rules.complete(state, SYSTEM, rules.timers(state)[0].action, chance)
    result = rules.apply(state, SYSTEM, action)
    assert isinstance(result, Accepted)
    return result.state


def test_ryo_a_leaver_who_built_in_secret_is_shown_and_the_others_are_revealed() -> None:
    rules, state, _ = started("ryo", 3)
    assert state.phase == "build"
    builds = [rules.legal_actions(state, p)[0] for p in range(3)]
    state = rules.apply(state, 0, builds[0]).state  # type: ignore[union-attr]
    state = rules.apply(state, 1, builds[1]).state  # type: ignore[union-attr]
    after = left(rules, state, 2)  # the last to build leaves: the two built dice are revealed at once
    assert [e["type"] for e in maps(after.events)] == ["player_left", "dice_revealed", "round_started"]
    assert maps(after.events)[0]["die"] is None and after.state.rolling == (0, 1)
    again = left(rules, rules.apply(started("ryo", 3)[1], 0, builds[0]).state, 0)  # type: ignore[union-attr]
    assert maps(again.events)[0]["die"] == list(builds[0].faces)


def test_ryo_a_choice_the_leaver_owed_passes_to_the_next_round() -> None:
    rules, state, chance = started("ryo", 3)
    for p in range(3):
        state = rules.apply(state, p, rules.legal_actions(state, p)[0]).state  # type: ignore[union-attr]
    for _ in range(500):
        if state.phase == "choice":
            break
        state = left_or_timer(rules, state, chance)
    assert state.phase == "choice"
    chooser = state.chooser
    after = left(rules, state, chooser)
    assert [e["type"] for e in maps(after.events)] == ["player_left", "round_started"]
    assert chooser not in after.state.rolling and after.state.phase == "rolling"


# --- through the relay's judge ---------------------------------------------------------------------


class Recorded(Table):
    """The relay core and every client's model (test_send_less's table), also writing the public
    events as `blink match --log` does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lines: list[str] = []
        super().__init__(*args, **kwargs)

    def deliver(self, out: list[Any]) -> None:
        for o in out:
            if isinstance(o, Publish) and isinstance(o.msg, m.Event):
                self.lines.append(json.dumps(event_line(o.msg)))
        super().deliver(out)


def run_match(table: Recorded, rng: random.Random, leaves: int, dropped: bool = False) -> list[int]:
    """Play the match out with random legal actions; ``leaves`` times, a seat still playing leaves
    (or, ``dropped``, loses its connection and never comes back). Returns the leavers."""
    match = table.core.matches[table.code]
    rules = match.rules
    gone: list[int] = []
    for step in range(20_000):
        if match.status == "over":
            break
        table.check()
        if len(gone) < leaves and step >= 4 + 5 * len(gone) and match.status == "playing":
            seat = rng.choice([p for p in range(len(table.clients)) if p not in gone])
            gone.append(seat)
            table.send(T.req(table.clients[seat]), m.Leave(table.code, dropped=dropped))
            continue
        options = [(p, a) for p in range(len(table.clients)) for a in rules.legal_actions(match.state, p)]
        if options and rng.random() < 0.9:
            seat, action = rng.choice(options)
            table.ids += 1
            table.send(T.act(table.code, table.clients[seat]),
                       m.Act(id=table.ids, seq=match.seq, action=rules.action_to_wire(action)))
            table.now += 1_000_000
        else:
            table.tick(S // 2)
    else:
        raise AssertionError("the match did not end")
    table.check()
    # delivered in order, nothing is ever in doubt (a dropped client's model asks for its seat back)
    assert [r for r in table.resyncs if not isinstance(r[1], m.Rejoin)] == []
    return gone


@pytest.mark.parametrize("name", sorted(QUICK))
@pytest.mark.parametrize("dropped", [False, True], ids=["leave", "grace"])
def test_the_judge_plays_on_without_leavers_and_the_last_one_wins(name: str, dropped: bool) -> None:
    seats = 4 if name != "sequence" else 3
    table = Recorded(5, {**QUICK[name], "grace_s": 1.0}, game=name, seats=seats)
    run_match(table, random.Random(9), leaves=seats, dropped=dropped)
    match = table.core.matches[table.code]
    events = [json.loads(line) for line in table.lines]
    # out of play: a leave at once, a dropped connection once its grace ran out
    gone = [e["seat"] for e in events if e["type"] == "player_left"]
    assert [s for s, seat in enumerate(match.players) if seat.left] == sorted(gone)
    over = events[-1]
    assert over["type"] == "match_over"
    assert not {match.names[s] for s in gone} & set(over["winners"]), "a leaver is never a winner"
    if len(gone) == seats - 1:
        assert over["reason"] == "forfeit" and over["winner"] is not None
        assert over["winner"] == match.names[next(s for s in range(seats) if s not in gone)]
    types = [e["type"] for e in events]
    assert "player_left" in types and "seat_left" not in types
    report = verify(parse_log(table.lines))
    assert report.ok and report.unchecked == 0, report.summary()


def test_a_leaver_cannot_come_back_nor_leave_twice() -> None:
    table = Recorded(2, QUICK["takeaway"], game="takeaway", seats=3)
    match = table.core.matches[table.code]
    token = match.players[0].token
    table.send(T.req("a"), m.Leave(table.code))
    assert match.status == "playing" and match.players[0].left
    out = table.send(T.req("z"), m.Rejoin(table.code, token))
    assert any(isinstance(o.msg, m.RequestRejected) and o.msg.code == "bad_token" for o in out if isinstance(o, Publish))
    before = len(table.lines)
    table.send(T.req("a"), m.Leave(table.code))
    assert len(table.lines) == before and match.status == "playing"


def test_two_player_dice_and_blink_leaves_still_end_the_match() -> None:
    table = Recorded(4, QUICK["takeaway"], game="takeaway", seats=2)
    table.send(T.req("b"), m.Leave(table.code))
    over = json.loads(table.lines[-1])
    assert over["type"] == "match_over" and over["reason"] == "forfeit" and over["winner"] == "ann"


# --- verify refuses a forged leave -----------------------------------------------------------------


def leave_log() -> list[str]:
    table = Recorded(5, QUICK["takeaway"], game="takeaway", seats=4)
    run_match(table, random.Random(9), leaves=3)
    return table.lines


def forged(lines: list[str], change: Any) -> list[str]:
    rows = [json.loads(line) for line in lines]
    change(rows)
    return [json.dumps(r) for r in rows]


def test_verify_accepts_a_match_played_on_after_leaves() -> None:
    lines = leave_log()
    report = verify(parse_log(lines))
    assert report.ok and report.games == 1 and report.unchecked == 0, report.summary()


def test_verify_refuses_a_leaver_named_the_winner() -> None:
    lines = leave_log()
    first = next(json.loads(x) for x in lines if json.loads(x)["type"] == "player_left")

    def crown(rows: list[dict[str, Any]]) -> None:
        rows[-1]["winner"] = first["player"]
        rows[-1]["winners"] = [first["player"]]

    report = verify(parse_log(forged(lines, crown)))
    assert not report.ok


def test_verify_refuses_a_turn_given_to_a_leaver() -> None:
    lines = leave_log()

    def back(rows: list[dict[str, Any]]) -> None:
        i = next(i for i, r in enumerate(rows) if r["type"] == "player_left")
        j = next(j for j in range(i + 1, len(rows)) if rows[j]["type"] == "turn_started")
        rows[j]["player"], rows[j]["seat"] = rows[i]["player"], rows[i]["seat"]

    report = verify(parse_log(forged(lines, back)))
    assert not report.ok and report.first is not None


def test_verify_refuses_a_leave_the_relay_would_not_make() -> None:
    """A player_left of a two-player game: the relay ends such a match instead."""
    table = Recorded(4, QUICK["takeaway"], game="takeaway", seats=2)
    rows = [json.loads(x) for x in table.lines]
    last = rows[-1]
    names = json.loads(table.lines[0])
    assert names["type"] == "match_created"
    rows.append({**{k: last[k] for k in ("ts", "game", "match")}, "seq": last["seq"] + 1, "type": "player_left",
                 "player": "ann", "seat": 0, "turn": 0})
    report = verify(parse_log([json.dumps(r) for r in rows]))
    assert not report.ok


# --- a real relay and broker -----------------------------------------------------------------------


@pytest.mark.integration
def test_four_bots_one_leaves_and_the_match_ends_with_a_named_winner(tmp_path: Path,
                                                                    mosquitto: BrokerAddress) -> None:
    procs = Procs(tmp_path)
    log = tmp_path / "relay.log"
    url = mosquitto.url
    try:
        serve(procs, mosquitto, log)
        ann = procs.start("bot", "--server", url, "--create", "--game", "ryo", "--players", "4",
                          "--settings", json.dumps({"rolls_per_round": 3, "rounds_per_game": 2,
                                                    "games_per_match": 2}), "--reaction", "0.2",
                          "--name", "ann", "--seed", "1")
        code = read_line(ann, " in match ").split(" in match ")[1].split()[0]
        bots = [procs.start("bot", "--server", url, "--match", code, "--reaction", "0.2", "--name", name,
                            "--seed", str(i)) for i, name in enumerate(("bob", "cy", "di"), 2)]
        wait_until(lambda: sum(r.get("kind") == "applied" for r in log_records(log)) >= 3,
                   what="the game to be under way")
        bots[0].send_signal(signal.SIGINT)  # bob quits: a clean leave
        bots[0].wait(timeout=DEADLINE_S)
        wait_until(lambda: any(r.get("type") == "player_left" for r in log_records(log)), what="bob to be out")
        for p in (ann, bots[1], bots[2]):
            assert p.wait(timeout=DEADLINE_S * 4) == 0
    finally:
        procs.close()
    events = [r for r in log_records(log) if r.get("kind") == "event"]
    left = next(r for r in events if r["type"] == "player_left")
    assert left["player"] == "bob"
    over = next(r for r in events if r["type"] == "match_over")
    assert over["reason"] == "won" and over["winner"] not in (None, "bob") and over["winners"] == [over["winner"]]
    assert not any(r["type"] == "seat_left" for r in events)
    done = procs_verify(tmp_path, log)
    assert done.returncode == 0 and ": true: 1 match, 1 game" in done.stdout, done.stdout + done.stderr


def procs_verify(tmp_path: Path, log: Path) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "client.cli", "verify", str(log)], capture_output=True, text=True,
                          timeout=120)


# --- the window ------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_the_window_shows_a_leaver_as_gone_and_the_game_going_on(xdisplay: str, tmp_path: Path) -> None:
    import asyncio

    from tests.test_window import started, stop, until
    from protocol.rules import takeaway as tk
    from tests.test_window_dice import click, make_app, shot

    async def scenario() -> None:
        app = make_app("takeaway", players=3, bot_s=0.3, settings={"layout": "random", "size": 16})
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "turn" and len(app.session.opponents) == 2)
            model = app.session.model
            leaver = app.session.opponents[1]
            seat = leaver.model.seat
            name = model.players[seat]
            await leaver.conn.request(m.Leave(model.match))
            await until(app, lambda: seat in getattr(app.session.model.state(), "gone", ()))
            await app.next_frame()
            d = app.describe()
            assert f"{name}  — left" in d["players"], d["players"]
            assert "left: the game goes on" in d["message"], d["message"]
            shot(app, tmp_path, "takeaway_a_player_left")
            await app.next_frame()
            claims = len(app.session.model.state().claims)

            def played_on() -> bool:  # the others play on; you claim on your turns
                state = app.session.model.state()
                if state.phase == "turn" and state.current == model.seat and app.describe()["pending"] == 0:
                    click(app, *app.scene.cell_centre(*tk.free_cells(state.coords())[0]))
                return len(state.claims) > claims + 3 or state.phase == "over"

            await until(app, played_on)
            assert all(c[0] != seat for c in app.session.model.state().claims[claims:])
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), 300))


def test_a_snapshot_keeps_who_left_and_the_restored_core_carries_on_alike() -> None:
    from relay.storage import snapshot

    table = Recorded(3, QUICK["ryo"], game="ryo", seats=4)
    table.send(T.req("b"), m.Leave(table.code))
    restored = snapshot.load(snapshot.dump(table.core))
    x, y = table.core.matches[table.code], restored.matches[table.code]
    assert [s.left for s in y.players] == [False, True, False, False] and y.state == x.state
    assert getattr(y.state, "gone") == (1,)
    # the same input to both: the same output, and the same state after it
    leave = encode(m.Leave(table.code))
    now = table.now + 1
    assert events_of(table.core.handle(T.req("c"), leave, now)) == events_of(restored.handle(T.req("c"), leave, now))
    assert x.state == y.state and getattr(y.state, "gone") == (1, 2)


def events_of(out: list[Any]) -> list[Any]:
    return [(o.topic, o.msg) for o in out if isinstance(o, Publish)]
