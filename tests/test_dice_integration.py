"""Bot matches of the three dice games through the relay and real brokers, with 2, 3 and 4
players; every log is checked against the rules by code that does not use the engines."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mqttkit import BrokerAddress
from tests.logcheck import read

pytestmark = pytest.mark.integration

BLINK = [sys.executable, "-m", "client.cli"]
SEQUENCE_BOARD = [[2, 7, 4, 8, 5, 2], [5, 9, 3, 6, 9, 7], [8, 6, 12, 12, 3, 4],
                  [4, 3, 12, 12, 6, 8], [7, 9, 6, 3, 9, 5], [2, 5, 8, 4, 7, 2]]
SHORT_RYO = {"rolls_per_round": 3, "rounds_per_game": 2, "games_per_match": 2}


def run(tmp_path: Path, game: str, bots: int, settings: dict[str, Any] | None = None,
        server: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    log = tmp_path / f"{game}{bots}.jsonl"
    cmd = [*BLINK, "match", "--game", game, "--bots", str(bots), "--seed", "11", "--reaction", "0.005",
           "--json", "--log", str(log), "--settings", json.dumps(settings or {})]
    if server:
        cmd += ["--server", server]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    events = read(log)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    return json.loads(proc.stdout), events


def hand_score(faces: list[int]) -> int:
    seen: set[int] = set()
    total = 0
    for f in faces:
        total += 10 if f in seen else f
        seen.add(f)
    return total


def check_takeaway(summary: dict[str, Any], events: list[dict[str, Any]]) -> None:
    players = summary["players"]
    faces: dict[tuple[int, int], int] = {}
    claimed: dict[str, list[int]] = {p: [] for p in players}
    order: list[int] = []
    turns = []
    for e in events:
        if e["type"] == "order_decided":
            order = e["order"]
        elif e["type"] == "dice_rolled":
            for q, r, face in e["cells"]:
                assert 1 <= face <= 6
                faces[(q, r)] = face
        elif e["type"] == "blink_claimed":
            cell = (e["q"], e["r"])
            assert cell in faces, f"{cell} claimed twice or never on the board"
            assert faces.pop(cell) == e["face"], "a claim must take the face the die shows"
            claimed[e["player"]].append(e["face"])
            turns.append(e["seat"])
    assert not faces, "the game ends when the last Blink is claimed"
    assert order and turns == [order[i % len(order)] for i in range(len(turns))], "turns go round in order"
    scores = {p: hand_score(f) for p, f in claimed.items()}
    assert summary["games"][0]["scores"] == scores
    best = max(scores.values())
    assert sorted(summary["games"][0]["winners"]) == sorted(p for p, s in scores.items() if s == best)


def has_line(cells: set[tuple[int, int]], length: int = 5) -> bool:
    """Five of ``cells`` in a row, column or diagonal (written here, not taken from the engine)."""
    return any(all((r + i * dr, c + i * dc) in cells for i in range(length))
               for r, c in cells for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)))


def check_sequence(summary: dict[str, Any], events: list[dict[str, Any]], players: int) -> None:
    board: dict[tuple[int, int], str] = {}
    last_total = None
    for e in events:
        if e["type"] == "dice_rolled":
            assert len(e["dice"]) == 2 and all(1 <= d <= 6 for d in e["dice"]) and sum(e["dice"]) == e["total"]
            last_total = e["total"]
        elif e["type"] == "chip_removed":
            cell = (e["row"], e["col"])
            if last_total == 10:
                assert SEQUENCE_BOARD[cell[0]][cell[1]] not in (2, 12), "10 never removes from 2 or 12"
            assert board.pop(cell) == e["colour"]
        elif e["type"] == "chip_placed":
            cell = (e["row"], e["col"])
            if e.get("replaced"):
                assert board.get(cell) == e["replaced"] != e["colour"], "only an opponent's chip is replaced"
            else:
                assert cell not in board, "a chip goes on an open space"
            if last_total != 11:
                assert SEQUENCE_BOARD[cell[0]][cell[1]] == last_total, "2-9 and 12 place on their number"
            board[cell] = e["colour"]
            assert Counter(board.values())[e["colour"]] <= 20
    over = next(e for e in events if e["type"] == "game_over")
    if over["reason"] == "sequence":
        line = [tuple(x) for x in over["line"]]
        assert len(line) == 5 and all(board[c] == over["colour"] for c in line)
        dr, dc = line[1][0] - line[0][0], line[1][1] - line[0][1]
        assert all((line[i + 1][0] - line[i][0], line[i + 1][1] - line[i][1]) == (dr, dc) for i in range(4))
        if players == 4:
            assert len(over["winners"]) == 2, "four players play as two teams"
        assert summary["games"][0]["line"] == over["line"]
    else:  # the only other end: the turn limit, with no line on the board and no winner
        assert over["reason"] == "max_turns" and over["winners"] == [] and over["winner"] is None, over
        colours = set(board.values())
        assert not any(has_line({c for c, col in board.items() if col == colour}) for colour in colours)


def check_ryo(summary: dict[str, Any], events: list[dict[str, Any]]) -> None:
    dice: list[list[int]] = []
    for e in events:
        if e["type"] == "dice_revealed":
            dice = e["dice"]
            for d in dice:
                assert len(d) == 6 and all(0 <= f <= 9 for f in d) and sum(d) <= 21
        elif e["type"] in ("face_raised", "face_lowered"):
            d = e["die"]
            assert all(0 <= f <= 9 for f in d) and sum(d) <= 21 + 50  # raises may go past the budget
            dice[e["seat"]] = d
        elif e["type"] == "dice_rolled":
            for roll in e["rolls"]:
                assert dice[roll["player"]][roll["face"]] == roll["value"], "a roll shows a face of that die"
        elif e["type"] == "die_built":
            assert "faces" not in e and "die" not in e, "builds are secret until the reveal"
    over = next(e for e in events if e["type"] == "game_over")
    assert max(over["scores"]) == SHORT_RYO["games_per_match"]


@pytest.mark.parametrize("bots", [2, 3, 4])
def test_takeaway_bot_matches(tmp_path: Path, bots: int) -> None:
    summary, events = run(tmp_path, "takeaway", bots)
    check_takeaway(summary, events)


@pytest.mark.parametrize("bots", [2, 3, 4])
def test_sequence_bot_matches(tmp_path: Path, bots: int) -> None:
    summary, events = run(tmp_path, "sequence", bots)
    check_sequence(summary, events, bots)


@pytest.mark.parametrize("bots", [2, 3, 4])
def test_roll_your_own_bot_matches(tmp_path: Path, bots: int) -> None:
    summary, events = run(tmp_path, "ryo", bots, SHORT_RYO)
    check_ryo(summary, events)
    assert summary["games_won"] and summary["rounds_won"]


def test_dice_games_through_mosquitto(tmp_path: Path, mosquitto: BrokerAddress) -> None:
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url, "--seed", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        summary, events = run(tmp_path, "takeaway", 3, server=mosquitto.url)
        check_takeaway(summary, events)
        summary, events = run(tmp_path, "sequence", 4, server=mosquitto.url)
        check_sequence(summary, events, 4)
        summary, events = run(tmp_path, "ryo", 3, SHORT_RYO, server=mosquitto.url)
        check_ryo(summary, events)
    finally:
        serve.send_signal(signal.SIGINT)
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 130 and "stopped" in out, err
