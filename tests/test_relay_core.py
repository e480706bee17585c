"""The relay's judging core, driven without a broker or a clock."""

from __future__ import annotations

import dataclasses

from typing import Any

import msgpack
import pytest

from protocol import messages as m
from protocol.codec import encode
from protocol.rules import blink
from protocol.topics import Topics
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from tests.decks import fixed_deck_games

T = Topics()
S = 1_000_000_000

# A deck order that sets up a known race: player 0's pile is deck[:30], player 1's deck[30:].
# Centre: 3-green-moon (pile 0) and 1-blue-triangle (pile 1).
# Hands: p0 = 3-red-star, 1-red-moon, 2-red-moon ; p1 = 5-green-triangle, 3-green-triangle, 2-blue-moon.
# 3-red-star and 5-green-triangle both match pile 0's 3-green-moon, but not each other.
HEAD0 = ["3-green-moon", "3-red-star", "1-red-moon", "2-red-moon"]
HEAD1 = ["1-blue-triangle", "5-green-triangle", "3-green-triangle", "2-blue-moon"]


def race_deck() -> tuple[str, ...]:
    rest = [str(c) for c in blink.standard_deck() if str(c) not in HEAD0 + HEAD1]
    return tuple(HEAD0 + rest[:26] + HEAD1 + rest[26:])


class Harness:
    def __init__(self, fixed_decks: tuple[tuple[str, ...], ...] | None = None, **config: Any) -> None:
        if fixed_decks:
            config["games"] = fixed_deck_games(fixed_decks)
        self.core = RelayCore(T, RelayConfig(**config), seed=42)
        self.now = 0
        self.out: list[Any] = []

    def send(self, topic: str, msg: Any) -> list[Any]:
        payload = msg if isinstance(msg, bytes) else encode(msg)
        out = self.core.handle(topic, payload, self.now)
        self.out.extend(out)
        return out

    def tick(self, dt_s: float) -> list[Any]:
        self.now += int(dt_s * S)
        out = self.core.tick(self.now)
        self.out.extend(out)
        return out

    def to(self, client: str, out: list[Any] | None = None) -> list[Any]:
        return [o.msg for o in (self.out if out is None else out)
                if isinstance(o, Publish) and o.topic == T.client(client)]

    def events(self, out: list[Any] | None = None) -> list[m.Event]:
        return [o.msg for o in (self.out if out is None else out) if isinstance(o, Publish) and isinstance(o.msg, m.Event)]

    def start_match(self, settings: dict[str, Any] | None = None) -> str:
        out = self.send(T.req("a"), m.CreateMatch(name="ann", settings=settings or {}))
        code = next(x for x in self.to("a", out) if isinstance(x, m.MatchJoined)).match
        self.send(T.req("b"), m.JoinMatch(name="bob", match=code))
        self.tick(3.01)  # the countdown
        return code

    def play(self, client: str, code: str, card: str, pile: int, action_id: int, seq: int | None = None) -> Any:
        match = self.core.matches[code]
        out = self.send(T.act(code, client), m.Act(id=action_id, seq=match.seq if seq is None else seq,
                                                   action=blink.action_to_wire(blink.PlayCard(card, pile))))
        answers = [x for x in self.to(client, out) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
        assert len(answers) == 1
        return answers[0]


def test_create_join_start_countdown_and_reveal() -> None:
    h = Harness()
    out = h.send(T.req("a"), m.CreateMatch(name="ann"))
    joined = next(x for x in h.to("a", out) if isinstance(x, m.MatchJoined))
    assert joined.seat == 0 and len(joined.match) == 5
    lobby = [o for o in out if isinstance(o, Publish) and o.topic == T.match_list]
    assert lobby and lobby[-1].retain and lobby[-1].msg.matches[0]["code"] == joined.match
    out = h.send(T.req("b"), m.JoinMatch(name="bob", match=joined.match.lower()))
    assert next(x for x in h.to("b", out) if isinstance(x, m.MatchJoined)).seat == 1
    assert h.core.matches[joined.match].state.phase == "countdown"
    # a play during the countdown is rejected as not_running
    hand = h.core.matches[joined.match].state.hands[0]
    ans = h.play("a", joined.match, str(hand[0]), 0, 1)
    assert isinstance(ans, m.ActionRejected) and ans.code == "not_running"
    h.tick(1.0)
    assert h.core.matches[joined.match].state.phase == "countdown"
    out = h.tick(2.1)
    assert [e.type for e in h.events(out)] == ["card_revealed", "card_revealed", "race_started"]


def test_a_race_is_judged_against_states_of_the_last_seconds_only() -> None:
    # The relay keeps past states to tell a lost race from a mistake, but only the recent ones
    # (HISTORY_NS): a play against a state seen long ago is judged against the pile as it is.
    from relay.model import HISTORY_MIN, HISTORY_NS

    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    match = h.core.matches[code]
    seen = match.seq
    assert isinstance(h.play("a", code, "3-red-star", 0, 1, seq=seen), m.ActionAccepted)
    h.now += HISTORY_NS + S  # long after: the state bob saw is forgotten once newer ones come
    for i in range(HISTORY_MIN + 1):
        match.seq += 1
        match.remember(h.now)
    assert match.state_at(seen) is None and len(match.history) == HISTORY_MIN + 1
    late = h.play("b", code, "5-green-triangle", 0, 1, seq=seen)
    assert isinstance(late, m.ActionRejected) and late.code == "no_match"


def test_seq_is_gap_free_and_every_event_is_stamped() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    h.play("a", code, "3-red-star", 0, 1)
    h.play("b", code, "2-blue-moon", 1, 1)
    evs = h.events()
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert all(e.match == code for e in evs)
    assert [e.ts for e in evs] == sorted(e.ts for e in evs) and evs[-1].ts == h.now  # stamped with relay time


def test_forced_race_for_one_pile_first_lands_second_is_pile_changed() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    seen = h.core.matches[code].seq  # both players saw the same pile top
    first = h.play("a", code, "3-red-star", 0, 1, seq=seen)
    second = h.play("b", code, "5-green-triangle", 0, 1, seq=seen)
    assert isinstance(first, m.ActionAccepted)
    assert isinstance(second, m.ActionRejected) and second.code == "pile_changed"
    state = h.core.matches[code].state
    assert state.top(0) == blink.Card.parse("3-red-star")
    assert blink.Card.parse("5-green-triangle") in state.hands[1]  # the card stays in its owner's hand
    # the same play made against the *new* top is a plain mistake, not a lost race
    again = h.play("b", code, "5-green-triangle", 0, 2)
    assert isinstance(again, m.ActionRejected) and again.code == "no_match"


def test_second_play_that_still_matches_lands() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    seen = h.core.matches[code].seq
    assert isinstance(h.play("a", code, "3-red-star", 0, 1, seq=seen), m.ActionAccepted)
    # 3-green-triangle matches 3-red-star by count: it lands on top
    assert isinstance(h.play("b", code, "3-green-triangle", 0, 1, seq=seen), m.ActionAccepted)
    assert str(h.core.matches[code].state.top(0)) == "3-green-triangle"


def test_duplicate_action_id_is_answered_again_never_applied_twice() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    first = h.play("a", code, "3-red-star", 0, 7)
    seq_after = h.core.matches[code].seq
    again = h.play("a", code, "3-red-star", 0, 7)
    # (the repeat does not say when the play first arrived: that is the first answer's)
    assert again == dataclasses.replace(first, recv_ns=0) and h.core.matches[code].seq == seq_after


@pytest.mark.parametrize("restored", [False, True])
def test_remembered_answers_come_back_equal_and_only_a_client_s_last_ones(restored: bool) -> None:
    # The core keeps an acceptance packed in an int and the book in a plain dict (memory): a
    # duplicate still gets the very answer, a fair-order hold included, and the oldest answer
    # beyond REMEMBERED_ANSWERS is forgotten first. ``restored``: a core read back from its
    # snapshot answers alike.
    from relay.core import REMEMBERED_ANSWERS

    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    first = h.play("a", code, "3-red-star", 0, 7)
    assert isinstance(first, m.ActionAccepted)
    held = m.ActionAccepted(code, 8, first.seq, 123_456_789)
    h.core.referee.answer("a", code, 8, held, h.now, [], log=False, client_ok=True)
    if restored:
        from relay.storage import snapshot

        h.core = snapshot.load(snapshot.dump(h.core), games=h.core.games)
    assert h.play("a", code, "3-red-star", 0, 8) == held
    # (a repeat does not say when the play first arrived: that is the first answer's, for its time in parts)
    assert first.recv_ns and h.play("a", code, "3-red-star", 0, 7) == dataclasses.replace(first, recv_ns=0)
    for i in range(REMEMBERED_ANSWERS - 1):  # 7 and 8 are the oldest of 513: 7 goes
        h.now += S
        assert isinstance(h.play("a", code, "3-red-star", 0, 100 + i), m.ActionRejected)
    assert h.play("a", code, "3-red-star", 0, 8) == held
    again = h.play("a", code, "3-red-star", 0, 7)  # judged afresh: the card is on the pile now
    assert isinstance(again, m.ActionRejected) and again.id == 7
    assert len(h.core.answers.book["a"]) == REMEMBERED_ANSWERS and (code, 8) not in h.core.answers.book["a"]


# On an action topic every undecodable payload is answered ``malformed`` (the action's id is
# unknown); the detail says what was wrong, e.g. the unknown type.
@pytest.mark.parametrize("payload,detail", [
    (b"\xc1\xc1", "not msgpack"),
    (msgpack.packb({"t": "Act", "v": 1, "id": "x", "seq": 0, "action": {}}), "Act.id: expected an integer"),
    (msgpack.packb({"t": "Nope", "v": 1}), "unknown message type 'Nope'"),
    (encode(m.Ping(t0=1)), "expected Act, got Ping"),  # a ping is not an action
])
def test_bad_bytes_on_an_action_topic_get_a_rejection_and_change_nothing(payload: bytes, detail: str) -> None:
    h = Harness(fixed_decks=(race_deck(),))
    match = h.start_match()
    before = (h.core.matches[match].state, h.core.matches[match].seq)
    out = h.send(T.act(match, "a"), payload)
    (ans,) = [x for x in h.to("a", out) if isinstance(x, m.ActionRejected)]
    assert ans.code == "malformed" and detail in ans.detail and ans.id == -1
    bad = [o.record for o in out if isinstance(o, LogRecord) and o.record["kind"] == "bad_input"]
    assert [(r["code"], r["client"], r["detail"]) for r in bad] == [("malformed", "a", ans.detail)]
    assert (h.core.matches[match].state, h.core.matches[match].seq) == before


@pytest.mark.parametrize("action,code", [
    ({"t": "PlayCard", "v": 1, "card": "9-red-star", "pile": 0}, "malformed"),
    ({"t": "PlayCard", "v": 1, "card": 4, "pile": 0}, "malformed"),
    ({"t": "Rocket", "v": 1}, "malformed"),
    ({"t": "StartRace", "v": 1}, "malformed"),  # system actions are not for players
    ({"t": "PlayCard", "v": 1, "card": "1-red-moon", "pile": 5}, "bad_pile"),
    ({"t": "PlayCard", "v": 1, "card": "5-green-triangle", "pile": 0}, "not_in_hand"),
    ({"t": "PlayCard", "v": 1, "card": "2-red-moon", "pile": 1}, "no_match"),
])
def test_bad_actions_are_rejected_with_a_reason(action: dict, code: str) -> None:
    h = Harness(fixed_decks=(race_deck(),))
    match = h.start_match()
    before = h.core.matches[match].state
    out = h.send(T.act(match, "a"), m.Act(id=1, seq=h.core.matches[match].seq, action=action))
    (ans,) = [x for x in h.to("a", out) if isinstance(x, m.ActionRejected)]
    assert ans.code == code
    assert h.core.matches[match].state is before


def test_unknown_match_and_stranger() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    match = h.start_match()
    act = m.Act(id=1, seq=0, action={"t": "PlayCard", "v": 1, "card": "3-red-star", "pile": 0})
    out = h.send(T.act("ZZZZZ", "a"), act)
    assert [x.code for x in h.to("a", out) if isinstance(x, m.ActionRejected)] == ["no_such_match"]
    out = h.send(T.act(match, "mallory"), act)
    assert [x.code for x in h.to("mallory", out) if isinstance(x, m.ActionRejected)] == ["not_a_player"]
    out = h.send(T.req("c"), m.JoinMatch(name="cy", match=match))
    assert [x.code for x in h.to("c", out) if isinstance(x, m.RequestRejected)] == ["match_full"]
    out = h.send(T.req("c"), m.JoinMatch(name="cy", match="NOPE1"))
    assert [x.code for x in h.to("c", out) if isinstance(x, m.RequestRejected)] == ["no_such_match"]
    out = h.send(T.req("c"), m.CreateMatch(name="cy", game="chess"))
    assert [x.code for x in h.to("c", out) if isinstance(x, m.RequestRejected)] == ["bad_settings"]
    out = h.send(T.req("c"), m.CreateMatch(name="cy", settings={"best_of": 2}))
    assert [x.code for x in h.to("c", out) if isinstance(x, m.RequestRejected)] == ["bad_settings"]


def test_bad_seq_claims_are_rejected() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    match = h.start_match()
    ans = h.play("a", match, "3-red-star", 0, 1, seq=h.core.matches[match].seq + 100)
    assert isinstance(ans, m.ActionRejected) and ans.code == "bad_seq"


def test_quick_match_pairs_whoever_is_waiting() -> None:
    h = Harness()
    out = h.send(T.req("a"), m.QuickMatch(name="ann"))
    code_a = next(x for x in h.to("a", out) if isinstance(x, m.MatchJoined)).match
    out = h.send(T.req("b"), m.QuickMatch(name="bob"))
    code_b = next(x for x in h.to("b", out) if isinstance(x, m.MatchJoined)).match
    assert code_a == code_b and h.core.matches[code_a].status == "playing"
    out = h.send(T.req("c"), m.QuickMatch(name="cy"))
    assert next(x for x in h.to("c", out) if isinstance(x, m.MatchJoined)).match != code_a


def test_pings_are_answered_with_relay_time() -> None:
    h = Harness()
    h.now = 555
    out = h.send(T.req("a"), m.Ping(t0=7))
    assert h.to("a", out) == [m.Pong(t0=7, t1=555, t2=555)]


def test_no_hidden_card_ever_reaches_a_topic_another_player_can_read() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    h.play("a", code, "3-red-star", 0, 1)
    h.play("b", code, "2-blue-moon", 1, 1)
    state = h.core.matches[code].state
    secret_of = {"a": {str(c) for c in state.hands[0]}, "b": {str(c) for c in state.hands[1]}}
    draws = {str(c) for d in state.draw for c in d}
    for o in h.out:
        if not isinstance(o, Publish) or isinstance(o.msg, bytes):
            continue
        text = repr(encode(o.msg))
        if o.topic == T.client("a"):
            hidden = secret_of["b"] | draws
        elif o.topic == T.client("b"):
            hidden = secret_of["a"] | draws
        else:  # ev, snap, lobby: public
            hidden = secret_of["a"] | secret_of["b"] | draws
        # cards played earlier are public; only the cards still hidden now are checked
        leaked = {c for c in hidden if c.encode() in encode(o.msg)}
        assert not leaked, (o.topic, leaked, text[:200])


def test_a_whole_match_through_the_core_with_timers() -> None:
    """Greedy players and the relay's timers finish a best-of-three; winners really ran out of cards."""
    h = Harness()
    h.send(T.req("a"), m.CreateMatch(name="ann"))
    code = next(iter(h.core.matches))
    h.send(T.req("b"), m.JoinMatch(name="bob", match=code))
    match = h.core.matches[code]
    ids = {"a": 0, "b": 0}
    for _ in range(20_000):
        if match.status == "over":
            break
        h.tick(0.05)
        if match.status != "playing":
            continue
        for seat, client in enumerate(("a", "b")):
            acts = blink.legal_actions(match.state, seat)
            if acts:
                ids[client] += 1
                h.send(T.act(code, client), m.Act(id=ids[client], seq=match.seq, action=blink.action_to_wire(acts[0])))
    assert match.status == "over"
    results = [e for e in h.events() if e.type == "game_over"]
    assert len(results) >= 2
    assert match.winner is not None and match.wins[match.winner] == 2
    over = [e for e in h.events() if e.type == "match_over"][0]
    assert over.data["winner"] == ("ann", "bob")[match.winner]


def test_leaving_a_running_match_forfeits_it() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    out = h.send(T.req("b"), m.Leave(match=code))
    over = [e for e in h.events(out) if e.type == "match_over"]
    assert over and over[0].data["winner"] == "ann" and over[0].data["reason"] == "forfeit"


def test_internal_errors_never_escape_handle() -> None:
    h = Harness()
    assert h.core.handle("not/our/topic", b"", 0)  # logged, not raised
    out = h.core.handle(T.req("bad+id"), encode(m.Ping(t0=1)), 0)
    assert all(isinstance(o, LogRecord) for o in out)


def test_a_relay_seats_a_player_who_joins_in_version_1() -> None:
    core = RelayCore(T, seed=3)
    core.handle(T.req("ann"), encode(m.CreateMatch(name="ann")), 1)
    code = core.client_match["ann"]
    old = msgpack.packb({"t": "JoinMatch", "v": 1, "name": "bob", "code": code})
    out = core.handle(T.req("bob"), old, 2)
    joined = [o.msg for o in out if getattr(o, "topic", "") == T.client("bob") and isinstance(o.msg, m.MatchJoined)]
    assert joined and joined[0].match == code and core.matches[code].status == "playing"


def test_each_seats_races_lost_round_trip_and_hold_are_in_the_public_snapshot() -> None:
    """What the spectator page's panel shows: a lost race counts for its loser (a plain mistake does
    not), a play naming the latest state is a round trip (its arrival less that state's publication
    less its claimed reaction), and the hold is the play's; the private and public topics say no more."""
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    seen = h.core.matches[code].seq
    h.now += 180 * S // 1000  # the state went out 180 ms ago: 150 ms of reaction, 30 of network both ways
    out = h.send(T.act(code, "a"), m.Act(id=1, seq=seen, action=blink.action_to_wire(blink.PlayCard("3-red-star", 0)),
                                        reaction_ns=150 * S // 1000))
    assert isinstance(h.to("a", out)[0], m.ActionAccepted)
    h.now += 1_000
    assert h.play("b", code, "5-green-triangle", 0, 1, seq=seen).code == "pile_changed"
    assert h.play("b", code, "5-green-triangle", 0, 2).code == "no_match"  # a mistake, not a race
    h.tick(1.5)  # the coalesced snapshot falls due
    snaps = [o.msg for o in h.out if isinstance(o, Publish) and isinstance(o.msg, m.Snapshot)]
    assert snaps[-1].seats == ({"rtt_ms": 30.0, "held_ms": None, "races_lost": 0},  # arrival order holds nothing
                               {"rtt_ms": None, "held_ms": None, "races_lost": 1})
    assert "seats" not in snaps[-1].match_state  # the match's own state stays what its events make it
    created = next(e for e in h.events() if e.type == "match_created")
    assert {x.since for x in snaps} == {created.ts}  # how long it has run: since its creation


def test_in_fair_order_a_seats_figures_say_how_long_its_latest_play_was_held() -> None:
    h = Harness(fixed_decks=(race_deck(),), order="fair")
    code = h.start_match()
    seen = h.core.matches[code].seq
    h.now += 200 * S // 1000
    h.send(T.act(code, "a"), m.Act(id=1, seq=seen, action=blink.action_to_wire(blink.PlayCard("3-red-star", 0)),
                                   reaction_ns=150 * S // 1000))  # held: bob holds a card for that pile too
    h.tick(1.5)  # the hold ends, then the coalesced snapshot
    snaps = [o.msg for o in h.out if isinstance(o, Publish) and isinstance(o.msg, m.Snapshot)]
    held = snaps[-1].seats[0]["held_ms"]
    assert isinstance(held, float) and held > 0, snaps[-1].seats
    assert snaps[-1].seats[1]["held_ms"] is None  # bob has not played
