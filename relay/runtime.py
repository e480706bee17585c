"""The relay: moves bytes between MQTT and the judges of the shards it owns, keeps time, journals, logs.

How this works
--------------
A single relay owns one shard, the whole game space (``WholeSpace``, ``StaticOwnership``),
journalled in SQLite or not at all, under its own relay id. A relay of a cluster owns some of
``total`` shards (``ShardedSpace``) by static assignment or JetStream leases, each journalled apart
under its fence and speaking as ``shard-{n}``. The runtime never asks which of the two it is: it
asks its space and its ownership (``relay/ownership.py``), and is started with one frozen
``RelaySettings``. Each owned shard is a ``Shard`` (``relay/shard.py``). Two tasks share one event
loop, so no core is entered concurrently:

- the *connection* (``relay/link.py``) hands every read's PUBLISHes to ``_on_messages`` as one
  list, stamped once, admitted by the intake. A flood's excess costs as little as can be (Mosquitto
  cannot limit a client's rate): a refused topic is charged in bulk for the rest of its read, and
  dropped unbuilt by the parser while its bucket is at the floor. A relay of several subscribes
  once to every shard's actions and the parser skips the unserved ones by their topic bytes: on
  NATS every SUBSCRIBE writes the session to JetStream (4 s each while a node was away).
- the *stepper* runs one group-committed step a loop turn: the inbox's messages routed to their
  shard (``relay/cluster/shards.py``) and handled in arrival order, due cores ticked, each shard's inputs
  appended as ONE batch with its fence, and only then the outputs published and logged: nothing a
  player hears accepted is lost, and the journal holds exactly the times the core was given. A
  fenced append drops the shard unpublished; another journal error rebuilds a shard the relay opened
  from its journal, and ends the relay when the journal is its caller's (a single relay's).

Takeover (``_on_gain`` only starts it, so lease renewals never wait on a replay): open the journal,
append an empty batch with the new fence, recover, serve. The players present in its running
matches lost their last will while nobody served them: those not heard from within
``WILL_CHECK_S`` (live clients ping every second) get a journalled ``Leave(dropped=True)``. A clean
stop says every status offline, disconnects, then releases the shards so successors start at once.

Memory (``relay/memdiag.py``): malloc tuned at start; the collector's oldest generation walks
every object held (25-55 ms at 300 matches) and frees nothing, so it runs on ``GC_FULL_EVERY_S``.
This module and ``relay/shard.py`` are the only places that read the clock or the OS's randomness.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import gc
import logging
import os
import secrets
import time
from array import array
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from mqttkit import DEFAULT_MAX_PAYLOAD, BrokerAddress, stop_task
from mqttkit.connection import CONNECT_TIMEOUT_S as DEFAULT_CONNECT_TIMEOUT_S
from mqttkit.connection import MqttError, Will
from mqttkit.packets import Message
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics, valid_id
from relay.cluster import shards
from relay import memdiag
from relay.core import RelayConfig, RelayCore
from relay.storage import EventLog
from relay.model import LogRecord, Out, Publish
from relay.storage import Entry, FencedError, Journal, Msg, Tick
from relay.limits import RELAY_INTAKE_SLACK, Intake
from relay.link import Connection, Connector, Link, Login, Remote
from relay.ownership import WHOLE, Ownership, Presence, Space, StaticOwnership, WholeSpace
from relay.publishing import Republisher, send_publishes
from relay.sealing import Sealing
from relay.shard import (SNAPSHOT_EVERY, SNAPSHOT_EVERY_S, ClusterError, ConfigConflict, Shard, close_quietly,
                         wall_minus_mono)

log = logging.getLogger("blink.relay")

MAX_SLEEP_S = 0.05
MAX_BATCH = 512  # messages handled (and journalled as one write a shard) per step
TOO_LARGE_QUIET_NS = 1_000_000_000  # a sender is told ``too_large`` (and it is logged) once a second at most
REBUILD_FIRST_S = 0.2
REBUILD_MAX_S = 5.0
WALL_STEP_NS = 50_000_000  # the wall clock moved this much against the monotonic one: it was set
GC_NEVER = 1 << 30
GC_FULL_EVERY_S = 600.0
RESIDENCE_KEPT = 5_000_000  # residence times kept for ``Diagnostics.residence`` (40 MB at most)
PACKET_HEADER_ALLOWANCE = 1024  # a PUBLISH's header and topic beside a ``max_payload`` payload
#: With several broker nodes, the CONNECT's wait before the next is tried (NATS waits 4 s on JetStream).
CONNECT_TIMEOUT_S = 2.0
WILL_CHECK_S = 10.0
#: Sealed play: the retained status (the relay's keys) is published again this often -- on a broker
#: that enforces nothing anyone may overwrite or clear it, and players take the keys from nowhere else.
RESTATE_S = 4.0
#: A relay of several waits this long for broker nodes that do not answer yet at its first connection.
FIRST_CONNECT_WAIT_S = 60.0

@dataclasses.dataclass(frozen=True)
class RelaySettings:
    """What a relay is started with (its collaborators -- broker, space, ownership -- beside it)."""

    topics: Topics = Topics()
    config: RelayConfig = dataclasses.field(default_factory=RelayConfig)
    seed: int | None = None  # the seed of the shard made with the relay; None: drawn at the start
    relay_id: str | None = None  # None: the configuration's
    log_path: Path | None = None  # the event log (None: none)
    max_payload: int = DEFAULT_MAX_PAYLOAD
    snapshot_every_s: float = SNAPSHOT_EVERY_S
    snapshot_every: int = SNAPSHOT_EVERY
    diagnostics: memdiag.Diagnostics = memdiag.Diagnostics()  # what it reports for a benchmark (none)


def clock_time(epoch: float) -> str:
    """``epoch`` (seconds since 1970) as people read it: the local date and time to the millisecond."""
    whole = int(epoch)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(whole)) + f".{int((epoch - whole) * 1000):03d}"


class Relay:
    """The relay runtime (see the module header): the shards ``ownership`` hands it out of ``space``
    (default: a single relay, the whole space in memory)."""

    def __init__(self, address: BrokerAddress | Sequence[BrokerAddress], settings: RelaySettings | None = None,
                 space: Space | None = None, ownership: Ownership | None = None, *,
                 say: Callable[[str], None] | None = None, seal: Sealing | None = None,
                 connector: Connector | None = None) -> None:
        self.addresses = [address] if isinstance(address, BrokerAddress) else list(address)
        if not self.addresses:
            raise ValueError("a relay needs a broker address")
        self.address = self.addresses[0]
        #: Where its connection goes: the broker at ``address`` over a socket, unless it is given
        #: another way there (the embedded broker of this very process: ``relay.embedded.inprocess``).
        self.connector: Connector = connector or Remote(self.addresses)
        self._gated = self.connector.gated
        settings = settings or RelaySettings()
        relay_id = settings.relay_id or settings.config.relay_id
        self.settings = dataclasses.replace(
            settings, relay_id=relay_id, config=dataclasses.replace(settings.config, relay_id=relay_id),
            seed=settings.seed if settings.seed is not None else int.from_bytes(os.urandom(8), "big"))
        self.space: Space = space or WholeSpace()
        self.ownership: Ownership = ownership or StaticOwnership([WHOLE])
        # Unique per start and never published: nobody can knock the relay off by taking its id.
        self.client_id = f"blink-{relay_id}-{secrets.token_hex(8)}"
        self.say = say  # told one line at each change of the shards served (``blink serve`` prints it)
        #: Sealed play (``relay/sealing.py``): every payload in is opened before anything counts it,
        #: every payload out sealed or signed. None: the broker keeps players apart.
        self.seal = seal
        self._restate: tuple[str, bytes] | None = None  # sealed: the signed online status, and when next
        self._restate_at = 0.0
        self.eventlog = EventLog(self.settings.log_path)
        self.intake = Intake.for_config(self.config, RELAY_INTAKE_SLACK)  # before decoding
        self._refused: dict[str, int] = {}  # sender -> when it was last told ``too_large`` (ns)
        # Journal calls block a thread each (a JetStream append waits for its acknowledgement): a
        # pool of our own, so one shard's never queue behind another's.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(64, 3 * self.space.total + 4),
                                                           thread_name_prefix="blink-journal")
        self.servers: dict[str, Shard] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._chores: set[asyncio.Future[object]] = set()
        self._inbox: list[tuple[str, bytes, int]] = []  # topic, payload, monotonic ns of its read
        self._wall_minus_mono = wall_minus_mono()
        self._wake = _Wake()
        self._client: Connection | None = None
        self._act_head = f"{self.prefix}/m/".encode()
        self.link: Link | None = None
        self._presence: Presence | None = None
        self._fatal: BaseException | None = None
        self._resync = False  # set on (re)connect: every shard is announced again
        self._announce: list[str] = []  # shards gained and not yet announced
        self.resync = Republisher(self._emit_all, self._wake.set)
        self.resynced = self.resync.done
        self.ready = asyncio.Event()
        self.publish_failures = 0
        self.reconnects = 0
        self.steps = 0  # steps with something to journal or publish
        self._will_checks: list[tuple[float, Shard, set[str]]] = []
        self._gc_full_at = time.monotonic()
        self._residence_file = self.settings.diagnostics.residence or ""
        self._residence = array("q")  # (kept only with a file to write them to)
        #: The shards made with the relay (see relay/ownership.py): their journal is the caller's, so
        #: they can be recovered and stepped before the relay runs; served once owned.
        self._made = {name: self._shard(name, self.space.core(name, self.topics, self.config, self.seed),
                                        self.space.open(name), 0, None) for name in self.space.ahead}
        self.ownership.subscribe(self._on_gain, self._on_loss)

    # ------------------------------------------------------------------ what it was started with

    @property
    def topics(self) -> Topics:
        return self.settings.topics

    @property
    def prefix(self) -> str:
        return self.settings.topics.prefix

    @property
    def config(self) -> RelayConfig:
        return self.settings.config

    @property
    def seed(self) -> int:
        assert self.settings.seed is not None  # (drawn when it was not given)
        return self.settings.seed

    @property
    def relay_id(self) -> str:
        assert self.settings.relay_id is not None  # (the configuration's when it was not given)
        return self.settings.relay_id

    @property
    def max_payload(self) -> int:
        return self.settings.max_payload

    @property
    def total(self) -> int:
        return self.space.total

    # ------------------------------------------------------------------ the shard made with the relay

    @property
    def whole(self) -> Shard:
        """The shard made with the relay (a single relay's; see relay/ownership.py)."""
        assert len(self._made) == 1, "a relay of several shards has a core per shard (servers)"
        return next(iter(self._made.values()))

    @property
    def core(self) -> RelayCore:
        return self.whole.core

    @core.setter
    def core(self, core: RelayCore) -> None:
        self.whole.core = core

    @property
    def journal(self) -> Journal | None:
        return self.whole.journal if self._made else None

    @property
    def recovered(self) -> str | None:
        return self.whole.recovered if self._made else None

    @property
    def resync_matches(self) -> int:
        return self.resync.matches

    @property
    def resync_s(self) -> float:
        return self.resync.seconds

    def recover(self) -> None:
        """Rebuild the shards made with the relay from their journal (``run`` does it first;
        idempotent)."""
        for srv in self._made.values():
            srv.recover(self.space.check(srv.name, self.prefix))
            # The journal's seed and configuration win: the matches were made with them.
            core = srv.core
            self.settings = dataclasses.replace(self.settings, seed=core.seed, config=core.config, topics=core.topics,
                                                relay_id=core.config.relay_id)

    def now(self) -> tuple[int, int]:
        """The (core, wall) time in ns of the shard made with the relay (0 offset without one)."""
        mono = self._mono()
        return mono + (self.whole.mono_offset if self._made else 0), mono + self._wall_minus_mono

    def _mono(self) -> int:
        """The monotonic clock, after checking whether the wall clock was set meanwhile."""
        mono = time.monotonic_ns()
        moved = time.time_ns() - mono - self._wall_minus_mono
        if abs(moved) > WALL_STEP_NS:  # set, not the jitter of reading two clocks
            log.warning("the wall clock moved by %.3f s; event stamps follow it", moved / 1e9)
            self._wall_minus_mono = wall_minus_mono()
        return mono

    def _shards(self) -> list[Shard]:
        """Every shard stepped: those served, and those made with the relay served or not (a test
        may step a relay that never ran)."""
        return list({**self._made, **self.servers}.values())

    def _callers(self, srv: Shard) -> bool:
        """Whether ``srv`` journals in its caller's journal (made with the relay; see relay/ownership.py)."""
        return self._made.get(srv.name) is srv

    # ------------------------------------------------------------------ ownership

    def _shard(self, name: str, core: RelayCore, journal: Journal | None, fence: int,
               io: concurrent.futures.Executor | None) -> Shard:
        return Shard(name, core, journal, fence, log_path=self.settings.log_path,
                     tagged=self.space.tag(name) is not None, snapshot_every=self.settings.snapshot_every,
                     snapshot_every_s=self.settings.snapshot_every_s, io=io, wake=self._wake.set)

    async def _on_gain(self, shard: str, fence: int) -> None:
        if shard in self.servers or shard in self._starting:
            return
        refused = self.space.refuse(shard)
        if refused is not None:
            self._fail(ConfigConflict(refused))
            return
        self._tell_of(shard, f"holds the lease of shard {shard} (fence {fence})")
        if self.ownership.before_connecting:
            await self._bring_up(shard, fence)  # before connecting: a conflict ends the relay at once
            return
        task = asyncio.create_task(self._bring_up(shard, fence))
        self._starting[shard] = task

        def started(t: asyncio.Task[None]) -> None:
            if self._starting.get(shard) is t:
                del self._starting[shard]
            if not t.cancelled() and t.exception() is not None:
                self._fail(t.exception() or RuntimeError("a shard failed to start"))
        task.add_done_callback(started)

    async def _on_loss(self, shard: str) -> None:
        task = self._starting.pop(shard, None)
        if task is not None:
            task.cancel()
        srv = self.servers.get(shard)
        if srv is not None and self._callers(srv):  # stopping: its journal is its caller's to close
            self.servers.pop(shard, None)
        elif srv is not None:
            self._drop(srv, rebuild=False, why=self.ownership.why_lost(shard))  # (for the operator)

    async def _bring_up(self, shard: str, fence: int) -> None:
        """Recover a shard and serve it: one made with the relay in its caller's journal (an error
        ends the relay), another opened, fenced and recovered (retried while owned)."""
        began = time.monotonic()
        made = self._made.get(shard)
        if made is not None:
            made.fence = fence
            await asyncio.get_running_loop().run_in_executor(None, self.recover)
            srv = made
        else:
            opened = await self._open(shard, fence)
            if opened is None:
                return
            srv = opened
        srv.resume_clock(self._wall_minus_mono)
        self._serve(srv, began)

    async def _open(self, shard: str, fence: int) -> Shard | None:
        """Open, fence and recover a shard's journal, retried while owned (None: not owned any more)."""
        delay = REBUILD_FIRST_S
        loop = asyncio.get_running_loop()
        while True:
            journal: Journal | None = None
            try:
                journal = await loop.run_in_executor(self._pool, self.space.open, shard)
                if journal is not None:
                    # The fence first: from here on the previous owner cannot append behind the replay.
                    await loop.run_in_executor(self._pool, journal.append, [], fence)
                srv = self._shard(shard, self.space.core(shard, self.topics, self.config,
                                                         int.from_bytes(os.urandom(8), "big")),
                                  journal, fence, self._pool)
                await loop.run_in_executor(self._pool, srv.recover, self.space.check(shard, self.prefix))
                break
            except BaseException as exc:
                await loop.run_in_executor(self._pool, close_quietly, journal)
                if isinstance(exc, FencedError):
                    log.warning("shard %s: %s", shard, exc)
                    return None  # someone newer holds it; the ownership will tell us it is lost
                if isinstance(exc, ConfigConflict) or not isinstance(exc, Exception):  # (cancelled among them)
                    raise
                if shard not in self.ownership.owned():
                    return None
                log.warning("shard %s: cannot open its journal yet (%s: %s); again in %.1f s",
                            shard, type(exc).__name__, exc, delay)
            await asyncio.sleep(delay)
            delay = min(REBUILD_MAX_S, delay * 2)
        if shard not in self.ownership.owned():
            await loop.run_in_executor(self._pool, close_quietly, srv.journal)
            return None
        # Taken over: the players present lost their last will while nobody served them.
        present = {seat.client for match in srv.core.matches.values() if match.status in ("playing", "between")
                   for seat in match.players if seat.dropped_at is None}
        if present:
            self._will_checks.append((time.monotonic() + WILL_CHECK_S, srv, present))
        return srv

    def _serve(self, srv: Shard, began: float) -> None:
        self.servers[srv.name] = srv
        self._refilter()
        srv.served_at = time.monotonic()
        if srv.recovered:
            log.info("%s", srv.recovered)
        self._tell_of(srv.name, f"serves shard {srv.name} (fence {srv.fence}, {len(srv.core.matches)} match(es), "
                                f"{srv.replayed} entries replayed in {srv.served_at - began:.2f} s)")
        self._announce.append(srv.name)
        self._wake.set()

    def _drop(self, srv: Shard, rebuild: bool, why: str | None = None) -> None:
        """Stop serving a shard at once (nothing more is published or appended for it)."""
        if self.servers.get(srv.name) is not srv:
            return
        del self.servers[srv.name]
        self._refilter()
        self._tell(f"stopped serving shard {srv.name}" + (f" ({why})" if why else ""))
        # Closed in the background: a journal busy with an append must not hold up the ownership.
        self._background(asyncio.get_running_loop().run_in_executor(self._pool, close_quietly, srv.journal))
        owned = self.ownership.owned()
        if rebuild and srv.name in owned and srv.name not in self._starting:
            self._background(self._on_gain(srv.name, owned[srv.name]))

    def _background(self, work: Awaitable[object]) -> None:
        task = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def _tell(self, what: str) -> None:
        line = f"relay {self.relay_id} {what} at {clock_time(time.time())}"
        log.info("%s", line)
        if self.say is not None:
            self.say(line)

    def _tell_of(self, shard: str, what: str) -> None:
        """Tell the operator about a shard that has a name (the whole space has none to tell of)."""
        if self.space.tag(shard) is not None:
            self._tell(what)

    def _say_plain(self, line: str) -> None:
        log.warning("%s", line)
        if self.say is not None:
            self.say(line)

    def _fail(self, exc: BaseException) -> None:
        self._fatal = self._fatal or exc
        self._wake.set()

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        memdiag.tune_malloc()
        diagnostics = self.settings.diagnostics  # a benchmark's (relay/memdiag.py)
        memdump = diagnostics.memdump_target()
        dump = (memdiag.install(memdump, asyncio.get_running_loop().add_signal_handler, self._memdiag_lines,
                                diagnostics.memdump_frames) if memdump else None)
        thresholds = gc.get_threshold()
        gc.set_threshold(thresholds[0], thresholds[1], GC_NEVER)  # the oldest one on our schedule
        self._gc_full_at = time.monotonic()
        stepper: asyncio.Task[None] | None = None
        connection: asyncio.Task[None] | None = None
        try:
            if self.ownership.before_connecting:
                await self.ownership.start()  # recovered before connecting (a conflict ends it here)
            if self._fatal is not None:
                raise self._fatal
            self.eventlog.open()
            self.eventlog.write([LogRecord(dict(self.space.started(self.relay_id, self.seed, self.config.order,
                                                                   time.time_ns())))])
            self.link = self._link()
            connection = asyncio.create_task(self.link.run())
            stepper = asyncio.create_task(self._step_loop())
            done, _ = await asyncio.wait({connection, stepper}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # raises what ended it
            raise RuntimeError("the relay stopped unexpectedly")
        finally:
            # Shielded: a server's stop cancels again and again while the relay has not stopped,
            # and a second cancel cut the leases' release short. Every part has its own timeout.
            cleanup = asyncio.ensure_future(self._shut_down(stepper, connection))
            while True:
                try:
                    await asyncio.shield(cleanup)
                    break
                except asyncio.CancelledError:
                    if cleanup.done():
                        if not cleanup.cancelled():
                            cleanup.exception()  # retrieved: the stop goes on
                        break
            gc.set_threshold(*thresholds)
            if self._residence_file:
                memdiag.write_residence(self._residence_file, self._residence, self.steps)
            if dump is not None:
                dump("exit")

    async def _shut_down(self, stepper: asyncio.Task[None] | None, connection: asyncio.Task[None] | None) -> None:
        """The stepper first (nothing more is published), then the last words on the connection still
        up, then the connection, then the shards (their successors start at once)."""
        try:
            if stepper is not None and not stepper.done():
                await stop_task(stepper)
            if self.link is not None:
                self.link.closing = True
            client = self._client
            if client is not None and client.connected:
                try:  # every status offline, then DISCONNECT (the broker drops the last will)
                    out = [o for srv in self.servers.values() for o in srv.core.shutdown()]
                    if self._presence is not None and self._presence.own_status:
                        out.append(Publish(self._presence.own_status, m.RelayStatus(self.relay_id, False), retain=True))
                    send_publishes(client, out, max_bytes=self.max_payload, seal=self._wire)
                    await client.disconnect(timeout=2.0)
                except BaseException as exc:  # noqa: BLE001 - the broker may be gone already
                    log.info("last words not sent: %s", exc)
            if connection is not None and not connection.done():
                await stop_task(connection)
            for task in list(self._starting.values()):
                task.cancel()
            for srv in list(self.servers.values()):
                await srv.stop_snapshot()
            opened = [srv for srv in self.servers.values() if not self._callers(srv)]
            for srv in opened:  # (those made with the relay are their caller's to close)
                del self.servers[srv.name]
                await asyncio.get_running_loop().run_in_executor(self._pool, close_quietly, srv.journal)
            try:
                await asyncio.wait_for(self.ownership.close(), 10)
            except BaseException as exc:  # noqa: BLE001 - leases run out by themselves
                log.warning("giving up the shards: %s", exc)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self.eventlog.close()

    def _memdiag_lines(self) -> list[str]:
        statuses: dict[str, int] = {}
        for srv in self.servers.values():
            for match in srv.core.matches.values():
                statuses[match.status] = statuses.get(match.status, 0) + 1
        return [f"matches {sum(statuses.values())} {statuses}",
                f"residence times kept {len(self._residence)}"]

    def _refilter(self) -> None:
        if self._client is not None and self._presence is not None and self._presence.filtered:
            # the served shards' actions from the next read on
            self._client.set_topic_filter(*self._topic_filter())

    def _link(self) -> Link:
        """The connection as the space has the relay stand on the broker (``Presence``)."""
        presence = self._presence = self.space.presence(self.relay_id, self.topics)
        status = presence.status
        several = self.connector.several or presence.patient
        offline, online = encode(m.RelayStatus(self.relay_id, False)), encode(m.RelayStatus(self.relay_id, True))
        if self.seal is not None:
            offline, online = self.seal.wire(status, offline) or b"", self.seal.wire(status, online) or b""
            self._restate = (status, online)
        login = Login(self.client_id, Will(status, offline, qos=1, retain=True),
                      presence.groups, presence.own_status, online,
                      self.max_payload + PACKET_HEADER_ALLOWANCE,
                      CONNECT_TIMEOUT_S if several else DEFAULT_CONNECT_TIMEOUT_S,
                      self._topic_filter if presence.filtered else None,
                      first_wait_s=FIRST_CONNECT_WAIT_S if presence.patient else 0.0, say=self._say_plain)
        return self.connector.link(login, self._on_messages, self._on_oversize, self._on_client, self._on_up)

    @property
    def _wire(self) -> Callable[[str, bytes], bytes | None] | None:
        return self.seal.wire if self.seal is not None else None

    def _topic_filter(self) -> tuple[bytes, tuple[bytes, ...]]:
        return self._act_head, tuple(f"{self.prefix}/m/{s}/".encode() for s in self.servers)

    def _on_client(self, conn: Connection | None) -> None:
        self._client = conn

    async def _on_up(self, first: bool) -> None:
        """Connected and subscribed: the first time, an ownership that takes its shards once connected
        starts taking part (a shard gained is served at once); after a reconnect, every shard is
        announced again."""
        if first and not self.ownership.before_connecting:
            try:
                await self.ownership.start()
            except (MqttError, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - one line for a person
                raise ClusterError(str(exc) or type(exc).__name__) from exc
        elif not first:
            self.reconnects += 1
            log.warning("reconnected to the broker %s", self.link.address.url if self.link else "")
        self._resync = True
        self._wake.set()

    def _on_messages(self, messages: list[Message]) -> None:
        """The PUBLISHes of one read: stamped once, admitted by the intake, queued for the stepper."""
        mono = time.monotonic_ns()
        inbox = self._inbox
        checks = self._will_checks
        if self._gated and self.seal is None and not checks:  # the broker held every sender to its rates
            inbox.extend((msg.topic, msg.payload, mono) for msg in messages if msg.topic is not None)
            if messages:
                self._wake.set()
            return
        intake = self.intake
        admit = intake.admit
        before = len(inbox)
        refused: str | None = None  # a flood repeats one topic: once refused, only counted for this read
        more = 0
        seal = self.seal
        for msg in messages:
            topic = msg.topic
            assert topic is not None  # the connection drops messages whose topic is not UTF-8
            payload = msg.payload
            if seal is not None:  # a forgery or a replay is dropped here: it counts against nobody
                opened = seal.open(topic, payload, mono)
                if opened is None:
                    continue
                payload = opened
            if checks:
                self._heard(topic)
            if topic == refused:
                more += 1
                continue
            if more:
                intake.refuse_more(more)  # charged to ``refused``'s bucket, before another admit
                more = 0
            if admit(topic, mono):
                inbox.append((topic, payload, mono))
            else:
                refused = topic
                hold = intake.hold_ns()
                if hold and self._client is not None:  # at its bucket's floor: dropped unbuilt meanwhile
                    self._client.drop_until(topic.encode(), mono + hold, self._on_dropped)
        if more:
            intake.refuse_more(more)
        if len(inbox) > before:
            self._wake.set()  # a read of nothing but dropped messages does not wake the stepper

    def _on_dropped(self, topic: bytes, n: int) -> None:
        """``n`` messages of a flooder the connection dropped unbuilt: charged to its bucket."""
        mono = time.monotonic_ns()
        hold = self.intake.refuse(topic.decode("utf-8", "replace"), n, mono)
        if hold and self._client is not None:
            self._client.drop_until(topic, mono + hold, self._on_dropped)

    def _on_oversize(self, topic: str, size: int) -> None:
        """A message far over ``max_payload`` (never buffered): its sender is told ``too_large``."""
        if topic.startswith(self._act_head.decode()) and self.space.route(topic, b"", self.prefix) not in self.servers:
            return  # an action for a shard served elsewhere
        if self.seal is not None:
            return  # unopened, its sender is unknown: the topic may name anyone
        if self._will_checks:
            self._heard(topic)
        mono = time.monotonic_ns()
        if self.intake.admit(topic, mono):
            self._emit_all([(None, self._too_large(topic, size, mono, mono + self._wall_minus_mono))])

    def _heard(self, topic: str) -> None:
        """A client spoke (a request or an action): it is alive, whatever shard it plays in."""
        head = f"{self.prefix}/lobby/req/"
        if topic.startswith(head):
            client = topic[len(head):]
        else:
            _, sep, client = topic.rpartition("/act/")
            if not sep:
                return
        for _, _, waiting in self._will_checks:
            waiting.discard(client)

    def _give_lost_wills(self) -> None:
        """The players of a taken-over shard not heard from since: their last will, now."""
        now = time.monotonic()
        due = [c for c in self._will_checks if c[0] <= now]
        self._will_checks = [c for c in self._will_checks if c[0] > now]
        for _, srv, waiting in due:
            if self.servers.get(srv.name) is not srv:
                continue  # lost meanwhile: its next owner checks
            for client in sorted(waiting):
                match = srv.core.matches.get(srv.core.client_match.get(client, ""))
                seat = match.seat_of(client) if match is not None else None
                if match is None or seat is None or match.players[seat].dropped_at is not None \
                        or match.status not in ("playing", "between"):
                    continue
                log.warning("shard %s: client %s not heard from since the takeover: its last will now", srv.name, client)
                self._inbox.append((self.topics.req(client), encode(m.Leave(dropped=True)), time.monotonic_ns()))
                self._wake.set()

    async def _step_loop(self) -> None:
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._will_checks:
                self._give_lost_wills()
            if self._restate is not None:
                self._restate_status()
            mono = time.monotonic_ns()
            deadlines = [d - srv.mono_offset for srv in self.servers.values()
                         if (d := srv.core.next_deadline()) is not None]
            due = bool(deadlines) and min(deadlines) <= mono
            busy = self._client is not None and (self._resync or bool(self._announce) or self.resync.may_send())
            if not self._inbox and not due and not busy:
                delay = MAX_SLEEP_S if not deadlines else min(MAX_SLEEP_S, max(0.0, (min(deadlines) - mono) / 1e9))
                self._wake.clear()
                await self._wake.wait(delay)
                for srv in self._shards():  # one due since a snapshot ended with nothing to step
                    await srv.maybe_snapshot()
                continue
            await self.step()
            if time.monotonic() - self._gc_full_at >= GC_FULL_EVERY_S:
                gc.collect()
                self._gc_full_at = time.monotonic()
            if self.resync.may_send():
                await asyncio.sleep(0)  # the reader's turn: requests come before the next chunk

    def _restate_status(self) -> None:
        """Sealed play: the signed online status, retained, again every ``RESTATE_S`` (see there)."""
        client, now = self._client, time.monotonic()
        if self._restate is None or client is None or not client.connected or now < self._restate_at:
            return
        self._restate_at = now + RESTATE_S
        try:
            client.publish(self._restate[0], self._restate[1], qos=0, retain=True)
        except MqttError as exc:
            log.debug("status not restated: %s", exc)

    def _targets(self, topic: str, payload: bytes) -> list[Shard]:
        """The shards a message is for (``relay/cluster/shards.py``): served, or made with the relay."""
        shard = self.space.route(topic, payload[:self.max_payload + 1], self.prefix)
        if shard == shards.KNOWN:
            client = topic.rpartition("/")[2]  # (only a lobby request may be for every shard that knows it)
            return [s for s in self.servers.values() if client in s.core.client_match]
        srv = self.servers.get(shard) or self._made.get(shard)
        return [srv] if srv is not None else []

    async def step(self) -> None:
        """One group-committed step: every message already received, due ticks, one journal write
        a shard, then the outputs; then a chunk of the resync and any snapshot due."""
        if self._client is not None and (self._resync or self._announce):
            fresh = list(self.servers) if self._resync else [s for s in self._announce if s in self.servers]
            self.resync.start([self.servers[s] for s in fresh], self._resync, self._mono())
            self._resync, self._announce = False, []
            self.ready.set()
        inbox, self._inbox = self._inbox[:MAX_BATCH], self._inbox[MAX_BATCH:]
        self._mono()  # (a wall clock set since the last step: this step's stamps follow it)
        wmm = self._wall_minus_mono
        batches: dict[str, tuple[Shard, list[Entry], list[Out]]] = {}
        extra: list[Out] = []
        for topic, payload, arrived in inbox:
            targets = self._targets(topic, payload)
            if len(payload) > self.max_payload:
                if targets:  # (an action for a shard served elsewhere is its owner's to refuse)
                    extra.extend(self._too_large(topic, len(payload), arrived, arrived + wmm))
                continue
            for srv in targets:
                _, entries, out = batches.get(srv.name) or batches.setdefault(srv.name, (srv, [], []))
                now = arrived + srv.mono_offset
                if srv.journal is not None:
                    entries.append(Msg(topic, payload, now, arrived + wmm))
                out.extend(srv.core.handle(topic, payload, now, arrived + wmm))
        mono = self._mono()
        wall = mono + self._wall_minus_mono
        for srv in self._shards():
            deadline = srv.core.next_deadline()
            now = mono + srv.mono_offset
            if deadline is not None and deadline <= now:
                _, entries, out = batches.get(srv.name) or batches.setdefault(srv.name, (srv, [], []))
                if srv.journal is not None:
                    entries.append(Tick(now, wall))
                out.extend(srv.core.tick(now, wall))
        if batches or extra:
            self.steps += 1
        # Before anything of this step is published: nothing a player hears accepted is lost.
        # (a caller's journal is fenced by its directory lock: see relay/ownership.py)
        writes = [(srv, entries, out, srv.writer.append(entries, None if self._callers(srv) else srv.fence)
                   if entries and srv.writer is not None else None) for srv, entries, out in batches.values()]
        results = iter(await _settled([w for *_, w in writes if w is not None]))
        held = self.ownership.owned()
        done: list[tuple[Shard | None, list[Out]]] = [(None, extra)] if extra else []
        answered: list[Shard] = []
        for srv, entries, out, write in writes:
            result = next(results) if write is not None else None
            if self._callers(srv):
                if isinstance(result, BaseException):
                    raise result  # a caller's journal that cannot be written ends the relay
            elif self.servers.get(srv.name) is not srv:
                continue  # lost meanwhile: not a word more for it
            elif held.get(srv.name) != srv.fence or isinstance(result, FencedError):
                self._drop(srv, rebuild=False, why=str(result) if held.get(srv.name) == srv.fence else "its lease is gone")
                continue
            elif isinstance(result, BaseException):
                log.warning("shard %s: journal append failed (%s: %s); rebuilding it from its journal",
                            srv.name, type(result).__name__, result)
                self._drop(srv, rebuild=True)
                continue
            done.append((srv, out))
            if out and not srv.answered and any(isinstance(e, Msg) for e in entries):
                srv.answered = True
                answered.append(srv)
        self._emit_all(done)
        for srv in answered:
            self._tell_of(srv.name, f"answers on shard {srv.name} ({time.monotonic() - srv.served_at:.2f} s after serving it)")
        if self._residence_file and len(self._residence) < RESIDENCE_KEPT:
            finished = time.monotonic_ns()
            self._residence.extend(finished - arrived for _, _, arrived in inbox)
        if self._client is not None and self.resync.may_send():
            self.resync.send_chunk(self.servers, mono, wall)
        for srv in self._shards():
            await srv.maybe_snapshot()

    def _too_large(self, topic: str, size: int, now_ns: int, wall_ns: int) -> list[Out]:
        """A payload over the limit is neither decoded nor journalled: its sender (from the topic) is
        told ``too_large`` and it is logged, once a second per sender at most: a flood costs one line."""
        shard = shards.shard_of_act_topic(topic, self.prefix)
        act = Topics(self.prefix, shard).parse_act(topic) if shard else self.topics.parse_act(topic)
        client = act[1] if act else self.topics.parse_req(topic)
        key = client or "?"
        if now_ns - self._refused.get(key, -TOO_LARGE_QUIET_NS) < TOO_LARGE_QUIET_NS:
            return []
        if len(self._refused) > 10_000:
            self._refused.clear()
        self._refused[key] = now_ns
        detail = f"{size} bytes > {self.max_payload}"
        out: list[Out] = [LogRecord({"kind": "bad_input", "code": "too_large", "ts": wall_ns,
                                     "client": key[:80], "detail": detail})]
        if client and valid_id(client):
            reply = m.ActionRejected(act[0][:16], -1, "too_large", detail) if act else m.RequestRejected("too_large", detail)
            out.append(Publish(self.topics.client(client), reply))
        return out

    def _emit_all(self, outs: Sequence[tuple[Shard | None, list[Out]]]) -> None:
        """Write the shards' log lines and publish all their messages at once (one buffer, one write)."""
        everything: list[Out] = []
        for srv, out in outs:
            records = [o for o in out if isinstance(o, LogRecord)]
            if records:
                self.eventlog.write(records, self.space.tag(srv.name) if srv is not None else None)
            everything += out
        if self._client is not None and everything:
            failed, why = send_publishes(self._client, everything, self.resync.on_qos1, self.max_payload, self._wire)
            if failed:
                # The connection dropped: it reconnects and every shard resyncs; what this step said is
                # in the state its clients will get then.
                self.publish_failures += failed
                log.warning("%d publish(es) failed (%s); waiting for the broker", failed, why)


__all__ = ["Relay", "RelaySettings", "clock_time"]


class _Wake:
    """What wakes the stepper: an ``asyncio.Event`` for one waiter, with a timeout, made for a wait
    per step. ``wait`` awaits one future of the loop it first ran in, ended by ``set`` or by a timer
    handle; ``asyncio.timeout`` around ``Event.wait`` builds a context manager, a waiter list and a
    rescheduled timer, and asks the running loop (a ``getpid`` call on Linux) three times over. A
    cancel while waiting is the waiter's, as ever. Set and cleared from the loop's thread only."""

    def __init__(self) -> None:
        self._set = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout: float) -> bool:
        """Wait until set, at most ``timeout`` seconds; True if it was set."""
        if self._set:
            return True
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _wake_up, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            timer.cancel()
        return self._set


def _wake_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _settled(writes: list[asyncio.Future[None]]) -> list[BaseException | None]:
    """Each write's error or None, as ``gather(return_exceptions=True)`` gives them; a lone write
    (a single relay's every step) is awaited as it is, without gather's extra loop turn, and no
    write at all (no journal) not at all."""
    if not writes:
        return []
    if len(writes) != 1:
        return list(await asyncio.gather(*writes, return_exceptions=True))
    try:
        await writes[0]
    except Exception as exc:  # noqa: BLE001 - judged by the caller, as gather's would be
        return [exc]
    return [None]
