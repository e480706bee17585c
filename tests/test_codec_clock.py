"""The codec's one door for untrusted bytes, topics, and the clock maths."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from protocol import messages as m
from protocol.clock import ClockFilter, ping_due, sample, verdict_sample
from protocol.codec import MAX_MESSAGE_BYTES, PROTOCOL_VERSION, DecodeError, decode, encode
from protocol.topics import Topics


def test_round_trip_every_message_type() -> None:
    msgs = [
        m.CreateMatch(name="ann", game="blink", settings={"best_of": 1}, seats=2),
        m.JoinMatch(name="bob", match="ABCDE"),
        m.QuickMatch(name="cy"),
        m.Ping(t0=123),
        m.Act(id=3, seq=9, action={"t": "PlayCard", "v": 1, "card": "4-yellow-star", "pile": 0}, reaction_ns=250_000_000),
        m.ActionAccepted(match="ABCDE", id=3, seq=10),
        m.ActionRejected(match="ABCDE", id=3, code="no_match", detail="x", seq=10),
        m.Event(match="ABCDE", seq=1, ts=5, game_index=0, type="card_played", data={"card": "4-yellow-star"}),
        m.Snapshot(match="ABCDE", seq=1, ts=5, game_index=0, status="playing", players=("a", "b"), state={}),
        m.Pong(t0=1, t1=2, t2=3),
        m.Leave(),
    ]
    for msg in msgs:
        assert decode(encode(msg)) == msg


def test_wire_form_is_a_map_with_type_tag_and_version() -> None:
    raw = msgpack.unpackb(encode(m.Ping(t0=5)))
    assert raw == {"t": "Ping", "v": PROTOCOL_VERSION, "t0": 5}


@pytest.mark.parametrize("obj,code", [
    ({"t": "Ping", "v": 1}, "malformed"),  # missing field
    ({"t": "Ping", "v": 1, "t0": "x"}, "malformed"),  # wrong type
    ({"t": "Ping", "v": 1, "t0": True}, "malformed"),  # bool is not an int here
    ({"t": "Ping", "v": 1, "t0": 1, "evil": 2}, "malformed"),  # unknown field
    ({"t": "Nope", "v": 1}, "unknown_type"),
    ({"t": "Ping", "v": 99, "t0": 1}, "bad_version"),
    ({"v": 1}, "malformed"),
    ([1, 2, 3], "malformed"),
    ({"t": "Act", "v": 1, "id": 1, "seq": 1, "action": [1]}, "malformed"),
])
def test_wrong_shapes_raise_decode_error_with_code(obj: object, code: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(msgpack.packb(obj))
    assert info.value.code == code


def test_version_1_messages_still_decode_into_the_current_form() -> None:
    """Version 1 named a match's code ``code`` in JoinMatch and a game's index ``game`` (and the
    game's name ``game_name`` in Snapshot); its messages decode into today's, so a journal of them
    replays and a peer of version 1 is understood."""
    def v1(obj: dict[str, object]) -> object:
        return decode(msgpack.packb({**obj, "v": 1}))

    assert PROTOCOL_VERSION == 2
    assert v1({"t": "JoinMatch", "name": "ann", "code": "ABCDE"}) == m.JoinMatch(name="ann", match="ABCDE")
    assert v1({"t": "Event", "match": "ABCDE", "seq": 3, "ts": 5, "game": 1, "type": "card_played", "data": {}}) \
        == m.Event("ABCDE", 3, 5, 1, "card_played", {})
    assert v1({"t": "PrivateUpdate", "match": "ABCDE", "seq": 3, "game": 1, "delta": {"drawn": []}}) \
        == m.PrivateUpdate("ABCDE", 3, 1, {"drawn": []})
    results = [{"game": 0, "winners": [1], "reason": "tie", "scores": []}]
    assert v1({"t": "ViewUpdated", "match": "ABCDE", "seq": 3, "game": 1, "state": {},
               "match_state": {"game_index": 1, "results": results}}) == m.ViewUpdated(
        "ABCDE", 3, 1, {}, {"game_index": 1, "results": [{"game_index": 0, "winners": [1], "reason": "tie",
                                                          "scores": []}]})
    snap = v1({"t": "Snapshot", "match": "ABCDE", "seq": 3, "ts": 5, "game": 1, "status": "playing",
               "players": ["a", "b"], "state": {}, "match_state": {"results": results}, "game_name": "takeaway"})
    assert isinstance(snap, m.Snapshot) and (snap.game_index, snap.game) == (1, "takeaway")
    assert snap.match_state["results"][0]["game_index"] == 0 and "game" not in snap.match_state["results"][0]
    assert v1({"t": "Ping", "t0": 5}) == m.Ping(t0=5)  # unchanged in version 2
    # A name of version 2 in a version-1 map is an unknown field there, as it was in version 1.
    for obj in ({"t": "JoinMatch", "name": "ann", "match": "ABCDE"},
                {"t": "Event", "match": "ABCDE", "seq": 3, "ts": 5, "game_index": 1, "type": "x", "data": {}}):
        with pytest.raises(DecodeError, match="unknown field") as info:
            v1(obj)
        assert info.value.code == "malformed"
    # and the current form is the only one written
    assert msgpack.unpackb(encode(m.JoinMatch(name="ann", match="ABCDE"))) == {
        "t": "JoinMatch", "v": 2, "name": "ann", "match": "ABCDE", "key": b"", "nonce": 0, "sig": b""}
    # a join without the (later, optional) proof of identity still reads, as an unrated player's
    plain = msgpack.packb({"t": "JoinMatch", "v": 2, "name": "ann", "match": "ABCDE"})
    assert decode(plain) == m.JoinMatch(name="ann", match="ABCDE")


def test_oversized_and_garbage_payloads() -> None:
    with pytest.raises(DecodeError) as info:
        decode(b"\x00" * (MAX_MESSAGE_BYTES + 1))
    assert info.value.code == "too_large"
    for junk in (b"", b"\xc1", b"\x92", b"\xdd\xff\xff\xff\xff", "text"):
        with pytest.raises(DecodeError):
            decode(junk)  # type: ignore[arg-type]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=256))
def test_decoder_raises_only_its_own_error_on_any_bytes(data: bytes) -> None:
    try:
        decode(data)
    except DecodeError:
        pass


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(["t", "v", "t0", "id", "seq", "action", "name", "code", "match", "x"]),
                       msgpack_values, max_size=6),
       st.sampled_from(["Ping", "Act", "JoinMatch", "CreateMatch", "Event", "PlayCard", "Zzz"]))
def test_decoder_raises_only_its_own_error_on_any_map(obj: dict, tag: str) -> None:
    obj = dict(obj)
    obj.setdefault("t", tag)
    obj.setdefault("v", 1)
    try:
        decode(msgpack.packb(obj))
    except DecodeError:
        pass


def test_topics_and_parsing() -> None:
    t = Topics("blink/v1", "0")
    assert t.act("ABCDE", "p1") == "blink/v1/m/0/ABCDE/act/p1"
    assert t.ev("ABCDE") == "blink/v1/m/0/ABCDE/ev"
    assert t.snap("ABCDE") == "blink/v1/m/0/ABCDE/snap"
    assert t.client("p1") == "blink/v1/c/p1"
    assert t.relay_status("r") == "blink/v1/relay/r/status"
    assert t.parse_act("blink/v1/m/0/ABCDE/act/p1") == ("ABCDE", "p1")
    assert t.parse_act("blink/v1/m/0/ABCDE/ev") is None
    assert t.parse_act("blink/v1/m/1/ABCDE/act/p1") is None  # another shard
    assert t.parse_req("blink/v1/lobby/req/p1") == "p1"
    assert t.parse_req("blink/v1/lobby/req/p1/x") is None


def test_clock_offset_and_delay_ntp_formula() -> None:
    # client clock = relay clock - 1000; one-way 50 each way; relay holds 10
    t0 = 10_000
    t1 = t0 + 1000 + 50
    t2 = t1 + 10
    t3 = t2 - 1000 + 50
    s = sample(t0, t1, t2, t3)
    assert s.delay_ns == 100 and s.offset_ns == 1000


def test_clock_filter_keeps_lowest_delay_of_recent_samples() -> None:
    f = ClockFilter(window=3)
    f.add(sample(0, 600, 600, 1000))  # delay 1000
    f.add(sample(0, 100, 100, 150))  # delay 150: best
    f.add(sample(0, 900, 900, 2000))
    assert f.rtt_ns == 150 and f.offset_ns == (100 + 100 - 150) // 2
    f.add(sample(0, 300, 300, 500))
    f.add(sample(0, 300, 300, 500))
    f.add(sample(0, 300, 300, 500))  # the best one has aged out of the window
    assert f.rtt_ns == 500


def test_a_verdict_is_a_clock_sample_as_a_pong_is() -> None:
    # client clock = relay clock - 1000; 50 each way; the relay held and judged the play for 30
    t0 = 10_000
    recv, sent = t0 + 1000 + 50, t0 + 1000 + 50 + 30
    t3 = sent - 1000 + 50
    s = verdict_sample(t0, recv, sent, t3)
    assert s == sample(t0, recv, sent, t3) and s.delay_ns == 100 and s.offset_ns == 1000 and s.at_ns == t3
    # No sample without both stamps (a duplicate's remembered answer has no recv_ns; a relay that
    # does not stamp), from stamps out of order, or from a play sent twice (its t0 is not known).
    assert verdict_sample(t0, 0, sent, t3) is None
    assert verdict_sample(t0, recv, 0, t3) is None
    assert verdict_sample(t0, sent, recv, t3) is None
    assert verdict_sample(t3, recv, sent, t0) is None
    assert verdict_sample(t0, recv, sent, t3, sends=2) is None


def test_a_ping_is_due_only_while_no_sample_came_within_the_period() -> None:
    f = ClockFilter()
    assert f.last_ns is None and ping_due(f.last_ns, 5, 1_000)  # nothing measured yet: ping
    f.add(sample(0, 100, 100, 150))
    assert f.last_ns == 150
    assert not ping_due(f.last_ns, 150 + 999, 1_000)  # a play answered within the period keeps the clock
    assert ping_due(f.last_ns, 150 + 1_000, 1_000)  # idle for a whole period: ping
