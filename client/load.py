"""``blink load``: thousands of simulated players against one relay, from one process.

How this works
--------------
Each simulated player is one MQTT connection (``mqttkit.connection.MqttConnection``) with its own
client id (a broker with the shipped ACL confines every client to its own request and action
topics) that speaks the relay's protocol directly: ``CreateMatch`` / ``JoinMatch`` on
``lobby/req/{client}``, ``Act`` on the match's action topic, and on ``c/{client}`` the relay's
``MatchJoined``, ``ViewUpdated``, ``PrivateUpdate``, verdicts and pongs. Like the real client it
also subscribes to its match's public events and snapshot (so the broker carries what it would
carry for real windows). The PUBLISHes of one socket read reach ``LoadPlayer.on_messages`` as one
list, stamped once; only what the player acts on is decoded: its private topic and, for a game
that sends less (``Game.apply_event``; BLINK does: a whole view only on joining and at a game's
start and end), its match's events, which it applies in seq order with the private update after
each (``catch_up``). The two players of a match receive the same bytes for each event: the first
to read them decodes them for both (``LoadPlayer.shared``; a decoded message is immutable). The
snapshot -- and the events of a game that sends whole views -- are counted, never unpacked. The places that turn what arrived into the state a player acts on are
``LoadPlayer.apply_view`` and ``catch_up`` (and ``state``).

Moves come from the real rules engine (``game_for(game)``: ``from_wire``, ``legal_actions`` via the
bots' policy, ``apply`` for the prediction, ``action_to_wire``). A player plays on its predicted
state -- the last confirmed view plus its own plays not yet confirmed, as the window's client
does -- with at most three plays awaiting a verdict, so at human pace it keeps its own rhythm
whatever the relay does: a relay that falls behind shows as growing verdict times and unanswered
plays, not as a politely slower generator. ``--pace human`` waits a reaction time before each
move, log-normal around ``--reaction`` (0.35 s) like ``client/bots.py``; ``--pace max`` plays at
once. Matches use the game's short settings (``Game.quick_settings``: for BLINK one game, 0.5 s countdown) and both players ask
for a rematch when a match is over, so the load stays steady for ``--duration``. Players ping
once a second, like the client's clock sync.

Everything is driven by callbacks and timers, not a task per player; the players' reaction
timers are one heap of tuples in the run with one loop timer for its earliest (``LoadRun.later``),
not a ``TimerHandle`` each on the loop's heap (whose every comparison is a Python call). Matches are set up in
bounded batches (64 connects and 32 create/join exchanges in flight), the first one alone: a
broker with no relay, or one that does not answer, is found at once and reported in one line.
Players start to play (and ping) when every match is set up, so the set-up meets a relay with
nothing else to do; their first moves are spread over a second or more (one more per 1,000
players), and the measured window opens when every player has started. At its end players stop,
verdicts get a bounded grace (5 s), and what never came back is counted as ``unanswered``. A
periodic 50 ms timer measures this process's own event-loop lag: when that grows, the generator,
not the relay, is the limit. Relay CPU and memory come from ``/proc/<pid>`` (the ``blink serve``
started here, or ``--relay-pid``).

Without ``--server`` a ``blink serve`` (embedded amqtt broker + relay) is started as a separate
process on a free port, in its own session (the terminal's Ctrl-C reaches only this process,
which stops it in order) and with a parent-death signal, so it never outlives this process.

Which MQTT client library
-------------------------
``bench/mqtt_clients_bench.py`` (one process, N clients each with its own id and its own
subscription, against Mosquitto, closed loop of one message in flight per client; CPU per
message = one publish + one delivery, this process only; a busy shared 2-core machine; figures and
commands in bench/RESULTS.md). The 2026-11-30 rows chose a library; the 2026-12-01 rows are one
session, the two alternated:

======== ======= ========= ========== =========== ================================================
library  clients RSS/conn  connects/s CPU µs/msg  notes
======== ======= ========= ========== =========== ================================================
aiomqtt  500     24.9 kB   1030       622         2026-11-30; an awaited publish, a task per client
aiomqtt  2000    --        --         --          no figures: stopped by hand after 3 minutes
gmqtt    2000    20.6 kB   237-414    112-119     2026-11-30 (uvloop: no change, 114)
paho     2000    11.5 kB   516        158         2026-11-30; from asyncio add_reader/add_writer
raw      2000    3.1 kB    571        63          2026-11-30; not a library: a bare QoS-0 protocol
gmqtt    2000    18.9 kB   4238-4317  35.5-43.5   2026-12-01, same session as the next row
mqttkit  2000    4.2 kB    5588-7011  11.2-12.4   2026-12-01: ``mqttkit.connection`` (the relay's)
======== ======= ========= ========== =========== ================================================

So players are ``mqttkit`` connections (until 2026-11-30 they were gmqtt clients, then the lightest
library): about 3.5x (2.9-3.9x) less CPU per message than gmqtt and a quarter of its memory per
connection. It is the relay's own client, tested with it: pure asyncio (one ``asyncio.Protocol``
and one keep-alive timer per connection, no thread, no task per player); the PUBLISHes of one
socket read arrive as ONE list (one callback, one timestamp, no per-message handler chain);
a play goes out as bytes packed by ``pack_publish`` in one ``write``; a dropped connection is told
by ``on_close`` (no task waiting on it). aiomqtt stays the library of the real client.

In ``blink load`` itself (generator CPU in the measured window / messages received, everything
included: MQTT, decoding, the rules engine, sending; ``bench/load_curve.py``, Mosquitto + ``blink
serve --broker``, the gmqtt generator and this one alternated in one session, 2026-12-01, load
average 2-8 from other work on the machine): 300 matches 34-37 -> 25-28 µs per message, 1,000
matches 31-33 -> 21-23, 2,000 matches 34-36 -> 25-28 (about 0.7x). What is left is Python, not
the kernel (system time is about 1/8 of this process's CPU): asyncio's dispatch of each read (one
socket per player: nothing to batch) and the parser, decoding what the player uses (1.4-2 µs a
message), and the rules engine every player runs (an event applied, a move chosen 2.7 µs, checked
and predicted 3.4 µs). uvloop is no way out as things stand: ``MqttConnection.connection_made``
asserts an ``asyncio.Transport``, which uvloop's transports are not.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import logging
import math
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mqttkit.packets import pack_publish, pack_subscribe
from protocol import messages as m
from protocol.codec import DecodeError, decode, encode
from protocol.rules import GAME_NAMES, game_for
from client.bots import RandomChance
from protocol.rules.base import Accepted
from protocol.topics import Topics

if TYPE_CHECKING:
    from mqttkit.connection import MqttConnection

MAX_MATCHES = 10_000
#: The embedded amqtt broker of ``blink serve`` accepts 1,000 connections (two per match, plus the
#: relay and a little room).
EMBEDDED_MAX_MATCHES = 495
MAX_IN_FLIGHT = 3  # plays awaiting a verdict, as client/bots.py
#: Decoded events one player of a match keeps for the other, at most (see ``LoadPlayer.on_event``).
SHARED_EVENTS = 64
CONNECTS_IN_FLIGHT = 64
SETUPS_IN_FLIGHT = 32
LAG_PERIOD_S = 0.05
#: A player's timer due this soon after the one being run goes with it (one loop wake-up, not two).
TIMER_SLACK_S = 0.0005
START_SPREAD_S = 1.0
GRACE_S = 5.0
RELAY_WAIT_S = 3.0
REQUEST_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 10.0
SERVE_START_S = 30.0
CLOSE_TIMEOUT_S = 20.0
KEEPALIVE_S = 60
#: The packet id of a player's one unawaited SUBSCRIBE (its match's topics); awaited ones count up from 1.
SUBSCRIBE_PID = 0xFFFF
LEAVE = encode(m.Leave())  # a player's last will, and what it says when it leaves
#: Many short games: one game per match, then a rematch; a short countdown and stalemate pause.

log = logging.getLogger("blink.load")


class LoadError(RuntimeError):
    """The run cannot go on (unreachable broker, no relay, bad arguments); one readable line."""


@dataclass
class LoadConfig:
    matches: int
    game: str = "blink"
    pace: str = "human"  # human | max
    duration_s: float = 30.0
    server: str | None = None
    seed: int | None = None
    relay_pid: int | None = None
    reaction_s: float = 0.35
    ping_s: float = 1.0
    grace_s: float = GRACE_S  # how long verdicts may still come after the window closes
    timeout_s: float = REQUEST_TIMEOUT_S  # a connect or a create/join with no answer by then fails
    topics: Topics = field(default_factory=Topics)


# ------------------------------------------------------------------------------------ pure helpers


def percentiles(values: list[float], keys: tuple[str, ...] = ("p50", "p90", "p99", "max")) -> dict[str, Any]:
    """Nearest-rank percentiles of values in ms (so p50 <= p90 <= p99 <= max), rounded, with ``n``."""
    xs = sorted(values)
    n = len(xs)
    out: dict[str, Any] = {}
    for k in keys:
        if not n:
            out[k] = None
        elif k == "max":
            out[k] = round(xs[-1], 3)
        else:
            q = float(k[1:])
            out[k] = round(xs[min(n - 1, max(0, math.ceil(q / 100.0 * n) - 1))], 3)
    out["n"] = n
    return out


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    return None


def check_config(cfg: LoadConfig) -> None:
    if not 1 <= cfg.matches <= MAX_MATCHES:
        raise LoadError(f"--matches must be from 1 to {MAX_MATCHES}, not {cfg.matches}")
    if cfg.server is None and cfg.matches > EMBEDDED_MAX_MATCHES:
        raise LoadError(f"without --server the embedded broker takes at most {EMBEDDED_MAX_MATCHES} matches; "
                        f"for {cfg.matches} run Mosquitto and `blink serve --broker mqtt://HOST:PORT`, then "
                        f"`blink load --server mqtt://HOST:PORT`")
    if cfg.relay_pid is not None and proc_cpu_s(cfg.relay_pid) is None:
        raise LoadError(f"--relay-pid {cfg.relay_pid}: no such process on this machine")
    game = game_for(cfg.game)
    if not game.min_players <= 2 <= game.max_players:
        raise LoadError(f"{cfg.game} is not a two-player game")


def raise_fd_limit(connections: int) -> None:
    """Each player is a socket: lift the soft file limit to what the run needs (up to the hard one)."""
    need = connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise LoadError(f"{connections} connections need {need} open files, but this process may open {hard} "
                        f"(ulimit -n); use fewer --matches")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def settings_for(game: str) -> dict[str, Any]:
    """The game's own settings for short matches (the Game's ``quick_settings``)."""
    return dict(game_for(game).quick_settings)


# ------------------------------------------------------------------------------------ one player


class LoadPlayer:
    """One simulated player: an MQTT connection, its confirmed view and its plays in flight."""

    def __init__(self, run: LoadRun, name: str, rng: random.Random) -> None:
        self.run = run
        self.name = name
        self.rng = rng
        self.chance = RandomChance(rng)
        self.cid = f"ld{os.urandom(6).hex()}"
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
        self.view_wire: dict[str, Any] | None = None
        self.view_seq = -1
        self.view_game = -1
        self.view_ns = 0  # when the current view arrived (the "reaction" clock starts there)
        self.status = ""
        self._confirmed: Any = None  # the decoded view, cached
        self._predicted: Any = None  # confirmed + own unconfirmed plays, cached
        self.inflight: list[list[Any]] = []  # [id, action, accepted_seq or None]
        self.awaiting: dict[int, int] = {}  # action id -> send time (perf_counter_ns), until a verdict
        self.next_id = 1
        self.busy = False  # a reaction is running: a move is chosen and waits to be made
        self.rematched_game = -1
        # A game that sends less (``Game.apply_event``): events and private updates not yet applied.
        self.ahead: dict[int, m.Event] = {}
        self.private: dict[int, m.PrivateUpdate] = {}
        #: Events decoded by one player of the match for the other (set by ``LoadRun.setup_match``).
        self.shared: dict[bytes, Any] = {}
        self.lost = False

    # --- connection

    async def connect(self) -> None:
        from mqttkit import NODELAY
        from mqttkit.connection import Will, connect

        run = self.run
        self.joined = asyncio.get_running_loop().create_future()
        async with run.connect_sem:
            conn = await connect(run.address.host, run.address.port, client_id=self.cid, on_messages=self.on_messages,
                                 username=run.address.username, password=run.address.password,
                                 will=Will(self.req_topic, LEAVE, qos=1), keepalive=KEEPALIVE_S,
                                 socket_options=NODELAY, timeout=max(CONNECT_TIMEOUT_S, run.cfg.timeout_s))
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
                conn.write(self._pack(self.req_topic, LEAVE))
            await conn.disconnect()
        except Exception:  # noqa: BLE001 - closing; the broker may be gone
            pass

    @staticmethod
    def _pack(topic: str, payload: bytes) -> bytearray:
        buf = bytearray()
        pack_publish(buf, topic, payload)
        return buf

    def publish(self, topic: str, msg: Any) -> None:
        conn = self.mqtt
        if conn is not None:
            buf = bytearray()
            pack_publish(buf, topic, encode(msg))
            try:
                conn.write(buf)
            except Exception:  # noqa: BLE001 - a connection that just dropped; counted by on_close
                pass

    def request(self, msg: Any) -> None:
        self.publish(self.req_topic, msg)

    # --- what arrives

    def on_messages(self, messages: list[Any]) -> None:
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
        ev = shared.pop(payload, None)
        if ev is None:
            try:
                ev = decode(payload)
            except DecodeError:
                self.run.bad_messages += 1
                return
            if len(shared) < SHARED_EVENTS:  # (bounded: the other player's connection may be gone)
                shared[payload] = ev
        if type(ev) is m.Event and ev.seq > self.view_seq and len(self.ahead) < 4096:
            self.ahead[ev.seq] = ev
            if self.catch_up(now):
                self.poke()

    def on_private(self, payload: bytes, now: int) -> None:
        run = self.run
        try:
            msg = decode(payload)
        except DecodeError:
            run.bad_messages += 1
            return
        kind = type(msg)
        if kind is m.ViewUpdated:
            if self.apply_view(msg, now):
                self.poke()
        elif kind is m.PrivateUpdate:
            if msg.match == self.match and msg.game == self.view_game:
                if msg.seq <= self.view_seq:  # it came after its event: apply it now
                    self.apply_late(msg)
                else:
                    self.private[msg.seq] = msg
                if self.catch_up(now):
                    self.poke()
        elif kind is m.ActionAccepted or kind is m.ActionRejected:
            self.on_verdict(msg, now)
        elif kind is m.Pong:
            run.pong(time.time_ns() - msg.t0)
        elif kind is m.MatchJoined:
            self.on_joined(msg)
        elif kind is m.Probe:
            self.request(m.ProbeReply(msg.sent_ns))
        elif kind is m.RequestRejected:
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
        if msg.game != self.view_game:
            self.inflight.clear()  # plays of the last game: they still await verdicts, not prediction
        self.view_wire, self.view_seq, self.view_game, self.view_ns = msg.state, msg.seq, msg.game, now_ns
        self.status = str(msg.match_state.get("status", ""))
        self._confirmed = self._predicted = None
        self.inflight = [e for e in self.inflight if e[2] is None or e[2] > msg.seq]
        self.private = {s: u for s, u in self.private.items() if s > msg.seq and u.game == msg.game}
        self.catch_up(now_ns)
        return True

    def catch_up(self, now_ns: int) -> bool:
        """Apply the public events (and the private update after each) that follow the confirmed
        view, in seq order, with the game's own applier; a doubt asks for the whole view again."""
        rules = self.run.rules
        if rules.apply_event is None or rules.apply_private is None or self.seat is None:
            return False
        moved = False
        while (ev := self.ahead.pop(self.view_seq + 1, None)) is not None:
            if ev.game != self.view_game:
                self.ahead[ev.seq] = ev  # a new game: its whole view comes first
                break
            if self._confirmed is None and self.state() is None:
                break
            try:
                view = rules.apply_event(self._confirmed, self.seat, ev.type, ev.data)
                update = self.private.pop(ev.seq, None)
                if update is not None:
                    view = rules.apply_private(view, self.seat, update.delta)
            except (ValueError, KeyError, TypeError, IndexError):
                self.run.bad_messages += 1
                self.request(m.Resync(ev.match))
                break
            self._confirmed, self.view_seq, self.view_ns, self._predicted = view, ev.seq, now_ns, None
            if self.inflight:
                self.inflight = [e for e in self.inflight if e[2] is None or e[2] > ev.seq]
            moved = True
        if self.ahead:
            for seq in [s for s in self.ahead if s <= self.view_seq]:
                del self.ahead[seq]
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

    def state(self) -> Any:
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
            for _, action, _accepted in self.inflight:
                result = self.run.rules.apply(st, self.seat, action)
                if isinstance(result, Accepted):
                    st = result.state
            self._predicted = st
        return self._predicted

    def on_verdict(self, msg: m.ActionAccepted | m.ActionRejected, now_ns: int) -> None:
        sent = self.awaiting.pop(msg.id, None)
        self.run.verdict(sent, msg, now_ns)
        if isinstance(msg, m.ActionAccepted):
            for entry in self.inflight:
                if entry[0] == msg.id:
                    entry[2] = msg.seq
            self.inflight = [e for e in self.inflight if e[2] is None or e[2] > self.view_seq]
        else:
            self.inflight = [e for e in self.inflight if e[0] != msg.id]
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
        if len(inflight) >= MAX_IN_FLIGHT and sum(1 for e in inflight if e[2] is None) >= MAX_IN_FLIGHT:
            return
        st = self.state()
        if st is None:
            return
        action = run.rules.bot_action(st, self.seat, self.chance)
        if action is None:
            return
        self._later(self.reaction(), self._fire, action, self.view_seq)

    def _later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
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

    def _fire(self, action: Any, seen_seq: int) -> None:
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
        self.inflight.append([aid, action, None])
        # The prediction with this play is the state just checked: what ``state()`` would compute
        # again (``apply`` is deterministic), so it is kept rather than recomputed on the next move.
        self._predicted = result.state
        run.sent(now)
        self.poke()


# ------------------------------------------------------------------------------------ the run


class LoadRun:
    def __init__(self, cfg: LoadConfig, address: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.address = address
        self.loop = loop
        self.topics = cfg.topics
        self.rules = game_for(cfg.game)
        self.reaction_s = cfg.reaction_s if cfg.pace == "human" else 0.0
        self.rng = random.Random(cfg.seed)
        self.connect_sem = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        self.setup_sem = asyncio.Semaphore(SETUPS_IN_FLIGHT)
        self.players: list[LoadPlayer] = []
        self.acting = False
        self.closing = False
        self.window_start = 0  # perf_counter_ns; 0 until the window opens
        self.window_end = 0
        # counters
        self.actions = 0
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.verdict_ms: list[float] = []
        self.ping_ms: list[float] = []
        self.lag_ms: list[float] = []
        self.bounced = 0
        self.messages_in = 0
        self.bad_messages = 0
        self.lost_connections = 0
        self.request_rejected: Counter[str] = Counter()
        self.setup_failed: Counter[str] = Counter()
        self.matches_up = 0
        self.setup_given_up = False
        # The players' reaction timers: one heap here, one loop timer for its earliest (see ``later``).
        self._timers: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._timer_order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` in ``delay`` seconds. Every player's reactions share one heap of plain
        tuples and one loop timer (the earliest's): thousands of pending ``TimerHandle``s on the
        loop's own heap cost a Python-level comparison each step of every push and pop."""
        when = self.loop.time() + delay
        heapq.heappush(self._timers, (when, next(self._timer_order), fn, args))
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = self.loop.call_at(when, self._run_timers)

    def stop_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timers.clear()
        self._timer_at, self._timer = math.inf, None

    def _run_timers(self) -> None:
        timers = self._timers
        loop = self.loop
        end = loop.time() + TIMER_SLACK_S
        while timers and timers[0][0] <= end:
            _, _, fn, args = heapq.heappop(timers)
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a bug in one callback must not stop the others' timers
                log.exception("a player's timer failed")
        if timers:
            self._timer_at = timers[0][0]
            self._timer = loop.call_at(self._timer_at, self._run_timers)
        else:
            self._timer_at, self._timer = math.inf, None

    def in_window(self, t: int) -> bool:
        return self.window_start > 0 and t >= self.window_start and (not self.window_end or t <= self.window_end)

    def sent(self, now_ns: int) -> None:
        if self.in_window(now_ns):
            self.actions += 1

    def verdict(self, sent_ns: int | None, msg: Any, now_ns: int) -> None:
        if sent_ns is None or not self.in_window(sent_ns):
            return
        self.verdict_ms.append((now_ns - sent_ns) / 1e6)
        if isinstance(msg, m.ActionAccepted):
            self.accepted += 1
        else:
            self.rejected[msg.code] += 1

    def pong(self, rtt_ns: int) -> None:
        if self.window_start and not self.window_end:
            self.ping_ms.append(rtt_ns / 1e6)

    def unanswered(self) -> int:
        return sum(1 for p in self.players for t in p.awaiting.values() if self.in_window(t))

    # --- set-up

    async def setup_match(self, i: int) -> None:
        a = LoadPlayer(self, f"p{i}a", random.Random(self.rng.random()))
        b = LoadPlayer(self, f"p{i}b", random.Random(self.rng.random()))
        a.shared = b.shared = {}
        self.players += (a, b)
        async with self.setup_sem:
            if self.setup_given_up:
                raise LoadError("not set up: the relay had stopped answering set-up requests")
            await asyncio.gather(a.connect(), b.connect())
            assert a.joined is not None and b.joined is not None
            try:
                a.request(m.CreateMatch(name=a.name, game=self.cfg.game, settings=settings_for(self.cfg.game),
                                        seats=2))
                code = await _answer(a.joined, self.cfg.timeout_s)
                b.request(m.JoinMatch(name=b.name, code=code))
                await _answer(b.joined, self.cfg.timeout_s)
            except LoadError:
                # A relay that lets a set-up time out will not answer the next ones sooner: run with
                # the matches that are up rather than wait for every one to time out in turn.
                self.setup_given_up = True
                raise
        self.matches_up += 1

    # --- background timers

    async def lag_probe(self) -> None:
        period_ns = int(LAG_PERIOD_S * 1e9)
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(LAG_PERIOD_S)
            lag = max(0, time.perf_counter_ns() - t - period_ns) / 1e6
            if self.window_start and not self.window_end:
                self.lag_ms.append(lag)

    async def pinger(self) -> None:
        """Each player pings every ``ping_s``, spread evenly over time (not all at once)."""
        if self.cfg.ping_s <= 0:
            return
        tick = 0.1
        i = 0
        while True:
            await asyncio.sleep(tick)
            if not self.acting:
                continue
            players = [p for p in self.players if p.match is not None]
            if not players:
                continue
            count = max(1, round(len(players) * tick / self.cfg.ping_s))
            now = time.time_ns()
            for _ in range(min(count, len(players))):
                i = (i + 1) % len(players)
                players[i].request(m.Ping(t0=now))


async def _answer(fut: asyncio.Future[str], timeout_s: float) -> str:
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
    except asyncio.TimeoutError as exc:
        raise LoadError(f"no answer from a relay within {timeout_s:g} s") from exc


async def wait_for_relay(address: Any, topics: Topics) -> None:
    """A relay announces itself on ``relay/+/status`` (retained); none online -> LoadError."""
    from mqttkit.connection import connect

    online = asyncio.Event()

    def on_messages(messages: list[Any]) -> None:
        for message in messages:
            try:
                msg = decode(message.payload)
            except DecodeError:
                continue
            if isinstance(msg, m.RelayStatus) and msg.online:
                online.set()

    try:
        conn = await connect(address.host, address.port, client_id=f"ldmon{os.urandom(5).hex()}",
                             on_messages=on_messages, username=address.username, password=address.password,
                             keepalive=KEEPALIVE_S, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - refused, unreachable, no answer, a refused CONNECT: one line each
        raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
    try:
        await conn.subscribe([(topics.relay_status("+"), 0)])
        try:
            await asyncio.wait_for(online.wait(), RELAY_WAIT_S)
        except asyncio.TimeoutError as exc:
            raise LoadError(f"no relay on {address.url}: none announced itself on {topics.relay_status('+')} within "
                            f"{RELAY_WAIT_S:g} s (start one with `blink serve --broker {address.url}`)") from exc
    except Exception as exc:
        if isinstance(exc, LoadError):
            raise
        raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
    finally:
        await conn.disconnect()


# ------------------------------------------------------------------------------------ the local relay


class LocalRelay:
    """``blink serve`` with its embedded broker on a free port, as a child process."""

    def __init__(self, topics: Topics, seed: int | None) -> None:
        from mqttkit import free_port

        self.port = free_port()
        self.topics = topics
        self.seed = seed
        self.proc: asyncio.subprocess.Process | None = None
        self._err = tempfile.TemporaryFile()
        self.data_dir = ""

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        # A private journal directory, removed in stop(): never the user's, never another run's.
        self.data_dir = tempfile.mkdtemp(prefix="blink-load-relay-")
        cmd = [sys.executable, "-m", "client.cli", "--prefix", self.topics.prefix, "serve", "--port", str(self.port),
               "--data", self.data_dir]
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=self._err,
            start_new_session=True, preexec_fn=_die_with_parent)
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), SERVE_START_S)
        except asyncio.TimeoutError:
            line = b""
        if b"running" not in line:
            await self.stop()
            self._err.seek(0)
            why = [x for x in self._err.read().decode(errors="replace").splitlines() if x.strip()]
            raise LoadError(f"the local relay (blink serve) did not start: {why[-1] if why else 'no output'}")

    async def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGINT)  # blink serve stops cleanly on SIGINT
                await asyncio.wait_for(proc.wait(), 5)
            except (asyncio.TimeoutError, ProcessLookupError):
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                await proc.wait()
        self._err.close()
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere, the orderly stop still applies
        pass


# ------------------------------------------------------------------------------------ driving it


async def run_load(cfg: LoadConfig, progress: Callable[[str], None] | None = None,
                   stop: asyncio.Event | None = None) -> dict[str, Any]:
    """Set up ``cfg.matches`` matches, play for ``cfg.duration_s``, and return the figures."""
    from mqttkit import parse_url

    check_config(cfg)
    raise_fd_limit(2 * cfg.matches + 8)
    # A dropped player connection is counted (lost_connections), not logged line by line; a failing
    # message callback (a bug here) still is. Restored at the end: a caller's own logging is its own.
    mqtt_log = logging.getLogger("blink.mqtt")
    mqtt_level = mqtt_log.level
    mqtt_log.setLevel(logging.ERROR)
    stop = stop or asyncio.Event()
    local = LocalRelay(cfg.topics, cfg.seed) if cfg.server is None else None
    started = time.monotonic()
    run: LoadRun | None = None
    background: list[asyncio.Task[Any]] = []
    try:
        if local is not None:
            await local.start()
        address = parse_url(local.url if local is not None else cfg.server or "")
        relay_pid = local.pid if local is not None else cfg.relay_pid
        if local is None:
            await wait_for_relay(address, cfg.topics)
        run = LoadRun(cfg, address, asyncio.get_running_loop())
        background = [asyncio.create_task(run.lag_probe()), asyncio.create_task(run.pinger())]
        # The first match alone: a broker that refuses us or a relay that does not answer shows at once.
        try:
            await run.setup_match(0)
        except LoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - a refused or failed connection: one line
            raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
        setups = [asyncio.create_task(run.setup_match(i)) for i in range(1, cfg.matches)]
        if setups:
            waiter = asyncio.create_task(stop.wait())
            while not all(t.done() for t in setups) and not stop.is_set():
                await asyncio.wait([waiter, *[t for t in setups if not t.done()]], timeout=1.0,
                                   return_when=asyncio.FIRST_COMPLETED)
                if progress:
                    progress(f"setting up: {run.matches_up}/{cfg.matches} matches")
            waiter.cancel()
            for t in setups:
                if not t.done():
                    t.cancel()
            for t in setups:
                try:
                    await t
                except asyncio.CancelledError:
                    run.setup_failed["interrupted"] += 1
                except LoadError as exc:
                    run.setup_failed[str(exc)] += 1
                except Exception as exc:  # noqa: BLE001
                    run.setup_failed[f"{type(exc).__name__}: {exc}"] += 1
        setup_s = time.monotonic() - started

        # Players start now, on a relay that had only set-up to do until now (a relay busy with the
        # first matches' plays would make the set-up of the last ones time out). Their first moves
        # are spread out (thousands of them in one instant is a burst, not a load), and the
        # measured window opens once every player has started.
        run.acting = True
        spread = START_SPREAD_S * (1 + len(run.players) / 1000)
        for p in run.players:
            run.later(run.rng.uniform(0.0, spread), p.poke)
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter], timeout=spread)
        cpu0 = proc_cpu_s(relay_pid) if relay_pid else None
        own0 = time.process_time()
        msgs0 = run.messages_in
        run.window_start = time.perf_counter_ns()
        deadline = time.monotonic() + cfg.duration_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait([waiter], timeout=min(1.0, left))
            if local is not None and local.proc is not None and local.proc.returncode is not None:
                raise LoadError(f"the local relay (blink serve) stopped during the run, status {local.proc.returncode}")
            if progress:
                progress(_progress_line(run, cfg, relay_pid))
        waiter.cancel()
        run.window_end = time.perf_counter_ns()
        run.acting = False
        wall = (run.window_end - run.window_start) / 1e9
        own_cpu = time.process_time() - own0
        window_msgs = run.messages_in - msgs0
        cpu1 = proc_cpu_s(relay_pid) if relay_pid else None
        rss = proc_rss_mb(relay_pid) if relay_pid else None

        # Grace: verdicts still on their way.
        grace_end = time.monotonic() + (1.0 if stop.is_set() else run.cfg.grace_s)
        while run.unanswered() and time.monotonic() < grace_end:
            await asyncio.sleep(0.05)
        result = {
            "matches": cfg.matches,
            "matches_running": run.matches_up,
            "players": 2 * run.matches_up,
            "game": cfg.game,
            "pace": cfg.pace,
            "server": address.url,
            "relay_local": local is not None,
            "library": "mqttkit",
            "setup_s": round(setup_s, 2),
            "duration_s": round(wall, 2),
            "actions": run.actions,
            "actions_per_s": round(run.actions / wall, 1) if wall > 0 else 0.0,
            "accepted": run.accepted,
            "rejected": dict(run.rejected),
            "bounced_locally": run.bounced,
            "verdict_ms": percentiles(run.verdict_ms),
            "unanswered": run.unanswered(),
            "ping_ms": percentiles(run.ping_ms, ("p50", "p99")),
            "generator_lag_ms": percentiles(run.lag_ms, ("p50", "p99", "max")),
            "generator_cpu_pct": round(own_cpu / wall * 100, 1) if wall > 0 else None,
            # all included (the library, decoding, choosing and sending), per message received
            "generator_us_per_msg": round(own_cpu / window_msgs * 1e6, 1) if window_msgs else None,
            "relay_pid": relay_pid,
            "relay_cpu_pct": (round((cpu1 - cpu0) / wall * 100, 1)
                              if cpu0 is not None and cpu1 is not None and wall > 0 else None),
            "relay_rss_mb": rss,
            "load_avg_1m": round(os.getloadavg()[0], 2),  # a busy machine explains many a tail
            "messages_in": run.messages_in,
            "bad_messages": run.bad_messages,
            "lost_connections": run.lost_connections,
            "setup_failed": dict(run.setup_failed),
            "request_rejected": dict(run.request_rejected),
            "interrupted": stop.is_set(),
        }
        return result
    finally:
        try:
            for t in background:
                t.cancel()
            if run is not None:
                run.acting = False
                run.closing = True
                run.stop_timers()
                await _close_all(run.players, leave=local is None)
            if local is not None:
                await local.stop()
        finally:
            mqtt_log.setLevel(mqtt_level)


async def _close_all(players: list[LoadPlayer], leave: bool) -> None:
    sem = asyncio.Semaphore(256)

    async def one(p: LoadPlayer) -> None:
        async with sem:
            await p.close(leave)

    tasks = [asyncio.create_task(one(p)) for p in players]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        for t in pending:
            t.cancel()


def _progress_line(run: LoadRun, cfg: LoadConfig, relay_pid: int | None) -> str:
    elapsed = max(1e-9, (time.perf_counter_ns() - run.window_start) / 1e9)
    recent = run.verdict_ms[-2000:]
    v = percentiles(recent, ("p50", "p99"))
    lag = percentiles(run.lag_ms[-200:], ("p99",))
    return (f"{elapsed:5.0f}/{cfg.duration_s:g} s  {run.matches_up} matches  {run.actions} actions "
            f"({run.actions / elapsed:.0f}/s)  verdict p50 {_fmt(v['p50'])} p99 {_fmt(v['p99'])} ms  "
            f"awaiting {run.unanswered()}  lag p99 {_fmt(lag['p99'])} ms")


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}"


def format_table(r: dict[str, Any]) -> str:
    v, lag, ping = r["verdict_ms"], r["generator_lag_ms"], r["ping_ms"]
    rejected = ", ".join(f"{k} {n}" for k, n in sorted(r["rejected"].items(), key=lambda kv: -kv[1])) or "none"
    relay = (f"cpu {_fmt(r['relay_cpu_pct'])} %   rss {_fmt(r['relay_rss_mb'])} MB   (pid {r['relay_pid']}"
             f"{', with its embedded broker' if r['relay_local'] else ''})") if r["relay_pid"] else "not local (use --relay-pid)"
    lines = [
        f"blink load: {r['matches_running']}/{r['matches']} matches ({r['players']} players), {r['game']}, "
        f"{r['pace']} pace, {r['duration_s']} s on {r['server']}{'  [interrupted]' if r['interrupted'] else ''}",
        f"  actions          {r['actions']} ({r['actions_per_s']}/s)   accepted {r['accepted']}   rejected: {rejected}",
        f"  verdict ms       p50 {_fmt(v['p50'])}   p90 {_fmt(v['p90'])}   p99 {_fmt(v['p99'])}   max {_fmt(v['max'])}"
        f"   (n {v['n']})",
        f"  unanswered       {r['unanswered']}",
        f"  ping ms          p50 {_fmt(ping['p50'])}   p99 {_fmt(ping['p99'])}   (n {ping['n']})",
        f"  generator        lag p50 {_fmt(lag['p50'])} ms   p99 {_fmt(lag['p99'])} ms   cpu {_fmt(r['generator_cpu_pct'])} %"
        f"   ({_fmt(r['generator_us_per_msg'])} µs per message received)",
        f"  relay            {relay}",
        f"  machine          load average {r['load_avg_1m']} (1 min)",
        f"  set-up           {r['setup_s']} s" + (f"   failed: {sum(r['setup_failed'].values())}" if r["setup_failed"] else "")
        + (f"   lost connections: {r['lost_connections']}" if r["lost_connections"] else ""),
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ command line


def add_parser(sub: Any) -> None:
    from client import args as argtypes

    p = sub.add_parser("load", help="load generator: many simulated players against one relay",
                       description="Drive many two-player matches of simulated players against a relay and report "
                                   "actions/s, play -> verdict times, unanswered plays, this generator's own "
                                   "event-loop lag and the relay's CPU and memory.")
    p.add_argument("--matches", type=argtypes.whole(1, MAX_MATCHES), required=True,
                   help=f"concurrent matches, two players each (1-{MAX_MATCHES})")
    p.add_argument("--game", choices=GAME_NAMES, default="blink")
    p.add_argument("--pace", choices=("human", "max"), default="human",
                   help="human: a log-normal reaction time before each move (default); max: as fast as allowed")
    p.add_argument("--reaction", type=argtypes.seconds(0.0, 10.0), default=0.35,
                   help="median reaction time at human pace, seconds (default 0.35)")
    p.add_argument("--duration", type=argtypes.seconds(1.0, 86_400.0), default=30.0,
                   help="seconds to measure once every match is set up (default 30)")
    p.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start blink serve here)")
    p.add_argument("--relay-pid", type=argtypes.whole(1, 2**31), help="with --server: the relay's pid, for its CPU and memory")
    p.add_argument("--ping", type=argtypes.seconds(0.0, 60.0), default=1.0,
                   help="each player pings the relay this often, seconds (default 1, as the client; 0: never)")
    p.add_argument("--seed", type=int, help="seed for the players (and the relay started here)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--grace", type=argtypes.seconds(0.0, 600.0), default=GRACE_S,
                   help=f"seconds verdicts may still arrive after the run (default {GRACE_S:g})")
    p.add_argument("--timeout", type=argtypes.seconds(1.0, 600.0), default=REQUEST_TIMEOUT_S,
                   help=f"seconds to wait for a connect or a match set-up (default {REQUEST_TIMEOUT_S:g})")

    def one_line_error(message: str) -> None:  # argparse prints usage too; bad input is one line here
        print(f"blink load: {message}", file=sys.stderr)
        sys.exit(2)

    p.error = one_line_error  # type: ignore[method-assign]


def run(args: argparse.Namespace, topics: Topics) -> int:
    cfg = LoadConfig(matches=args.matches, game=args.game, pace=args.pace, duration_s=args.duration,
                     server=args.server, seed=args.seed, relay_pid=args.relay_pid, reaction_s=args.reaction,
                     ping_s=args.ping, grace_s=args.grace, timeout_s=args.timeout, topics=topics)
    if args.relay_pid is not None and not args.server:
        print("blink load: --relay-pid goes with --server (a relay started here is measured anyway)", file=sys.stderr)
        return 2
    try:  # bad input is status 2 and found before anything starts; LoadError later is a run-time failure (1)
        check_config(cfg)
    except LoadError as exc:
        print(f"blink load: {exc}", file=sys.stderr)
        return 2
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(line: str) -> None:
        now = time.monotonic()
        if tty:
            sys.stderr.write("\r\x1b[K" + line[:160])
            sys.stderr.flush()
        elif now - last[0] >= 5.0:
            last[0] = now
            print(f"blink load: {line}", file=sys.stderr, flush=True)

    async def main() -> dict[str, Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_cancellations)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        return await run_load(cfg, progress, stop)

    try:
        result = asyncio.run(main())
    except LoadError as exc:
        _clear(tty)
        print(f"blink load: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # an unknown game and the like
        _clear(tty)
        print(f"blink load: {exc}", file=sys.stderr)
        return 2
    _clear(tty)
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result))
    if result["interrupted"]:
        return 130
    return 0 if result["matches_running"] else 1


def _quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A set-up task cancelled by Ctrl-C may be asked for its exception as the run shuts down; that
    is no error of the run and must not print a traceback. Anything else goes to the default."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


def _clear(tty: bool) -> None:
    if tty:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
