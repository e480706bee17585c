"""Fair order's decisions in the relay's log: every one is recomputed by `blink verify`, a changed one
is named, and `blink verify --order arrival` re-judges the races in arrival order.

The logs are the relay core's own records (in process, no broker), written as `blink serve --log`
writes them; one test makes a real one with `blink serve --order fair --log` and `blink match`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from client.cli import main
from protocol import messages as m
from protocol.fairlog import is_decision
from protocol.verify import parse_log, verify
from relay.core import LogRecord
from tests.test_fair import MS, measure, play_at
from tests.test_relay_core import Harness, race_deck
from tests.test_verify import FAST, drive


def relay_log(h: Harness) -> list[str]:
    """The harness's log records as `blink serve --log` writes them (its events among them), in order."""
    return [json.dumps(o.record) for o in h.out if isinstance(o, LogRecord)]


def check(lines: list[str]) -> Any:
    decisions: list[Any] = []
    records = parse_log(lines, decisions)
    return verify(records, relay_lines=decisions)


def race(bob_arrives_ms: int = 250, ann_rtt_ms: float = 10, cap_ms: int = 400) -> tuple[Harness, str]:
    """Ann (10 ms round trip) reacts in 200 ms; Bob (100 ms) in 150 ms: his play arrives later but wins."""
    h = Harness(order="fair", fixed_decks=(race_deck(),), fair_cap_ns=cap_ms * MS)
    code = h.start_match()
    measure(h, "a", ann_rtt_ms)
    measure(h, "b", 100)
    seq = h.core.matches[code].seq
    pub = h.now
    play_at(h, pub + 215 * MS, "a", code, "3-red-star", 0, 1, seq, 200)
    due = h.core.next_deadline()
    if due is not None and due < pub + bob_arrives_ms * MS:  # the relay's timer ends ann's hold first
        h.now = due
        h.out.extend(h.core.tick(due))
    play_at(h, pub + bob_arrives_ms * MS, "b", code, "5-green-triangle", 0, 1, seq, 150)
    h.tick(0.5)
    return h, code


def decision_lines(lines: list[str]) -> list[int]:
    return [i for i, x in enumerate(lines) if is_decision(json.loads(x))]


def test_a_race_s_decisions_are_in_the_log_and_recomputed() -> None:
    h, _ = race()
    lines = relay_log(h)
    found = decision_lines(lines)
    assert len(found) == 2
    ann = json.loads(lines[found[1]])
    bob = json.loads(lines[found[0]])
    # bob's faster reaction is judged first; ann's play waited for him and lost the race
    assert bob["kind"] == "applied" and ann["kind"] == "rejected" and ann["code"] == "pile_changed"
    assert ann["reaction_used_ns"] == 200 * MS and ann["virtual_ns"] == ann["published_ns"] + 200 * MS
    assert ann["considered"] == [{"seat": 1, "rtt_ns": 100 * MS, "measured": True}]
    assert ann["release_ns"] == ann["virtual_ns"] + 100 * MS + ann["margin_ns"] and not ann["capped"]
    assert ann["why"] == "rivals_played" and ann["hold_ns"] == 35 * MS and ann["rivals"] == [1]
    assert ann["cap_ns"] == 400 * MS and ann["floor_ns"] == 100 * MS
    report = check(lines)
    assert report.ok, report.summary()
    assert report.decisions == 2 and "2 fair-order decisions recomputed" in report.summary()


def test_a_capped_hold_is_recorded_as_capped() -> None:
    h, _ = race(bob_arrives_ms=900, cap_ms=50)  # bob's play comes long after the cap
    lines = relay_log(h)
    ann = json.loads(lines[decision_lines(lines)[0]])
    assert ann["client"] == "a" and ann["capped"] and ann["why"] == "hold_over"
    assert ann["release_ns"] == ann["arrival_ns"] + 50 * MS == ann["released_ns"]
    report = check(lines)
    assert report.ok, report.summary()


def changed(lines: list[str], index: int, **fields: Any) -> list[str]:
    rec = json.loads(lines[index])
    for k, v in fields.items():
        rec[k] = v(rec) if callable(v) else v
    return lines[:index] + [json.dumps(rec)] + lines[index + 1:]


@pytest.mark.parametrize("which, fields, words", [
    (1, {"virtual_ns": lambda r: r["virtual_ns"] - 60 * MS}, "virtual_ns"),
    (1, {"reaction_used_ns": 100 * MS, "virtual_ns": lambda r: r["published_ns"] + 100 * MS}, "clamped"),
    (1, {"release_ns": lambda r: r["release_ns"] + 1}, "release_ns"),
    (1, {"considered": []}, "release_ns"),
    (1, {"capped": True}, "capped"),
    (1, {"hold_ns": lambda r: r["hold_ns"] - 5 * MS}, "hold_ns"),
    (1, {"why": "no_rival"}, "every rival considered had played"),
    (0, {"why": "no_rival", "considered": [{"seat": 0, "rtt_ns": 200 * MS, "measured": True}],
         "release_ns": lambda r: r["virtual_ns"] + 203 * MS}, "every rival considered had played"),
    (1, {"why": "hold_over"}, "before its release"),
    (0, {"coin": 12345}, "no play tied"),
    (1, {"cap_ns": 1_000 * MS}, "one relay, one configuration"),
    (1, {"seat": 1}, "rivals considered"),
    (1, {"reaction_used_ns": "fast"}, "whole number reaction_used_ns"),
    (1, {"why": "felt_like_it"}, "not one of"),
])
def test_a_changed_decision_is_named(which: int, fields: dict[str, Any], words: str) -> None:
    h, _ = race()
    lines = relay_log(h)
    at = decision_lines(lines)[which]
    report = check(changed(lines, at, **fields))
    assert not report.ok
    assert report.first is not None and report.first.line == at + 1, report.summary()
    assert words in report.first.problem and "fair decision" in str(report.first), report.summary()


def test_a_play_judged_before_a_faster_reaction_is_named() -> None:
    """The decisions swapped: the log says ann's slower reaction was judged first in the batch."""
    h, _ = race()
    lines = relay_log(h)
    bob, ann = decision_lines(lines)
    lines[bob], lines[ann] = lines[ann], lines[bob]
    report = check(lines)
    assert not report.ok and report.first is not None and report.first.line == bob + 1, report.summary()
    assert "reacted earlier" in report.first.problem


def test_every_decision_of_whole_fair_matches_verifies() -> None:
    total = 0
    for seed in (1, 2, 3):
        played = drive("blink", 2, seed, {**FAST["blink"], "order": "fair", "best_of": 3}, rematch=True)
        report = check(played.relay)
        assert report.ok, report.summary()
        total += report.decisions
    assert total > 50


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "relay.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_arrival_order_would_flip_the_race(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h, code = race()
    path = write(tmp_path, relay_log(h))
    assert main(["verify", "--order", "arrival", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    seq = next(e.seq for e in h.events() if e.type == "card_played")
    assert json.loads(out) == [{"match": code, "seq": seq, "pile": 0, "fair_winner": "bob", "arrival_winner": "ann"}]
    assert main(["verify", "--order", "arrival", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "fair order gave it to bob, arrival order would give it to ann" in out
    assert out.strip().endswith("1 race re-judged in arrival order, 1 would flip")


def test_a_race_arrival_order_would_give_the_same_winner_is_no_flip(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    h, _ = race(bob_arrives_ms=900, cap_ms=50)  # ann's play was confirmed at the cap: she won, as on arrival
    path = write(tmp_path, relay_log(h))
    assert main(["verify", "--order", "arrival", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_re_judging_refuses_a_log_without_decisions_and_a_false_one(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    played = drive("blink", 2, 4, FAST["blink"])  # arrival order: no decisions
    path = write(tmp_path, played.relay)
    assert main(["verify", "--order", "arrival", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "no fair-order decisions" in err
    h, _ = race()
    lines = relay_log(h)
    at = decision_lines(lines)[1]
    path = write(tmp_path, changed(lines, at, hold_ns=1))
    assert main(["verify", "--order", "arrival", "--json", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"line {at + 1}" in err and "hold_ns" in err
    assert main(["verify", "--json", str(path)]) == 2
    assert "--json goes with --order arrival" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def test_a_real_fair_relay_log_verifies_refuses_a_changed_decision_and_re_judges(tmp_path: Path,
                                                                                 relay_guard: Any) -> None:
    log = tmp_path / "relay.jsonl"
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "client.cli", "serve", "--embedded", "--port", str(port),
                              "--order", "fair", "--no-journal", "--log", str(log)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        done = subprocess.run([sys.executable, "-m", "client.cli", "match", "--server", f"mqtt://127.0.0.1:{port}",
                               "--order", "fair", "--seed", "5", "--reaction", "0.15",
                               "--settings", json.dumps({"best_of": 1, "countdown_s": 0.5})],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    verdict = subprocess.run([sys.executable, "-m", "client.cli", "verify", str(log)], capture_output=True, text=True,
                             timeout=120)
    assert verdict.returncode == 0 and "fair-order decisions recomputed" in verdict.stdout, verdict.stdout + verdict.stderr
    lines = log.read_text().splitlines()
    at = decision_lines(lines)
    assert at, "no decision in a fair relay's log"
    bad = tmp_path / "changed.jsonl"
    bad.write_text("\n".join(changed(lines, at[0], reaction_used_ns=lambda r: r["reaction_used_ns"] + 1)) + "\n")
    refused = subprocess.run([sys.executable, "-m", "client.cli", "verify", str(bad)], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 1 and f"line {at[0] + 1} " in refused.stdout, refused.stdout + refused.stderr
    rejudged = subprocess.run([sys.executable, "-m", "client.cli", "verify", "--order", "arrival", "--json", str(log)],
                              capture_output=True, text=True, timeout=120)
    assert rejudged.returncode == 0, rejudged.stderr
    flips = json.loads(rejudged.stdout)
    assert isinstance(flips, list) and all(set(f) == {"match", "seq", "pile", "fair_winner", "arrival_winner"}
                                           and f["fair_winner"] != f["arrival_winner"] for f in flips)
