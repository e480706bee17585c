"""One flooding client against a real broker and relay: its excess is dropped before the relay
decodes it, it is told ``rate_limited``, and a player in the same window is served.

On the embedded broker the excess is dropped at the broker (``relay/embedded/gate.py``'s gate): what the
relay receives from the flooder is counted where it enters the relay (the relay stands inside the
broker: what the broker hands it, ``relay/embedded/inprocess.py``) and must stay within the
token bucket's allowance -- ``burst + rate x elapsed`` -- a bound that holds however slow the
machine is (a slower run only makes ``elapsed`` longer). On Mosquitto, which cannot limit a
client's rate, the relay's intake (``relay.limits.Intake``) drops it before decoding, at 1.5x the
core's rates, and the core answers what gets through. Rates are set low here so that a short
flood meets them; nothing waits a fixed time and nothing is timed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, Callable

import pytest

from bench.fuzz import RawMqtt
from client import event_line, new_client_id, run_match
from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.codec import DecodeError, decode_all, encode
from protocol.topics import Topics
from relay.limits import NS, RELAY_INTAKE_SLACK, Intake
from mqttkit.packets import Message
from relay.embedded.inprocess import LocalSession
from relay.hosting import LocalServer
from relay.model import RelayConfig
from tests.logcheck import check_blink_log

pytestmark = pytest.mark.integration

T = Topics()
DEADLINE_S = 120.0
CFG = RelayConfig(req_rate=2.0, req_burst=10, act_rate=5.0, act_burst=20)
PLAYER_PINGS = 6  # under the player's own request burst (10): a player at its own pace
MATCH_FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}  # a short bot match
FLOOD_MAX = 6_000  # messages: enough to meet the rates many times over, few enough for a busy machine


async def until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Peer:
    """A bare MQTT connection (QoS 0, like every blink client) keeping what it is sent on its own topic."""

    def __init__(self, prefix: str) -> None:
        self.id = new_client_id(prefix)
        self.got: list[Any] = []
        self.conn = RawMqtt(self.id, self._on)

    def _on(self, topic: str, payload: bytes) -> None:
        try:
            self.got.extend(decode_all(payload))
        except DecodeError:
            pass

    async def start(self, address: BrokerAddress) -> None:
        await self.conn.connect(address.host, address.port)
        await self.conn.subscribe(T.client(self.id))
        await self.ping(-1)  # a barrier: the subscription is live once this is answered

    async def ping(self, t0: int) -> None:
        self.conn.publish(T.req(self.id), encode(m.Ping(t0=t0)))
        await self.conn.drain()
        await until(lambda: any(isinstance(x, m.Pong) and x.t0 == t0 for x in self.got), f"the Pong to {t0}")

    def limited(self, kind: type[m.RequestRejected] | type[m.ActionRejected]) -> list[Any]:
        return [x for x in self.got if isinstance(x, kind) and x.code == "rate_limited"]


class Counting:
    """Counts, by client and kind, every message the relay receives from the broker, where it enters
    the relay (its intake's ``admit``, the first thing the shell does with a message)."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.received: Counter[str] = Counter()  # "r/C" / "a/C" -> received
        self.passed: Counter[str] = Counter()  # ... -> passed on to be decoded
        self._admit = intake.admit
        self._refuse_more = intake.refuse_more
        intake.admit = self.admit  # type: ignore[method-assign]
        intake.refuse_more = self.refuse_more  # type: ignore[method-assign]
        self.bulk = 0  # received but refused in bulk (the rest of a read, or dropped unbuilt by the connection)

    def admit(self, topic: str, now_ns: int) -> bool:
        key = Intake.key(topic) or topic
        self.received[key] += 1
        ok = self._admit(topic, now_ns)
        if ok:
            self.passed[key] += 1
        return ok

    def refuse_more(self, n: int) -> None:
        """The relay's intake refuses a flooder's messages in bulk (``Relay._on_messages``,
        ``_on_dropped``): counted here as received, under the refused sender and kind."""
        self.received[self.intake._refused[0]] += n  # noqa: SLF001 - the bucket being charged
        self.bulk += n
        self._refuse_more(n)


class Entering:
    """Counts, by client and kind, every message the embedded broker hands the relay standing inside
    it (the session's ``on_messages``: where a message enters the relay)."""

    def __init__(self, session: LocalSession) -> None:
        self.received: Counter[str] = Counter()
        hand_on = session.on_messages

        def counted(messages: list[Message]) -> None:
            for msg in messages:
                self.received[Intake.key(msg.topic or "") or (msg.topic or "")] += 1
            hand_on(messages)
        session.on_messages = counted


async def flood_while_a_player_plays(address: BrokerAddress, flooder: Peer, player: Peer,
                                     accounted: Callable[[int], bool]) -> tuple[int, float]:
    """The flooder sends Pings and Acts (alternately, at full speed) until the player has done its
    pings -- which it starts once the flooder has been told ``rate_limited`` for both -- then stops;
    returns (messages the flooder sent, seconds from its connecting to the end) once
    ``accounted(sent)`` holds."""
    t0 = time.monotonic()
    await flooder.start(address)
    await player.start(address)
    act = encode(m.Act(id=7, seq=1, action={"t": "x"}))
    ping = encode(m.Ping(t0=0))
    flood = Flood(flooder, [(T.req(flooder.id), ping), (T.act("FLOOD", flooder.id), act)] * 50, FLOOD_MAX,
                  sent=1)  # its barrier ping
    task = asyncio.create_task(flood.run())
    try:
        await until(lambda: bool(flooder.limited(m.RequestRejected)) and bool(flooder.limited(m.ActionRejected)),
                    "the flooder to be told rate_limited for requests and actions")
        for i in range(PLAYER_PINGS):
            await player.ping(i)
    finally:
        flood.stop.set()
        await task
    await until(lambda: accounted(flood.sent), "every flooding message to be accounted for")
    elapsed = time.monotonic() - t0
    for p in (flooder, player):
        await p.conn.close()
    return flood.sent, elapsed


class Flood:
    """A client at full speed: each round publishes ``burst`` (topic, payload) pairs and lets the
    loop turn, until ``stop`` is set or ``limit`` messages have gone; ``sent`` counts them."""

    def __init__(self, flooder: Peer, burst: list[tuple[str, bytes]], limit: int, sent: int = 0) -> None:
        self.flooder, self.burst, self.limit, self.sent = flooder, burst, limit, sent
        self.stop = asyncio.Event()

    async def run(self) -> None:
        conn = self.flooder.conn
        while not self.stop.is_set() and self.sent < self.limit:
            for topic, payload in self.burst:
                conn.publish(topic, payload)
            self.sent += len(self.burst)
            await conn.drain()
            await asyncio.sleep(0)


def test_the_embedded_broker_drops_a_flooders_excess_and_tells_it_while_a_player_is_served() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=5, config=CFG) as server:
            assert server.broker is not None and server.relay is not None
            broker, relay = server.broker, server.relay
            inlet = broker._routes().inlet  # noqa: SLF001 - the relay inside the broker
            assert isinstance(inlet, LocalSession)
            seen = Entering(inlet)
            flooder, player = Peer("flood"), Peer("player")
            gate = broker._broker  # noqa: SLF001 - its count of publishes dropped for their rate
            assert gate is not None

            def accounted(sent: int) -> bool:  # every message sent: dropped at the broker or received
                return gate.limited + seen.received[f"r/{flooder.id}"] + seen.received[f"a/{flooder.id}"] >= sent

            sent, elapsed = await flood_while_a_player_plays(server.address, flooder, player, accounted)
            # What reached the relay from the flooder: within each bucket's allowance.
            req, act = seen.received[f"r/{flooder.id}"], seen.received[f"a/{flooder.id}"]
            assert 0 < req <= CFG.req_burst + CFG.req_rate * elapsed + 1, (req, elapsed)
            assert 0 < act <= CFG.act_burst + CFG.act_rate * elapsed + 1, (act, elapsed)
            # ... and not even a trickle at the rate: a sender that keeps on above its rate gets
            # nothing past the gate's first burst (each refusal costs a token too). The gate reads
            # the flooder's packets from its socket buffer, never empty while it floods, so this
            # holds however slowly the machine runs either side.
            assert req <= broker.intake.req[1] and act <= broker.intake.act[1], (req, act, broker.intake.act)
            assert gate.limited == sent - req - act > sent // 2  # the rest: dropped at the broker
            assert relay.intake.dropped == 0  # the broker had already done it
            # Told, at most once a second per kind; an action's refusal names the action.
            told_req, told_act = flooder.limited(m.RequestRejected), flooder.limited(m.ActionRejected)
            assert 1 <= len(told_req) <= elapsed + 2 and 1 <= len(told_act) <= elapsed + 2
            assert all(x.match == "FLOOD" and x.id == 7 for x in told_act)
            # The player, in the same window: every ping answered, nothing refused.
            assert sorted(x.t0 for x in player.got if isinstance(x, m.Pong)) == list(range(-1, PLAYER_PINGS))
            assert not [x for x in player.got if isinstance(x, (m.RequestRejected, m.ActionRejected))]
            assert seen.received[f"r/{player.id}"] == PLAYER_PINGS + 1

    asyncio.run(main())


def test_on_mosquitto_the_relays_intake_drops_a_flooders_excess_before_decoding(mosquitto: BrokerAddress) -> None:
    async def main() -> None:
        async with LocalServer(mosquitto.login_url, seed=6, config=CFG) as server:
            assert server.relay is not None
            relay = server.relay
            seen = Counting(relay.intake)
            flooder, player = Peer("flood"), Peer("player")
            unbuilt = Counter[bytes]()  # messages the relay's connection dropped before building them
            on_dropped = relay._on_dropped  # noqa: SLF001

            def count_dropped(topic: bytes, n: int) -> None:
                unbuilt[topic] += n
                on_dropped(topic, n)

            relay._on_dropped = count_dropped  # type: ignore[method-assign]  # noqa: SLF001

            def accounted(sent: int) -> bool:
                # Mosquitto may drop QoS 0 messages a slow subscriber cannot take: wait for what
                # the test needs, not for every message.
                return relay.intake.dropped > 0

            _, elapsed = await flood_while_a_player_plays(server.address, flooder, player, accounted)
            passed_req, passed_act = seen.passed[f"r/{flooder.id}"], seen.passed[f"a/{flooder.id}"]
            s = RELAY_INTAKE_SLACK
            assert 0 < passed_req <= s * (CFG.req_burst + CFG.req_rate * elapsed) + 1, (passed_req, elapsed)
            assert 0 < passed_act <= s * (CFG.act_burst + CFG.act_rate * elapsed) + 1, (passed_act, elapsed)
            received = seen.received[f"r/{flooder.id}"] + seen.received[f"a/{flooder.id}"]
            assert relay.intake.dropped == received - passed_req - passed_act > 0
            assert seen.bulk > 0  # most of them refused in bulk, not one by one ...
            # ... many before anything was built for them: only the flooder's own topics, never the player's
            assert sum(unbuilt.values()) > 0
            assert set(unbuilt) <= {T.req(flooder.id).encode(), T.act("FLOOD", flooder.id).encode()}
            # The core saw more than its own rates allow (the intake's slack) and answered the flood.
            assert flooder.limited(m.RequestRejected) and flooder.limited(m.ActionRejected)
            assert relay.core.stats["limited"]["dropped"] > 0
            assert sorted(x.t0 for x in player.got if isinstance(x, m.Pong)) == list(range(-1, PLAYER_PINGS))
            assert not [x for x in player.got if isinstance(x, (m.RequestRejected, m.ActionRejected))]
            assert seen.passed[f"r/{player.id}"] == seen.received[f"r/{player.id}"] == PLAYER_PINGS + 1

    asyncio.run(main())


def test_a_bot_match_on_the_embedded_broker_gets_every_verdict_while_a_client_floods_throughout() -> None:
    """Behaviour, not speed: one client sends actions at full speed for the whole of a bot match
    (default limits); the match plays out valid, its players are never refused for their rate,
    the flooder is told, and its connection is still served afterwards (a ping answered)."""

    async def main() -> None:
        async with LocalServer(None, seed=9) as server:
            gate = server.broker._broker if server.broker is not None else None  # noqa: SLF001
            assert gate is not None
            flooder = Peer("flood")
            await flooder.start(server.address)
            act = encode(m.Act(id=3, seq=1, action={"t": "x"}))
            flood = Flood(flooder, [(T.act("FLOOD", flooder.id), act)] * 100, 200_000)
            task = asyncio.create_task(flood.run())
            try:
                await until(lambda: bool(flooder.limited(m.ActionRejected)), "the flooder to be told rate_limited")
                result = await run_match(server.address, "blink", 2, MATCH_FAST, 9, 0.03, DEADLINE_S)
                flooding = not task.done()
            finally:
                flood.stop.set()
                await task
            assert flooding  # the flood went on for the whole match
            assert gate.limited > 0 and result.rejected.get("rate_limited", 0) == 0
            assert any(e.type == "match_over" for e in result.events)
            check_blink_log([event_line(e) for e in result.events], result.players)
            await flooder.conn.close()

    asyncio.run(main())


def test_intake_limits_each_client_and_kind_tells_once_a_second_and_forgets_only_the_idle() -> None:
    i = Intake(act_rate=5, act_burst=20, req_rate=2, req_burst=10, max_clients=4)
    a, r = "blink/v1/m/blink/ABCDE/act/c1", "blink/v1/lobby/req/c1"
    assert sum(i.admit(a, 0) for _ in range(100)) == 20  # the burst, then nothing until time passes
    assert sum(i.admit(r, 0) for _ in range(100)) == 10  # requests have their own bucket
    assert i.admit("blink/v1/lobby/req/c2", 0)  # and every client its own
    assert i.admit("blink/v1/m/x/y/ev", 0)  # not a client's topic: not this limit's business
    assert not i.admit(r, NS // 4)  # half a token back: still refused
    assert i.first_refusal() and i.tell(NS // 4)  # about the request refused: log it, tell its sender
    # Still flooding a second later: nothing, not a trickle of ``act_rate`` (each refusal cost a
    # token too, down to -burst) ...
    assert sum(i.admit(a, NS) for _ in range(100)) == 0
    # ... until it pauses: five quiet seconds earn 25 tokens, of which 20 were owed.
    assert sum(i.admit(a, 6 * NS) for _ in range(100)) == 5
    assert i.dropped == 80 + 90 + 1 + 100 + 95 and i.admitted == 20 + 10 + 1 + 5
    assert i.first_refusal() and not i.first_refusal()  # log once per burst (the actions' first)
    assert i.tell(6 * NS) and not i.tell(6 * NS + NS // 2) and i.tell(7 * NS)  # tell once a second, per kind
    assert not i.admit(r, NS) and not i.tell(NS)  # refused again: told 3/4 s ago
    assert sum(i.admit(r, 12 * NS) for _ in range(20)) == 10  # quiet long enough: a whole burst again
    for n in range(3, 8):  # past max_clients, long after: the refilled (idle) buckets are forgotten,
        i.admit(f"blink/v1/lobby/req/c{n}", 100 * NS)  # the ones just used (not full) are kept
    assert sorted(i.buckets) == [f"r/c{n}" for n in range(3, 8)] and not i.told
    flooding = Intake(act_rate=5, act_burst=1, req_rate=2, req_burst=1, max_clients=2)
    for n in range(10):  # every one over its rate: none is forgotten (a fresh bucket would be a fresh burst)
        t = f"blink/v1/lobby/req/f{n}"
        flooding.admit(t, 0)
        assert not flooding.admit(t, 0)
    assert len(flooding.buckets) == 10


def test_intake_holds_a_sender_at_its_floor_only_until_it_could_have_a_token_back() -> None:
    """``hold_ns``/``refuse``: what the relay's connection may drop unbuilt (on Mosquitto) is
    exactly what ``admit`` would have refused, one by one."""
    a = "blink/v1/m/blink/ABCDE/act/c1"
    bulk = Intake(act_rate=10, act_burst=20, req_rate=2, req_burst=10)
    one = Intake(act_rate=10, act_burst=20, req_rate=2, req_burst=10)
    assert sum(bulk.admit(a, 0) for _ in range(21)) == 20 and bulk.hold_ns() == 0  # refused, not at the floor
    assert sum(bulk.admit(a, 0) for _ in range(18)) == 0 and bulk.hold_ns() == 0
    assert not bulk.admit(a, 0) and bulk.hold_ns() == int(20.5 / 10 * NS)  # at -burst: ~2 s
    assert sum(one.admit(a, 0) for _ in range(40)) == 20
    # Within the hold, 500 more arrive over 1.9 s: refused in bulk or one by one, the same.
    hold = bulk.refuse(a, 500, 19 * NS // 10)
    assert sum(one.admit(a, 19 * NS // 10) for _ in range(500)) == 0
    assert hold == int(20.5 / 10 * NS) and bulk.dropped == one.dropped and bulk.admitted == one.admitted == 20
    assert bulk.buckets["a/c1"].tokens == one.buckets["a/c1"].tokens == -20
    # The sender stops: after the hold it gets its tokens back as if every message had been seen.
    assert [bulk.admit(a, 8 * NS) for _ in range(25)] == [one.admit(a, 8 * NS) for _ in range(25)]
    assert bulk.refuse("blink/v1/lobby/req/nobody", 5, 0) == 0 and bulk.refuse(a, 0, 0) == 0  # nothing to hold


def test_publishes_the_broker_drops_are_still_acknowledged_at_qos_1_and_2() -> None:
    """A client publishing at QoS 1 or 2 (blink's clients use 0) waits for acknowledgements: the
    gate must give them for what it drops, or the client's in-flight window would stall."""

    def packet(first: int, body: bytes) -> bytes:
        out, n = bytearray([first]), len(body)
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out) + body

    def utf8(text: str) -> bytes:
        return len(text.encode()).to_bytes(2, "big") + text.encode()

    async def main() -> None:
        async with LocalServer(None, seed=7, config=RelayConfig(req_rate=0.5, req_burst=2)) as server:
            assert server.broker is not None and server.broker._broker is not None  # noqa: SLF001
            gate = server.broker._broker  # noqa: SLF001
            cid = new_client_id("qos")
            reader, writer = await asyncio.open_connection(server.address.host, server.address.port)
            writer.write(packet(0x10, utf8("MQTT") + bytes([4, 0x02, 0, 0]) + utf8(cid)))
            assert (await asyncio.wait_for(reader.readexactly(4), DEADLINE_S))[3] == 0  # CONNACK: accepted
            ping, topic = encode(m.Ping(t0=1)), utf8(T.req(cid))
            for pid in range(1, 11):  # QoS 1
                writer.write(packet(0x32, topic + pid.to_bytes(2, "big") + ping))
            for pid in range(11, 16):  # QoS 2
                writer.write(packet(0x34, topic + pid.to_bytes(2, "big") + ping))
            await writer.drain()
            acks: dict[int, set[int]] = {}  # packet type -> packet ids

            async def read_until(want: Callable[[], bool]) -> None:
                while not want():
                    head = await asyncio.wait_for(reader.readexactly(2), DEADLINE_S)
                    body = await reader.readexactly(head[1])  # acks and our answers are short
                    if head[0] >> 4 in (4, 5, 7):
                        acks.setdefault(head[0] >> 4, set()).add(int.from_bytes(body[:2], "big"))

            await read_until(lambda: acks.get(4, set()) >= set(range(1, 11)) and acks.get(5, set()) >= set(range(11, 16)))
            for pid in range(11, 16):
                writer.write(packet(0x62, pid.to_bytes(2, "big")))  # PUBREL
            await writer.drain()
            await read_until(lambda: acks.get(7, set()) >= set(range(11, 16)))  # PUBCOMP for each
            assert gate.limited > 0  # most of the 15 were over the rate: the gate answered those itself
            writer.close()

    asyncio.run(main())
