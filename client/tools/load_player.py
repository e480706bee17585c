"""One simulated player of the load generator: an MQTT connection that speaks the relay's protocol.

How this works
--------------
``LoadPlayer`` connects with its own client id, creates or joins its match, and then acts on what
arrives: the PUBLISHes of one socket read come to ``on_messages`` as one list, stamped once; only
its private topic and (for a game that sends less) its match's events are decoded, the snapshot is
only counted. It plays on its predicted state -- the last confirmed view plus its own plays not yet
confirmed -- with at most ``MAX_IN_FLIGHT`` plays awaiting a verdict, choosing moves with the bots'
policy and the real rules engine, and asks for a rematch when a match is over. Its timers are the
run's (``LoadRun.later``); what it measures (verdict times, bad messages, lost connections) goes
to the run.

Clock samples, as the client takes them (``protocol/clock.py``): each verdict carries the relay's
receive and send times, so a play answered is a round trip measured (``run.round_trip``), and the
run pings a player only while it is idle (``answered_ns``: no verdict within the ping period).

Decoding once. The two players of a match read the same bytes for each event bundle: the first to
read them decodes the messages and each event's game fact (``Game.decode_event``) for both, into
``shared``; the second takes them from there (decoded values are immutable).

A player knows its run only as ``PlayerRun``, the members it uses, and ``LoadRun``
(``client/tools/load.py``) has them: the run makes and owns its players, so only it imports the
other module, and a player can be driven by any object with those members.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from client.bots import RandomChance
from client.tools.load_config import (CONNECT_TIMEOUT_S, KEEPALIVE_S, LEAVE, MAX_IN_FLIGHT, SHARED_EVENTS,
                                      SUBSCRIBE_PID, LoadConfig, LoadError)
from mqttkit.packets import pack_publish, pack_subscribe
from protocol import messages as m
from protocol.codec import DecodeError, decode_all, encode
from protocol.events import TypedEvent
from protocol.rules import AnyGame
from protocol.rules.base import Accepted
from protocol.seal import ClientSeal, SealError
from protocol.topics import Topics

if TYPE_CHECKING:
    from mqttkit import BrokerAddress
    from mqttkit.connection import MqttConnection
    from mqttkit.packets import Message


class PlayerRun(Protocol):
    """What a player uses of the run it belongs to (``LoadRun``): settings, the shared connection
    limit and timers, and the counters and measurements it reports to."""

    @property
    def cfg(self) -> LoadConfig: ...
    @property
    def address(self) -> BrokerAddress: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def topics(self) -> Topics: ...
    @property
    def rules(self) -> AnyGame: ...
    @property
    def reaction_s(self) -> float: ...
    @property
    def connect_sem(self) -> asyncio.Semaphore: ...
    @property
    def acting(self) -> bool: ...  # every match is set up and the run not stopped: play
    @property
    def closing(self) -> bool: ...  # the run is ending: a dropped connection is not a loss
    @property
    def relay_status(self) -> tuple[str, bytes] | None: ...  # sealed play: the status that keys a seal

    # counters the player adds to
    bounced: int
    messages_in: int
    bad_messages: int
    lost_connections: int

    @property
    def request_rejected(self) -> Counter[str]: ...

    def later(self, delay: float, fn: Callable[..., None], *args: object) -> None: ...
    def sent(self, now_ns: int) -> None: ...
    def verdict(self, sent_ns: int | None, msg: m.ActionAccepted | m.ActionRejected, now_ns: int) -> None: ...
    def round_trip(self, rtt_ns: int) -> None: ...


@dataclass(slots=True)
class InFlight:
    """A play sent and not yet in the confirmed view: its id, the game's action, and the seq the
    relay accepted it at (None until it did)."""

    id: int
    action: object
    accepted_seq: int | None = None


class LoadPlayer:
    """One simulated player: an MQTT connection, its confirmed view and its plays in flight."""

    def __init__(self, run: PlayerRun, name: str, rng: random.Random) -> None:
        self.run = run
        self.name = name
        self.rng = rng
        self.chance = RandomChance(rng)
        #: Sealed play (the URL's pin): this player's key, keyed from the relay's status; the client
        #: id is the key's hash, and the MQTT session's id a secret of its own.
        self.seal: ClientSeal | None = None
        if run.address.pin is not None and run.relay_status is not None:
            self.seal = ClientSeal(os.urandom(32), run.address.pin)
            self.seal.open_status(*run.relay_status)
        self.cid = self.seal.client_id if self.seal is not None else f"ld{os.urandom(6).hex()}"
        self.mqtt_id = f"ld{os.urandom(12).hex()}" if self.seal is not None else self.cid
        t = run.topics
        self.private_topic = t.client(self.cid)
        self.req_topic = t.req(self.cid)
        self.act_topic = ""
        self.ev_topic: str | None = None  # the match's public events, when this player applies them
        self.match_topics = t  # the topics of the shard the match lives in (MatchJoined names it)
        self.mqtt: MqttConnection | None = None
        self.match: str | None = None
        self.seat: int | None = None
        self.joined: asyncio.Future[str] | None = None
        self.view_wire: dict[str, object] | None = None
        self.view_seq = -1
        self.view_game = -1
        self.view_ns = 0  # when the current view arrived (the "reaction" clock starts there)
        self.status = ""
        self._confirmed: object = None  # the decoded view, cached
        self._predicted: object = None  # confirmed + own unconfirmed plays, cached
        self.inflight: list[InFlight] = []
        self.awaiting: dict[int, int] = {}  # action id -> send time (perf_counter_ns), until a verdict
        self.next_id = 1
        self.busy = False  # a reaction is running: a move is chosen and waits to be made
        self.rematched_game = -1
        # A game that sends less (``Game.apply_event``): events and private updates not yet applied.
        #: (the event, its game fact decoded, or None if that failed: a doubt when it is applied)
        self.ahead: dict[int, tuple[m.Event, TypedEvent | None]] = {}
        self.private: dict[int, m.PrivateUpdate] = {}
        #: Event bundles decoded by one player of the match for the other (set by ``LoadRun.setup_match``).
        self.shared: dict[bytes, list[tuple[m.Event, TypedEvent | None]]] = {}
        self.lost = False
        #: When (perf_counter_ns) the latest verdict with the relay's stamps came: a clock sample, so
        #: no ping is due for a period after it (``LoadRun.pinger``).
        self.answered_ns: int | None = None

    # --- connection

    async def connect(self) -> None:
        from mqttkit import NODELAY
        from mqttkit.connection import Will, connect

        run = self.run
        self.joined = asyncio.get_running_loop().create_future()
        async with run.connect_sem:
            leave = LEAVE if self.seal is None else self.seal.will(self.req_topic, LEAVE, 1)
            conn = await connect(run.address.host, run.address.port, client_id=self.mqtt_id,
                                 on_messages=self.on_messages,
                                 username=run.address.username, password=run.address.password,
                                 will=Will(self.req_topic, leave, qos=1), keepalive=KEEPALIVE_S,
                                 socket_options=NODELAY, timeout=max(CONNECT_TIMEOUT_S, run.cfg.timeout_s),
                                 tls=run.address.ssl_context())
        conn.on_close(self.on_close)
        self.mqtt = conn
        await conn.subscribe([(self.private_topic, 0)], timeout=max(CONNECT_TIMEOUT_S, run.cfg.timeout_s))

    def on_close(self, reason: Exception) -> None:
        # A player whose connection dropped stays lost (and counted): it is not reconnected.
        self.mqtt = None
        if not self.run.closing and not self.lost:
            self.lost = True
            self.run.lost_connections += 1

    async def close(self, leave: bool) -> None:
        conn, self.mqtt = self.mqtt, None
        if conn is None:
            return
        try:
            if leave:
                conn.write(self._pack(self.req_topic, LEAVE if self.seal is None else self.seal.seal(self.req_topic, LEAVE)))
            await conn.disconnect()
        except Exception:  # noqa: BLE001 - closing; the broker may be gone
            pass

    @staticmethod
    def _pack(topic: str, payload: bytes) -> bytearray:
        buf = bytearray()
        pack_publish(buf, topic, payload)
        return buf

    def publish(self, topic: str, msg: object) -> None:
        conn = self.mqtt
        if conn is not None:
            buf = bytearray()
            payload = encode(msg)
            pack_publish(buf, topic, payload if self.seal is None else self.seal.seal(topic, payload))
            try:
                conn.write(buf)
            except Exception:  # noqa: BLE001 - a connection that just dropped; counted by on_close
                pass

    def request(self, msg: object) -> None:
        self.publish(self.req_topic, msg)

    # --- what arrives

    def on_messages(self, messages: list[Message]) -> None:
        """The PUBLISHes of one socket read (``mqttkit.packets.Message``), stamped once.

        Only what the player acts on is decoded: its private topic and, for a game that sends
        less, its match's public events. The snapshot (and the events of a game that sends whole
        views) are carried by the broker and counted, never unpacked."""
        run = self.run
        run.messages_in += len(messages)
        now = time.perf_counter_ns()
        private, events = self.private_topic, self.ev_topic
        for message in messages:
            topic = message.topic
            if topic == private:
                self.on_private(message.payload, now)
            elif topic == events:
                self.on_event(message.payload, now)

    def on_event(self, payload: bytes, now: int) -> None:
        # Both players of a match get the same bytes for each event: the first to read them decodes
        # them for both (a decoded message is immutable), the second takes it out of ``shared``.
        shared = self.shared
        evs = shared.pop(payload, None)
        if evs is None:
            try:
                # a step's events for the match come as one bundle (verified once for both players)
                msgs = decode_all(payload if self.seal is None else self.seal.open(self.ev_topic or "", payload))
            except (DecodeError, SealError):
                self.run.bad_messages += 1
                return
            evs = [(ev, self._fact(ev)) for ev in msgs if type(ev) is m.Event]
            if len(shared) < SHARED_EVENTS:  # (bounded: the other player's connection may be gone)
                shared[payload] = evs
        ahead = False
        view_seq, book = self.view_seq, self.ahead
        for one in evs:
            seq = one[0].seq
            if seq > view_seq and len(book) < 4096:
                book[seq] = one
                ahead = True
        if ahead and self.catch_up(now):
            self.poke()

    def _fact(self, ev: m.Event) -> TypedEvent | None:
        """The game's fact an event tells, or None if it cannot be read (a doubt when it is applied)."""
        try:
            return self.run.rules.decode_event(ev)
        except (ValueError, KeyError, TypeError, IndexError):
            return None

    def on_private(self, payload: bytes, now: int) -> None:
        try:
            # a verdict and the cards it drew come as one bundle
            msgs = decode_all(payload if self.seal is None else self.seal.open(self.private_topic, payload))
        except (DecodeError, SealError):
            self.run.bad_messages += 1
            return
        for msg in msgs:
            self.on_private_message(msg, now)

    def on_private_message(self, msg: object, now: int) -> None:
        # (the messages of every play first: a private update and a verdict)
        run = self.run
        kind = type(msg)
        if kind is m.PrivateUpdate:
            assert isinstance(msg, m.PrivateUpdate)
            if msg.match == self.match and msg.game_index == self.view_game:
                if msg.seq <= self.view_seq:  # it came after its event: apply it now
                    self.apply_late(msg)
                else:
                    self.private[msg.seq] = msg
                if self.catch_up(now):
                    self.poke()
        elif kind is m.ActionAccepted or kind is m.ActionRejected:
            assert isinstance(msg, (m.ActionAccepted, m.ActionRejected))
            self.on_verdict(msg, now)
        elif isinstance(msg, m.ViewUpdated):
            if self.apply_view(msg, now):
                self.poke()
        elif isinstance(msg, m.Pong):
            run.round_trip(time.time_ns() - msg.t0)
        elif isinstance(msg, m.MatchJoined):
            self.on_joined(msg)
        elif isinstance(msg, m.Probe):
            self.request(m.ProbeReply(msg.sent_ns))
        elif isinstance(msg, m.RequestRejected):
            if self.joined is not None and not self.joined.done():
                self.joined.set_exception(LoadError(f"the relay refused: {msg.code}: {msg.detail}"))
            else:
                run.request_rejected[msg.code] += 1

    def on_joined(self, msg: m.MatchJoined) -> None:
        self.match, self.seat = msg.match, msg.seat
        self.match_topics = Topics(self.run.topics.prefix, msg.shard)
        self.act_topic = self.match_topics.act(msg.match, self.cid)
        ev_topic = self.match_topics.ev(msg.match)
        # Events are decoded only by a game that sends less (the player applies them); else counted.
        self.ev_topic = ev_topic if self.run.rules.sends_less else None
        if self.mqtt is not None:
            # Not awaited (one SUBACK each would cost a task per player): the broker takes a
            # connection's packets in order, so these apply before anything the player sends next.
            try:
                self.mqtt.write(pack_subscribe(SUBSCRIBE_PID, [(ev_topic, 0), (self.match_topics.snap(msg.match), 0)]))
            except Exception:  # noqa: BLE001 - a connection that just dropped; counted by on_close
                pass
        if self.joined is not None and not self.joined.done():
            self.joined.set_result(msg.match)

    def apply_view(self, msg: m.ViewUpdated, now_ns: int) -> bool:
        """Take a private view from the relay as the confirmed state; False if it is stale.

        The one place that turns what the relay sent into the state a player acts on: today every
        change brings a whole view; with deltas this applies them instead."""
        if msg.match != self.match or msg.seq < self.view_seq:
            return False
        if msg.game_index != self.view_game:
            self.inflight.clear()  # plays of the last game: they still await verdicts, not prediction
        self.view_wire, self.view_seq, self.view_game, self.view_ns = msg.state, msg.seq, msg.game_index, now_ns
        self.status = str(msg.match_state.get("status", ""))
        self._confirmed = self._predicted = None
        self.inflight = [e for e in self.inflight if e.accepted_seq is None or e.accepted_seq > msg.seq]
        self.private = {s: u for s, u in self.private.items() if s > msg.seq and u.game_index == msg.game_index}
        self.catch_up(now_ns)
        return True

    def catch_up(self, now_ns: int) -> bool:
        """Apply the public events (and the private update after each) that follow the confirmed
        view, in seq order, with the game's own applier; a doubt asks for the whole view again."""
        rules = self.run.rules
        if rules.apply_event is None or rules.apply_private is None or self.seat is None:
            return False
        ahead, private, seat, game = self.ahead, self.private, self.seat, self.view_game
        apply_event, apply_private = rules.apply_event, rules.apply_private
        seq = self.view_seq
        view = self._confirmed
        while (one := ahead.pop(seq + 1, None)) is not None:
            ev, fact = one
            if ev.game_index != game:
                ahead[ev.seq] = one  # a new game: its whole view comes first
                break
            if view is None and (self.state() is None or (view := self._confirmed) is None):
                break
            try:
                if fact is None:
                    raise ValueError("an event that could not be read")
                view = apply_event(view, seat, fact)
                update = private.pop(ev.seq, None) if private else None
                if update is not None:
                    view = apply_private(view, seat, update.delta)
            except (ValueError, KeyError, TypeError, IndexError):
                self.run.bad_messages += 1
                self.request(m.Resync(ev.match))
                break
            seq = ev.seq
        if seq == self.view_seq:
            moved = False
        else:
            moved = True
            self._confirmed, self.view_seq, self.view_ns, self._predicted = view, seq, now_ns, None
            if self.inflight:  # (plays the view now holds are no longer predicted)
                self.inflight = [e for e in self.inflight if e.accepted_seq is None or e.accepted_seq > seq]
        if ahead:
            for old in [s for s in ahead if s <= seq]:
                del ahead[old]
        return moved

    def apply_late(self, update: m.PrivateUpdate) -> None:
        apply_private = self.run.rules.apply_private
        if apply_private is None or self.seat is None or (self._confirmed is None and self.state() is None):
            return
        try:
            self._confirmed, self._predicted = apply_private(self._confirmed, self.seat, update.delta), None
        except (ValueError, KeyError, TypeError, IndexError):
            self.run.bad_messages += 1
            self.request(m.Resync(update.match))

    def state(self) -> object:
        """The predicted state: the confirmed view with this player's unconfirmed plays applied."""
        if self._predicted is None:
            if self._confirmed is None:
                if self.view_wire is None:
                    return None
                try:
                    self._confirmed = self.run.rules.from_wire(self.view_wire)
                except ValueError:
                    self.run.bad_messages += 1
                    self.view_wire = None
                    return None
            st = self._confirmed
            for e in self.inflight:
                result = self.run.rules.apply(st, self.seat, e.action)
                if isinstance(result, Accepted):
                    st = result.state
            self._predicted = st
        return self._predicted

    def on_verdict(self, msg: m.ActionAccepted | m.ActionRejected, now_ns: int) -> None:
        sent = self.awaiting.pop(msg.id, None)
        run = self.run
        run.verdict(sent, msg, now_ns)
        if sent is not None and msg.recv_ns and msg.sent_ns >= msg.recv_ns:
            # A play is a ping: the time out and back, less the relay's own (see protocol/clock.py).
            self.answered_ns = now_ns
            run.round_trip(now_ns - sent - (msg.sent_ns - msg.recv_ns))
        inflight = self.inflight
        if type(msg) is m.ActionAccepted:
            view_seq = self.view_seq
            for entry in inflight:
                if entry.id == msg.id:
                    entry.accepted_seq = msg.seq
                    if msg.seq <= view_seq:  # the view holds it already: no longer predicted
                        inflight.remove(entry)
                        self._predicted = None
                    # (else the prediction stands: the same view, the same plays on it)
                    break
        else:
            self.inflight = [e for e in inflight if e.id != msg.id]
            self._predicted = None
        self.poke()

    # --- what the player does

    def poke(self) -> None:
        """Something changed: choose a move unless one is already on its way."""
        if not self.busy and self.run.acting and self.match is not None:
            self.decide()

    def decide(self) -> None:
        run = self.run
        if self.status == "over":
            if self.rematched_game != self.view_game:
                self.rematched_game = self.view_game
                self._later(self.reaction(), self._rematch)
            return
        if self.status != "playing" or self.seat is None:
            return
        inflight = self.inflight
        if len(inflight) >= MAX_IN_FLIGHT and sum(1 for e in inflight if e.accepted_seq is None) >= MAX_IN_FLIGHT:
            return
        st = self.state()
        if st is None:
            return
        action = run.rules.bot_action(st, self.seat, self.chance)
        if action is None:
            return
        self._later(self.reaction(), self._fire, action, self.view_seq)

    def _later(self, delay: float, fn: Callable[..., None], *args: object) -> None:
        self.busy = True
        if delay <= 0:
            self.run.loop.call_soon(fn, *args)
        else:
            self.run.later(delay, fn, *args)

    def reaction(self) -> float:
        r = self.run.reaction_s
        return 0.0 if r <= 0 else r * math.exp(self.rng.gauss(0.0, 0.25))

    def _rematch(self) -> None:
        self.busy = False
        if self.run.acting and self.match is not None and self.status == "over":
            self.request(m.Rematch(self.match))

    def _fire(self, action: object, seen_seq: int) -> None:
        self.busy = False
        run = self.run
        if not run.acting or self.status != "playing" or self.mqtt is None:
            return
        st = self.state()
        result = run.rules.apply(st, self.seat, action) if st is not None else None
        if not isinstance(result, Accepted):
            run.bounced += 1  # the table changed while "reacting": the client would bounce it locally
            self.poke()
            return
        aid = self.next_id
        self.next_id += 1
        now = time.perf_counter_ns()
        act = m.Act(id=aid, seq=seen_seq, action=run.rules.action_to_wire(action),
                    reaction_ns=max(0, now - self.view_ns))
        self.publish(self.act_topic, act)
        self.awaiting[aid] = now
        self.inflight.append(InFlight(aid, action))
        # The prediction with this play is the state just checked: what ``state()`` would compute
        # again (``apply`` is deterministic), so it is kept rather than recomputed on the next move.
        self._predicted = result.state
        run.sent(now)
        self.poke()


# ------------------------------------------------------------------------------------ the run
