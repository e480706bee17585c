"""``blink latency``: the argument parsers, the race counting, the statistics, and whole runs.

No timing assertions: only that the report has its fields and is consistent with itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from client.tools.latency import (PARTS, BadArgument, PlayRecord, SeatImpairment, SweepStep, add_fast_cost, count_races,
                            delay_axis, format_sweep, json_report, parse_delay_list, parse_fraction_list,
                            parse_sweep, parts_confirm_ms, parts_ms, percentiles_ms, seat_impairments, slow_seat,
                            step_figures, sweep_plan,
                            wilson)

BLINK = [sys.executable, "-m", "client.cli", "latency"]
MS = 1_000_000
ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ parsers


@pytest.mark.parametrize("text,expected", [
    ("0ms,100ms", [0.0, 0.1]),
    ("100", [0.1, 0.1]),  # a plain number is milliseconds; one value is for both seats
    ("0.25s", [0.25, 0.25]),
    (" 5 ms , 1.5s ", [0.005, 1.5]),
    ("500us,0", [0.0005, 0.0]),
    ("10s", [10.0, 10.0]),
    (None, [0.0, 0.0]),
])
def test_delay_list_parses_units_and_seats(text: str | None, expected: list[float]) -> None:
    assert parse_delay_list(text) == pytest.approx(expected)


@pytest.mark.parametrize("text,needle", [
    ("-5ms", "negative"),
    ("10.5s", "at most 10 s"),
    ("20000", "at most 10 s"),
    ("5parsecs", "unknown unit"),
    ("5 m", "unknown unit"),
    ("fast", "not a time"),
    ("1,2,3", "at most 2 values"),
    ("5,", "empty value"),
    ("", "empty value"),
    ("nan", "not a time"),
])
def test_delay_list_rejects_bad_values_with_a_readable_reason(text: str, needle: str) -> None:
    with pytest.raises(BadArgument) as err:
        parse_delay_list(text)
    assert needle in str(err.value) and "--delay" in str(err.value)
    assert "\n" not in str(err.value)


def test_fraction_lists_and_whole_impairments() -> None:
    assert parse_fraction_list("0.1,5%", "loss") == pytest.approx([0.1, 0.05])
    for bad in ("1", "1.5", "-0.1", "100%", "0.1x"):
        with pytest.raises(BadArgument):
            parse_fraction_list(bad, "loss")
    imps = seat_impairments(delay="0ms,100ms", jitter="5ms", loss="0,0.01", reorder=None)
    assert [i.delay_s for i in imps] == pytest.approx([0.0, 0.1])
    assert [i.jitter_s for i in imps] == pytest.approx([0.005, 0.005])
    assert [i.loss for i in imps] == pytest.approx([0.0, 0.01])
    assert imps[1].to_json() == {"delay_ms": 100.0, "jitter_ms": 5.0, "loss": 0.01, "reorder": 0.0,
                                 "jitter_dist": "uniform", "rate_per_s": 0.0}


# ------------------------------------------------------------------------------------------ statistics


def test_percentiles_are_ordered_and_in_milliseconds() -> None:
    p = percentiles_ms([5_000_000, 1_000_000, 3_000_000, 2_000_000, 4_000_000])
    assert p == {"p50": 3.0, "p90": 5.0, "p99": 5.0, "max": 5.0, "mean": 3.0, "n": 5}
    many = percentiles_ms(range(0, 1_000_000_000, 997_001))
    assert many["p50"] <= many["p90"] <= many["p99"] <= many["max"]
    assert percentiles_ms([])["n"] == 0 and percentiles_ms([])["p50"] is None


def test_wilson_interval() -> None:
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.2 < hi < 0.35  # type: ignore[operator]
    assert wilson(0, 0) == (None, None)


# ------------------------------------------------------------------------------------------ races


def ev(seq: int, type_: str, pile: int | None = None, seat: int | None = None, match: str = "M") -> dict[str, Any]:
    """A log line of a BLINK event (what the race count reads of it: its pile and its seat)."""
    d: dict[str, Any] = {"match": match, "seq": seq, "type": type_}
    if seat is not None:
        d["player"], d["seat"] = f"p{seat}", seat
    if type_ == "hand_refilled":
        d.update(count=1, hand=3, draw=20)
    if pile is not None:
        d.update(card="1-red-moon", pile=pile)
        if type_ == "card_picked":
            d["auto"] = False
    return d


def play(seat: int, seq: int, pile: int, match: str = "M", kind: str = "PlayCard", ok: bool = True) -> PlayRecord:
    return PlayRecord(match=match, seat=seat, id=seq * 10 + seat, seq=seq, kind=kind, pile=pile, card="1-red-moon",
                      sent_ns=0, answered_ns=1, ok=ok, code="accepted" if ok else "pile_changed")


def test_race_counting_on_a_small_log() -> None:
    events = [
        ev(1, "game_started"),
        ev(2, "card_revealed", 0, 0), ev(3, "card_revealed", 1, 1), ev(4, "race_started"),
        ev(5, "card_played", 0, 1), ev(6, "hand_refilled", seat=1),  # seat 1 covers pile 0's first top
        ev(7, "card_played", 1, 0),  # seat 0 covers pile 1's first top ...
        ev(8, "card_played", 1, 1),  # ... and seat 1's play, which matched the new top too, lands after it
        ev(9, "stalemate"), ev(10, "card_flipped", 0, 0), ev(11, "card_flipped", 1, 1),
    ]
    plays = [
        # Race 1: both against pile 0's top from seq 2 (seen at seq 4); seat 1 landed first.
        play(0, 4, 0, ok=False), play(1, 4, 0),
        # Race 2: pile 1's top from seq 3, seen at seq 5 and seq 6 (the top had not changed): seat 0 won.
        play(0, 6, 1), play(1, 5, 1),
        # Not a race: only one seat played for pile 0's top from seq 5.
        play(0, 7, 0, ok=False),
        # Undecided: both played for pile 1's top from seq 8, but the next change is a stalemate flip.
        play(0, 8, 1, ok=False), play(1, 8, 1, ok=False),
        # Not plays for a pile, or plays in a match without a log: ignored.
        play(0, 4, 0, kind="PickCard"), play(1, 4, 0, match="OTHER"), play(0, 4, 0, match="OTHER"),
    ]
    count = count_races(events, plays)
    assert count.races == 2 and count.void == 1
    assert count.to_json() == {"0": {"won": 1, "lost": 1}, "1": {"won": 1, "lost": 1}}


def test_race_counting_reads_protocol_events_too() -> None:
    def e(seq: int, type_: str, **data: Any) -> m.Event:
        return m.Event(match="M", seq=seq, ts=0, game_index=0, type=type_, data=data)

    events = [e(1, "card_revealed", pile=0, seat=0, player="a", card="1-red-moon"),
              e(2, "card_played", pile=0, seat=0, player="a", card="2-red-moon")]
    count = count_races(events, [play(0, 1, 0), play(1, 1, 0, ok=False), play(1, 1, 0, ok=False)])
    assert count.races == 1 and count.won == {0: 1, 1: 0} and count.lost == {0: 0, 1: 1}


# ------------------------------------------------------------------------------------------ sweeps


def test_sweep_values_are_delays_in_the_order_given() -> None:
    assert parse_sweep("0,50,100ms,0.15s") == [0.0, 0.05, 0.1, 0.15]
    assert parse_sweep("200") == [0.2]


@pytest.mark.parametrize("text,needle", [
    ("-5", "negative"), ("0,abc", "not a time"), ("0,,50", "empty value"), ("50,50ms", "twice"),
    ("11s", "at most 10 s"), ("5parsecs", "unknown unit"),
])
def test_bad_sweep_values_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(BadArgument, match=needle) as exc:
        parse_sweep(text)
    assert str(exc.value).startswith("--sweep:")


def test_sweep_plan_runs_arrival_first_at_each_delay_and_sweeps_only_seat_1s_delay() -> None:
    plan = sweep_plan([0.1, 0.0], ["fair", "arrival"])
    assert plan == [SweepStep(0.1, "arrival"), SweepStep(0.1, "fair"), SweepStep(0.0, "arrival"),
                    SweepStep(0.0, "fair")]
    assert sweep_plan([0.05], ["fair"]) == [SweepStep(0.05, "fair")]
    base = [SeatImpairment(0.3, 0.002, 0.01, 0.0), SeatImpairment(0.0, 0.004, 0.0, 0.02)]
    imps = SweepStep(0.15, "fair").impairments(base)
    assert imps == [SeatImpairment(0.0, 0.002, 0.01, 0.0), SeatImpairment(0.15, 0.004, 0.0, 0.02)]
    assert slow_seat(imps) == 1 and slow_seat([SeatImpairment(0.1), SeatImpairment(0.0)]) == 0
    assert slow_seat([SeatImpairment(), SeatImpairment()]) == 1


def summary(order: str, delays_ms: tuple[float, float], races: tuple[int, int], wins: tuple[int, int], ties: int,
            fast_p: tuple[float, float | None] | None, duration: float = 10.0) -> dict[str, Any]:
    """A ``LatencyResult.summary()`` as far as the sweep reads it; seat 0 is the fast seat."""
    def p(pair: tuple[float, float | None] | None, n: int) -> dict[str, Any]:
        return {"p50": None, "p99": None, "n": 0} if pair is None else {"p50": pair[0], "p99": pair[1], "n": n}

    return {
        "order": order, "duration_s": duration,
        "impairment": {str(i): SeatImpairment(d / 1e3).to_json() for i, d in enumerate(delays_ms)},
        "race_count": sum(races), "races_void": 1,
        "races": {"0": {"won": races[0], "lost": races[1]}, "1": {"won": races[1], "lost": races[0]}},
        "games": wins[0] + wins[1] + ties, "wins": {"0": wins[0], "1": wins[1]}, "ties": ties,
        "confirm_ms_by_seat": {"0": p(fast_p, 40), "1": p((200.0, 260.0), 30)},
        "hold_ms": p((0.0, 150.0), 70) if order == "fair" else p(None, 0),
    }


def test_step_figures_are_the_slow_seats_shares_with_wilson_intervals() -> None:
    f = step_figures(summary("fair", (0, 100), races=(60, 40), wins=(10, 8), ties=2, fast_p=(150.0, 170.0)), slow=1)
    assert f["delay_ms"] == 100 and f["order"] == "fair" and f["slow_seat"] == 1
    assert f["races"] == 100 and f["races_won"] == 40 and f["races_share"] == 0.4
    assert f["races_ci95"] == [round(x, 4) for x in wilson(40, 100)]  # type: ignore[arg-type]
    # a tie is a finished game but decides nothing: it is left out of the share
    assert f["games"] == 20 and f["games_decided"] == 18 and f["games_won"] == 8 and f["ties"] == 2
    assert f["games_share"] == round(8 / 18, 4)
    assert f["games_ci95"] == [round(x, 4) for x in wilson(8, 18)]  # type: ignore[arg-type]
    assert f["fast_confirm_ms"] == {"p50": 150.0, "p99": 170.0} and f["slow_confirm_ms"] == {"p50": 200.0, "p99": 260.0}
    assert f["fast_plays_per_s"] == 4.0
    assert f["hold_ms"] == {"p50": 0.0, "p99": 150.0}
    # seat 0 slower: the shares turn round
    g = step_figures(summary("arrival", (100, 0), races=(60, 40), wins=(10, 8), ties=0, fast_p=(5.0, 9.0)), slow=0)
    assert g["delay_ms"] == 100 and g["races_share"] == 0.6 and g["games_share"] == round(10 / 18, 4)


def test_step_figures_without_races_or_games_have_no_share() -> None:
    f = step_figures(summary("arrival", (0, 0), races=(0, 0), wins=(0, 0), ties=1, fast_p=None, duration=0.0))
    assert f["races_share"] is None and f["races_ci95"] is None
    assert f["games"] == 1 and f["games_share"] is None and f["games_ci95"] is None
    assert f["fast_plays_per_s"] is None


def test_the_fast_seats_added_time_is_against_arrival_order_at_the_same_delay() -> None:
    steps = add_fast_cost([
        step_figures(summary("arrival", (0, 50), (5, 5), (3, 3), 0, fast_p=(10.0, 30.0))),
        step_figures(summary("fair", (0, 50), (5, 5), (3, 3), 0, fast_p=(60.0, 95.5))),
        step_figures(summary("arrival", (0, 100), (5, 5), (3, 3), 0, fast_p=(12.0, 40.0))),
        step_figures(summary("fair", (0, 100), (5, 5), (3, 3), 0, fast_p=(112.0, None))),
        step_figures(summary("fair", (0, 150), (5, 5), (3, 3), 0, fast_p=(160.0, 170.0))),  # no arrival step
    ])
    assert [s["fast_added_ms"] for s in steps] == [
        {"p50": 0.0, "p99": 0.0}, {"p50": 50.0, "p99": 65.5}, {"p50": 0.0, "p99": 0.0},
        {"p50": 100.0, "p99": None}, {"p50": None, "p99": None}]
    table = format_sweep(steps).splitlines()
    assert len(table) == 1 + len(steps) + 2
    assert table[2].split()[:2] == ["50", "fair"] and "+50.0/+65.5" in table[2]
    assert table[5].split()[:2] == ["150", "fair"] and table[5].split()[-2:] == ["-/-", "-"]


def test_the_fast_seats_pace_is_against_arrival_order_at_the_same_delay() -> None:
    def with_pace(s: dict[str, Any], fast: float) -> dict[str, Any]:
        return {**s, "plays_per_playable_s": {"0": fast, "1": 1.0}}

    steps = add_fast_cost([
        step_figures(with_pace(summary("arrival", (0, 100), (5, 5), (3, 3), 0, fast_p=(12.0, 40.0)), 2.0)),
        step_figures(with_pace(summary("fair", (0, 100), (5, 5), (3, 3), 0, fast_p=(112.0, 150.0)), 1.94)),
        step_figures(summary("fair", (0, 150), (5, 5), (3, 3), 0, fast_p=(160.0, 170.0))),  # nothing to compare
    ])
    assert [s["fast_pace"] for s in steps] == [2.0, 1.94, None]
    assert [s["fast_pace_change"] for s in steps] == [0.0, -0.03, None]
    assert format_sweep(steps).splitlines()[2].endswith("1.94 (-3.0%)")


def test_the_json_report_of_several_runs_has_every_run_at_the_top_level() -> None:
    base = {"game": "blink", "server": "local", "matches": 2, "reaction_s": 0.35, "seed": 4}
    arrival = {**base, **summary("arrival", (0, 100), (6, 4), (3, 2), 0, fast_p=(10.0, 30.0))}
    fair = {**base, **summary("fair", (0, 100), (5, 5), (2, 3), 0, fast_p=(110.0, 140.0))}
    steps = add_fast_cost([step_figures(arrival), step_figures(fair)])
    one = json_report([arrival], steps[:1])
    assert one == {**arrival, "sweep": steps[:1]}  # a single run: its own keys, as it always was
    both = json_report([arrival, fair], steps)
    assert both["runs"] == [arrival, fair] and both["sweep"] == steps
    assert {k: both[k] for k in base} == base  # what the runs share
    assert "order" not in both and "races" not in both  # and nothing that would be one run's alone
    other = {**fair, "seed": 5}
    assert "seed" not in json_report([arrival, other], steps)


def test_the_fairness_plot_of_one_delay_spans_from_no_difference_and_shows_both_orders() -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the bench extra")
    from client.tools.latency import sweep_figure

    left, right, _ = delay_axis([100.0, 100.0])
    assert left < 0 < 100 < right
    assert delay_axis([0.0])[1] - delay_axis([0.0])[0] >= 50  # no difference at all: still a readable axis
    steps = add_fast_cost([step_figures(summary("arrival", (0, 100), (6, 4), (3, 2), 0, fast_p=(10.0, 30.0))),
                           step_figures(summary("fair", (0, 100), (5, 5), (3, 2), 0, fast_p=(110.0, 140.0)))])
    fig = sweep_figure(steps)
    try:
        for ax in fig.axes:
            left, right = ax.get_xlim()
            assert left <= 0 and right >= 100 and right - left >= 100, (ax.get_title(), left, right)
        for ax in fig.axes[:2]:  # the shares: one point per order, both in view, neither on the other
            xs = {bars.get_label(): list(bars.lines[0].get_xdata()) for bars in ax.containers}
            assert set(xs) == {"arrival order", "fair order"}, xs
            (a,), (f,) = xs["arrival order"], xs["fair order"]
            assert a != f and abs(a - 100) < 5 and abs(f - 100) < 5
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


# ------------------------------------------------------------------------------------------ whole runs


def check_report(r: dict[str, Any]) -> None:
    for key in ("rtt_ms", "confirm_ms", "clock_offset_ms", "accepted", "rejected", "races", "games", "wins",
                "matches", "order", "duration_s"):
        assert key in r, key
    for key in ("rtt_ms", "confirm_ms"):
        p = r[key]
        assert set(p) >= {"p50", "p90", "p99", "max", "n"}
        assert p["n"] > 0
        assert 0 <= p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
    assert set(r["clock_offset_ms"]) == {"0", "1"}
    assert all(isinstance(v, (int, float)) for v in r["clock_offset_ms"].values())
    assert r["accepted"] + sum(r["rejected"].values()) == r["verdicts"] == r["confirm_ms"]["n"]
    assert r["verdicts"] + r["unanswered"] == r["plays"]
    assert r["accepted"] > 0
    races = r["races"]
    assert set(races) == {"0", "1"}
    assert races["0"]["won"] == races["1"]["lost"] and races["1"]["won"] == races["0"]["lost"]
    assert races["0"]["won"] + races["1"]["won"] == r["race_count"]
    assert set(r["wins"]) == {"0", "1"} and r["wins"]["0"] + r["wins"]["1"] + r["ties"] == r["games"]
    assert r["log_gaps"] == 0


def run_cli(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The timeout only bounds a hang: a run on a busy machine may take several times its --duration.
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.integration
def test_latency_json_report_is_complete_and_consistent() -> None:
    proc = run_cli("--matches", "2", "--duration", "6", "--json", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1  # exactly one JSON object, no progress bar or chatter on stdout
    r = json.loads(lines[0])
    check_report(r)
    assert r["matches"] == 2 and r["order"] == "arrival" and r["server"] == "local"
    assert r["duration_s"] >= 6  # ran for as long as asked (how much longer is the machine's business)


@pytest.mark.integration
def test_latency_with_unequal_delay_and_a_table() -> None:
    proc = run_cli("--matches", "1", "--duration", "4", "--delay", "0ms,50ms", "--jitter", "2ms", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "round trip (ms)" in out and "play -> verdict (ms)" in out and "races" in out and "games" in out
    assert "delay 50 ms" in out


@pytest.mark.integration
def test_latency_in_fair_order_reports_holds() -> None:
    proc = run_cli("--matches", "1", "--duration", "4", "--delay", "0ms,30ms", "--order", "fair", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    check_report(r)
    assert r["order"] == "fair" and r["hold_ms"]["n"] > 0


@pytest.mark.integration
def test_each_seats_play_time_in_parts_adds_up_to_its_confirmation() -> None:
    """Seat 1 is 40 ms further each way: its uplink and downlink show it, the fast seat's plays are
    the ones held, and the parts' means add up to the confirmation mean (within 10 %)."""
    proc = run_cli("--matches", "2", "--duration", "6", "--delay", "0ms,40ms", "--order", "fair", "--json",
                   "--seed", "4")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    parts, whole = r["parts_ms"], r["parts_confirm_ms"]
    assert set(parts) == set(whole) == {"0", "1"}
    for seat in ("0", "1"):
        ps, cs = parts[seat], whole[seat]
        assert set(ps) == set(PARTS) and cs["n"] > 0
        for q in (*ps.values(), cs):
            assert {"p50", "p99", "mean"} <= set(q) and q["p50"] <= q["p99"]
        total = sum(q["mean"] for q in ps.values())
        assert abs(total - cs["mean"]) <= 0.1 * cs["mean"], (seat, ps, cs)
        assert abs(total - r["confirm_ms_by_seat"][seat]["mean"]) <= 0.1 * r["confirm_ms_by_seat"][seat]["mean"]
    assert parts["1"]["uplink"]["p50"] >= 40 and parts["1"]["downlink"]["p50"] >= 40
    assert parts["0"]["uplink"]["p50"] < 40 and parts["0"]["downlink"]["p50"] < 40
    assert parts["0"]["held"]["mean"] > parts["1"]["held"]["mean"]


def test_a_plays_parts_come_from_its_stamps_and_the_clock_offset() -> None:
    # The client's clock is 1 s behind the relay's (offset +1 s); the play left at 10.000 s (client),
    # reached the relay at 11.020 s, was held 100 ms, its verdict left at 11.125 s and came back at
    # 10.150 s (client); the view showed it 3 ms later.
    p = PlayRecord("M", 0, 1, 4, "PlayCard", 0, "3-red-star", sent_ns=10_000 * MS, answered_ns=10_150 * MS,
                   ok=True, hold_ns=100 * MS, recv_ns=11_020 * MS, relay_sent_ns=11_125 * MS, offset_ns=1_000 * MS,
                   accepted_seq=9, drawn_ns=10_153 * MS)
    assert p.parts_ns() == {"uplink": 20 * MS, "held": 100 * MS, "judging": 5 * MS, "downlink": 25 * MS,
                            "drawing": 3 * MS}
    assert sum(v for k, v in (p.parts_ns() or {}).items() if k != "drawing") == p.confirm_ns
    assert PlayRecord("M", 0, 2, 4, "PlayCard", 0, "x", sent_ns=1, answered_ns=2).parts_ns() is None  # no stamps
    figures = parts_ms([p, replace(p, seat=1)], 0)
    assert set(figures) == set(PARTS) and figures["held"] == {"p50": 100.0, "p99": 100.0, "mean": 100.0}
    assert parts_confirm_ms([p, replace(p, seat=1)], 0) == {"p50": 150.0, "p99": 150.0, "mean": 150.0, "n": 1}


@pytest.mark.integration
@pytest.mark.parametrize("args,needle", [
    (["--delay", "5parsecs"], "unknown unit"),
    (["--delay=-5ms"], "negative"),
    (["--delay", "11s"], "at most 10 s"),
    (["--jitter", "1,2,3"], "at most 2 values"),
    (["--loss", "1"], "--loss"),
    (["--reorder", "2%,abc"], "--reorder"),
    (["--order", "random"], "unknown order"),
    (["--matches", "0"], "--matches"),
    (["--settings", '{"best_of": 2}'], "best_of"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    proc = run_cli(*args, "--duration", "1")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("blink latency:") and needle in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.integration
def test_an_unreachable_server_is_one_line_and_exit_1() -> None:
    from mqttkit import free_port

    proc = run_cli("--server", f"mqtt://127.0.0.1:{free_port()}", "--duration", "1")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach" in lines[0], proc.stderr


@pytest.mark.integration
def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the bench extra; its absence is tested below")
    path = tmp_path / "latency.png"
    proc = run_cli("--matches", "1", "--duration", "3", "--delay", "0ms,40ms", "--json", "--plot", str(path))
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.integration
def test_plot_without_matplotlib_is_one_line_and_exit_1(tmp_path: Path) -> None:
    stub = tmp_path / "site" / "matplotlib"  # shadows an installed matplotlib: importing it fails
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(stub.parent), os.environ.get("PYTHONPATH")) if p)}
    proc = run_cli("--matches", "1", "--duration", "1", "--json", "--plot", str(tmp_path / "x.png"), env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "x.png").exists()


@pytest.mark.integration
def test_latency_against_a_running_server_asks_for_the_order_per_match() -> None:
    from mqttkit import free_port

    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "client.cli", "serve", "--port", str(port)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # "running" is printed once the relay has subscribed: a request sent earlier would be lost
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        proc = run_cli("--server", f"mqtt://127.0.0.1:{port}", "--matches", "1", "--duration", "3",
                       "--delay", "0,20ms", "--order", "fair", "--json")
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)
        check_report(r)
        assert r["server"] == f"mqtt://127.0.0.1:{port}" and r["order"] == "fair"
        # the relay runs in arrival order; this match asked for fair order and got it
        assert r["hold_ms"]["n"] > 0 and r["hold_ms"]["max"] > 0
    finally:
        serve.terminate()
        serve.communicate(timeout=60)


@pytest.mark.integration
def test_both_orders_are_both_in_the_json_and_on_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the bench extra; its absence is tested above")
    path = tmp_path / "both.png"
    proc = run_cli("--order", "both", "--delay", "0,100ms", "--matches", "1", "--duration", "4", "--seed", "6",
                   "--json", "--plot", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert [u["order"] for u in r["runs"]] == ["arrival", "fair"]
    for u in r["runs"]:
        check_report(u)
        assert u["impairment"]["1"]["delay_ms"] == 100 and u["matches"] == 1
    assert r["runs"][1]["hold_ms"]["n"] > 0  # the fair run's own figures, not a copy of the other's
    assert [s["order"] for s in r["sweep"]] == ["arrival", "fair"]
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


SMALL_DECK = {"deck": {"colours": ["red", "yellow", "green", "blue"], "shapes": ["star", "triangle", "moon"],
                       "counts": [1, 2, 3]}}


@pytest.mark.integration
def test_a_tiny_sweep_reports_every_step_and_draws_the_curves(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the bench extra; its absence is tested above")
    path = tmp_path / "curve.png"
    proc = run_cli("--sweep", "0,50", "--games", "2", "--order", "both", "--matches", "2", "--seed", "4",
                   "--settings", json.dumps(SMALL_DECK), "--json", "--plot", str(path), timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert "order" not in r and r["game"] == "blink" and r["matches"] == 2  # no one run is the report
    runs = r["runs"]  # every run, whole, in the order run
    assert [(u["impairment"]["1"]["delay_ms"], u["order"]) for u in runs] == \
        [(0, "arrival"), (0, "fair"), (50, "arrival"), (50, "fair")]
    for u in runs:
        check_report(u)
        assert u["impairment"]["0"]["delay_ms"] == 0
    steps = r["sweep"]
    assert [(s["delay_ms"], s["order"]) for s in steps] == [(0, "arrival"), (0, "fair"), (50, "arrival"), (50, "fair")]
    for s in steps:
        assert set(s) >= {"delay_ms", "order", "races", "games", "games_share", "games_ci95", "races_share",
                          "races_ci95", "fast_added_ms"}
        assert s["games"] >= 2  # played until the games were done, not for a time
        assert s["games_share"] is not None and s["games_ci95"][0] <= s["games_share"] <= s["games_ci95"][1]
        if s["races"]:
            assert s["races_ci95"][0] <= s["races_share"] <= s["races_ci95"][1]
        assert set(s["fast_added_ms"]) == {"p50", "p99"}
        if s["order"] == "arrival":
            assert s["fast_added_ms"] == {"p50": 0.0, "p99": 0.0}
    last = steps[-1]
    assert last["fast_added_ms"]["p50"] == round(last["fast_confirm_ms"]["p50"] - steps[2]["fast_confirm_ms"]["p50"], 3)
    assert last["hold_ms"]["p99"] is not None and last["hold_ms"]["p99"] > 0  # fair order held the fast seat's plays
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.integration
@pytest.mark.parametrize("args,needle", [
    (["--sweep=-50"], "--sweep: must not be negative"),
    (["--sweep", "0,fast"], "--sweep: not a time"),
    (["--games", "0"], "--games"),
    (["--sweep", "0,50", "--delay", "0,10ms"], "not both"),
])
def test_bad_sweeps_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    proc = run_cli(*args, "--duration", "1")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blink latency:") and needle in lines[0], proc.stderr


# ------------------------------------------------------------------------ impairment profiles


def test_jitter_distributions_and_the_rate_limit_are_seeded_and_as_documented() -> None:
    from client.tools.latency import ProfileImpairment

    def draws(dist: str, seed: int = 3, n: int = 4000) -> list[float]:
        p = ProfileImpairment(SeatImpairment(0.1, 0.01, dist=dist), seed)
        return [p.plan("up") or 0.0 for _ in range(n)]

    for dist in ("uniform", "normal", "pareto"):
        assert draws(dist) == draws(dist)  # the same seed: the same draws
    uniform, normal, pareto = draws("uniform"), draws("normal"), draws("pareto")
    assert 0.09 <= min(uniform) and max(uniform) <= 0.11
    assert abs(sum(normal) / len(normal) - 0.1) < 0.001 and max(normal) > 0.125  # sd 10 ms: beyond 2.5 sd now and then
    assert min(pareto) >= 0.1 and abs(sum(pareto) / len(pareto) - 0.11) < 0.003 and max(pareto) > 0.15  # heavy tail
    limited = ProfileImpairment(SeatImpairment(rate=10.0), 1)
    waits = [limited.plan("up") or 0.0 for _ in range(3)]
    assert waits[0] < 0.01 and 0.09 <= waits[1] <= 0.11 and 0.19 <= waits[2] <= 0.21  # a turn every 100 ms
    assert (limited.plan("down") or 0.0) < 0.01  # each direction has its own turns
    lossy = ProfileImpairment(SeatImpairment(loss=0.5), 2)
    assert 0.4 < sum(lossy.plan() is None for _ in range(1000)) / 1000 < 0.6


@pytest.mark.parametrize("args,needle", [
    ({"rate": "fast"}, "not a rate"), ({"rate": "-1"}, "from 0"), ({"dist": "cauchy"}, "not one of"),
    ({"dist": "normal,pareto,uniform"}, "at most 2 values"),
])
def test_bad_profile_values_name_the_problem(args: dict[str, str], needle: str) -> None:
    with pytest.raises(BadArgument, match=needle):
        seat_impairments(**args)


def test_a_logs_header_gives_back_the_profile_and_seed(tmp_path: Path) -> None:
    from client.tools.latency import LatencyConfig, read_profile, write_header

    imps = seat_impairments(delay="0,100ms", jitter="0,20ms", loss="0,1%", reorder="0,2%", dist="uniform,pareto",
                            rate="0,50")
    log = tmp_path / "run.jsonl"
    write_header(LatencyConfig(impairments=imps, seed=11, log_path=str(log)))
    assert read_profile(log.read_text().splitlines(), "run.jsonl") == (imps, 11)
    for text, needle in [("", "no impairment header"), ('{"kind": "relay_started"}', "no impairment header"),
                         ('{"kind": "impairment", "seats": {"0": {}}}', "seats 0 and 1"),
                         ('{"kind": "impairment", "seed": 1, "seats": {"0": {"delay_ms": -5, "jitter_ms": 0, "loss": 0, '
                          '"reorder": 0}, "1": {"delay_ms": 0, "jitter_ms": 0, "loss": 0, "reorder": 0}}}', "out of range")]:
        with pytest.raises(BadArgument, match=needle):
            read_profile([text], "x.jsonl")


@pytest.mark.integration
def test_a_logged_run_verifies_and_its_profile_runs_again(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    first = run_cli("--matches", "1", "--duration", "4", "--delay", "0ms,30ms", "--jitter", "0,8ms",
                    "--jitter-dist", "uniform,normal", "--rate", "0,100", "--order", "fair", "--log", str(log), "--json")
    assert first.returncode == 0, first.stderr
    ran = json.loads(first.stdout)
    header = json.loads(log.read_text().splitlines()[0])
    assert header["kind"] == "impairment" and header["seats"] == ran["impairment"] and type(header["seed"]) is int
    assert ran["impairment"]["1"]["jitter_dist"] == "normal" and ran["impairment"]["1"]["rate_per_s"] == 100.0
    verdict = subprocess.run([sys.executable, "-m", "client.cli", "verify", str(log)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
    assert verdict.returncode == 0 and "true:" in verdict.stdout, verdict.stdout + verdict.stderr
    again = run_cli("--matches", "1", "--duration", "3", "--replay-impairment", str(log), "--json")
    assert again.returncode == 0, again.stderr
    replayed = json.loads(again.stdout)
    assert replayed["impairment"] == ran["impairment"] and replayed["seed"] == header["seed"]


@pytest.mark.integration
@pytest.mark.parametrize("args,needle", [
    (["--replay-impairment", "LOG", "--delay", "5ms"], "not with --delay"),
    (["--replay-impairment", "NOHEADER"], "no impairment header"),
    (["--replay-impairment", "/nonexistent/run.jsonl"], "cannot read"),
    (["--log", "OUT", "--order", "both"], "one run"),
    (["--rate", "fast"], "not a rate"),
    (["--jitter-dist", "cauchy"], "not one of"),
])
def test_bad_profile_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "noheader.jsonl").write_text('{"kind": "relay_started", "relay": "r"}\n')
    (tmp_path / "log.jsonl").write_text('{"kind": "impairment", "seed": 1, "seats": {}}\n')
    args = [{"LOG": str(tmp_path / "log.jsonl"), "NOHEADER": str(tmp_path / "noheader.jsonl"),
             "OUT": str(tmp_path / "out.jsonl")}.get(a, a) for a in args]
    proc = run_cli(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
