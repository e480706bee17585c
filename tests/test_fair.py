"""Fair ordering in the relay core: reaction time decides a race, not the network; holds are bounded;
claims are clamped by the relay's own measurements."""

from __future__ import annotations

from typing import Any

from protocol import messages as m
from protocol.rules import blink
from relay.core import LogRecord, Publish
from tests.test_relay_core import T, Harness, race_deck

MS = 1_000_000


def fair_harness(**config: Any) -> tuple[Harness, str]:
    h = Harness(order="fair", fixed_decks=(race_deck(),), **config)
    code = h.start_match()
    return h, code


def measure(h: Harness, client: str, rtt_ms: float) -> None:
    h.send(T.req(client), m.ProbeReply(sent_ns=h.now - int(rtt_ms * MS)))


def play_at(h: Harness, t_ns: int, client: str, code: str, card: str, pile: int, action_id: int, seq: int,
            reaction_ms: float | None) -> list[Any]:
    h.now = t_ns
    act = m.Act(id=action_id, seq=seq, action=blink.action_to_wire(blink.PlayCard(card, pile)),
                reaction_ns=None if reaction_ms is None else int(reaction_ms * MS))
    return h.send(T.act(code, client), act)


def answers(h: Harness, client: str) -> list[Any]:
    return [x for x in h.to(client) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]


def applied_records(h: Harness) -> list[dict[str, Any]]:
    return [o.record for o in h.out if isinstance(o, LogRecord) and o.record["kind"] in ("applied", "rejected")
            and "order" in o.record]


def race(order: str) -> tuple[Harness, str]:
    """Ann (10 ms round trip) reacts in 200 ms; Bob (100 ms round trip) reacts in 150 ms.
    Ann's play arrives first (t+215) but Bob reacted faster (his arrives at t+200+...)."""
    h = Harness(order=order, fixed_decks=(race_deck(),))
    code = h.start_match()
    measure(h, "a", 10)
    measure(h, "b", 100)
    seq = h.core.matches[code].seq
    pub = h.now  # the race started (and seq was published) at this relay time
    play_at(h, pub + 215 * MS, "a", code, "3-red-star", 0, 1, seq, 200)
    play_at(h, pub + 250 * MS, "b", code, "5-green-triangle", 0, 1, seq, 150)
    h.tick(0.2)
    return h, code


def test_arrival_order_gives_the_race_to_the_faster_network() -> None:
    h, code = race("arrival")
    assert isinstance(answers(h, "a")[0], m.ActionAccepted)
    lost = answers(h, "b")[0]
    assert isinstance(lost, m.ActionRejected) and lost.code == "pile_changed"


def test_fair_order_gives_the_race_to_the_faster_reaction() -> None:
    h, code = race("fair")
    won = answers(h, "b")[0]
    lost = answers(h, "a")[0]
    assert isinstance(won, m.ActionAccepted)
    assert isinstance(lost, m.ActionRejected) and lost.code == "pile_changed"
    assert str(h.core.matches[code].state.top(0)) == "5-green-triangle"
    assert blink.Card.parse("3-red-star") in h.core.matches[code].state.hands[0]
    # both plays were judged as soon as the second arrived: ann's was held 35 ms, bob's not at all
    recs = {r["client"]: r for r in applied_records(h)}
    assert recs["a"]["hold_ns"] == 35 * MS and recs["b"]["hold_ns"] == 0
    assert recs["a"]["reaction_used_ns"] == 200 * MS and recs["b"]["reaction_used_ns"] == 150 * MS
    assert recs["a"]["rivals"] == [1]


def test_a_contestable_play_is_held_then_confirmed() -> None:
    h, code = fair_harness()
    measure(h, "a", 10)
    measure(h, "b", 100)
    seq = h.core.matches[code].seq
    out = play_at(h, h.now, "a", code, "1-red-moon", 1, 1, seq, 300)  # 1 matches 1-blue-triangle by count
    # bob holds triangles: he could race for pile 1 -> ann's play is held, not answered yet
    assert not [x for x in h.to("a", out) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
    h.tick(0.2)
    assert isinstance(answers(h, "a")[-1], m.ActionAccepted)


def test_no_possible_rival_means_no_hold() -> None:
    h, code = fair_harness()
    match = h.core.matches[code]
    # give bob a hand that matches nothing on either pile
    from dataclasses import replace

    state = match.state
    bob_hand = tuple(blink.Card.parse(c) for c in ("2-yellow-star", "4-red-star", "5-yellow-star"))
    match.state = replace(state, hands=(state.hands[0], bob_hand))
    match.remember(h.now)
    out = play_at(h, h.now + 300 * MS, "a", code, "3-red-star", 0, 1, match.seq, 250)
    got = [x for x in h.to("a", out) if isinstance(x, (m.ActionAccepted, m.ActionRejected))]
    assert len(got) == 1 and isinstance(got[0], m.ActionAccepted) and got[0].hold_ns == 0


def test_a_hold_never_exceeds_the_cap() -> None:
    h, code = fair_harness(fair_cap_ns=150 * MS)
    measure(h, "a", 5)
    measure(h, "b", 900)  # a very slow rival: waiting for him would take long
    seq = h.core.matches[code].seq
    start = h.now
    play_at(h, start + 300 * MS, "a", code, "3-red-star", 0, 1, seq, 290)
    assert not answers(h, "a")
    deadline = h.core.next_deadline()
    assert deadline is not None and deadline <= start + 300 * MS + 150 * MS
    h.now = start + 300 * MS + 149 * MS
    h.out.extend(h.core.tick(h.now))
    assert not answers(h, "a")
    h.now = start + 300 * MS + 150 * MS
    h.out.extend(h.core.tick(h.now))
    (ans,) = answers(h, "a")
    assert isinstance(ans, m.ActionAccepted) and ans.hold_ns == 150 * MS


def test_a_lying_client_gains_nothing_beyond_the_floor() -> None:
    """Bob claims he reacted in 1 ms. The relay uses the floor (100 ms), so an honest 90 ms... is
    impossible; an honest player with a faster real reaction than bob's floor-clamped claim wins."""
    h, code = fair_harness(fair_floor_ns=100 * MS)
    measure(h, "a", 10)
    measure(h, "b", 10)
    seq = h.core.matches[code].seq
    pub = h.now
    play_at(h, pub + 400 * MS, "b", code, "5-green-triangle", 0, 1, seq, 1)  # the lie: 1 ms
    h.tick(0.001)
    recs = [r for r in applied_records(h) if r["client"] == "b"]
    assert recs and recs[0]["reaction_claimed_ns"] == 1 * MS and recs[0]["reaction_used_ns"] == 100 * MS


def test_a_claim_beyond_what_the_relay_measured_is_clamped_down() -> None:
    h, code = fair_harness()
    measure(h, "a", 50)
    seq = h.core.matches[code].seq
    pub = h.now
    # arrives 300 ms after publication with a 50 ms round trip: at most 250 ms of reaction
    play_at(h, pub + 300 * MS, "a", code, "3-red-star", 0, 1, seq, 5000)
    h.tick(0.3)
    (rec,) = [r for r in applied_records(h) if r["client"] == "a"]
    assert rec["reaction_used_ns"] == 250 * MS


def test_equal_reactions_are_broken_by_a_seeded_coin_in_the_log() -> None:
    winners = []
    for _ in range(2):
        h, code = fair_harness()
        measure(h, "a", 10)
        measure(h, "b", 10)
        seq = h.core.matches[code].seq
        pub = h.now
        play_at(h, pub + 210 * MS, "a", code, "3-red-star", 0, 1, seq, 200)
        play_at(h, pub + 210 * MS, "b", code, "5-green-triangle", 0, 1, seq, 200)
        h.tick(0.1)
        recs = applied_records(h)
        assert all("coin" in r for r in recs) and len({r["coin"] for r in recs}) == 2
        winners.append(str(h.core.matches[code].state.top(0)))
    assert winners[0] == winners[1]  # the same seed: the same coin


def test_probes_are_sent_to_players_of_fair_matches_and_replies_measured() -> None:
    h, code = fair_harness()
    out = h.tick(1.0)
    probes = [o for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Probe)]
    assert {p.topic for p in probes} == {T.client("a"), T.client("b")}
    h.now += 7 * MS
    h.send(T.req("a"), m.ProbeReply(sent_ns=probes[0].msg.sent_ns))
    assert h.core.fair.rtt_of("a") == 7 * MS
    h.send(T.req("a"), m.ProbeReply(sent_ns=h.now + 10**12))  # a forged reply from the future is ignored
    assert h.core.fair.rtt_of("a") == 7 * MS


def test_a_play_is_a_round_trip_and_only_idle_players_are_probed() -> None:
    h, code = fair_harness()
    pub = h.now
    seq = h.core.matches[code].seq
    h.tick(0.0)
    h.out.clear()
    # a's play names the state it saw, published at ``pub``, with a reaction of 200 ms; it arrives
    # 230 ms after: 30 ms down and back.
    play_at(h, pub + 230 * MS, "a", code, "3-red-star", 0, 1, seq, 200)
    assert h.core.fair.rtt_of("a") == 30 * MS and h.core.fair.rtt_of("b") is None
    # (its own claim was bounded before the sample it gave: by no round trip yet)
    assert [x.rtt_ns for x in h.core.fair.held.get(code, [])] + [d["rtt_ns"] for d in applied_records(h)] == [None]
    h.out.clear()
    h.tick(0.3)  # the probe interval is up: only b, who has not played, is probed
    probes = [o for o in h.out if isinstance(o, Publish) and isinstance(o.msg, m.Probe)]
    assert [p.topic for p in probes] == [T.client("b")]
    h.out.clear()
    h.tick(0.6)  # a has been idle for a probe interval: both
    probes = [o for o in h.out if isinstance(o, Publish) and isinstance(o.msg, m.Probe)]
    assert {p.topic for p in probes} == {T.client("a"), T.client("b")}


def test_fair_order_can_be_chosen_per_match() -> None:
    h = Harness()
    h.send(T.req("a"), m.CreateMatch(name="ann", settings={"order": "fair"}))
    match = next(iter(h.core.matches.values()))
    assert match.order == "fair" and "order" not in match.settings
    h2 = Harness()
    out = h2.send(T.req("a"), m.CreateMatch(name="ann", settings={"order": "sideways"}))
    assert [x.code for x in h2.to("a", out) if isinstance(x, m.RequestRejected)] == ["bad_settings"]


def test_a_hold_waits_for_the_rivals_slowest_recent_round_trip() -> None:
    """Bob's round trips were 100 and 140 ms: ann's play waits until a play of his slowed by jitter
    to 140 ms could have come, not only one as fast as his best."""
    h, code = fair_harness(fair_cap_ns=400 * MS)
    measure(h, "a", 10)
    measure(h, "b", 100)
    measure(h, "b", 140)
    seq = h.core.matches[code].seq
    pub = h.now
    play_at(h, pub + 215 * MS, "a", code, "3-red-star", 0, 1, seq, 200)
    (held,) = h.core.fair.held[code]
    assert held.release_ns == pub + 200 * MS + 140 * MS + 3 * MS
    h.now = pub + 200 * MS + 120 * MS  # bob's faster reaction (150 ms) comes 170 ms after it left
    play_at(h, h.now, "b", code, "5-green-triangle", 0, 1, seq, 150)
    assert isinstance(answers(h, "b")[0], m.ActionAccepted)
    assert isinstance(answers(h, "a")[0], m.ActionRejected)
