"""The relay core's limits: floods, caps, expiry and forgetting -- driven directly with
messages and times, no broker, no clock. Behaviour only; speed belongs in bench/flood.py."""

from __future__ import annotations

import gc
import pickle
import tracemalloc
from typing import Any

import msgpack
import pytest

from protocol import messages as m
from protocol.codec import encode, to_dict
from protocol.rules import blink
from protocol.topics import Topics
from relay.judge.tables import DETAIL_CHARS
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.limits import Clients, DeadlineHeap, Quiet, TokenBucket
from tests.toygame import TOY, Take

T = Topics()
S = 1_000_000_000
MS = 1_000_000
NO_CARD = "9-red-star"


class Relay:
    def __init__(self, **config: Any) -> None:
        self.core = RelayCore(T, RelayConfig(**config), seed=7)
        self.now = 1_000 * S
        self.out: list[Any] = []

    def send(self, topic: str, msg: Any) -> list[Any]:
        payload = msg if isinstance(msg, bytes) else encode(msg)
        out = self.core.handle(topic, payload, self.now)
        self.out.extend(out)
        return out

    def tick(self, dt_s: float = 0.0) -> list[Any]:
        self.now += int(dt_s * S)
        out = self.core.tick(self.now)
        self.out.extend(out)
        return out

    def to(self, client: str, out: list[Any]) -> list[Any]:
        return [o.msg for o in out if isinstance(o, Publish) and o.topic == T.client(client)]

    def create(self, client: str, **kw: Any) -> str:
        out = self.send(T.req(client), m.CreateMatch(name=client, **kw))
        joined = [x for x in self.to(client, out) if isinstance(x, m.MatchJoined)]
        assert joined, self.to(client, out)
        return joined[0].match

    def start(self, a: str = "a", b: str = "b") -> str:
        code = self.create(a)
        self.send(T.req(b), m.JoinMatch(name=b, match=code))
        self.tick(3.01)  # the countdown
        assert self.core.matches[code].state.phase == "running"
        return code

    def act(self, client: str, code: str, action_id: int, card: str = "1-red-star") -> list[Any]:
        match = self.core.matches.get(code)
        return self.send(T.act(code, client), m.Act(id=action_id, seq=match.seq if match else 0,
                                                    action=blink.action_to_wire(blink.PlayCard(card, 0))))


def bad(out: list[Any], code: str) -> list[dict[str, Any]]:
    return [o.record for o in out if isinstance(o, LogRecord) and o.record.get("kind") == "bad_input"
            and o.record.get("code") == code]


def codes(msgs: list[Any]) -> list[str]:
    return [x.code for x in msgs if isinstance(x, (m.RequestRejected, m.ActionRejected))]


# -- the pure pieces -----------------------------------------------------------------------------


def test_a_token_bucket_refuses_beyond_its_burst_and_refills_with_time() -> None:
    b = TokenBucket(rate=10, burst=5, now_ns=0)
    assert [b.take(0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert b.first_refusal() and not b.first_refusal()  # one answer per burst
    assert b.take(100 * MS) and not b.take(100 * MS)  # one token back after 1/rate s
    assert not b.first_refusal()  # a trickle through is not the end of the burst
    assert b.take(10 * S)  # full again: the burst is over
    assert [b.take(10 * S) for _ in range(5)] == [True] * 4 + [False]
    assert b.first_refusal()
    assert not b.take(5 * S)  # time going backwards refills nothing
    copy = pickle.loads(pickle.dumps(b))
    assert (copy.tokens, copy.refusing, copy.dropped) == (b.tokens, b.refusing, b.dropped)


def test_idle_clients_come_out_oldest_first_and_only_once() -> None:
    c = Clients(idle_ns=10)
    for i, name in enumerate("abcd"):
        c.touch(name, i)
    c.touch("a", 5)  # heard from again: no longer the oldest
    assert c.idle(13) == ["b", "c"]  # b (1), c (2) are idle; d (3) is not, so the walk stops there
    assert c.idle(13) == []
    assert c.idle(100, limit=1) == ["d"] and c.idle(100) == ["a"] and len(c) == 0


def test_quiet_logs_once_per_burst_and_counts_the_rest() -> None:
    q = Quiet(quiet_ns=S)
    assert q.log("x", "too_large", 0) == 0
    assert [q.log("x", "too_large", t * MS) for t in (1, 2, 3)] == [None, None, None]
    assert q.log("y", "too_large", 3 * MS) == 0  # another sender has its own bursts
    assert q.log("x", "too_large", 3 * S) == 3  # a new burst: reports how many were silenced
    q.forget("x")
    assert q.log("x", "too_large", 3 * S + 1) == 0


def test_deadlines_come_due_in_time_order() -> None:
    d = DeadlineHeap()
    for at, code in ((30, "C"), (10, "A"), (20, "B")):
        d.add(at, code, "waiting")
    assert d.next() == 10
    assert [c for _, c, _ in d.due(25)] == ["A", "B"] and d.next() == 30


# -- floods ----------------------------------------------------------------------------------------


def test_a_create_flood_stops_at_the_per_client_cap_answered_every_time_logged_once() -> None:
    r = Relay(max_open_per_client=3)
    made = [r.create("f") for _ in range(3)]
    assert len(set(made)) == 3
    out: list[Any] = []
    for _ in range(40):  # within the request rate: each is answered
        r.now += 100 * MS
        out += r.send(T.req("f"), m.CreateMatch(name="f"))
    assert codes(r.to("f", out)) == ["too_many_matches"] * 40
    assert len(r.core.matches) == 3
    assert len(bad(out, "too_many_matches")) == 1  # once per burst, not 40 times
    # Someone else is not affected; and when one of f's matches is over, f may create again.
    other = r.create("g")
    r.send(T.req("h"), m.JoinMatch(name="h", match=made[0]))
    r.tick(3.01)
    r.send(T.req("h"), m.Leave(match=made[0]))  # forfeit: the match is over
    assert r.core.matches[made[0]].status == "over"
    assert r.create("f") not in made + [other]


def test_waiting_matches_are_capped_relay_wide() -> None:
    r = Relay(max_waiting=5)
    for i in range(5):
        r.create(f"c{i}")
    out = r.send(T.req("late"), m.CreateMatch(name="late"))
    assert codes(r.to("late", out)) == ["relay_full"]
    out = r.send(T.req("late"), m.QuickMatch(name="late", settings={"hand_size": 4}))
    assert codes(r.to("late", out)) == ["relay_full"]
    assert len(r.core.matches) == 5


def test_a_request_flood_gets_one_rate_limited_answer_then_silence_and_a_count() -> None:
    r = Relay(req_rate=20, req_burst=60)
    out: list[Any] = []
    for i in range(1_000):  # all at the same instant: a machine, not a person
        out += r.send(T.req("f"), m.Ping(t0=i))
    pongs = [x for x in r.to("f", out) if isinstance(x, m.Pong)]
    assert len(pongs) == 60
    assert codes(r.to("f", out)) == ["rate_limited"]
    assert len(bad(out, "rate_limited")) == 1
    assert r.core.stats["limited"] == {"dropped": 940, "bursts": 1}
    # A steady flood afterwards gets its trickle through but no second answer.
    out = []
    for i in range(2_000):
        r.now += 1 * MS
        out += r.send(T.req("f"), m.Ping(t0=i))
    assert codes(r.to("f", out)) == []
    assert 30 <= len([x for x in r.to("f", out) if isinstance(x, m.Pong)]) <= 41  # 20 a second for 2 s
    # Quiet long enough to fill the bucket: the burst is over, a person's pace is answered again.
    r.now += 10 * S
    out = r.send(T.req("f"), m.Ping(t0=1))
    assert [type(x) for x in r.to("f", out)] == [m.Pong]


def test_an_action_flood_gets_one_rate_limited_then_silence_and_changes_nothing_for_the_other() -> None:
    r = Relay(act_rate=100, act_burst=200)
    code = r.start("a", "b")
    out: list[Any] = []
    for i in range(1, 5_001):  # a 5,000-action flood at one instant (of a card no deck has: rejected)
        out += r.act("a", code, i, card=NO_CARD)
    answers = r.to("a", out)
    assert len(answers) == 201  # the burst judged, then one rate_limited
    limited = [x for x in answers if isinstance(x, m.ActionRejected) and x.code == "rate_limited"]
    assert len(limited) == 1 and limited[0].id == 201 and limited[0].match == code
    assert len(bad(out, "rate_limited")) == 1
    assert r.core.stats["limited"]["dropped"] == 4_800
    seq = r.core.matches[code].seq
    # b plays at a person's pace meanwhile and is judged as ever.
    hand = [c for c in r.core.matches[code].state.hands[1] if c is not None]
    top = r.core.matches[code].state.top(0)
    out = r.send(T.act(code, "b"), m.Act(id=1, seq=seq, action=blink.action_to_wire(blink.PlayCard(str(hand[0]), 0))))
    verdict = [x for x in r.to("b", out) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
    assert len(verdict) == 1
    expected = "accepted" if blink.cards_match(hand[0], top) else "rejected"
    assert (isinstance(verdict[0], m.ActionAccepted)) == (expected == "accepted")
    # A dropped action was never applied nor remembered: sent again after the flood, it is judged.
    r.now += 10 * S
    again = r.to("a", r.act("a", code, 4_000, card=NO_CARD))
    assert codes(again) and codes(again) != ["rate_limited"]


def test_a_payload_over_the_cap_is_refused_undecoded(monkeypatch: pytest.MonkeyPatch) -> None:
    r = Relay(max_payload=1024)
    code = r.start("a", "b")
    before = (r.core.matches[code].seq, r.core.matches[code].state)
    from protocol import messages
    from relay.judge import lobby, referee

    real_decode = referee.decode

    def guarded(data: bytes) -> Any:
        assert len(data) <= 1024, "an oversized payload was decoded"
        return real_decode(data)

    for part in (messages, lobby, referee):  # every part that decodes a payload (the gate through m.act_id)
        monkeypatch.setattr(part, "decode", guarded)
    big_act = encode(m.Act(id=9, seq=1, action={"t": "PlayCard", "v": 1, "card": "x" * 2000, "pile": 0}))
    out: list[Any] = []
    for _ in range(5):
        out += r.send(T.act(code, "a"), big_act)
        out += r.send(T.req("a"), encode(m.CreateMatch(name="y" * 2000)))
    answers = r.to("a", out)
    assert codes(answers) == ["too_large"] * 10
    assert all(x.id == -1 for x in answers if isinstance(x, m.ActionRejected))
    assert len(bad(out, "too_large")) == 1  # one burst
    assert (r.core.matches[code].seq, r.core.matches[code].state) == before
    assert len(r.core.matches) == 1


# -- settings bounded before any work --------------------------------------------------------------


def test_a_huge_deck_create_is_refused_without_the_deck_ever_being_built(monkeypatch: pytest.MonkeyPatch) -> None:
    real_cards = blink.Deck.cards
    built: list[int] = []

    def guarded(self: blink.Deck) -> Any:
        size = len(self.colours) * len(self.shapes) * len(self.counts)
        assert size <= blink.MAX_DECK_CARDS, f"a deck of {size} cards was built"
        built.append(size)
        return real_cards(self)

    monkeypatch.setattr(blink.Deck, "cards", guarded)
    r = Relay()
    words = ["".join(chr(97 + (i // 26 ** k) % 26) for k in range(3)) for i in range(120)]
    huge = {"colours": words, "shapes": words, "counts": list(range(1, 99))}  # 1.4 million cards, ~1.5 KB
    payload = encode(m.CreateMatch(name="x", settings={"deck": huge}))
    assert len(payload) < 8 * 1024
    for msg in (payload, encode(m.QuickMatch(name="x", settings={"deck": huge}))):
        out = r.send(T.req("x"), msg)
        assert codes(r.to("x", out)) == ["bad_settings"]
    assert "at most" in r.to("x", out)[0].detail
    assert not r.core.matches and not built
    # Lists too long on their own are refused before they are even converted.
    for deck in ({"colours": ["a"] * 5000, "shapes": ["s"], "counts": [1]},
                 {"colours": "abcdefgh" * 100, "shapes": ["s"], "counts": [1]}):
        with pytest.raises(ValueError):
            blink.Deck.from_wire(deck)
    # A big but allowed deck still works.
    ok = {"colours": ["red", "blue", "green", "gold"], "shapes": ["star", "moon", "sun", "ring"], "counts": [1, 2, 3, 4, 5]}
    code = r.create("y", settings={"deck": ok})
    r.send(T.req("z"), m.JoinMatch(name="z", match=code))  # it starts: now the deck is built
    assert built and max(built) == 80


@pytest.mark.parametrize("game,settings,seats", [
    ("takeaway", {"layout": "custom", "cells": [[q, r] for q in range(-30, 30) for r in range(-15, 15)]}, 2),
    ("takeaway", {"size": 10**9, "layout": "random"}, 2),
    ("ryo", {"tile_pool": [0] + [999] * 20, "max_face": 20, "budget": 0}, 8),
    ("ryo", {"rolls_per_round": 10**15}, 2),
    ("sequence", {"board": [[2] * 12] * 13}, 2),
    ("sequence", {"max_turns": 2**62}, 2),
    ("blink", {"hand_size": 10**12}, 2),
    ("blink", {"best_of": 10**12 + 1}, 2),
    ("blink", {"unknown": [1] * 1000}, 2),
    ("blink", {"order": "x" * 1000}, 2),
])
def test_hostile_settings_of_every_game_are_refused_plainly(game: str, settings: dict[str, Any], seats: int) -> None:
    r = Relay()
    out = r.send(T.req("x"), m.CreateMatch(name="x", game=game, settings=settings, seats=seats))
    rejected = [x for x in r.to("x", out) if isinstance(x, m.RequestRejected)]
    assert [x.code for x in rejected] == ["bad_settings"]
    assert len(rejected[0].detail) <= DETAIL_CHARS
    assert not r.core.matches


def test_a_big_tile_pool_that_is_allowed_is_checked_without_spelling_it_out() -> None:
    r = Relay()
    code = r.create("x", game="ryo", settings={"tile_pool": [999] * 21, "max_face": 20}, seats=8)
    assert r.core.matches[code].settings["tile_pool"] == [999] * 21


# -- what leaves memory ----------------------------------------------------------------------------


def _finish_one(r: Relay, i: int) -> str:
    """A BLINK match: created, joined, an action judged, then a forfeit ends it."""
    a, b = f"a{i}", f"b{i}"
    code = r.create(a)
    r.send(T.req(b), m.JoinMatch(name=b, match=code))
    r.send(T.act(code, a), m.Act(id=1, seq=0, action=blink.action_to_wire(blink.PlayCard("1-red-star", 0))))
    r.send(T.req(a), m.Leave(match=code))  # a forfeit: the match is over
    assert r.core.matches[code].status == "over"
    return code


def _play_one(r: Relay, i: int) -> str:
    """A toy match (cheap to play, so ten thousand fit in a test): played to its end."""
    a, b = f"a{i}", f"b{i}"
    code = r.create(a, game="toy", settings={"pile": 1})
    r.send(T.req(b), m.JoinMatch(name=b, match=code))
    r.send(T.act(code, a), m.Act(id=1, seq=r.core.matches[code].seq, action=to_dict(Take(1))))
    assert r.core.matches[code].status == "over" and r.core.matches[code].winner == 0
    return code


def _drain(r: Relay) -> None:
    for _ in range(200):
        r.tick(1.0)
        if not r.core.matches and not len(r.core.gate.clients):
            return
    raise AssertionError("housekeeping never finished")


def _sizes(core: RelayCore) -> dict[str, int]:
    return {"matches": len(core.matches), "waiting": len(core.tables.waiting), "live": len(core.tables.live),
            "owned": len(core.gate.owned), "client_match": len(core.client_match), "answers": len(core.answers.book),
            "act_buckets": len(core.gate.act_buckets), "req_buckets": len(core.gate.req_buckets),
            "clients": len(core.gate.clients), "quiet": len(core.gate.quiet.last), "rtt": len(core.fair.rtt),
            "published": len(core.fair.published), "held": len(core.fair.held), "coins": len(core.fair.coins),
            "housekeeping": len(core.deadlines.housekeeping)}


def _finish_many(r: Relay, first: int, n: int) -> None:
    for i in range(first, first + n):
        # Mostly toy matches (cheap); every 50th a BLINK match (a real game's state and views).
        if i % 50:
            _play_one(r, i)
        else:
            _finish_one(r, i)
        r.out.clear()
        r.now += 1 * MS
        if i % 500 == 0:
            r.tick()
            r.out.clear()


def test_ten_thousand_finished_matches_leave_the_relays_memory_where_it_was() -> None:
    r = Relay(linger_s=60, client_idle_s=120, games={"blink": blink.GAME, "toy": TOY})
    _finish_many(r, -100, 100)  # warm up: caches, interned strings
    _drain(r)
    r.out.clear()
    gc.collect()
    baseline = _sizes(r.core)
    # Moot housekeeping deadlines (of matches that started) are dropped once they are the majority.
    assert baseline.pop("housekeeping") <= 64
    assert set(baseline.values()) == {0}
    objects = len(gc.get_objects())

    _finish_many(r, 0, 10_000)
    assert len(r.core.matches) == 10_000  # all still lingering (for a rematch, a resync)
    _drain(r)
    r.out.clear()
    gc.collect()
    sizes = _sizes(r.core)
    assert sizes.pop("housekeeping") <= 64
    assert sizes == baseline
    assert len(gc.get_objects()) - objects < 500  # a finished BLINK match was ~1,000 objects of its own

    # The bytes, traced over two more rounds: nothing is kept per match, and the tables the core's
    # dicts grew to for 10,000 are given back once they are empty. (Traced allocation is ~10x
    # slower, hence the shorter rounds.)
    tracemalloc.start()
    try:
        held = []
        for k in range(2):
            _finish_many(r, 10_000 + 500 * k, 500)
            _drain(r)
            r.out.clear()
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # A finished BLINK match held ~100 kB before (500 of them: ~50 MB). Generous bounds (~2 kB seen).
    assert held[0] < 100_000, f"{held[0]} bytes held after 500 more matches"
    assert held[1] - held[0] < 20_000, f"{held[1] - held[0]} bytes more held after another 500 matches"


def test_a_finished_match_lingers_for_a_rematch_then_is_gone_its_snapshot_cleared() -> None:
    r = Relay(linger_s=60)
    code = r.start("a", "b")
    r.send(T.req("b"), m.Leave(match=code))
    assert r.core.matches[code].status == "over"
    r.tick(30)
    out = r.send(T.req("a"), m.Resync(match=code))
    assert any(isinstance(x, m.ViewUpdated) for x in r.to("a", out))
    out = r.tick(31)
    assert code not in r.core.matches
    assert any(isinstance(o, Publish) and o.topic == T.snap(code) and o.msg == b"" and o.retain for o in out)
    assert any(isinstance(o, LogRecord) and o.record.get("kind") == "match_forgotten" for o in out)
    for msg in (m.Resync(match=code), m.JoinMatch(name="late", match=code), m.Rematch(match=code)):
        assert codes(r.to("a", r.send(T.req("a"), msg))) == ["no_such_match"]
    assert codes(r.to("a", r.act("a", code, 99))) == ["no_such_match"]


def test_a_rematch_within_the_linger_keeps_the_match() -> None:
    r = Relay(linger_s=60)
    code = r.start("a", "b")
    r.send(T.req("b"), m.Leave(match=code))
    r.tick(50)
    r.send(T.req("a"), m.Rematch(match=code))
    r.send(T.req("b"), m.Rematch(match=code))
    assert r.core.matches[code].status == "playing"
    r.tick(20)  # past the first linger: the match is being played again, it stays
    assert code in r.core.matches and r.core.matches[code].status == "playing"


def test_idle_clients_state_is_dropped_but_a_seated_players_is_kept() -> None:
    r = Relay(client_idle_s=60)
    code = r.start("a", "b")
    r.act("a", code, 1)
    for i in range(100):
        r.send(T.req(f"p{i}"), m.Ping(t0=i))
        r.send(T.req(f"p{i}"), m.ProbeReply(sent_ns=r.now))
    assert len(r.core.gate.req_buckets) >= 102 and "a" in r.core.answers.book
    r.tick(61)
    sizes = _sizes(r.core)
    assert sizes["req_buckets"] == 2 and sizes["clients"] == 2 and sizes["rtt"] == 0  # a and b only
    assert "a" in r.core.answers.book and r.core.client_match == {"a": code, "b": code}
    r.send(T.req("b"), m.Leave(match=code))
    r.tick(61)
    r.tick(61)
    assert _sizes(r.core)["clients"] == 0 and not r.core.answers.book and not r.core.client_match


def test_the_number_of_clients_remembered_is_capped_least_recent_first() -> None:
    r = Relay(max_clients=100)
    for i in range(300):
        r.now += 1
        r.send(T.req(f"p{i}"), m.Ping(t0=i))
    r.tick()
    assert len(r.core.gate.clients) == 100 and len(r.core.gate.req_buckets) == 100
    assert "p299" in r.core.gate.req_buckets and "p0" not in r.core.gate.req_buckets


def test_waiting_matches_expire_with_an_event_and_free_their_creator() -> None:
    r = Relay(waiting_ttl_s=600, max_open_per_client=1)
    code = r.create("a")
    assert codes(r.to("a", r.send(T.req("a"), m.CreateMatch(name="a")))) == ["too_many_matches"]
    r.tick(599)
    assert code in r.core.matches
    out = r.tick(2)
    assert code not in r.core.matches
    expired = [o.msg for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Event)]
    assert [e.type for e in expired] == ["match_expired"] and expired[0].match == code
    assert any(isinstance(o, LogRecord) and o.record.get("type") == "match_expired" for o in out)
    assert any(isinstance(o, Publish) and o.topic == T.snap(code) and o.msg == b"" for o in out)
    lists = [o.msg for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchList)]
    assert lists and lists[-1].matches == ()
    assert codes(r.to("b", r.send(T.req("b"), m.JoinMatch(name="b", match=code)))) == ["no_such_match"]
    assert r.create("a") != code


def test_a_match_that_starts_does_not_expire() -> None:
    r = Relay(waiting_ttl_s=10)
    code = r.start("a", "b")
    r.tick(20)
    assert code in r.core.matches and r.core.matches[code].status == "playing"


def test_the_match_list_stays_capped_and_correct() -> None:
    r = Relay(max_listed=5)

    def listed() -> list[str]:
        lists = [o.msg for o in r.out if isinstance(o, Publish) and isinstance(o.msg, m.MatchList)]
        return [x["code"] for x in lists[-1].matches]

    def truth() -> list[str]:
        return [c for c, x in r.core.matches.items() if x.status == "waiting"][:5]

    made = [r.create(f"c{i}") for i in range(12)]
    assert listed() == truth() == made[:5]
    r.send(T.req("j"), m.JoinMatch(name="j", match=made[1]))  # it starts: off the list
    assert listed() == truth() == made[:1] + made[2:6]
    r.send(T.req("c3"), m.Leave(match=made[3]))  # its only player leaves: it closes
    assert listed() == truth() == [made[0], made[2], made[4], made[5], made[6]]
    r.send(T.req("q"), m.QuickMatch(name="q"))  # a quick match: joins no custom match, makes its own
    assert listed() == truth()
    entry = [o.msg for o in r.out if isinstance(o, Publish) and isinstance(o.msg, m.MatchList)][-1].matches[0]
    assert entry == {"code": made[0], "game": "blink", "seats": 2, "players": ["c0"], "quick": False}


def test_quick_match_still_pairs_among_many_waiting_matches() -> None:
    r = Relay()
    for i in range(50):
        r.create(f"c{i}")
    out = r.send(T.req("q1"), m.QuickMatch(name="q1"))
    code = [x for x in r.to("q1", out) if isinstance(x, m.MatchJoined)][0].match
    out = r.send(T.req("q2"), m.QuickMatch(name="q2"))
    assert [x for x in r.to("q2", out) if isinstance(x, m.MatchJoined)][0].match == code
    assert r.core.matches[code].status == "playing"


def test_a_core_with_limits_in_force_pickles_and_carries_on_identically() -> None:
    r = Relay()
    code = r.start("a", "b")
    for i in range(300):
        r.act("a", code, i + 1)
    copy = pickle.loads(pickle.dumps(r.core))
    payload = encode(m.Ping(t0=1))
    assert copy.handle(T.req("a"), payload, r.now) == r.core.handle(T.req("a"), payload, r.now)
    assert copy.tick(r.now + 700 * S) == r.core.tick(r.now + 700 * S)


def test_garbage_from_many_bad_topics_is_logged_once_per_burst() -> None:
    r = Relay()
    out: list[Any] = []
    for i in range(100):
        out += r.send(f"blink/v1/m/0/{'x' * 70}/act/y{i}", b"\x00")
        out += r.send(T.req("bad/" + str(i)), msgpack.packb({"t": "Ping"}))
    assert len(bad(out, "bad_topic")) == 1
    assert len([o for o in out if isinstance(o, LogRecord)]) <= 3


def test_a_snapshot_keeps_the_limits_state_and_carries_on() -> None:
    r = Relay()
    playing = r.start("a", "b")
    waiting = r.create("c")
    r.send(T.req("b"), m.Leave(match=playing))  # over
    from relay.storage import snapshot

    core = snapshot.load(snapshot.dump(r.core))
    assert list(core.tables.waiting) == [waiting] and not core.tables.live and core.gate.owned == {"c": {waiting}}
    out = core.handle(T.req("d"), encode(m.JoinMatch(name="d", match=waiting)), r.now)
    assert any(isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined) for o in out)
    assert waiting in core.tables.live
    core.tick(r.now + 60 * S)
    assert playing in core.matches  # its linger counts from the snapshot's time, not from zero
    for _ in range(5):
        core.tick(r.now + 10_000 * S)
    assert playing not in core.matches  # then the finished one leaves memory
