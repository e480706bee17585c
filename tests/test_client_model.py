"""The client's pure model: prediction, reconciliation, bounces, spectating."""

from __future__ import annotations

from dataclasses import replace

from protocol import messages as m
from relay.model import RelayConfig
from protocol.rules import blink
from protocol.rules.base import Rejected
from client import ClientModel
from tests.test_relay_core import T, Harness, race_deck


def joined_model(h: Harness, client: str) -> ClientModel:
    model = ClientModel(client, client)
    for o in h.out:
        if getattr(o, "topic", None) in (T.client(client),) or (
                hasattr(o, "msg") and isinstance(o.msg, (m.Event, m.Snapshot))):
            model.on_message(o.msg, h.now)
    return model


def test_prediction_shows_a_play_at_once_and_reconciles_with_the_relay() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    model = joined_model(h, "a")
    assert model.state().phase == "running"
    act = model.act(blink.PlayCard("3-red-star", 0), h.now)
    assert isinstance(act, m.Act)
    assert str(model.state().top(0)) == "3-red-star"  # drawn before any answer
    assert model.state().hands[0][-1] is None  # the refill is unknown until the relay says
    out = h.send(T.act(code, "a"), act)
    for o in out:  # its private topic and the public events (the relay sends less: no whole view)
        if getattr(o, "topic", "") in (T.client("a"), T.ev(code)):
            model.on_message(o.msg, h.now)
    assert not model.predictor.pending
    assert None not in model.state().hands[0]  # now the relay told us what we drew


def test_a_rejected_play_bounces_back_with_its_reason() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    a, b = joined_model(h, "a"), joined_model(h, "b")
    act_a = a.act(blink.PlayCard("3-red-star", 0), h.now)
    act_b = b.act(blink.PlayCard("5-green-triangle", 0), h.now)
    assert isinstance(act_a, m.Act) and isinstance(act_b, m.Act)
    assert str(b.state().top(0)) == "5-green-triangle"  # b's own prediction
    out = h.send(T.act(code, "a"), act_a) + h.send(T.act(code, "b"), act_b)
    for o in out:
        if getattr(o, "topic", "") in (T.client("b"), T.ev(code)):
            b.on_message(o.msg, h.now)
    assert [x.code for x in b.bounces] == ["pile_changed"]
    assert str(b.state().top(0)) == "3-red-star"  # the screen now matches the relay
    assert blink.Card.parse("5-green-triangle") in b.state().hands[1]
    assert [type(x) for x in h.to("a", out) if isinstance(x, (m.ActionAccepted, m.ActionRejected))] == [m.ActionAccepted]


def test_a_locally_impossible_play_is_not_sent() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    h.start_match()
    model = joined_model(h, "a")
    result = model.act(blink.PlayCard("2-red-moon", 1), h.now)
    assert isinstance(result, Rejected) and result.code == "no_match"
    assert not model.predictor.pending


def test_a_gap_in_event_seq_asks_for_a_resync() -> None:
    model = ClientModel("a", "a")
    model.on_message(m.MatchJoined("ABCDE", 0, "blink", ("a", "b"), 2, {}), 0)
    assert model.on_message(m.Event("ABCDE", 1, 0, 0, "x", {}), 0) == []
    assert model.on_message(m.Event("ABCDE", 2, 0, 0, "x", {}), 0) == []
    assert model.on_message(m.Event("ABCDE", 5, 0, 0, "x", {}), 0) == [m.Resync("ABCDE")]
    assert model.on_message(m.Event("ABCDE", 4, 0, 0, "x", {}), 0) == []  # late duplicate ignored


def test_probes_are_answered() -> None:
    model = ClientModel("a", "a")
    assert model.on_message(m.Probe(sent_ns=42), 0) == [m.ProbeReply(sent_ns=42)]


def test_a_spectator_sees_the_public_state_and_cannot_play() -> None:
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    h.play("a", code, "3-red-star", 0, 1)
    h.tick(RelayConfig().snapshot_interval_s + 0.05)  # the retained snapshot is coalesced: rewritten within it
    snap = [o.msg for o in h.out if isinstance(getattr(o, "msg", None), m.Snapshot)][-1]
    model = ClientModel("s", "spectator")
    model.spectate(code)
    model.on_message(snap, h.now)
    state = model.state()
    assert model.game == "blink" and str(state.top(0)) == "3-red-star"
    assert all(c is None for hand in state.hands for c in hand)  # no hand is visible to a spectator
    assert isinstance(model.act(blink.PlayCard("1-red-moon", 0), h.now), Rejected)


def test_a_lost_connection_is_recorded_for_the_screen() -> None:
    from client.model import ConnectionLost

    model = ClientModel("a", "a")
    before = model.version
    model.on_message(ConnectionLost("broker closed the connection"), 0)
    assert model.lost == "broker closed the connection" and model.version == before + 1


def test_an_acceptance_heard_twice_is_one_verdict() -> None:
    # QoS 1 delivers at least once (a NATS node that stops redelivers what it had not seen acknowledged),
    # and a resent action is answered again: one play, one accepted verdict, however often it is heard.
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    model = joined_model(h, "a")
    act = model.act(blink.PlayCard("3-red-star", 0), h.now)
    assert isinstance(act, m.Act)
    out = h.send(T.act(code, "a"), act)
    answer = [x for x in h.to("a", out) if isinstance(x, m.ActionAccepted)]
    assert len(answer) == 1
    model.on_message(answer[0], h.now)  # before the event: the play is accepted, not yet confirmed
    model.on_message(answer[0], h.now)  # the same acceptance again
    for o in out:
        if getattr(o, "topic", "") == T.ev(code):
            model.on_message(o.msg, h.now)
    model.on_message(answer[0], h.now)  # and once more after the event
    assert [(v.id, v.ok) for v in model.verdicts] == [(act.id, True)]


def test_a_play_is_a_clock_sample_and_no_ping_is_due_while_plays_keep_the_clock() -> None:
    # The client's clock is 1 s behind the relay's; 3 ms each way; the relay takes 1 ms.
    S, MS = 1_000_000_000, 1_000_000
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    model = joined_model(h, "a")
    t0 = 50 * S
    assert isinstance(model.ping(t0, S), m.Ping)  # nothing measured yet: idle, ping
    act = model.act(blink.PlayCard("3-red-star", 0), t0)
    assert isinstance(act, m.Act)
    out = h.send(T.act(code, "a"), act)
    verdict = next(x for x in h.to("a", out) if isinstance(x, m.ActionAccepted))
    # (the shell stamps the verdict as it leaves: here by hand, on the relay's clock)
    model.on_message(replace(verdict, recv_ns=t0 + S + 3 * MS, sent_ns=t0 + S + 4 * MS), t0 + 7 * MS)
    assert model.clock.rtt_ns == 6 * MS and model.clock.offset_ns == S  # the HUD's figures, from the play
    assert model.verdicts[-1].offset_ns is None  # (a verdict's parts use the offset known before it)
    assert model.ping(t0 + 7 * MS + S - 1, S) is None  # a play answered within the period: no ping
    assert isinstance(model.ping(t0 + 7 * MS + S, S), m.Ping)  # idle for a period: ping again


def test_a_resent_play_or_an_unstamped_answer_is_no_clock_sample() -> None:
    S = 1_000_000_000
    h = Harness(fixed_decks=(race_deck(),))
    code = h.start_match()
    model = joined_model(h, "a")
    first = model.act(blink.PlayCard("3-red-star", 0), 10 * S)
    assert isinstance(first, m.Act)
    assert model.resends(12 * S) == [first]  # sent twice: the answer may be to either send
    out = h.send(T.act(code, "a"), first)
    verdict = next(x for x in h.to("a", out) if isinstance(x, m.ActionAccepted))
    model.on_message(replace(verdict, recv_ns=12 * S + 1, sent_ns=12 * S + 2), 12 * S + 3)
    assert model.verdicts[-1].ok and model.clock.samples == []
    model.on_message(m.Pong(t0=13 * S, t1=13 * S + 5, t2=13 * S + 5), 13 * S + 10)  # an idle ping's pong
    assert model.clock.rtt_ns == 10
