"""Shard ownership by leases in a NATS JetStream key-value bucket: ``NatsLeases`` implements
``relay.ownership.Ownership``.

How this works
--------------
Two buckets (``<ns>`` is the namespace, ``blink`` by default):

- ``<ns>_leases``, a KV bucket whose entries expire ``ttl`` seconds after their last write (the
  stream's ``max_age``; file storage, replicated). Key ``s.<shard>`` holds the id of the relay that
  owns the shard; key ``m.<relay>`` is a relay's heartbeat (its pinned shards, when it has any).
- ``<ns>_meta`` (no expiry): ``shards``, the shard count, written by the first relay ever started;
  a relay started with another count is refused. Shards are named "0" .. "N-1".

A relay **acquires** a shard by writing its key when it is absent (free, released or expired),
**renews** it with ``update(last=revision)`` every ``RENEW_EVERY_S`` (1 s; ``ttl/3`` for a ttl under
3 s) and **releases** it with ``delete(last=revision)``. The fence of a tenure is the revision of its acquiring write: revisions are
the bucket stream's sequence numbers, so a later tenure always has a larger fence (renewals
make new revisions too, but the fence stays the tenure's first).

Acquiring is not KV ``create``: nats-server before 2.9.21 checks a clustered stream's per-subject
condition (``Nats-Expected-Last-Subject-Sequence``, what ``create`` and ``update`` use) only before
the write is replicated, so two relays racing for one key could both "create" it (nats-server#4320;
199 of 200 races on 2.9.10 here), and a relay may be pointed at any cluster (``blink cluster up``
requires 2.10 only for its authorization). The stream-wide ``Nats-Expected-Last-Sequence`` is
checked in order on every version: an acquisition reads the bucket's last sequence, checks the key is absent, and writes with
that sequence expected; any write to the bucket in between (a renewal elsewhere) makes it fail and
read again. Renewals keep ``update(last=revision)``: only the owner writes its key while it holds it.

Fast takeover from a dead relay: each relay answers a NATS request on ``<ns>.alive.<relay>`` from its
lease connection (subscribed before its heartbeat is written). Every tick a relay asks each other
member; NATS answers "no responders" at once when nobody is subscribed -- the relay's connection is
closed (``kill -9`` closes it too). The probes run every ``PROBE_S`` in a task of their own (a tick
reading the bucket while a stream elects its leader may take a second or more). A member with no
responder on every probe for ``DEAD_AFTER_S`` (longer than a NATS client's reconnect to another
node, well under 0.2 s on loopback) is taken as dead and the tick runs at once: its shards are taken
without waiting for their entries to expire, each written over only if it still holds that
relay's revision (the same stream-wide condition as an acquisition). Should the relay in fact be
alive (cut off from NATS for that long), it gives its shards up by itself at ``ttl/2`` and its late
journal appends are refused by the new owner's fence, claimed before it replays -- the fence, not
the timing, is what keeps two relays from writing one shard. Without the probes a killed relay's
shards would be served again only once their leases expired (up to the ttl after the kill) plus a
tick.

Safety: a renewal is counted from the moment it was *sent* (the server's expiry clock starts
later). A relay that has had no successful renewal for ``ttl/2`` gives the shard up at once
(``on_loss``), well before the entry can expire on the server and another relay can create it; a
renewal refused because the revision moved on means the lease is gone: ``on_loss`` at once too.
The give-up is checked every tick and again before each step of a tick that waits on the cluster
(the bucket read, the renewals, each acquisition), so it comes at most a tick plus the longest such
step (``3 * request_s``, 2 s) late: ``ttl/2 + 2.5 s`` at most, 8.5 s for the default ttl of 12 s. Once
the relay has stopped serving a shard it gave up it deletes the entry (``delete(last=revision)``), so
the others need not wait for the expiry once the cluster answers again. That deletion fails while
the cluster stalls, and a renewal queued in the stall may be stored after the give-up: such an entry
still names this relay, and nobody else may take it before it expires (a ttl after that late write),
so the relay takes it back itself once its cooldown is over, or deletes it (``relay.cluster.leaseplan``,
"Leftovers"). Should a relay still write
after all that (a frozen process), the journal's fence refuses it.

Timing (the default ttl, ``DEFAULT_TTL_S``, is 12 s): renewals every second, give-up after 6 s
without a successful one. When a NATS node stops, JetStream may stall for ~4 s some 7-12 s later
(consumer deletions waiting on the meta leader hold the routes up); with a give-up time of 2 s (a
4 s ttl) every relay would give every shard up then, while with 6 s a stall of up to ~5 s (the
give-up time less a renewal interval) costs nothing. What a long ttl costs: a relay that is
*frozen* (SIGSTOP, a hung process whose NATS connection stays open: its probes time out rather
than find no responder) has its shards taken only when its entries expire, up to the ttl; a killed
relay's shards are taken through the probes after ``DEAD_AFTER_S`` whatever the ttl. Writes: one KV
write per held shard a second, a heartbeat every ``ttl/3``; each tick's read of the bucket (a
stream-info request plus one read per key, every ``tick_s`` by every relay) is by far the larger
load.

Balance, and which shards to keep, renew, release or take each tick: ``relay.cluster.leaseplan``.

``relay.cluster.leaseplan.decide`` is that logic as a pure function (time is an argument); ``NatsLeases`` is the thin
nats-py shell: every tick (``ttl/8``, at most 0.5 s) it reads the bucket (one stream-info request
listing the present keys, then their values), calls ``decide``, and carries out the plan.
Callbacks run in order on a separate task, so a long replay in ``on_gain`` never delays renewals;
``start`` returns once the callbacks for the shards taken at start have run.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from protocol.topics import DEFAULT_PREFIX
from relay.cluster.jetstream import START_WAIT_S, bounded, close_nats, connect_jetstream, quiet_refused_closes
from relay.storage import JournalError
from relay.cluster.leaseplan import (GIVE_UP_AT, RENEW_AT, HeldLease, LeaseError, Owner, View, cooldown_s, decide, leftovers,
                             pin_conflict, renew_after, without_dead)
from relay.cluster.natscallout import Callout, CalloutError, password_of
from relay.ownership import OnGain, OnLoss

if TYPE_CHECKING:  # nats-py is imported where it is used: a relay without a cluster never loads it
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg as NatsMsg
    from nats.aio.subscription import Subscription
    from nats.js.client import JetStreamContext
    from nats.js.kv import KeyValue

T = TypeVar("T")

log = logging.getLogger("blink.relay.leases")

DEFAULT_TTL_S = 12.0  # rides out a ~5 s JetStream stall (see "Timing" above); ``--lease-ttl`` changes it
REQUEST_S = 4.0 / 6  # at most, for one request of the lease shell (ttl/6 if shorter): resent soon after a stall
DEAD_AFTER_S = 0.75  # no responder on the liveness subject for this long: the relay is dead
PROBE_S = 0.2  # how often the other members are asked (a task of its own; a death wakes the tick)
_ID = re.compile(r"^[A-Za-z0-9_-]+$")


# ---------------------------------------------------------------------------------------------- the nats-py shell

class NatsLeases:
    """``Ownership`` backed by leases in JetStream KV (see the module docstring)."""

    def __init__(self, servers: str | Sequence[str], shard_count: int, *, pinned: Iterable[str] = (),
                 ttl: float = DEFAULT_TTL_S, namespace: str = "blink", relay_id: str | None = None,
                 replicas: int | None = None, connect_timeout: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, probe: bool = True,
                 prefix: str = DEFAULT_PREFIX, callout: bool = True) -> None:
        if shard_count < 1:
            raise LeaseError(f"the shard count must be at least 1, not {shard_count}")
        if not 1.0 <= ttl <= 600:
            raise LeaseError(f"the lease ttl must be 1..600 s, not {ttl}")
        if not _ID.match(namespace):
            raise LeaseError(f"namespace {namespace!r} must be letters, digits, '-' or '_'")
        self.relay_id = relay_id or f"r-{uuid.uuid4().hex[:12]}"
        if not _ID.match(self.relay_id):
            raise LeaseError(f"relay id {self.relay_id!r} must be letters, digits, '-' or '_'")
        self.servers = servers
        self.shard_count = shard_count
        self.shards = [str(i) for i in range(shard_count)]
        self.pinned = frozenset(pinned)
        bad = sorted(s for s in self.pinned if s not in self.shards)
        if bad:
            raise LeaseError(f"pinned shard{'s' if len(bad) > 1 else ''} {', '.join(bad)} not in 0..{shard_count - 1}")
        self._timing(ttl)
        self.namespace = namespace
        self.replicas = replicas
        self.connect_timeout = connect_timeout
        self.clock = clock
        self._held: dict[str, HeldLease] = {}
        self._cooldown: dict[str, float] = {}
        self._gain: list[OnGain] = []
        self._loss: list[OnLoss] = []
        self._events: asyncio.Queue[tuple[str, str, int, Callable[[], Awaitable[None]] | None]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._nc: NATS | None = None
        self._js_context: JetStreamContext | None = None
        self._kv_bucket: KeyValue | None = None
        self._stream = ""
        self._since: int | None = None
        self._closing = False
        self._releasing: set[str] = set()
        self._clearing: set[str] = set()  # leftovers whose deletion is queued (``relay.cluster.leaseplan.leftovers``)
        self.probe = probe  # ask the other members whether they are alive (see the module docstring)
        self._absent: dict[str, float] = {}  # member -> since when it has had no responder
        self._replacing: dict[str, Owner] = {}  # shard -> the dead relay's entry, for this tick's acquisitions
        self._alive_sub: Subscription | None = None
        self._dead: set[str] = set()  # the members the probes found dead (see ``_run_probes``)
        self._wake_tick: asyncio.Event | None = None
        self.view = View()
        self.prefix = prefix  # the topic prefix whose players the auth callout lets in
        #: Answer the cluster's auth callout (``relay/cluster/natscallout.py``) when logged in with a password.
        self.answer_callout = callout
        self.callout: Callout | None = None
        #: (time, what) of every change, for tests and logs
        self.history: collections.deque[tuple[float, str, str]] = collections.deque(maxlen=1000)

    def _timing(self, ttl: float) -> None:
        self.ttl = ttl
        self.tick_s = min(0.5, ttl / 8)
        # one request's timeout: short, so a request lost in a stall is sent again soon after it ends
        self.request_s = min(REQUEST_S, ttl / 6)

    # The connection and the buckets exist from ``start`` on; nothing uses them before.

    @property
    def _kv(self) -> KeyValue:
        if self._kv_bucket is None:
            raise LeaseError("the leases are not started")
        return self._kv_bucket

    @property
    def _js(self) -> JetStreamContext:
        if self._js_context is None:
            raise LeaseError("the leases are not started")
        return self._js_context

    # ---- Ownership

    #: Leases are taken once the relay is connected: a shard gained is served at once (relay/ownership.py).
    before_connecting = False

    def subscribe(self, on_gain: OnGain, on_loss: OnLoss) -> None:
        self._gain.append(on_gain)
        self._loss.append(on_loss)

    def owned(self) -> Mapping[str, int]:
        held = self._held.copy()  # one C call: safe to read from another thread (``ThreadedLeases``)
        return {s: h.fence for s, h in held.items()}

    def why_lost(self, shard: str) -> str | None:
        """The latest change of ``shard`` in the history (what the operator is told when it goes)."""
        return next((what for _, what, s in reversed(list(self.history)) if s == shard), None)

    async def start(self) -> None:
        if self._nc is not None:
            return
        try:
            self._nc = await connect_jetstream(self.servers, self.connect_timeout, name=f"blink-leases-{self.relay_id}")
        except JournalError as exc:
            raise LeaseError(str(exc)) from exc
        try:
            await self._start_callout(self._nc)
            await self._setup(self._nc)
        except BaseException:
            await close_nats(self._nc)
            self._nc = None
            raise
        self._events = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._run_events(), name="blink-lease-events")]
        await self._tick()
        self._tasks.append(asyncio.create_task(self._run_ticks(), name="blink-lease-ticks"))
        self._tasks.append(asyncio.create_task(self._run_probes(), name="blink-lease-probes"))
        await self._events.join()  # like StaticOwnership: the first shards' on_gain has run when start returns

    async def close(self) -> None:
        """Give every shard up: ``on_loss`` for each, then the lease entries are deleted (others take over
        at once); the heartbeat goes last."""
        if self._nc is None or self._closing:
            return
        self._closing = True
        ticker = [t for t in self._tasks if t.get_name() in ("blink-lease-ticks", "blink-lease-probes")]
        for t in ticker:
            t.cancel()
        await bounded(asyncio.gather(*ticker, return_exceptions=True), self.ttl)
        held, self._held = dict(self._held), {}
        for shard, h in held.items():
            self._note("close", shard)
            await self._emit("loss", shard, h.fence, self._deleter(shard, h.revision))
        if self._events is not None:
            runner = [t for t in self._tasks if t.get_name() == "blink-lease-events"]
            if runner and not runner[0].done():
                await self._events.join()  # the relay's own on_loss callbacks: not bounded here
            else:  # the callback task is gone (cancelled from outside): run what is left here
                while not self._events.empty():
                    await self._handle(*self._events.get_nowait())
                    self._events.task_done()
        for t in self._tasks:
            t.cancel()
        await bounded(asyncio.gather(*self._tasks, return_exceptions=True), self.ttl)
        try:
            await bounded(self._kv.delete(f"m.{self.relay_id}"), self.request_s * 2)
        except Exception:  # noqa: BLE001 -- it expires anyway
            pass
        await close_nats(self._nc)
        self._nc = None

    # ---- setup

    async def _start_callout(self, nc: NATS) -> None:
        """Answer the nodes' auth callout from here on (first: players get in while the rest starts)."""
        password = password_of(self.servers) if self.answer_callout else None
        if password is None:
            return  # an open cluster: nothing to answer
        try:
            self.callout = Callout(password, self.prefix)
        except CalloutError as exc:
            raise LeaseError(str(exc)) from exc
        await self.callout.start(nc)

    async def _setup(self, nc: NATS) -> None:
        import nats.errors
        import nats.js.errors
        from nats.js.api import KeyValueConfig, StorageType

        # Short requests, retried until START_WAIT_S: right after a stream is created (by another relay
        # starting at the same moment, say) a request to it may go unanswered until its leader is up,
        # and a freshly started cluster answers "temporarily unavailable" until it has a meta leader.
        js = nc.jetstream(timeout=2.0)
        bucket = f"{self.namespace}_leases"
        meta_bucket = f"{self.namespace}_meta"
        replicas_choices = [self.replicas] if self.replicas else [3, 2, 1]

        deadline = time.monotonic() + max(START_WAIT_S, self.connect_timeout)
        transient = (nats.errors.TimeoutError, asyncio.TimeoutError, nats.js.errors.ServiceUnavailableError,
                     nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)

        async def bucket_of(name: str, ttl: float | None) -> KeyValue:
            """The bucket, created if missing; several relays starting at once may all try, and a busy
            cluster may time a creation out that still happens: look again until the deadline."""
            choices = list(replicas_choices)
            while True:
                try:
                    return await js.key_value(name)
                except nats.js.errors.BucketNotFoundError:
                    pass
                except transient:
                    if time.monotonic() > deadline:
                        raise
                    continue
                try:
                    return await js.create_key_value(KeyValueConfig(bucket=name, history=1, ttl=ttl,
                                                                    replicas=choices[0], storage=StorageType.FILE))
                except transient:
                    if time.monotonic() > deadline:
                        raise
                except nats.js.errors.APIError as exc:
                    if "already in use" in str(exc):
                        continue
                    if self.replicas or len(choices) == 1 or ("replica" not in str(exc).lower()
                                                              and exc.err_code != 10074):
                        raise LeaseError(f"cannot create the key-value bucket {name}: {' '.join(str(exc).split())}")
                    choices.pop(0)
                await asyncio.sleep(0.2)

        async def again(make: Callable[[], Awaitable[T]]) -> T:
            while True:
                try:
                    return await make()
                except transient:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.2)

        try:
            meta = await bucket_of(meta_bucket, None)
            self._js_context = js
            written = await again(lambda: self._create_exclusive(f"KV_{meta_bucket}", f"$KV.{meta_bucket}.shards",
                                                                 str(self.shard_count).encode()))
            if written is None:
                stored = (await again(lambda: meta.get("shards"))).value or b""
                if stored.decode(errors="replace") != str(self.shard_count):
                    raise LeaseError(f"the cluster has {stored.decode(errors='replace')} shards "
                                     f"(namespace {self.namespace}); this relay was started with {self.shard_count}: "
                                     f"use the same shard count on every relay")
            self._kv_bucket = await bucket_of(bucket, self.ttl)
            info = await again(lambda: js.stream_info(f"KV_{bucket}"))
            age = float(info.config.max_age or 0)
            if age and abs(age - self.ttl) > 1e-3:
                log.warning("the lease bucket %s expires entries after %.1f s, not %.1f s: using %.1f s",
                            bucket, age, self.ttl, age)
                self._timing(age)
            self._stream = f"KV_{bucket}"
            self._prefix = f"$KV.{bucket}."
            self.view = await again(self._observe)
            if self.pinned:
                problem = pin_conflict(self.relay_id, self.pinned, self.view, None)
                if problem:
                    raise LeaseError(f"refused: {problem}; two relays cannot be forced onto one shard")
            # answer liveness probes before anyone can see this relay as a member
            self._alive_sub = await nc.subscribe(self._alive_subject(self.relay_id), cb=self._answer_alive)
            await nc.flush(timeout=2)
            self._since = await again(lambda: self._kv.create(f"m.{self.relay_id}", self._member_value()))
            if self.pinned:
                self.view = await again(self._observe)
                problem = pin_conflict(self.relay_id, self.pinned, self.view, self._since)
                if problem:
                    await again(lambda: self._kv.delete(f"m.{self.relay_id}"))
                    raise LeaseError(f"refused: {problem}; two relays cannot be forced onto one shard")
        except LeaseError:
            raise
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise LeaseError(f"a relay with id {self.relay_id} is already running") from exc
        except Exception as exc:
            raise LeaseError(f"cannot set up the leases: {' '.join(str(exc).split()) or type(exc).__name__}") from exc
        self._member_at = self.clock()

    def _alive_subject(self, relay: str) -> str:
        return f"{self.namespace}.alive.{relay}"

    async def _answer_alive(self, msg: NatsMsg) -> None:
        try:
            await msg.respond(b"1")
        except Exception:  # noqa: BLE001 -- the asker will ask again
            pass

    async def _probe(self) -> set[str]:
        """Ask every other member whether it is alive; the members dead for ``DEAD_AFTER_S``."""
        import nats.errors

        others = [m for m in self.view.members if m != self.relay_id]
        for gone in [m for m in self._absent if m not in others]:
            del self._absent[gone]
        nc = self._nc
        if not others or not self.probe or nc is None:
            return set()

        async def ask(member: str) -> bool | None:
            try:
                await nc.request(self._alive_subject(member), b"", timeout=min(1.0, self.request_s))
                return True
            except nats.errors.NoRespondersError:
                return False
            except Exception:  # noqa: BLE001 -- a timeout or our own connection away: no conclusion
                return None

        answers = await asyncio.gather(*(ask(m) for m in others))
        now = self.clock()
        dead: set[str] = set()
        for member, alive in zip(others, answers):
            if alive:
                self._absent.pop(member, None)
            elif alive is False:
                first = self._absent.setdefault(member, now)
                if now - first >= DEAD_AFTER_S:
                    dead.add(member)
        return dead

    def _member_value(self) -> bytes:
        return json.dumps({"pins": sorted(self.pinned), "since": self._since}).encode()

    # ---- the tick

    async def _observe(self) -> View:
        """One read of the bucket: the present keys (stream info), then each key's newest message. A key
        whose read failed (other than "not found": expired in between) fails the whole read -- taken as
        absent, it made the relay drop a shard it held ("lease taken") while the bucket's stream elected
        a new leader after a node stopped."""
        import nats.js.errors

        info = await self._js.stream_info(self._stream, subjects_filter=">")
        subjects = list((info.state.subjects or {}).keys())
        msgs = await asyncio.gather(*(self._js.get_msg(self._stream, subject=s) for s in subjects),
                                    return_exceptions=True)
        owners: dict[str, Owner] = {}
        members: dict[str, frozenset[str]] = {}
        since: dict[str, int] = {}
        for subject, msg in zip(subjects, msgs):
            if isinstance(msg, nats.js.errors.NotFoundError):
                continue  # expired between the two requests
            if isinstance(msg, BaseException):
                raise msg
            op = (msg.headers or {}).get("KV-Operation")
            if op in ("DEL", "PURGE"):
                continue
            key = subject[len(self._prefix):]
            if msg.seq is None:
                raise LeaseError(f"the lease bucket's entry {key} has no revision")
            if key.startswith("s."):
                owners[key[2:]] = Owner((msg.data or b"").decode(errors="replace"), msg.seq)
            elif key.startswith("m."):
                try:
                    value = json.loads(msg.data or b"{}")
                    members[key[2:]] = frozenset(str(p) for p in value.get("pins", []))
                    since[key[2:]] = int(value.get("since") or msg.seq)
                except (ValueError, TypeError, AttributeError):
                    members[key[2:]] = frozenset()
                    since[key[2:]] = msg.seq
        return View(owners, members, since)

    async def _run_probes(self) -> None:
        while True:
            await asyncio.sleep(PROBE_S)
            try:
                dead = await bounded(self._probe(), 1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- no conclusion this time
                log.info("liveness probe failed: %s", exc)
                continue
            if dead is None:
                continue
            new = dead - self._dead
            self._dead = dead
            if new and any(o.relay in new for o in self.view.owners.values()) and self._wake_tick is not None:
                log.warning("relay %s gone (no responder for %.2f s): taking its shards over now",
                            ", ".join(sorted(new)), DEAD_AFTER_S)
                self._wake_tick.set()

    async def _run_ticks(self) -> None:
        self._wake_tick = asyncio.Event()
        while True:
            try:
                await asyncio.wait_for(self._wake_tick.wait(), self.tick_s)
            except asyncio.TimeoutError:
                pass
            self._wake_tick.clear()
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- a failed read: the give-up clock decides
                log.warning("lease tick failed: %s", " ".join(str(exc).split()) or type(exc).__name__)
                await self._expire_only()

    async def _expire_only(self) -> None:
        """When the bucket cannot be read, and between the steps of a tick that wait on the cluster:
        give up what is too old now, not only once the tick is over."""
        now = self.clock()
        for shard, h in list(self._held.items()):
            if now - h.renewed_at >= self.ttl * GIVE_UP_AT:
                await self._lose(shard, "no renewal in time")

    async def _tick(self) -> None:
        if self._closing:
            return
        now = self.clock()
        # Renewals and the heartbeat that are due go out first, beside the read of the bucket: a slow
        # read must not eat into the time left before the give-up.
        writes: list[Awaitable[None]] = [self._renew(s) for s, h in self._held.items()
                                         if renew_after(self.ttl) <= now - h.renewed_at < self.ttl * GIVE_UP_AT]
        if now - self._member_at >= self.ttl * RENEW_AT:
            writes.append(self._heartbeat(now))
        early = asyncio.gather(*writes, return_exceptions=True)
        try:
            view_now = await bounded(self._observe(), self.request_s * 2)
            if view_now is None:
                raise TimeoutError("reading the lease bucket timed out")
            self.view = view_now
        finally:
            await early
            await self._expire_only()
        view = self.view
        for shard, mine in list(self._held.items()):
            owner = view.owners.get(shard)
            if owner is not None and owner.relay == self.relay_id and owner.revision > mine.revision:
                # a renewal whose answer was lost did land: renew from its revision (only we write our id
                # there); its send time is unknown, so the give-up clock keeps the older one
                self._held[shard] = HeldLease(mine.fence, owner.revision, mine.renewed_at)
        dead = set(self._dead) if self.probe else set()
        view, self._replacing = without_dead(view, dead)
        # this relay's own leftovers are taken back only if still exactly that entry, like a dead relay's
        self._replacing.update(leftovers(self.relay_id, self._held, view))
        for member in dead:
            if any(o.relay == member for o in self._replacing.values()):
                log.warning("relay %s is gone (no responder for %.1f s): taking its shards over", member, DEAD_AFTER_S)
        # the heartbeat may not be in the view yet on the very first tick
        if self.relay_id not in view.members:
            view = View(view.owners, {**view.members, self.relay_id: self.pinned}, view.since)
        now = self.clock()
        plan = decide(now, self.relay_id, self.shards, self.pinned, self._held, view, self.ttl, self._cooldown)
        for shard in plan.lose:
            why = "renewal too late" if now - self._held[shard].renewed_at >= self.ttl * GIVE_UP_AT else "lease taken"
            await self._lose(shard, why)
        await asyncio.gather(*(self._renew(s) for s in plan.renew))
        await self._expire_only()
        for shard in plan.release:
            h = self._held.pop(shard, None)
            if h is None:
                continue
            self._cooldown[shard] = now + cooldown_s(self.ttl)
            self._note("release", shard)
            await self._emit("loss", shard, h.fence, self._deleter(shard, h.revision))
        for shard in plan.clear:
            if shard not in self._clearing:  # after any on_loss still queued for it, like a give-up's deletion
                self._clearing.add(shard)
                await self._emit("clear", shard, 0, self._deleter(shard, view.owners[shard].revision))
        for shard in plan.acquire:  # one at a time: concurrent ones would only spoil each other's condition
            if self._closing:
                break
            await self._acquire(shard)
            await self._expire_only()  # an acquisition may wait up to 3 * request_s

    async def _heartbeat(self, sent: float) -> None:
        try:
            if await bounded(self._kv.put(f"m.{self.relay_id}", self._member_value()), self.request_s) is None:
                raise TimeoutError("no answer")
            self._member_at = sent
        except Exception as exc:  # noqa: BLE001
            log.info("heartbeat failed: %s", " ".join(str(exc).split()) or type(exc).__name__)

    async def _renew(self, shard: str) -> None:
        import nats.js.errors

        h = self._held.get(shard)
        if h is None:
            return
        sent = self.clock()
        try:
            rev = await bounded(self._kv.update(f"s.{shard}", self.relay_id.encode(), last=h.revision),
                                self.request_s)
            if rev is None:
                raise TimeoutError("no answer")
        except nats.js.errors.KeyWrongLastSequenceError:
            # An earlier renewal whose answer was lost (the stream's leader went away) may have landed:
            # the key then still holds this relay's id, at a newer revision (only the owner writes its id).
            try:
                entry = await bounded(self._kv.get(f"s.{shard}"), self.request_s)
            except Exception:  # noqa: BLE001 -- cannot tell now: the next tick's read decides
                return
            landed = (entry.revision or 0) if entry is not None else 0
            if entry is not None and (entry.value or b"") == self.relay_id.encode() and landed > h.revision:
                if self._held.get(shard) is h:
                    self._held[shard] = HeldLease(h.fence, landed, h.renewed_at)
                log.info("renewal of shard %s: an earlier one had landed (revision %s)", shard, entry.revision)
                return
            if entry is None:
                return  # no answer: the next tick's read decides
            await self._lose(shard, "lease taken")
            return
        except Exception as exc:  # noqa: BLE001 -- try again next tick, until the give-up time
            log.info("renewal of shard %s failed: %s", shard, " ".join(str(exc).split()) or type(exc).__name__)
            return
        if self._held.get(shard) is h:
            self._held[shard] = HeldLease(h.fence, int(rev), sent)

    async def _create_exclusive(self, stream: str, subject: str, value: bytes, attempts: int = 8,
                                replacing: Owner | None = None) -> int | None:
        """Write ``value`` to ``subject`` only if that key is absent (or deleted) -- or, with ``replacing``,
        still holds exactly that entry -- and nobody has written to the bucket since it was read: the
        stream-wide ``Nats-Expected-Last-Sequence`` (see the module docstring for why not KV ``create``).
        Returns the revision, or None (taken, or too busy to tell)."""
        import nats.js.errors

        for _ in range(attempts):
            info = await self._js.stream_info(stream)
            last = int(info.state.last_seq)
            try:
                msg = await self._js.get_msg(stream, subject=subject)
                present = (msg.headers or {}).get("KV-Operation") not in ("DEL", "PURGE")
                if present and (replacing is None or msg.seq != replacing.revision
                                or (msg.data or b"").decode(errors="replace") != replacing.relay):
                    return None
            except nats.js.errors.NotFoundError:
                pass
            try:
                ack = await self._js.publish(subject, value, headers={"Nats-Expected-Last-Sequence": str(last)})
            except nats.js.errors.APIError as exc:
                if exc.err_code in (10071, 10164):
                    continue  # someone wrote to the bucket meanwhile (often a renewal elsewhere): read again
                raise
            return int(ack.seq)
        return None

    async def _acquire(self, shard: str) -> None:
        sent = self.clock()
        try:
            rev = await bounded(
                self._create_exclusive(self._stream, f"{self._prefix}s.{shard}", self.relay_id.encode(),
                                       replacing=self._replacing.get(shard)),
                self.request_s * 3)
        except Exception:  # noqa: BLE001 -- no answer: next tick
            return
        if rev is None:
            return
        if self._closing:
            return
        self._held[shard] = HeldLease(int(rev), int(rev), sent)
        if shard in self._replacing and self._replacing[shard].relay == self.relay_id:
            log.warning("took back shard %s (its entry still named this relay) in %.2f s", shard, self.clock() - sent)
        elif shard in self._replacing:
            log.warning("took shard %s of relay %s in %.2f s", shard, self._replacing[shard].relay,
                        self.clock() - sent)
        self._note("gain", shard)
        await self._emit("gain", shard, int(rev), None)

    async def _lose(self, shard: str, why: str) -> None:
        h = self._held.pop(shard, None)
        if h is None:
            return
        # A relay whose renewals fail must not grab the shard straight back (it would only lose it again
        # and keep the healthy relays from it): it waits like after a release.
        self._cooldown[shard] = self.clock() + cooldown_s(self.ttl)
        log.warning("relay %s lost shard %s (%s)", self.relay_id, shard, why)
        self._note(f"loss: {why}", shard)
        # Given up for want of renewals, the entry still holds this relay's id until it expires (up to a
        # ttl): once on_loss has run, it is deleted (if still at this revision), so another relay can take
        # the shard as soon as the cluster answers again. A lease taken by another is not ours to delete.
        await self._emit("loss", shard, h.fence, None if why == "lease taken" else self._deleter(shard, h.revision))

    def _deleter(self, shard: str, revision: int) -> Callable[[], Awaitable[None]]:
        async def delete() -> None:
            try:
                await bounded(self._kv.delete(f"s.{shard}", last=revision), self.request_s * 2)
            except Exception:  # noqa: BLE001 -- renewed meanwhile or no answer: a later tick sees it as a leftover
                pass
            finally:
                self._clearing.discard(shard)
        return delete

    def _note(self, what: str, shard: str) -> None:
        self.history.append((self.clock(), what, shard))

    # ---- callbacks, in order, off the tick

    async def _emit(self, kind: str, shard: str, fence: int, after: Callable[[], Awaitable[None]] | None) -> None:
        assert self._events is not None
        self._events.put_nowait((kind, shard, fence, after))

    async def _run_events(self) -> None:
        assert self._events is not None
        while True:
            event = await self._events.get()
            try:
                await self._handle(*event)
            finally:
                self._events.task_done()

    async def _handle(self, kind: str, shard: str, fence: int, after: Callable[[], Awaitable[None]] | None) -> None:
        try:
            for cb in (self._gain if kind == "gain" else []):
                await cb(shard, fence)
            for cb2 in (self._loss if kind == "loss" else []):
                await cb2(shard)
            if after is not None:
                await after()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- one failing callback must not stop the others
            log.warning("%s callback for shard %s failed: %s", kind, shard, exc)


class ThreadedLeases:
    """``Ownership``: a ``NatsLeases`` run on a thread of its own, with its own event loop and NATS
    connection, so that a relay whose event loop is busy (a burst of plays, a long replay, a slow
    journal) never makes a renewal late: under two CPU burners a relay's loop can stall long enough
    for renewals made on it to miss the give-up time, and shards would move for nothing.

    The callbacks still run on the caller's loop (the one ``start`` was awaited on), in order, each
    awaited before the next -- as with ``NatsLeases`` itself. ``owned()`` is read straight from the
    lease thread, so a shard whose lease is gone drops out of it at once, even while the ``on_loss``
    callback still waits for the caller's loop: the relay checks ``owned()`` before publishing each
    shard's outputs (and the journal's fence refuses any append behind a successor's back anyway)."""

    CALLBACK_TIMEOUT_S = 120.0  # a caller loop that never runs a callback (it was stopped): go on

    def __init__(self, leases: NatsLeases) -> None:
        self.inner = leases
        self.relay_id = leases.relay_id
        self._gain: list[OnGain] = []
        self._loss: list[OnLoss] = []
        self._caller: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        leases.subscribe(self._forward_gain, self._forward_loss)

    @property
    def ttl(self) -> float:
        return self.inner.ttl

    before_connecting = False  # (as ``NatsLeases``)

    @property
    def history(self) -> collections.deque[tuple[float, str, str]]:
        return self.inner.history

    def subscribe(self, on_gain: OnGain, on_loss: OnLoss) -> None:
        self._gain.append(on_gain)
        self._loss.append(on_loss)

    def owned(self) -> Mapping[str, int]:
        return self.inner.owned()

    def why_lost(self, shard: str) -> str | None:
        return self.inner.why_lost(shard)

    async def start(self) -> None:
        if self._loop is not None:
            return
        self._caller = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()
        quiet_refused_closes(self._loop)
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"blink-leases-{self.relay_id}",
                                        daemon=True)
        self._thread.start()
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.inner.start(), self._loop))
        except BaseException:
            self._stop_loop()
            raise

    async def close(self) -> None:
        if self._loop is None:
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.inner.close(), self._loop))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()

    async def _on_caller(self, make: Callable[[], Awaitable[None]]) -> None:
        """Run a callback on the caller's loop and wait for it (from the lease thread)."""
        caller = self._caller
        if caller is None or caller.is_closed():
            return

        async def call() -> None:
            await make()

        try:
            future = asyncio.run_coroutine_threadsafe(call(), caller)
        except RuntimeError:  # the caller's loop is closed
            return
        try:
            await bounded(asyncio.wrap_future(future), self.CALLBACK_TIMEOUT_S)
        except asyncio.CancelledError:
            if future.cancelled():  # cancelled on the caller's loop (it is shutting down): not ours
                return
            raise
        if not future.done():
            log.warning("a lease callback did not run within %.0f s", self.CALLBACK_TIMEOUT_S)

    async def _forward_gain(self, shard: str, fence: int) -> None:
        for cb in list(self._gain):
            await self._on_caller(functools.partial(cb, shard, fence))

    async def _forward_loss(self, shard: str) -> None:
        for cb in list(self._loss):
            await self._on_caller(functools.partial(cb, shard))


__all__ = ["DEAD_AFTER_S", "DEFAULT_TTL_S", "NatsLeases", "ThreadedLeases"]
