"""An independent check of a BLINK event log (``blink match --log``), written without the engine:
every accepted play matched the pile top before it, no card landed twice in a game, and each
game's winner really put all 30 of their cards on the piles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LANDS = {"card_revealed", "card_played", "card_flipped", "card_picked"}


def read(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def matches(a: str, b: str) -> bool:
    x, y = a.split("-"), b.split("-")
    return any(p == q for p, q in zip(x, y))


def check_blink_log(events: list[dict[str, Any]], players: list[str]) -> dict[str, Any]:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "seq must be gap-free from 1"
    assert all(isinstance(e["ts"], int) for e in events)
    assert all(a["ts"] <= b["ts"] for a, b in zip(events, events[1:])), "relay time never goes back"
    tops: dict[int, str | None] = {}
    landed: dict[str, str] = {}
    per_player: dict[str, int] = {}
    game = None
    plays = 0
    winners: list[Any] = []
    for e in events:
        if e["game"] != game and e["type"] == "game_started":
            game, tops, landed, per_player = e["game"], {0: None, 1: None}, {}, {p: 0 for p in players}
        if e["type"] in LANDS:
            assert {"player", "card", "pile"} <= set(e), e
            card, pile = e["card"], e["pile"]
            assert card not in landed, f"{card} landed twice in game {game}"
            if "play" in e["type"]:
                plays += 1
                top = tops[pile]
                assert top is not None and matches(card, top), f"{card} does not match {top}"
            landed[card] = e["player"]
            tops[pile] = card
            per_player[e["player"]] += 1
        if e["type"] == "game_over":
            assert "winner" in e
            winners.append(e["winner"])
            if e["winner"] is not None:
                assert e["winner"] in players
                assert per_player[e["winner"]] == 30, f"{e['winner']} put {per_player[e['winner']]} cards down"
    return {"plays": plays, "winners": winners}
