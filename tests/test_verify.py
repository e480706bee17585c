"""`blink verify`: true logs of all four games pass; tampered, truncated and unreadable ones are named.

The logs are made by the relay's real judging core (in process, no broker), driven by random legal
play and the relay's own timers, written exactly as `blink match --log` writes them (and, for the
relay-log format, as `blink serve --log` does). One test makes a real log with `blink match --log`.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from client.cli import main
from client import event_line
from protocol import messages as m
from protocol.chance import SeededChance
from protocol.codec import encode
from protocol.topics import Topics
from protocol.verify import NotALog, parse_log, verify
from relay.core import LogRecord, Publish, RelayConfig, RelayCore

T = Topics()
NS = 1_000_000_000

#: Small, fast settings per game (each still exercises its timers and chance).
FAST: dict[str, dict[str, Any]] = {
    "blink": {"best_of": 1, "countdown_s": 0.5, "stalemate_pause_s": 0.2, "pick_time_s": 0.5},
    "takeaway": {"layout": "random", "size": 12, "turn_timer_s": 2.0},
    "sequence": {"sequence_length": 3, "board": [[2, 3, 4, 5], [6, 7, 8, 9], [12, 2, 3, 4], [5, 6, 7, 8]],
                 "turn_timer_s": 2.0},
    "ryo": {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 1, "turn_timer_s": 2.0},
}
PLAYERS = {"blink": 2, "takeaway": 3, "sequence": 2, "ryo": 3}


@dataclass
class Played:
    public: list[str] = field(default_factory=list)  # `blink match --log` lines
    relay: list[str] = field(default_factory=list)  # `blink serve --log` lines


def drive(game: str, seats: int, seed: int, game_settings: dict[str, Any] | None = None, *, rematch: bool = False,
          leave_after: int | None = None, idle: float = 0.1) -> Played:
    """A whole match through the relay core: random legal actions (sometimes a stale or wrong
    one), sometimes waiting for the relay's timers instead; returns its logs."""
    rng = random.Random(seed)
    core = RelayCore(T, RelayConfig(between_games_s=0.5), seed=seed)
    played = Played()
    now = NS

    def take(out: list[Any]) -> None:
        for o in out:
            if isinstance(o, Publish) and isinstance(o.msg, m.Event):
                played.public.append(json.dumps(event_line(o.msg)))
            elif isinstance(o, LogRecord):
                played.relay.append(json.dumps(o.record, default=str))

    clients = [f"c{i}" for i in range(seats)]
    take(core.handle(T.req(clients[0]), encode(m.CreateMatch(name="ann", game=game, seats=seats,
                                                             settings=game_settings or FAST[game])), now))
    code = next(iter(core.matches))
    for i, c in enumerate(clients[1:], 1):
        now += rng.randrange(1, NS // 10)
        take(core.handle(T.req(c), encode(m.JoinMatch(name=f"p{i}", match=code)), now))
    match = core.matches[code]
    rules = match.rules
    ids = itertools.count(1)
    rematched = False
    for _ in range(50_000):
        if leave_after is not None and match.seq >= leave_after and match.status == "playing":
            take(core.handle(T.req(clients[-1]), encode(m.Leave(code)), now))
            break
        if match.status == "over":
            if rematch and not rematched:
                rematched = True
                for c in clients:
                    now += NS // 100
                    take(core.handle(T.req(c), encode(m.Rematch(code)), now))
                continue
            break
        options = ([(s, a) for s in range(seats) for a in rules.legal_actions(match.state, s)]
                   if match.status == "playing" else [])
        deadline = core.next_deadline()
        if options and (deadline is None or rng.random() > idle):
            now += rng.randrange(1, NS // 20)
            seat, action = rng.choice(options)
            seq = match.seq if rng.random() > 0.1 else max(0, match.seq - 2)  # now and then a stale play
            take(core.handle(T.act(code, clients[seat]),
                             encode(m.Act(id=next(ids), seq=seq, action=rules.action_to_wire(action))), now))
        elif deadline is not None:
            now = max(now, deadline)
            take(core.tick(now))
        else:
            raise AssertionError(f"{game}: nothing to do and no timer in {match.status}")
    else:
        raise AssertionError(f"{game}: the match did not end")
    return played


@pytest.fixture(scope="module")
def logs() -> dict[str, Played]:
    return {g: drive(g, PLAYERS[g], seed=7) for g in FAST}


def check(lines: list[str]) -> Any:
    return verify(parse_log(lines))


def run_cli(tmp_path: Path, lines: list[str] | str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "log.jsonl"
    path.write_text(lines if isinstance(lines, str) else "\n".join(lines) + "\n")
    code = main(["verify", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def rows(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in lines]


def dump(records: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(r) for r in records]


def index_of(records: list[dict[str, Any]], etype: str, nth: int = 0, **where: Any) -> int:
    found = [i for i, r in enumerate(records) if r["type"] == etype and all(r.get(k) == v for k, v in where.items())]
    return found[nth]


# ------------------------------------------------------------------------------------------ true logs


@pytest.mark.parametrize("game", list(FAST))
def test_true_logs_of_every_game_verify(game: str, logs: dict[str, Played], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    lines = logs[game].public
    report = check(lines)
    assert report.ok, report.summary()
    assert report.matches == 1 and report.games >= 1 and report.events == len(lines)
    code, out, err = run_cli(tmp_path, lines, capsys)
    assert code == 0 and err == ""
    assert out.count("\n") == 1 and "true" in out and f"{report.events} events checked" in out


@pytest.mark.parametrize("game", list(FAST))
def test_the_walk_of_a_true_game_reads_back_as_steps_and_states(game: str, logs: dict[str, Played]) -> None:
    from protocol.rules import game_for

    records = parse_log(logs[game].public)
    report = verify(records, keep_walks=True)
    assert report.ok and len(report.walks) == report.games >= 1
    assert verify(records).walks == []  # kept only when asked for
    rules = game_for(game)
    results = [r for r in records if r.type == "game_result"]
    for walk, result in zip(report.walks, results):
        assert walk.ok and walk.start is not None and walk.start.type == "game_started"
        steps = list(walk.steps())
        # the steps' events are the game's events, in order, each exactly once
        assert [e for s in steps for e in s.events] == list(walk.events)
        assert all(s.events for s in steps)
        states = walk.states()
        assert len(states) == len(walk.events) + 1 and states[0] == walk.initial
        assert states[-1] == steps[-1].state == walk.finals[0].state
        outcome = rules.outcome(states[-1])
        assert outcome is not None and outcome.reason == result.data["reason"]
        # each step's state is what the rules make of the state before it and the step's action
        before = walk.initial
        for s in steps:
            produced = rules.apply(before, s.player, s.action)
            assert isinstance(produced, Accepted) and produced.state == s.state
            before = s.state


@pytest.mark.parametrize("game", list(FAST))
def test_the_relays_own_log_verifies_too(game: str, logs: dict[str, Played]) -> None:
    relay = logs[game].relay
    assert any('"kind": "applied"' in x for x in relay)
    report = check(relay)
    assert report.ok, report.summary()
    assert report.events == check(logs[game].public).events


def test_a_rematch_and_several_matches_in_one_relay_log() -> None:
    a = drive("blink", 2, seed=11, rematch=True)
    b = drive("takeaway", 2, seed=12)
    records = rows(a.public)
    assert any(r["type"] == "rematch_started" for r in records)
    report = check(a.relay + b.relay)
    assert report.ok, report.summary()
    # A rematch is a match of its own: the Replays list counts "2 matches" for the first log too.
    assert report.matches == 3 and report.rematches == 1
    assert report.games == sum(1 for r in records if r["type"] == "game_result") + 1
    assert report.summary().startswith(f"true: 3 matches (1 rematch), {report.games} games, ")
    # A relay restarted with the same seed appends the same match codes again: each is its own match.
    again = check(a.relay + a.relay)
    assert again.ok and again.matches == 4 and again.rematches == 2, again.summary()


def test_a_forfeit_is_true_but_its_unrevealed_game_is_not_checkable() -> None:
    played = drive("sequence", 2, seed=5, leave_after=12)
    records = rows(played.public)
    assert records[-1]["type"] == "match_over" and records[-1]["reason"] == "forfeit"
    report = check(played.public)
    assert report.ok, report.summary()
    assert report.unchecked > 0 and "not checkable" in report.summary()


@pytest.mark.integration
def test_a_real_log_written_by_blink_match(tmp_path: Path, relay_guard: Any) -> None:
    log = tmp_path / "m.jsonl"
    subprocess.run([sys.executable, "-m", "client.cli", "match", "--game", "takeaway", "--bots", "2", "--seed", "3",
                    "--reaction", "0.01", "--log", str(log)], check=True, capture_output=True, timeout=300)
    assert str(log) in relay_guard.event_logs()  # the child said so: the guard verifies it too
    done = subprocess.run([sys.executable, "-m", "client.cli", "verify", str(log)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"{log}: true: 1 match, 1 game")


@hsettings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(game=st.sampled_from(sorted(FAST)), seed=st.integers(0, 2**32), idle=st.sampled_from([0.0, 0.3, 0.9]),
       order=st.sampled_from(["arrival", "fair"]))
def test_random_matches_of_every_game_verify(game: str, seed: int, idle: float, order: str) -> None:
    played = drive(game, PLAYERS[game], seed, {**FAST[game], "order": order}, idle=idle)
    report = check(played.public)
    assert report.ok, report.summary()
    assert report.events == len(played.public)


# ------------------------------------------------------------------------------------------ tampered logs


def assert_false_at(lines: list[str], line: int, *words: str) -> str:
    report = check(lines)
    assert not report.ok, "a false log verified"
    assert report.first is not None and report.first.line == line, report.summary()
    text = report.summary()
    for w in words:
        assert w in text, text
    return text


def test_a_changed_card(logs: dict[str, Played], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = rows(logs["blink"].public)
    i = index_of(records, "card_played", 3)
    # The first revealed centre card lies under a pile: it is in nobody's hand.
    records[i]["card"] = records[index_of(records, "card_revealed")]["card"]
    assert records[i]["card"] != rows(logs["blink"].public)[i]["card"]
    text = assert_false_at(dump(records), i + 1, "card_played", f"seq {records[i]['seq']}", "card")
    code, out, err = run_cli(tmp_path, dump(records), capsys)
    assert code == 1 and out.strip().endswith(text) and f"line {i + 1} " in out and err == ""


def test_a_changed_die_face(logs: dict[str, Played]) -> None:
    records = rows(logs["takeaway"].public)
    i = index_of(records, "dice_rolled")
    cell = records[i]["cells"][2]
    cell[2] = cell[2] % 6 + 1
    assert_false_at(dump(records), i + 1, "dice_rolled", "cells")
    records = rows(logs["sequence"].public)
    i = index_of(records, "dice_rolled", 2)
    records[i]["dice"][0] = records[i]["dice"][0] % 6 + 1
    records[i]["total"] = sum(records[i]["dice"])
    assert_false_at(dump(records), i + 1, "dice_rolled")


def test_a_changed_roll_your_own_roll(logs: dict[str, Played]) -> None:
    records = rows(logs["ryo"].public)
    i = index_of(records, "dice_rolled", 1)
    roll = records[i]["rolls"][0]
    roll["face"] = (roll["face"] + 1) % 6
    assert_false_at(dump(records), i + 1, "dice_rolled", "rolls")


@pytest.mark.parametrize("game", list(FAST))
def test_a_changed_seed_breaks_its_commitment(game: str, logs: dict[str, Played]) -> None:
    records = rows(logs[game].public)
    i = index_of(records, "game_result")
    records[i]["seed"] += 1
    assert_false_at(dump(records), i + 1, "game_result", "seed_commitment")


def test_a_seed_that_matches_a_forged_commitment_still_fails_the_shuffle(logs: dict[str, Played]) -> None:
    """A forger who re-commits to another seed: the commitment holds, the deal does not."""
    from protocol.chance import commitment

    records = rows(logs["blink"].public)
    start, result = index_of(records, "game_started"), index_of(records, "game_result")
    records[result]["seed"] = 12345
    records[start]["seed_commitment"] = commitment(12345)
    report = check(dump(records))
    assert report.first is not None and start + 1 < report.first.line <= result + 1


def test_a_removed_event(logs: dict[str, Played]) -> None:
    lines = logs["blink"].public
    k = len(lines) // 2
    assert_false_at(lines[:k] + lines[k + 1:], k + 1, "missing", f"expected {k + 1}")


def test_two_swapped_events(logs: dict[str, Played]) -> None:
    lines = list(logs["takeaway"].public)
    k = len(lines) // 2
    lines[k], lines[k + 1] = lines[k + 1], lines[k]
    assert_false_at(lines, k + 1, f"seq {k + 2}")
    # The same swap with the seq numbers rewritten to look gap-free: the rules catch it.
    records = rows(logs["blink"].public)
    i = index_of(records, "hand_refilled", 2)
    records[i - 1], records[i] = records[i], records[i - 1]
    records[i - 1]["seq"], records[i]["seq"] = records[i]["seq"], records[i - 1]["seq"]
    assert_false_at(dump(records), i, "hand_refilled")


def test_a_changed_winner(logs: dict[str, Played]) -> None:
    for game in FAST:
        records = rows(logs[game].public)
        i = index_of(records, "game_result")
        names = records[index_of(records, "game_started")]["players"]
        seat = (records[i]["winner_seats"][0] + 1) % len(names) if records[i]["winner_seats"] else 0
        records[i]["winner"], records[i]["winner_seat"] = names[seat], seat
        records[i]["winners"], records[i]["winner_seats"] = [names[seat]], [seat]
        assert_false_at(dump(records), i + 1, "game_result", "winner")


def test_a_changed_match_result(logs: dict[str, Played]) -> None:
    records = rows(logs["sequence"].public)
    assert records[-1]["type"] == "match_over"
    records[-1]["wins"] = [9, 9]
    assert_false_at(dump(records), len(records), "match_over", "wins")


def test_a_timer_event_before_its_time(logs: dict[str, Played]) -> None:
    """BLINK's race starts when the countdown is over: a log that starts it early is false."""
    records = rows(logs["blink"].public)
    start = index_of(records, "game_started")
    i = index_of(records, "card_revealed")
    shift = records[i]["ts"] - records[start]["ts"] - 1000
    for r in records[i:]:
        r["ts"] -= shift  # the race and everything after it, much earlier
    assert_false_at(dump(records), i + 1, "card_revealed", "timer start", "early")


def test_time_going_back(logs: dict[str, Played]) -> None:
    records = rows(logs["takeaway"].public)
    records[10]["ts"] = records[9]["ts"] - 1
    assert_false_at(dump(records), 11, "earlier")


@pytest.mark.parametrize("game", list(FAST))
def test_a_log_that_ends_during_a_match_is_true_so_far(game: str, logs: dict[str, Played], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A relay stopped, killed or relieved of its shard mid-match leaves a log that ends there: what
    it holds is checked; the game in progress waits for its seed."""
    lines = logs[game].public
    records = rows(lines)
    cut = (index_of(records, "game_started") + index_of(records, "game_result")) // 2 + 1
    report = check(lines[:cut])
    assert report.ok and report.running == 1 and report.games == 0, report.summary()
    assert report.pending == cut - index_of(records, "game_started") - 1
    assert report.events == cut - report.pending
    code, out, err = run_cli(tmp_path, lines[:cut], capsys)
    assert code == 0 and "1 match still running where the log ends" in out and out.count("\n") == 1
    # A false event before the cut is still found.
    records[cut - 2]["seq"] += 5
    assert_false_at(dump(records[:cut]), cut - 1, "missing")
    # Cut right after a result that does not end the match: ends between games.
    if game == "blink":
        a = drive("blink", 2, seed=3, game_settings={**FAST["blink"], "best_of": 3}).public
        results = [i for i, r in enumerate(rows(a)) if r["type"] == "game_result"]
        assert len(results) >= 2
        between = check(a[:results[0] + 1])
        assert between.ok and between.running == 1 and between.games == 1 and not between.pending


def test_a_damaged_line_in_the_middle(logs: dict[str, Played]) -> None:
    lines = list(logs["blink"].public)
    lines[20] = lines[20][:30]
    assert_false_at(lines, 21, "damaged")


def test_a_stranger_record_in_the_middle(logs: dict[str, Played]) -> None:
    records = rows(logs["takeaway"].public)
    records.insert(15, {**records[14], "type": "blink_claimed"})
    assert not check(dump(records)).ok


# ------------------------------------------------------------------------------------------ not a log


@pytest.mark.parametrize("content, words", [
    ("hello world\n", "not JSON"),
    ("[1, 2, 3]\n", "not a JSON object"),
    ('{"a": 1}\n{"b": 2}\n', "not an event log"),
    ('{"kind": "applied", "seq": [1, 2]}\n', "not an event log"),
])
def test_not_an_event_log_is_status_2_and_one_line(content: str, words: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(tmp_path, content, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_missing_unreadable_and_binary_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in (tmp_path / "nope.jsonl", tmp_path):
        assert main(["verify", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("blink verify: cannot read")
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert main(["verify", str(binary)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.integration
def test_the_command_line_has_no_traceback_for_a_bad_log(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("{not json\n")
    done = subprocess.run([sys.executable, "-m", "client.cli", "verify", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_chance_copies_are_independent() -> None:
    a = SeededChance(99)
    a.randbelow(6)
    b = a.copy()
    assert [b.randbelow(1000) for _ in range(5)] == [a.randbelow(1000) for _ in range(5)]
    c = a.copy()
    c.randbelow(10)
    assert c.draws == a.draws + 1  # drawing on the copy leaves the original where it was
    assert a.copy().randbelow(1 << 62) == SeededChance(99).copy().randbelow(1 << 62) or a.draws != 1
    untouched = SeededChance(99)
    untouched.randbelow(6)
    for _ in range(5):
        untouched.randbelow(1000)
    assert a.randbelow(1 << 62) == untouched.randbelow(1 << 62)


# ------------------------------------------------------------------------------------------ hidden picks


def blink_log_with_picks() -> list[str]:
    """BLINK with a deck where stalemates with empty draw piles happen: each player then picks a
    card in secret (``pick_made`` names no card), so the checker must keep every pick open until
    ``card_picked`` shows them."""
    deck = {"colours": ["red", "blue", "green", "pink", "gold", "grey"], "shapes": ["star", "moon", "sun"],
            "counts": [1, 2, 3, 4, 5, 6, 7]}
    for seed in range(200):
        lines = drive("blink", 2, seed, {**FAST["blink"], "deck": deck, "hand_size": 2}, idle=0.3).public
        if any(r["type"] == "pick_made" for r in rows(lines)):
            return lines
    raise AssertionError("no seed made a secret pick")


def test_secret_picks_are_checked_once_revealed() -> None:
    lines = blink_log_with_picks()
    report = check(lines)
    assert report.ok, report.summary()
    records = rows(lines)
    i = index_of(records, "card_picked")
    records[i]["card"] = records[index_of(records, "card_revealed")]["card"]  # a card nobody held
    assert_false_at(dump(records), i + 1, "card_picked", "card")


# ------------------------------------------------------------------------------------------ any game


from protocol.codec import from_dict, message, to_dict  # noqa: E402
from protocol.events import EventTypes, TypedEvent, event  # noqa: E402
from protocol.rules.base import SYSTEM, Accepted, Game, Outcome, Rejected, Timer  # noqa: E402


@message("ToyRoll")
@dataclass(frozen=True)
class ToyRoll:
    value: int | None = None  # filled by complete(): a player's roll uses the relay's chance


@message("ToyNudge")
@dataclass(frozen=True)
class ToyNudge:
    round: int
    value: int | None = None


@event("toy_rolled")
@dataclass(frozen=True, kw_only=True)
class ToyRolled(TypedEvent):
    player: int
    value: int


@event("toy_over")
@dataclass(frozen=True, kw_only=True)
class ToyOver(TypedEvent):
    winner: int


@event("toy_tie")
@dataclass(frozen=True, kw_only=True)
class ToyTie(TypedEvent):
    round: int


@dataclass(frozen=True)
class ToyState:
    values: tuple[int | None, ...]
    round: int = 0
    winner: int | None = None


class Toy:
    """High roll: everyone rolls a die (a timer rolls for the slowest); a unique highest roll wins,
    a tie rolls again. A game the checker has never heard of, known only through the registry."""

    name = "toy"
    min_players, max_players = 2, 4
    stale_code = "stale"

    def default_settings(self) -> dict[str, Any]:
        return {}

    def check_settings(self, settings: dict[str, Any], players: int) -> dict[str, Any]:
        if settings:
            raise ValueError("toy has no settings")
        return {}

    def best_of(self, settings: dict[str, Any]) -> int:
        return 1

    def new_game(self, settings: dict[str, Any], players: int, chance: Any) -> ToyState:
        return ToyState(tuple(None for _ in range(players)))

    def complete(self, state: ToyState, player: int | None, action: Any, chance: Any) -> Any:
        if isinstance(action, ToyRoll) and action.value is None:
            return ToyRoll(chance.randbelow(6) + 1)
        if isinstance(action, ToyNudge) and action.value is None:
            return ToyNudge(action.round, chance.randbelow(6) + 1)
        return action

    def apply(self, state: ToyState, player: int | None, action: Any) -> Accepted[ToyState] | Rejected:
        if state.winner is not None:
            return Rejected("game_over")
        if player is SYSTEM:
            if not isinstance(action, ToyNudge) or action.round != state.round or action.value is None:
                return Rejected("stale")
            player = state.values.index(None)
        elif not isinstance(action, ToyRoll) or action.value is None or state.values[player] is not None:
            return Rejected("not_allowed")
        assert action.value is not None
        values = state.values[:player] + (action.value,) + state.values[player + 1:]
        events: list[TypedEvent] = [ToyRolled(player=player, value=action.value)]
        if None in values:
            return Accepted(ToyState(values, state.round), tuple(events))
        top = max(v for v in values if v is not None)
        if values.count(top) == 1:
            events.append(ToyOver(winner=values.index(top)))
            return Accepted(ToyState(values, state.round, values.index(top)), tuple(events))
        events.append(ToyTie(round=state.round))
        return Accepted(ToyState(tuple(None for _ in values), state.round + 1), tuple(events))

    def legal_actions(self, state: ToyState, player: int) -> list[Any]:
        return [ToyRoll()] if state.winner is None and state.values[player] is None else []

    def timers(self, state: ToyState) -> tuple[Timer[Any], ...]:
        if state.winner is not None:
            return ()
        return (Timer(f"nudge-{state.round}-{state.values.count(None)}", NS, ToyNudge(state.round)),)

    def outcome(self, state: ToyState) -> Outcome | None:
        if state.winner is None:
            return None
        return Outcome((state.winner,), "high_roll", tuple(v or 0 for v in state.values))

    def view(self, state: ToyState, player: int | None) -> ToyState:
        return state

    def to_wire(self, state: ToyState) -> dict[str, Any]:
        return {"values": list(state.values), "round": state.round, "winner": state.winner}

    def action_from_wire(self, data: dict[str, Any]) -> Any:
        action = from_dict(data)
        if not isinstance(action, ToyRoll):
            raise ValueError("not a toy action")
        return action

    def action_to_wire(self, action: Any) -> dict[str, Any]:
        return to_dict(action)


def toy_game() -> Game[ToyState, Any]:
    """The toy as the relay's registry holds games: a typed ``Game`` made of its methods."""
    t = Toy()

    def unknown_state(data: dict[str, Any]) -> ToyState:
        raise ValueError("the checker never decodes toy states")

    return Game(name=t.name, title="High roll", min_players=t.min_players, max_players=t.max_players,
                default_settings=t.default_settings, check_settings=t.check_settings, new_game=t.new_game,
                apply=t.apply, complete=t.complete, view=t.view, legal_actions=t.legal_actions, outcome=t.outcome,
                timers=t.timers, to_wire=t.to_wire, from_wire=unknown_state, action_from_wire=t.action_from_wire,
                action_to_wire=t.action_to_wire, bot_action=lambda state, seat, chance: None,
                events=EventTypes(ToyRolled, ToyOver, ToyTie))


def test_a_game_the_checker_does_not_know_is_checked_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import protocol.rules

    monkeypatch.setitem(protocol.rules.GAMES, "toy", toy_game())
    FAST["toy"] = {}
    try:
        lines = []
        for seed in range(40):
            lines = drive("toy", 3, seed, idle=0.4).public
            if any(r["type"] == "toy_tie" for r in rows(lines)):
                break
        records = rows(lines)
        assert any(r["type"] == "toy_tie" for r in records) and records[-1]["type"] == "match_over"
        report = check(lines)
        assert report.ok, report.summary()
        assert report.events == len(lines)
        i = index_of(records, "toy_rolled", 1)
        records[i]["value"] = records[i]["value"] % 6 + 1
        assert_false_at(dump(records), i + 1, "toy_rolled", "value")
    finally:
        FAST.pop("toy")
    # Without the game in the registry the log cannot be checked: the match_created line says so.
    monkeypatch.delitem(protocol.rules.GAMES, "toy")
    assert_false_at(lines, 1, "unknown game")
    # The checker itself takes any lookup of engines by name.
    assert verify(parse_log(lines), lookup=lambda name: toy_game()).ok


CHOICES = ("pile", "row", "col", "q", "r")
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(game=st.sampled_from(sorted(FAST)), where=st.floats(0, 1, exclude_max=True), pick=st.integers(0, 50),
       value=st.one_of(JSON_VALUES, st.sampled_from(["+1", "-1"])))
def test_any_changed_value_is_found_and_never_crashes(logs: dict[str, Played], game: str, where: float, pick: int,
                                                      value: Any) -> None:
    records = rows(logs[game].public)
    i = int(where * len(records))
    keys = sorted(records[i])
    key = keys[pick % len(keys)]
    old = records[i][key]
    if value in ("+1", "-1") and type(old) is int:
        value = old + int(value)  # the subtle change: a neighbouring number
    changed = json.dumps(old) != json.dumps(value)
    records[i][key] = value
    try:
        report = check(dump(records))  # must not raise, whatever the value
    except NotALog:
        assert i == 0 and key in ("seq", "type")  # the first line is no event any more: not a log (status 2)
        return
    # Not refutable by the rules: a plausible timestamp, and a player's choice changed into another
    # legal one (a card that matched both piles, a chip on another free space) when what follows
    # fits both -- that is another true history. Everything else is forced by the seed, by the
    # match frame or by what follows.
    if changed and key != "ts" and key not in CHOICES:
        assert not report.ok, f"{key} = {value!r} at line {i + 1} went unnoticed"
        assert report.first is not None
        if key == "seed_commitment":  # a forged commitment shows when the seed is revealed; both lines are named
            assert report.first.line == i + 1 or f"(line {i + 1})" in report.first.problem
        else:
            # A changed match code splits the log; a changed seat count shows when the seats fill.
            assert report.first.line <= i + 1 or key in ("match", "seats")


def test_a_game_missing_its_last_event_is_named_at_its_result(logs: dict[str, Played]) -> None:
    records = rows(logs["blink"].public)
    i = index_of(records, "game_over")
    del records[i]
    for r in records[i:]:
        r["seq"] -= 1  # renumbered so that no gap shows: the rules still want the game_over
    assert_false_at(dump(records), i + 1, "game_result", "the rules give game_over")


def test_a_log_that_starts_in_the_middle_of_a_match(logs: dict[str, Played]) -> None:
    assert_false_at(logs["sequence"].public[7:], 1, "starts at seq 8", "first 7 events are missing")
