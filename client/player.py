"""One player's client, headless: a ``Connection`` feeding a ``ClientModel``.

How this works
--------------
Everything a player does goes through here, whoever the player is -- a bot, the latency harness
or (through a thread-safe bridge) the pyglet window. Incoming messages update the model; the
requests the model asks for (a resync after a gap) are sent back; ``changed`` is set after every
message so a bot can wait for the next thing to react to. ``act`` predicts locally first and only
then sends, so the state a bot or a screen reads already shows the move.

A background task sends again, with the same id, the actions the relay has not answered
(``ClientModel.resends``: bounded backoff, given up after 30 s), and a join or rejoin not answered
yet (``ClientModel.asks_again``, until the caller's wait ends); the connection reconnects by itself
and the model asks for the seat and view back. ``rejoin(code, token)`` takes a seat back from a new
process (``blink bot --rejoin``, ``blink play --rejoin``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable

from mqttkit import BrokerAddress, wait_event
from protocol import messages as m
from protocol.rules.base import Rejected
from protocol.topics import Topics
from client.model import ClientModel
from client.net import Connection, Impairment, Link, new_client_id
from client.identity import Identity, Proof
from client.sealing import new_seal
from client.netthread import NetThread, ThreadedConnection
from client import ClientError


#: How long ``create``, ``join``, ``quick`` and ``rejoin`` wait for their seat by default. A relay
#: killed just after seating a player (its answer lost with it) leaves the shard unserved until another
#: takes it over: at once through the liveness probes, or -- when they cannot tell, as while a NATS node
#: is stopping -- once the lease expires (``relay/cluster/leases.py``: the ttl, 12 s by default, plus a tick,
#: the acquisition and the replay). The wait covers that twice over; the join is asked again meanwhile.
SEAT_WAIT_S = 30.0


class RequestError(ClientError, RuntimeError):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class Player:
    def __init__(self, address: BrokerAddress, name: str, topics: Topics | None = None,
                 impairment: Impairment | None = None, client_id: str | None = None,
                 ping_interval_s: float = 1.0, net: NetThread | None = None,
                 identity: Identity | None = None) -> None:
        self.topics = topics or Topics()
        #: With an identity, every create, join and quick match proves its key to the relay (rated play).
        self.identity = identity
        # Sealed play (the URL's pin): the player's key, whose hash is its client id.
        seal = new_seal(address.pin) if address.pin else None
        self.client_id = seal.client_id if seal is not None else client_id or new_client_id()
        self.model = ClientModel(self.client_id, name)
        #: With ``net`` (the window), the connection runs on that network thread: messages are
        #: stamped there and handed to this loop (``client/netthread.py``); else on this loop.
        self.conn: Link
        if net is not None:
            self.conn = ThreadedConnection(net, address, self.client_id, self.topics, self._on_message, impairment,
                                           ping_interval_s, relay_status=True, seal=seal)
        else:
            self.conn = Connection(address, self.client_id, self.topics, self._on_message, impairment,
                                   ping_interval_s, relay_status=True, seal=seal)
        self.resend_interval_s = 0.1
        #: A seated player that has heard nothing of its running match for this long asks for it
        #: again: a lost event that nothing follows (the last before a pause, or before its own
        #: turn) would otherwise leave it waiting for ever -- the gap check needs a later event.
        self.quiet_resync_s = 5.0
        self._heard_match = time.monotonic()
        self.changed = asyncio.Event()
        self._joined = asyncio.Event()
        self._background: set[asyncio.Task[object]] = set()

    async def __aenter__(self) -> Player:
        await self.conn.__aenter__()
        self._spawn(self._resender())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, leave: bool = True) -> None:
        for t in list(self._background):
            t.cancel()
        await self.conn.close(leave=leave)

    def _spawn(self, coro: Awaitable[object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_message(self, msg: object, now_ns: int) -> None:
        if getattr(msg, "match", None) == self.model.match:
            self._heard_match = time.monotonic()
        for req in self.model.on_message(msg, now_ns):
            self._spawn(self.conn.request(req))
        if isinstance(msg, m.MatchJoined):
            self._spawn(self._watch_then_resync(msg.match))
        self.changed.set()

    async def _resender(self) -> None:
        """Send again what the relay has not answered (the model decides what and when)."""
        while True:
            await asyncio.sleep(self.resend_interval_s)
            before = self.model.version
            now_ns = time.time_ns()
            acts = self.model.resends(now_ns)
            if acts and self.model.match:
                for act in acts:
                    await self.conn.act(self.model.match, act)
            for req in self.model.asks_again(now_ns):
                await self.conn.request(req)
            quiet = time.monotonic() - self._heard_match
            if (quiet > self.quiet_resync_s and self.model.match and not self.model.spectating
                    and self.model.seat is not None and not self.match_over()):
                self._heard_match = time.monotonic()  # once per quiet spell, not every tick
                await self.conn.request(m.Resync(self.model.match, from_seq=self.model.last_event_seq + 1))
            if self.model.version != before:
                self.changed.set()

    async def rejoin(self, code: str, token: str, timeout: float = SEAT_WAIT_S) -> str:
        """Take back a seat with its token (from ``MatchJoined``, saved by an earlier run)."""
        await self.conn.request(self.model.ask(m.Rejoin(code.upper(), token), time.time_ns()))
        return await self._wait_joined(timeout)

    async def _watch_then_resync(self, match: str) -> None:
        await self.conn.watch(match)
        # The relay may have published the match's next events (a joiner's seat, the game's start,
        # whose turn it is) before the broker had our subscription: nothing would come after them
        # while the game waits for us. Now that we are subscribed, ask for what we may have missed.
        if self.model.match == match:
            await self.conn.request(m.Resync(match, from_seq=self.model.last_event_seq + 1))
        self._joined.set()

    async def _wait_joined(self, timeout: float) -> str:
        try:
            return await self._seated(timeout)
        finally:
            self.model.stop_asking()  # answered, refused or given up: no more resends of it

    async def _seated(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        seen_errors = len(self.model.errors)
        while True:
            if self._joined.is_set() and self.model.match:
                return self.model.match
            if len(self.model.errors) > seen_errors:
                err = self.model.errors[-1]
                raise RequestError(err.code, err.detail)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestError("timeout", "no answer from a relay: is `blink serve` running on this broker?")
            self.changed.clear()
            await wait_event(self.changed, min(left, 0.25))

    async def create(self, game: str = "blink", settings: dict[str, object] | None = None, seats: int = 2,
                     timeout: float = SEAT_WAIT_S) -> str:
        proof = await self.proof(timeout)
        await self.conn.request(self.model.ask(m.CreateMatch(name=self.model.name, game=game, settings=settings or {},
                                                             seats=seats, **proof), time.time_ns()))
        return await self._wait_joined(timeout)

    async def join(self, code: str, timeout: float = SEAT_WAIT_S) -> str:
        proof = await self.proof(timeout)
        await self.conn.request(self.model.ask(m.JoinMatch(name=self.model.name, match=code, **proof), time.time_ns()))
        return await self._wait_joined(timeout)

    async def quick(self, game: str = "blink", settings: dict[str, object] | None = None,
                    timeout: float = SEAT_WAIT_S) -> str:
        proof = await self.proof(timeout)
        await self.conn.request(self.model.ask(m.QuickMatch(name=self.model.name, game=game, settings=settings or {},
                                                            **proof), time.time_ns()))
        return await self._wait_joined(timeout)

    async def proof(self, timeout: float = SEAT_WAIT_S) -> Proof:
        """What a join carries to prove this player's key (``client/identity.py``): the relay's
        challenge signed; nothing without an identity, or from a relay that rates nobody (one that
        does not know ``Challenge`` refuses it as ``unknown_type``)."""
        if self.identity is None:
            return {}
        self.model.challenge = None
        seen = len(self.model.errors)
        deadline = time.monotonic() + timeout
        while self.model.challenge is None:
            if any(e.code == "unknown_type" for e in list(self.model.errors)[seen:]):
                return {}
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestError("timeout", "no answer from a relay: is `blink serve` running on this broker?")
            await self.conn.request(m.Challenge())  # (asked again each second: a request may be lost)
            end = time.monotonic() + min(left, 1.0)
            while self.model.challenge is None and time.monotonic() < end and len(self.model.errors) == seen:
                await self.wait_change(0.1)
            seen_new = list(self.model.errors)[seen:]
            if seen_new and not any(e.code == "unknown_type" for e in seen_new):
                seen = len(self.model.errors)  # another refusal (a rate limit): ask again
        return self.identity.prove(self.client_id, self.model.challenge)

    async def watch(self, code: str, timeout: float = 10.0) -> str:
        """Spectate a match by code: a read-only view from its public events and snapshot, with the
        match's history from its first event (the relay re-sends the past ones it keeps).

        Returns once the relay has shown the match exists: a game's state, or one of its events --
        a match still waiting for players has no game state yet, but it has its ``match_created``,
        which the relay re-sends to this client alone in answer to ``watch_from``. (A retained
        snapshot is no proof: it can outlive a relay that died before clearing it.)"""
        code = code.upper()
        self.model.spectate(code)
        before = {id(e) for e in self.model.errors}
        await self.conn.watch(code)  # subscribed first: no live event falls between the past and them
        await self.conn.request(self.model.watch_from())
        deadline = time.monotonic() + timeout
        while self.model.predictor is None and not any(e.match == code for e in self.model.events):
            if any(e.code == "no_such_match" and id(e) not in before for e in self.model.errors):
                raise RequestError("no_such_match", f"no match {code!r} on this relay")
            if time.monotonic() > deadline:
                raise RequestError("no_such_match", f"no match {code!r} on this broker")
            await self.wait_change(0.25)
        return code

    async def act(self, action: object, seen_seq: int | None = None) -> m.Act | Rejected:
        """Predict the action at once, then send it. A local rejection is returned, not sent."""
        result = self.model.act(action, time.time_ns(), seen_seq=seen_seq)
        if isinstance(result, m.Act) and self.model.match:
            await self.conn.act(self.model.match, result)
        self.changed.set()
        return result

    def act_nowait(self, action: object, seen_seq: int | None = None) -> m.Act | Rejected:
        """The same, for code that may not await (a key handler): the prediction is done when this
        returns, so the very next frame draws it; the publish follows in a task."""
        result = self.model.act(action, time.time_ns(), seen_seq=seen_seq)
        if isinstance(result, m.Act) and self.model.match:
            self.conn.post_act(self.model.match, result)
        self.changed.set()
        return result

    async def rematch(self) -> None:
        if self.model.match:
            await self.conn.request(m.Rematch(self.model.match))

    def match_over(self) -> bool:
        return self.model.match_state.get("status") == "over"

    async def wait_change(self, timeout: float | None = None) -> None:
        self.changed.clear()
        await wait_event(self.changed, timeout)
