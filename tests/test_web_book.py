"""The spectator page's book (relay/web/book.py), pure: fed a relay core's public messages as the wire
carries them, it lists the match and keeps a watched match's table equal to the relay's own
spectator view -- through gaps, game boundaries and a late page -- and never holds a hidden card.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from protocol import messages as m
from protocol.codec import decode_all, encode
from relay.core import Publish
from relay.publishing import wire_messages
from relay.web import Book, parse_web
from tests.test_send_less import SMALL_DECK, T, Table, play_out

SETTINGS: dict[str, Any] = {"hand_size": 3, "auto_refill": True, "countdown_s": 0.5, "stalemate_pause_s": 0.3,
                            "pick_time_s": 1.0, "best_of": 3}


class WatchedTable(Table):
    """A relay core whose public messages also go to a spectator page's book (``drop``: the seqs of
    events the book never gets, as a lost message)."""

    def __init__(self, seed: int, game_settings: dict[str, Any], game: str = "blink", seats: int = 2,
                 watch_at_start: bool = True, drop: frozenset[int] = frozenset()) -> None:
        self.book = Book()
        self.frames: list[Any] = []
        self.drop = drop
        self.watch_at_start = watch_at_start
        self.compared = 0  # steps at which the book's table was checked against the relay's
        super().__init__(seed, game_settings, game, seats)

    def deliver(self, out: list[Any]) -> None:
        super().deliver(out)
        if self.watch_at_start and not self.book.watched() and self.book.knows(self.code):
            self.book.watch(self.code)
        for w in wire_messages([o for o in out if isinstance(o, Publish)], encode):
            if w.topic == T.snap(self.code):
                if not w.payload:
                    self.book.on_cleared(self.code, self.now)
                    continue
                for msg in decode_all(w.payload):
                    self.frames += self.book.on_snapshot(msg)
            elif w.topic == T.ev(self.code):
                for msg in decode_all(w.payload):
                    assert isinstance(msg, m.Event)
                    if msg.seq not in self.drop:
                        self.frames += self.book.on_event(msg)

    def check(self) -> None:
        super().check()
        match = self.core.matches.get(self.code)
        if match is None or match.state is None or self.code not in self.book.watched():
            return
        frame = self.book.frame(self.code)
        if frame["seq"] == match.seq and frame["view"] is not None:
            rules = match.rules
            assert frame["view"] == rules.to_wire(rules.view(match.state, None))
            self.compared += 1


def steps(seed: int, n: int = 600) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    return [(rnd.choice((0, 1, 4)), rnd.randint(0, 700)) for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_a_watched_blink_match_is_the_relays_spectator_view_at_every_step(seed: int) -> None:
    table = WatchedTable(seed, {**SETTINGS, **({"deck": SMALL_DECK} if seed % 2 else {})})
    play_out(table, steps(seed))
    assert table.compared > 30
    frames = table.frames
    assert any(f["event"] and f["event"]["type"] == "card_played" for f in frames)
    for f in frames:
        view = f["view"]
        if view is not None:  # a spectator's table: no hand card, no draw order
            assert all(c is None for hand in view["hands"] for c in hand)
            assert all(isinstance(d, int) for d in view["draw"])


def test_a_lost_event_is_put_right_by_the_next_snapshot() -> None:
    table = WatchedTable(7, SETTINGS, drop=frozenset({12, 30}))
    play_out(table, steps(7))
    match = table.core.matches.get(table.code)
    seqs = [f["seq"] for f in table.frames]
    assert 12 not in seqs and 30 not in seqs and table.compared > 30
    assert max(seqs) >= 40 and (match is None or max(seqs) <= match.seq)


def test_a_page_opened_late_starts_from_the_latest_snapshot() -> None:
    table = WatchedTable(3, SETTINGS, watch_at_start=False)
    play_out(table, steps(3, 200))
    assert table.frames == []  # nobody watched: the book kept the list only
    table.book.watch(table.code)
    frame = table.book.frame(table.code)
    assert frame["view"] is not None and frame["summary"]["players"] == ["ann", "pb"]
    play_out(table, steps(4, 300))
    assert table.frames


@pytest.mark.parametrize("game,seats", [("takeaway", 3), ("sequence", 2), ("ryo", 2)])
def test_the_dice_games_are_watched_the_same_way(game: str, seats: int) -> None:
    table = WatchedTable(5, {}, game=game, seats=seats)
    play_out(table, [(0, k) for k in range(400)])
    assert any(f["view"] is not None for f in table.frames) and table.compared > 20


def test_the_list_says_game_players_score_and_how_long_and_keeps_the_result() -> None:
    table = WatchedTable(11, {**SETTINGS, "best_of": 1}, watch_at_start=False)
    summary = table.book.summaries(table.now)
    assert [s["code"] for s in summary] == [table.code] and summary[0]["status"] == "playing"
    assert summary[0]["title"] == "BLINK" and summary[0]["players"] == ["ann", "pb"]
    start = table.now
    while table.core.matches[table.code].status != "over":
        play_out(table, steps(table.now % 1000, 50))
    over = table.book.summaries(table.now)[0]
    assert over["status"] == "over" and not over["live"]
    assert over["result"].split(" won")[0] in ("ann", "pb") and "games won: ann" in over["result"]
    assert sorted(over["wins"]) == [0, 1]
    assert 0 < over["seconds"] <= (table.now - start) / 1e9 + 1


def test_closed_matches_stay_listed_as_recent_up_to_a_bound() -> None:
    book = Book(recent_kept=2)
    for i, code in enumerate(["AAAA1", "BBBB2", "CCCC3", "DDDD4"]):
        book.on_snapshot(m.Snapshot(match=code, seq=1, ts=(i + 1) * 10**9, game_index=0, status="waiting",
                                    players=("x",), state={}, game="blink"))
    book.on_cleared("AAAA1", 5 * 10**9)
    book.on_cleared("BBBB2", 6 * 10**9)
    book.on_cleared("CCCC3", 7 * 10**9)
    listed = book.summaries(8 * 10**9)
    assert [(s["code"], s["live"], s["status"]) for s in listed] == [
        ("DDDD4", True, "waiting"), ("CCCC3", False, "closed"), ("BBBB2", False, "closed")]
    assert not book.knows("AAAA1")


@pytest.mark.parametrize("text,host,port", [("8080", "127.0.0.1", 8080), ("0.0.0.0:80", "0.0.0.0", 80),
                                            ("[::1]:9000", "::1", 9000), ("localhost:65535", "localhost", 65535)])
def test_web_takes_port_or_host_and_port(text: str, host: str, port: int) -> None:
    got = parse_web(text)
    assert (got.host, got.port) == (host, port)


@pytest.mark.parametrize("text", ["", "http", "0", "65536", ":8080", "host:", "8080x"])
def test_web_refuses_what_is_not_a_port(text: str) -> None:
    with pytest.raises(ValueError, match="port"):
        parse_web(text)


def test_the_leaderboards_are_each_games_rated_players_best_first() -> None:
    book = Book()
    assert book.leaderboards() == []
    rows = ({"name": "ann", "key": "abcdefghijklmnop", "rating": 4.5, "mu": 27.0, "sigma": 7.5, "matches": 3},
            {"name": "bob", "key": "qrstuvwxyz234567", "rating": -1.0, "mu": 23.0, "sigma": 8.0, "matches": 3})
    book.on_ratings(m.RatingBoard(game="ryo", rows=rows, players=2))
    book.on_ratings(m.RatingBoard(game="blink", rows=rows[1:], players=1))
    book.on_ratings(m.RatingBoard(game="takeaway", rows=(), players=0))  # nobody rated: not shown
    book.on_ratings(m.RatingBoard(game="chess", rows=rows, players=2))  # a game this relay has not
    boards = book.leaderboards()
    assert [(b["game"], b["title"], b["players"]) for b in boards] == [("blink", "BLINK", 1),
                                                                       ("ryo", "Roll Your Own", 2)]
    assert boards[1]["rows"] == [{"name": "ann", "key": "abcdefghijkl", "rating": 4.5, "matches": 3},
                                 {"name": "bob", "key": "qrstuvwxyz23", "rating": -1.0, "matches": 3}]


def test_a_match_over_that_nobody_watched_has_its_result_from_its_snapshot() -> None:
    book = Book()
    state = {"status": "over", "winner": 1, "wins": [0, 2], "best_of": 3}
    book.on_snapshot(m.Snapshot(match="ABCDE", seq=90, ts=10**9, game_index=2, status="over", players=("ann", "bob"),
                                state={}, match_state=state, game="blink"))
    (listed,) = book.summaries(2 * 10**9)
    assert listed["result"] == "bob won; games won: ann 0, bob 2" and not listed["live"]
