"""Sealed play's pure core (``protocol/seal.py``), the pin in a broker URL (``mqttkit.parse_url``) and
the relay's identity file (``relay/sealing.py``): what each end takes, and every way a payload can be
refused -- cut, altered, replayed, sealed for another client or another start of the relay, signed
by someone else, a pin that does not match -- each a ``SealError`` with its reason, never another
exception."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqttkit import PIN, BadURL, parse_url
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.seal import (MAGIC, OVERHEAD, WILL, WINDOW, ClientSeal, RelayIdentity, RelaySeal, SealError, client_id,
                           fingerprint, is_sealed, valid_pin)
from protocol.topics import Topics, valid_id
from relay.sealing import IDENTITY_FILE, IdentityError, load_identity

T = Topics()
IDENTITY = RelayIdentity(bytes(range(32)), bytes(range(32, 64)))
EPOCH = b"epoch--1"
STATUS = T.relay_status("relay-0")


def key(n: int) -> bytes:
    return hashlib.sha256(b"client %d" % n).digest()


def relay(epoch: bytes = EPOCH, started: int = 1000, **kw: int) -> RelaySeal:
    return RelaySeal(IDENTITY, epoch, started, **kw)


def keyed_client(r: RelaySeal, n: int = 1) -> ClientSeal:
    c = ClientSeal(key(n), r.pin)
    body, new = c.open_status(STATUS, r.status(STATUS, encode(m.RelayStatus("relay-0", True))))
    assert new and decode_all(body) == [m.RelayStatus("relay-0", True)]
    return c


def reason(fn: object, *args: object) -> str:
    with pytest.raises(SealError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value.reason


# ------------------------------------------------------------------------------------ identities and pins


def test_a_pin_is_26_base32_characters_of_both_public_keys_and_urls_carry_it() -> None:
    pin = IDENTITY.pin
    assert valid_pin(pin) and PIN.fullmatch(pin) and len(pin) == 26
    other = RelayIdentity(bytes(range(32)), bytes(range(1, 33)))  # one key differs: another pin
    assert other.pin != pin and fingerprint(IDENTITY.sign_public, IDENTITY.box_public) == pin
    address = parse_url(f"mqtt://example.org:1884/?pin={pin}")
    assert (address.host, address.port, address.pin) == ("example.org", 1884, pin)
    assert parse_url(address.url) == address and address.url == f"mqtt://example.org:1884/?pin={pin}"
    assert parse_url(f"mqtts://u:pw@h:8883?pin={pin}").pin == pin
    plain = parse_url("mqtt://example.org:1884")
    assert plain.pin is None and plain.url == "mqtt://example.org:1884"
    assert parse_url("h:1883").pin is None and parse_url("mqtt://h:1883/").pin is None
    assert plain.pinned(pin).url == address.url and address.public().pin == pin


@pytest.mark.parametrize("url", ["mqtt://h:1883/?pin=", "mqtt://h:1883/?pin=abc", "mqtt://h:1883/?pin=" + "A" * 26,
                                 "mqtt://h:1883/?pin=" + "a" * 27, "mqtt://h:1883/?pn=" + "a" * 26,
                                 "mqtt://h:1883/?pin=" + "a" * 26 + "&pin=" + "b" * 26,
                                 "mqtt://h:1883/?pin=" + "a" * 26 + "&x=1"])
def test_a_url_with_a_bad_pin_or_another_query_is_refused(url: str) -> None:
    with pytest.raises(BadURL):
        parse_url(url)


def test_a_client_id_is_the_hash_of_its_key_and_a_valid_topic_level() -> None:
    a, b = ClientSeal(key(1), IDENTITY.pin), ClientSeal(key(2), IDENTITY.pin)
    assert a.client_id == client_id(a.public) != b.client_id
    assert valid_id(a.client_id) and len(a.client_id) == 33


# ------------------------------------------------------------------------------------ the identity file (relay/sealing.py)


def test_the_identity_is_made_once_mode_600_and_read_back(tmp_path: Path) -> None:
    first = load_identity(tmp_path / "data")
    path = tmp_path / "data" / IDENTITY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_identity(tmp_path / "data") == first and first.pin == load_identity(tmp_path / "data").pin
    assert load_identity(None) != load_identity(None)  # no data directory: fresh every start


def test_an_identity_others_may_read_or_one_that_is_not_is_refused_in_one_line(tmp_path: Path) -> None:
    load_identity(tmp_path)
    path = tmp_path / IDENTITY_FILE
    path.chmod(0o644)
    with pytest.raises(IdentityError, match="may be read by others.*chmod 600"):
        load_identity(tmp_path)
    path.chmod(0o600)
    path.write_text("not an identity\n")
    with pytest.raises(IdentityError, match="is not a relay identity"):
        load_identity(tmp_path)
    with pytest.raises(ValueError):
        RelayIdentity(b"short", b"short")


# ------------------------------------------------------------------------------------ client -> relay


def test_a_request_and_a_play_open_at_the_relay_once() -> None:
    r = relay()
    c = keyed_client(r)
    req, act = T.req(c.client_id), T.act("ABCDE", c.client_id)
    ping = encode(m.Ping(t0=5))
    sealed = c.seal(req, ping)
    assert is_sealed(sealed) and sealed[0] == MAGIC and len(sealed) - len(ping) <= OVERHEAD
    assert r.open(req, sealed, 1) == ping
    play = encode(m.Act(id=1, seq=3, action={"t": "PlayCard"}))
    sealed_play = c.seal(act, play)
    assert r.open(act, sealed_play, 2) == play
    assert reason(r.open, act, sealed_play, 3) == "replayed"
    assert reason(r.open, req, sealed, 3) == "replayed"


def test_counters_may_arrive_out_of_order_within_the_window_but_never_twice() -> None:
    r = relay()
    c = keyed_client(r)
    topic = T.req(c.client_id)
    sealed = [c.seal(topic, b"\x80") for _ in range(WINDOW + 10)]
    assert r.open(topic, sealed[5], 0) == b"\x80"
    assert r.open(topic, sealed[2], 0) == b"\x80"  # older but unseen: taken
    assert reason(r.open, topic, sealed[2], 0) == "replayed"
    assert r.open(topic, sealed[WINDOW + 9], 0) == b"\x80"
    assert reason(r.open, topic, sealed[3], 0) == "replayed"  # fell out of the window
    assert r.open(topic, sealed[WINDOW + 5], 0) == b"\x80"


def test_a_plain_cut_or_altered_message_is_refused_with_its_reason() -> None:
    r = relay()
    c = keyed_client(r)
    topic = T.act("ABCDE", c.client_id)
    good = c.seal(topic, encode(m.Act(id=1, seq=3, action={})))
    assert reason(r.open, topic, encode(m.Act(id=1, seq=3, action={})), 0) == "unsealed"
    assert reason(r.open, topic, b"", 0) == "unsealed"
    for n in range(len(good)):
        assert reason(r.open, topic, good[:n], 0) in ("cut", "unsealed", "forged")
    seen = set()
    for i in range(len(good)):
        altered = bytearray(good)
        altered[i] ^= 0x01
        seen.add(reason(r.open, topic, bytes(altered), 0))
    # the magic, the kind, the epoch, the key, the counter (1 made 0: never sent), the box: each
    # refused for what it is
    assert seen == {"unsealed", "cut", "other_epoch", "other_sender", "replayed", "forged"}, seen
    assert r.open(topic, good, 0)  # the true one still opens: nothing altered counted against it


def test_a_play_sealed_by_one_client_is_refused_on_another_clients_topics() -> None:
    r = relay()
    a, b = keyed_client(r, 1), keyed_client(r, 2)
    play = encode(m.Act(id=1, seq=3, action={}))
    # Eve (b) signs a play with her own key and puts it on a's topic: her key is not a's.
    assert reason(r.open, T.act("ABCDE", a.client_id), b.seal(T.act("ABCDE", a.client_id), play), 0) == "other_sender"
    # a's own play moved to another topic (another match, or a's request topic) does not open there.
    sealed = a.seal(T.act("ABCDE", a.client_id), play)
    assert reason(r.open, T.act("FGHIJ", a.client_id), sealed, 0) == "forged"
    assert reason(r.open, T.req(a.client_id), sealed, 0) == "forged"
    assert r.open(T.act("ABCDE", a.client_id), sealed, 0) == play


def test_a_message_sealed_for_an_earlier_start_of_the_relay_is_refused() -> None:
    before = relay(b"epoch--1", 1000)
    c = keyed_client(before)
    sealed = c.seal(T.req(c.client_id), b"\x80")
    after = relay(b"epoch--2", 2000)
    assert reason(after.open, T.req(c.client_id), sealed, 0) == "other_epoch"


def test_a_last_will_is_taken_once_and_a_later_connections_after_it() -> None:
    r = relay()
    c = keyed_client(r)
    topic = T.req(c.client_id)
    leave = encode(m.Leave(dropped=True))
    first, second = c.will(topic, leave, 1), c.will(topic, leave, 2)
    assert r.open(topic, c.seal(topic, b"\x80"), 0) == b"\x80"  # ordinary counters apart from wills
    assert r.open(topic, first, 0) == leave
    assert reason(r.open, topic, first, 0) == "replayed"
    assert r.open(topic, second, 0) == leave
    assert reason(r.open, topic, first, 0) == "replayed"
    with pytest.raises(ValueError):
        c.will(topic, leave, 0)


def test_the_relay_forgets_only_idle_sessions_and_refuses_new_ones_when_full() -> None:
    r = relay(max_sessions=2, idle_ns=100)
    a, b, c = (keyed_client(r, n) for n in (1, 2, 3))
    assert r.open(T.req(a.client_id), a.seal(T.req(a.client_id), b"\x80"), 0)
    assert r.open(T.req(b.client_id), b.seal(T.req(b.client_id), b"\x80"), 50)
    assert reason(r.open, T.req(c.client_id), c.seal(T.req(c.client_id), b"\x80"), 60) == "full"
    assert r.open(T.req(c.client_id), c.seal(T.req(c.client_id), b"\x80"), 120) == b"\x80"  # a's idle: forgotten
    assert set(r.sessions) == {b.client_id, c.client_id}


def test_a_forged_message_leaves_no_session_behind() -> None:
    r = relay()
    c = keyed_client(r)
    sealed = bytearray(c.seal(T.req(c.client_id), b"\x80"))
    sealed[-1] ^= 1
    assert reason(r.open, T.req(c.client_id), bytes(sealed), 0) == "forged"
    assert r.sessions == {}
    assert reason(r.seal, c.client_id, T.client(c.client_id), b"\x80") == "no_keys"


# ------------------------------------------------------------------------------------ relay -> client


def test_private_messages_open_for_their_client_alone_and_once() -> None:
    r = relay()
    a, b = keyed_client(r, 1), keyed_client(r, 2)
    for c in (a, b):
        r.open(T.req(c.client_id), c.seal(T.req(c.client_id), b"\x80"), 0)
    joined = encode(m.MatchJoined("ABCDE", 0, "blink", ("a",), 2, {}, token="secret-token"))
    to_a = r.seal(a.client_id, T.client(a.client_id), joined)
    assert b"secret-token" not in to_a
    assert a.open(T.client(a.client_id), to_a) == joined
    assert reason(a.open, T.client(a.client_id), to_a) == "replayed"
    assert reason(b.open, T.client(b.client_id), to_a) == "forged"  # moved to b's topic: b's key does not open it
    assert reason(b.open, T.client(a.client_id), to_a) == "forged"  # b reading a's topic: not b's key either
    assert reason(a.open, T.client(a.client_id), joined) == "unsealed"
    fresh = r.seal(a.client_id, T.client(a.client_id), joined)
    for n in range(len(fresh)):
        assert reason(a.open, T.client(a.client_id), fresh[:n]) in ("cut", "unsealed", "forged")
    assert a.open(T.client(a.client_id), fresh) == joined


def test_a_session_the_relay_opened_again_never_reuses_a_nonce_and_old_ones_stay_refused() -> None:
    r = relay(max_sessions=1, idle_ns=10)
    c, other = keyed_client(r, 1), keyed_client(r, 2)
    r.open(T.req(c.client_id), c.seal(T.req(c.client_id), b"\x80"), 0)
    old = r.seal(c.client_id, T.client(c.client_id), b"\x81")
    r.open(T.req(other.client_id), other.seal(T.req(other.client_id), b"\x80"), 100)  # c forgotten
    r.open(T.req(c.client_id), c.seal(T.req(c.client_id), b"\x80"), 200)  # other forgotten, c again
    new = r.seal(c.client_id, T.client(c.client_id), b"\x82")
    assert old[10:22] != new[10:22]  # another instance: another nonce under the same key
    assert c.open(T.client(c.client_id), new) == b"\x82"
    assert reason(c.open, T.client(c.client_id), old) == "replayed"


def test_public_messages_verify_for_every_client_and_forgeries_do_not() -> None:
    r = relay()
    a, b = keyed_client(r, 1), keyed_client(r, 2)
    ev = encode(m.Event("ABCDE", 7, 1, 0, "card_played", {"card": "1-red-moon"}))
    signed = r.sign(T.ev("ABCDE"), ev)
    assert a.open(T.ev("ABCDE"), signed) == ev and b.open(T.ev("ABCDE"), signed) == ev
    assert reason(a.open, T.ev("FGHIJ"), signed) == "forged"  # moved to another match's topic
    assert reason(a.open, T.ev("ABCDE"), ev) == "unsealed"
    evil = RelaySeal(RelayIdentity(bytes(32), bytes(32)), EPOCH, 1000)
    assert reason(a.open, T.ev("ABCDE"), evil.sign(T.ev("ABCDE"), ev)) == "forged"
    altered = bytearray(signed)
    altered[15] ^= 1
    assert reason(a.open, T.ev("ABCDE"), bytes(altered)) == "forged"
    later = relay(b"epoch--2", 2000)
    assert reason(a.open, T.ev("ABCDE"), later.sign(T.ev("ABCDE"), ev)) == "other_epoch"


def test_a_status_is_taken_only_with_the_pins_keys_and_never_rolled_back() -> None:
    first = relay(b"epoch--1", 1000)
    c = ClientSeal(key(1), first.pin)
    online = encode(m.RelayStatus("relay-0", True))
    assert reason(c.seal, T.req(c.client_id), b"\x80") == "no_keys"
    assert reason(c.open, T.ev("ABCDE"), first.sign(T.ev("ABCDE"), b"\x80")) == "no_keys"
    impostor = RelaySeal(RelayIdentity(bytes(32), bytes(32)), b"epoch--9", 9000)
    assert reason(c.open_status, STATUS, impostor.status(STATUS, online)) == "wrong_pin"
    assert reason(c.open_status, STATUS, online) == "unsealed"  # a relay that does not seal: no downgrade
    assert reason(c.open_status, STATUS, first.sign(STATUS, online)) == "cut"  # signed, but no keys in it
    assert c.open_status(STATUS, first.status(STATUS, online)) == (online, True)
    assert c.open_status(STATUS, first.status(STATUS, online)) == (online, False)
    altered = bytearray(first.status(STATUS, online))
    altered[-70] ^= 1
    assert reason(c.open_status, STATUS, bytes(altered)) == "forged"
    second = relay(b"epoch--2", 2000)
    assert c.open_status(STATUS, second.status(STATUS, online)) == (online, True)  # restarted: keyed afresh
    assert c.epoch == b"epoch--2"
    assert reason(c.open_status, STATUS, first.status(STATUS, online)) == "stale"  # an old one replayed
    assert c.epoch == b"epoch--2"
    sealed = c.seal(T.req(c.client_id), b"\x80")
    assert second.open(T.req(c.client_id), sealed, 0) == b"\x80"


def test_wills_and_counters_are_distinct_nonces() -> None:
    r = relay()
    c = keyed_client(r)
    topic = T.req(c.client_id)
    assert c.seal(topic, b"\x80")[42:50] != c.will(topic, b"\x80", 1)[42:50]
    assert int.from_bytes(c.will(topic, b"\x80", 1)[42:50], "big") == WILL | 1


# ------------------------------------------------------------------------------------ whatever the bytes


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([0, 1, 2]))
def test_any_bytes_are_refused_with_a_seal_error_and_nothing_else(data: bytes, prefix: int) -> None:
    r = relay()
    c = keyed_client(r)
    heads = [b"", bytes((MAGIC,)), bytes((MAGIC, ord("C"))) + EPOCH + c.public]
    payload = heads[prefix] + data
    for fn, args in ((r.open, (T.req(c.client_id), payload, 0)), (c.open, (T.client(c.client_id), payload)),
                     (c.open, (T.ev("ABCDE"), payload)), (c.open_status, (STATUS, payload))):
        try:
            fn(*args)  # type: ignore[operator]
        except SealError:
            pass


# ------------------------------------------------------------------------------------ the shells' words


def test_the_relay_drops_a_flood_of_forgeries_in_one_line_a_reason_and_second(caplog: pytest.LogCaptureFixture) -> None:
    from relay.sealing import Sealing

    sealing = Sealing(IDENTITY, T)
    c = ClientSeal(key(1), sealing.pin)
    c.open_status(STATUS, sealing.wire(STATUS, encode(m.RelayStatus("relay-0", True))) or b"")
    topic = T.act("ABCDE", c.client_id)
    good = c.seal(topic, encode(m.Act(id=1, seq=1, action={})))
    with caplog.at_level("WARNING", logger="blink.relay"):
        for i in range(200):
            assert sealing.open(topic, encode(m.Act(id=i, seq=1, action={})), 1_000 + i) is None
            assert sealing.open(topic, good[:-1] + bytes((good[-1] ^ 1,)), 1_000 + i) is None
        assert sealing.open(topic, good, 2_000) is not None
        assert sealing.open(topic, good, 2_001) is None
        assert sealing.open(topic, encode(m.Ping(t0=1)), 2_000_000_000) is None  # a second later: said again
    lines = [r.getMessage() for r in caplog.records]
    assert sealing.dropped == {"unsealed": 201, "forged": 200, "replayed": 1}
    assert len(lines) == 4, lines
    assert "(199 more since the last line)" in lines[-1] and "unsealed" in lines[-1]
    # What the relay publishes: sealed for its client, signed for all, nothing for a client unknown.
    private = sealing.wire(T.client(c.client_id), b"\x80")
    assert private is not None and c.open(T.client(c.client_id), private) == b"\x80"
    assert c.open(T.ev("ABCDE"), sealing.wire(T.ev("ABCDE"), b"\x80") or b"") == b"\x80"
    assert sealing.wire(T.client("s" + "0" * 32), b"\x80") is None and sealing.dropped["no_keys"] == 1
    assert sealing.wire(T.snap("ABCDE"), b"") == b""  # clearing a retained message stays empty


def test_a_player_asks_for_its_view_again_when_a_message_for_it_may_have_been_spoilt() -> None:
    from client import ClientModel
    from client.model import Tampered

    model = ClientModel("s" + "1" * 32, "ann")
    assert model.on_message(Tampered("blink/v1/c/x", "forged"), 0) == []  # in no match: nothing to ask
    model.spectate("ABCDE")
    assert model.on_message(Tampered("blink/v1/m/0/ABCDE/ev", "forged"), 10) == [m.Resync("ABCDE", from_seq=0)]
    assert model.on_message(Tampered("blink/v1/m/0/ABCDE/ev", "cut"), 500_000_000) == []  # once a second
    assert model.on_message(Tampered("blink/v1/m/0/ABCDE/ev", "other_epoch"), 1_100_000_000) != []
    # A plain message or a replay is someone else's: the true one came too.
    for reason in ("unsealed", "replayed", "other_sender"):
        assert model.on_message(Tampered("blink/v1/c/x", reason), 5_000_000_000 * (1 + len(reason))) == []
