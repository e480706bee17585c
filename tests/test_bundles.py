"""Bundles: a step's messages for one topic in one payload (protocol.codec, relay.publishing)."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client import Connection, new_client_id, run_match
from mqttkit import DEFAULT_MAX_PAYLOAD, BrokerAddress
from protocol import messages as m
from protocol.codec import MAX_BUNDLE_ITEMS, DecodeError, decode, decode_all, encode, pack_bundle
from relay.hosting import LocalServer
from relay.model import Publish
from relay.publishing import BUNDLE_BYTES, wire_messages


def test_a_bundle_is_the_messages_encodings_behind_an_array_header() -> None:
    msgs = [m.Pong(t0=i, t1=i + 1, t2=i + 2) for i in range(20)]
    bundle = pack_bundle([encode(x) for x in msgs])
    assert decode_all(bundle) == msgs
    assert msgpack.unpackb(bundle, raw=False) == [msgpack.unpackb(encode(x), raw=False) for x in msgs]
    assert decode_all(encode(msgs[0])) == [msgs[0]]  # a single message reads as a list of one
    with pytest.raises(DecodeError):
        decode(bundle)  # the single-message door refuses a bundle (a client never sends one)
    with pytest.raises(ValueError):
        pack_bundle([])
    with pytest.raises(ValueError):
        pack_bundle([encode(msgs[0])] * (MAX_BUNDLE_ITEMS + 1))


@pytest.mark.parametrize("junk", [b"", b"\x90", b"\x92\x01\x02", b"\x91\xc1", b"\xdc\x00\x02\x80\x80",
                                  b"\x92" + encode(m.Ping(t0=1)), "text", None])
def test_a_bad_bundle_is_a_decode_error(junk: object) -> None:
    with pytest.raises(DecodeError):
        decode_all(junk)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_decode_all_raises_only_its_own_error_on_any_bytes(data: bytes) -> None:
    try:
        decode_all(b"\x93" + data)
    except DecodeError:
        pass


def _pub(topic: str, msg: object, retain: bool = False, qos: int = 0) -> Publish:
    return Publish(topic, msg, retain, qos)


def test_a_steps_messages_for_one_topic_go_out_as_one_in_the_order_said() -> None:
    ev = [m.Ping(t0=i) for i in range(4)]
    mine = [m.Pong(t0=i, t1=0, t2=0) for i in range(3)]
    wires = wire_messages([_pub("c/a", mine[0]), _pub("c/b", mine[0]), _pub("c/a", mine[1]),
                           _pub("m/X/ev", ev[0]), _pub("m/Y/ev", ev[1]), _pub("m/X/ev", ev[2])], encode)
    assert [w.topic for w in wires] == ["c/a", "c/b", "m/X/ev", "m/Y/ev"]  # each at its first message's place
    assert [decode_all(w.payload) for w in wires] == [mine[:2], [mine[0]], [ev[0], ev[2]], [ev[1]]]
    assert wires[1].payload == encode(mine[0])  # a lone message stays a plain message


def test_nothing_moves_across_a_message_of_the_other_class() -> None:
    """A private update must reach its player before the events after its seq, and a view after the
    events it follows: events and players' messages keep their order against each other."""
    ev = [m.Ping(t0=i) for i in range(3)]
    mine = [m.Pong(t0=i, t1=0, t2=0) for i in range(3)]
    wires = wire_messages([_pub("c/a", mine[0]), _pub("m/X/ev", ev[0]), _pub("c/b", mine[1]), _pub("m/X/ev", ev[1]),
                           _pub("m/X/ev", ev[2]), _pub("c/a", mine[2])], encode)
    assert [(w.topic, decode_all(w.payload)) for w in wires] == [
        ("c/a", [mine[0]]), ("m/X/ev", [ev[0]]), ("c/b", [mine[1]]), ("m/X/ev", ev[1:]), ("c/a", [mine[2]])]


def test_retained_qos1_and_raw_payloads_stay_single_and_nothing_moves_across_them() -> None:
    a, b, c = m.Ping(t0=1), m.Ping(t0=2), m.Ping(t0=3)
    wires = wire_messages([_pub("m/X/ev", a), _pub("snap", b, retain=True), _pub("m/X/ev", b), _pub("m/X/ev", c, qos=1),
                           _pub("m/X/ev", a), _pub("old", b"", retain=True), _pub("m/X/ev", c)], encode)
    assert [(w.topic, w.retain, w.qos) for w in wires] == [
        ("m/X/ev", False, 0), ("snap", True, 0), ("m/X/ev", False, 0), ("m/X/ev", False, 1), ("m/X/ev", False, 0),
        ("old", True, 0), ("m/X/ev", False, 0)]
    assert [decode_all(w.payload) if w.payload else [] for w in wires] == [[a], [b], [b], [c], [a], [], [c]]


def test_a_bundle_is_closed_at_its_size_and_item_limits() -> None:
    big = m.ViewUpdated(match="ABCDE", seq=1, game_index=0, state={"x": "y" * 3000}, match_state={})
    n = 3 * BUNDLE_BYTES // len(encode(big))
    wires = wire_messages([_pub("c/a", big)] * n, encode)
    assert len(wires) > 1 and all(len(w.payload) <= BUNDLE_BYTES + 3 for w in wires)
    assert sum(len(decode_all(w.payload)) for w in wires) == n
    small = wire_messages([_pub("m/X/ev", m.Ping(t0=1))] * (MAX_BUNDLE_ITEMS + 5), encode)
    assert [len(decode_all(w.payload)) for w in small] == [MAX_BUNDLE_ITEMS, 5]


def test_no_bundle_is_larger_than_the_brokers_payload_limit() -> None:
    """A broker drops a PUBLISH over its ``message_size_limit`` (the relay's ``max_payload``) without
    a word, and with it every message inside: bundles stop below it, header included."""
    events = [m.Event(match="ABCDE", seq=i, ts=i, game_index=0, type="dice_rolled", data={"pad": "x" * 90})
              for i in range(1, 400)]
    for limit in (512, 8192):
        wires = wire_messages([_pub("m/X/ev", e) for e in events], encode, max_bytes=limit)
        assert len(wires) > 1 and all(len(w.payload) <= limit for w in wires)
        assert [x for w in wires for x in decode_all(w.payload)] == events
    alone = m.ViewUpdated(match="ABCDE", seq=1, game_index=0, state={"x": "y" * 700}, match_state={})
    wires = wire_messages([_pub("c/a", alone), _pub("c/a", alone)], encode, max_bytes=512)
    assert [decode_all(w.payload) for w in wires] == [[alone], [alone]]  # too large to bundle: each as it is


def test_a_long_past_reaches_a_late_spectator_through_mosquittos_size_limit(mosquitto: BrokerAddress) -> None:
    """A Roll Your Own match makes hundreds of events; a spectator that asks for them from the start
    gets them all in one step's answer, bundled: through Mosquitto, whose ``message_size_limit`` is
    the relay's ``max_payload``, every one arrives."""

    async def body() -> None:
        async with LocalServer(mosquitto.login_url, seed=8) as server:
            played = await run_match(mosquitto.public(), "ryo", 2, seed=3, reaction_s=0.0, timeout_s=120)
            assert len(played.events) > 150
            heard: list[m.Event] = []
            got_all = asyncio.Event()

            def on_message(msg: object, now: int) -> None:
                if isinstance(msg, m.Event) and msg.match == played.code:
                    heard.append(msg)
                    if len(heard) >= len(played.events):
                        got_all.set()

            async with Connection(mosquitto.public(), new_client_id("late"), on_message=on_message,
                                  ping_interval_s=0) as late:
                await late.request(m.Resync(played.code, from_seq=1))
                await asyncio.wait_for(got_all.wait(), 60)
            assert [e.seq for e in heard] == [e.seq for e in played.events]
            assert server.relay.max_payload == DEFAULT_MAX_PAYLOAD

    asyncio.run(body())
