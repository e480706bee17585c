"""Several relays on one broker: a relay process that serves the shards it owns, one core each.

How this works
--------------
``ClusterRelay`` is the scale-out sibling of ``relay/shell.py``'s ``RelayShell`` (which stays the
single-process default, untouched). It holds one MQTT connection and, for every shard its
``Ownership`` (``relay/ownership.py``: static shards, or leases in NATS JetStream) hands it, a
``ShardServer``: that shard's ``RelayCore``, its journal (one per shard) and its fence.

- Receiving. The relay's broker connection is ``mqttkit.connection`` (as the shell's: a read's
  PUBLISHes come to ``_on_messages`` as one list, stamped once and queued; about a tenth of the CPU
  a message that paho under aiomqtt took). The relay subscribes, once per connection, to every
  lobby request (``lobby/req/+``: NATS's MQTT has no shared subscriptions, so every relay sees
  every request) and to the action topics of *every* shard (``m/+/+/act/+``); the actions of
  shards it does not serve are dropped by the connection's parser by their topic bytes
  (``set_topic_filter``: under ``m/`` and under no served ``m/{shard}/``), where they lie in the
  read -- nothing decoded, no object made for them -- so R relays each receiving every action
  costs each little more than its own share. Its subscriptions never change while it runs: on NATS
  every SUBSCRIBE and UNSUBSCRIBE writes the MQTT session to JetStream (the ``$MQTT_sess``
  stream), and while that stream's leader is being re-elected after a node stopped (4-9 s in
  nats-server 2.9) the node holds the connection's every later packet -- the new owner's
  announcement and verdicts -- 4 s per SUBSCRIBE, and then refuses it. Measured before: the shard
  was served 1.8 s after the kill, its first verdict went out 10.4 s after it. Each request
  is routed by ``relay/shards.py`` -- the same answer on every relay -- and handled only if this
  relay serves the shard it names; ``KNOWN`` requests (a ``Leave`` without a match, a probe reply)
  go to each served core that knows the client.
- Stepping. One stepper for all shards, as in the shell: the messages already received are
  handed to their shard's core, each due shard ticks, every shard's batch is appended to its own
  journal with the shard's fence (the journals are written side by side, in worker threads), and
  only then are the outputs published. An append refused by the fence (``FencedError``: another
  relay took the shard) drops the shard at once, its outputs unpublished. Any other journal error
  (a NATS node went away) drops the shard's core too -- its memory got ahead of its journal -- and
  rebuilds it from the journal while the shard is still owned.
- Gaining a shard (``on_gain(shard, fence)``, which only starts this, so lease renewals never wait
  on a replay): open the shard's journal, append an empty batch with the new fence (from then on
  the previous owner's appends are refused, so nothing lands behind the replay's back), replay it
  (the latest snapshot, then every later entry), then serve: the shard's status ``shard-{n}``
  online (retained, on ``relay/shard-{n}/status``: clients of that shard resync and resend what
  is unanswered), its match list, every match's snapshot and every player's view. A fresh journal
  gets a snapshot of the fresh core at position 0, so the shard's seed and configuration survive
  every change of owner; a journal made with another shard count is refused (conflicting
  configuration), the relay stops with that one line.
- Lost last wills: a player whose connection dropped while nobody served its shard (its owner had
  died) had its last will (``Leave(dropped=True)`` on its request topic) handled by nobody. So a
  relay that gains a shard notes the seated, present players of its running matches and listens
  (every relay hears every lobby request: live clients ping every second); those not heard from
  within ``WILL_CHECK_S`` get that will now, as a message of their request topic -- journalled like
  any other, so a replay stays exact. A player that was only slow sees itself dropped and takes its
  seat back (``Rejoin``), as after any dropped connection.
- Losing a shard (``on_loss``): its server is removed at once -- nothing more is published or
  appended for it (its actions are dropped from then on). A clean stop publishes each shard's
  status offline and the relay's own, disconnects (flushing them), and then releases the shards,
  so a successor starts at once.
- Publishing. A step's outputs for a shard are packed (``mqttkit.packets.pack_publish``) into one
  buffer and written once, never awaited message by message; a publish on a dropped connection is
  counted and logged, never raised (the connection reconnects and every served shard resyncs).
- Connecting. Each node of ``--broker a,b,c`` in turn: a CONNECT unanswered for 2 s, a refused or
  lost connection, moves on to the next node at once (each node once), then backs off (0.1 s
  doubling to 5 s). A subscription refused in its SUBACK is asked again in the background.
- Time. The cores get the wall clock (``time.time_ns``) so a successor on another machine carries
  on the same deadlines; per shard it is kept from going backwards (also across owners: the replay
  ends at the last journalled time).
- The relay process's own status is ``relays/{relay_id}/status`` (retained, offline by MQTT last
  will) -- for operators; clients follow their shard's status instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import os
import pickle
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from mqttkit import DEFAULT_MAX_PAYLOAD, NODELAY, RELAY_USER, BrokerAddress, stop_task, wait_event
from mqttkit.connection import MqttConnection, MqttError, SubscribeRefused, Will
from mqttkit.connection import connect as mqtt_connect
from mqttkit.packets import Message
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay import shards
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.journal import Entry, FencedError, Journal, JournalError, Msg, Tick, open_journal
from relay.ownership import Ownership, StaticOwnership
from relay.shell import send_publishes

log = logging.getLogger("blink.cluster")
T = TypeVar("T")

MAX_SLEEP_S = 0.05
MAX_BATCH = 512
SNAPSHOT_EVERY_S = 10.0
SNAPSHOT_EVERY = 20_000
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 5.0
REBUILD_FIRST_S = 0.2
REBUILD_MAX_S = 5.0
#: The relay's subscriptions (requests, actions) are QoS 0. With a clean session QoS 1 buys nothing
#: across a reconnect, clients send again what was not answered, and NATS's MQTT makes a JetStream
#: consumer for every QoS 1 subscription: while a node was away each one took 4 s to be refused
#: (the relay's whole connection stalled meanwhile), so a shard taken over then heard its players
#: only ~8 s after it was served (measured: first verdict 10.4 s after the kill, shard served at 1.8 s).
SUB_QOS = 0
#: How long one MQTT CONNECT (to CONNACK) may take before the next node is tried. NATS answers a
#: CONNECT only after reading the session from JetStream; while the ``$MQTT_sess`` leader is being
#: re-elected that waits 4 s and fails, on every node alike -- so a short wait and another try.
CONNECT_TIMEOUT_S = 2.0
#: A SUBSCRIBE's wait for its SUBACK: longer than NATS's own 4 s wait on JetStream, so that a refusal
#: (asked again in the background) is heard rather than taken for a dead connection.
SUBSCRIBE_TIMEOUT_S = 6.0
WILL_CHECK_S = 10.0  # after a takeover: a seated player not heard from for this long gets its last will
#: Room for a PUBLISH's fixed header and topic on top of ``max_payload``: a message longer than that
#: is not buffered (its sender is told ``too_large``), as in the shell.
PACKET_HEADER_ALLOWANCE = 1024

#: Opens the journal of one shard (called in a worker thread).
JournalOpener = Callable[[str], Journal]


class ClusterError(JournalError):
    """The cluster cannot be used as configured (unreachable, no JetStream, a conflict); one line."""


class ConfigConflict(ClusterError):
    """A shard's journal was made under another configuration (the shard count), or a shard was
    given to two relays."""


def shard_status_id(shard: str) -> str:
    return f"shard-{shard}"


def process_status_topic(prefix: str, relay_id: str) -> str:
    return f"{prefix}/relays/{relay_id}/status"


@dataclasses.dataclass
class ShardServer:
    shard: str
    fence: int
    core: RelayCore
    journal: Journal
    last_now: int = 0  # the shard's clock never goes back (also across owners)
    snap_pos: int = 0
    prev_snap: int = 0
    snap_at: float = 0.0
    steps: int = 0
    replayed: int = 0  # journal entries replayed when this relay took the shard
    served_at: float = 0.0  # monotonic: when this relay began serving it
    answered: bool = False  # has published an answer to a client's message since (logged once)

    def now(self, t: int) -> int:
        self.last_now = max(self.last_now, t)
        return self.last_now


class ClusterRelay:
    def __init__(self, address: BrokerAddress | Sequence[BrokerAddress], ownership: Ownership, open_journal: JournalOpener, shards_total: int,
                 prefix: str = "blink/v1", config: RelayConfig | None = None, relay_id: str | None = None,
                 log_path: str | Path | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 snapshot_every_s: float = SNAPSHOT_EVERY_S, snapshot_every: int = SNAPSHOT_EVERY,
                 say: Callable[[str], None] | None = None) -> None:
        #: Told one line at each change of the shards served (``blink serve`` prints it).
        self.say = say
        # Several addresses: nodes of one clustered broker. The relay connects to the first and, when
        # it loses a node, goes on to the next (a stopped node must not take the relay's shards with it).
        self.addresses = [address] if isinstance(address, BrokerAddress) else list(address)
        if not self.addresses:
            raise ValueError("a relay needs a broker address")
        self.address = self.addresses[0]
        self.ownership = ownership
        self.open_journal = open_journal
        self.total = shards.check_total(shards_total)
        self.prefix = prefix
        self.topics = Topics(prefix)
        self.config = config or RelayConfig()
        self.relay_id = relay_id or self.config.relay_id
        self.client_id = f"blink-{self.relay_id}-{secrets.token_hex(8)}"
        self.max_payload = max_payload
        self.snapshot_every_s = snapshot_every_s
        self.snapshot_every = snapshot_every
        self.log_path = Path(log_path) if log_path else None
        self._log_file: IO[str] | None = None
        self.servers: dict[str, ShardServer] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._chores: set[asyncio.Future[Any]] = set()
        # Journal calls block a thread each (a JetStream append waits for its acknowledgement, longer
        # while a node is away): a pool of our own, so they never queue behind each other per shard.
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(64, 3 * self.total + 4),
                                                           thread_name_prefix="blink-journal")
        self._inbox: list[tuple[str, bytes, int]] = []
        self._wake = asyncio.Event()
        self._client: MqttConnection | None = None
        self._act_head = f"{prefix}/m/".encode()  # every action topic starts so (the parser's filter)
        self._closing = False  # stopping: a connection that ends is not made again
        self.publish_failures = 0
        self._announce: list[str] = []  # shards gained and not yet announced (status, list, snapshots)
        self._fatal: BaseException | None = None
        self._stopped = asyncio.Event()
        self.ready = asyncio.Event()  # connected and taking part
        self.records: list[dict[str, Any]] | None = None
        self.reconnects = 0
        #: (shard, when it began serving, monotonic) -- tests and the failover benchmark read it.
        self.gained: list[tuple[str, float]] = []
        #: after a takeover: (when, shard server, players not heard from yet) -- see "lost last wills"
        self._will_checks: list[tuple[float, ShardServer, set[str]]] = []
        self.wills_given: list[str] = []
        self.lost: list[tuple[str, float]] = []
        ownership.subscribe(self._on_gain, self._on_loss)

    # ------------------------------------------------------------------ ownership

    async def _on_gain(self, shard: str, fence: int) -> None:
        if shard in self.servers or shard in self._starting:
            return
        if shard not in shards.shard_names(self.total):
            self._fail(ConfigConflict(f"was handed shard {shard!r}, which is not one of the {self.total} shards "
                                      f"of --shards-total {self.total}: every relay must be started with the same count"))
            return
        self._tell(f"holds the lease of shard {shard} (fence {fence})")
        task = asyncio.create_task(self._bring_up(shard, fence))
        self._starting[shard] = task
        task.add_done_callback(lambda t, s=shard: self._started(s, t))  # type: ignore[misc]

    def _started(self, shard: str, task: asyncio.Task[None]) -> None:
        if self._starting.get(shard) is task:
            del self._starting[shard]
        if not task.cancelled() and task.exception() is not None:
            self._fail(task.exception())  # type: ignore[arg-type]

    async def _on_loss(self, shard: str) -> None:
        task = self._starting.pop(shard, None)
        if task is not None:
            task.cancel()
        srv = self.servers.pop(shard, None)
        if srv is None:
            return
        self._refilter()
        self.lost.append((shard, time.monotonic()))
        history = getattr(self.ownership, "history", None)  # the leases say why (for the operator)
        why = next((what for _, what, s in reversed(list(history)) if s == shard), None) if history else None
        self._tell(f"stopped serving shard {shard}" + (f" ({why})" if why else ""))
        # Closed in the background: a journal busy with an append (a NATS node going away) must not
        # hold up the ownership's next callbacks (the shard another relay died with, say).
        self._background(self._io(_close_quietly, srv.journal))

    async def _bring_up(self, shard: str, fence: int) -> None:
        began = time.monotonic()
        delay = REBUILD_FIRST_S
        while True:
            journal: Journal | None = None
            try:
                t0 = time.monotonic()
                journal = await self._io(self.open_journal, shard)
                t1 = time.monotonic()
                # The fence first: from here on the previous owner cannot append behind the replay.
                await self._io(journal.append, [], fence)
                t2 = time.monotonic()
                srv = await self._io(self._replay, shard, fence, journal)
                t3 = time.monotonic()
            except ConfigConflict:
                if journal is not None:
                    await self._io(_close_quietly, journal)
                raise
            except FencedError as exc:
                log.warning("shard %s: %s", shard, exc)
                if journal is not None:
                    await self._io(_close_quietly, journal)
                return  # someone newer holds it; the ownership will tell us it is lost
            except asyncio.CancelledError:
                if journal is not None:
                    await self._io(_close_quietly, journal)
                raise
            except Exception as exc:  # noqa: BLE001 - a journal that cannot be read now: try again
                if journal is not None:
                    await self._io(_close_quietly, journal)
                if shard not in self.ownership.owned():
                    return
                log.warning("shard %s: cannot open its journal yet (%s: %s); again in %.1f s",
                            shard, type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                delay = min(REBUILD_MAX_S, delay * 2)
                continue
            break
        if shard not in self.ownership.owned():
            await self._io(_close_quietly, srv.journal)
            return
        self.servers[shard] = srv
        self._refilter()
        self.gained.append((shard, time.monotonic()))
        present = {seat.client for match in srv.core.matches.values() if match.status in ("playing", "between")
                   for seat in match.players if seat.dropped_at is None}
        if present:
            self._will_checks.append((time.monotonic() + WILL_CHECK_S, srv, present))
        srv.served_at = time.monotonic()
        self._tell(f"serves shard {shard} (fence {fence}, {len(srv.core.matches)} match(es), "
                   f"{srv.replayed} entries replayed in {time.monotonic() - began:.2f} s: journal opened in "
                   f"{t1 - t0:.2f} s, fenced in {t2 - t1:.2f} s, replayed in {t3 - t2:.2f} s)")
        self._announce.append(shard)
        self._wake.set()

    def _replay(self, shard: str, fence: int, journal: Journal) -> ShardServer:
        """The shard's core from its journal (in a worker thread: nothing else sees it yet)."""
        snapshot = journal.latest_snapshot()
        if snapshot is None and journal.last_position() == 0:
            cfg = dataclasses.replace(self.config, relay_id=shard_status_id(shard), shards_total=self.total)
            core = RelayCore(Topics(self.prefix, shard), cfg, int.from_bytes(os.urandom(8), "big"))
            journal.save_snapshot(0, pickle.dumps(core, protocol=pickle.HIGHEST_PROTOCOL))
            return ShardServer(shard, fence, core, journal, time.time_ns(), snap_at=time.monotonic())
        if snapshot is None:
            raise JournalError(f"the journal of shard {shard} holds entries but no snapshot to start them from")
        pos, blob = snapshot
        core = pickle.loads(blob)
        if not isinstance(core, RelayCore):
            raise JournalError(f"the snapshot of shard {shard} is not a relay core")
        if core.config.shards_total != self.total or core.topics.shard != shard or core.topics.prefix != self.prefix:
            raise ConfigConflict(
                f"shard {shard}'s journal was made with {core.config.shards_total} shard(s) and prefix "
                f"{core.topics.prefix!r}; this relay has --shards-total {self.total} and prefix {self.prefix!r}: "
                f"every relay of a cluster must use the same")
        last = 0
        n = 0
        for _, entry in journal.read(pos + 1):
            if isinstance(entry, Msg):
                core.handle(entry.topic, entry.payload, entry.now_ns)
            else:
                core.tick(entry.now_ns)
            last = entry.now_ns
            n += 1
        log.info("shard %s: snapshot at %d + %d entries replayed", shard, pos, n)
        return ShardServer(shard, fence, core, journal, max(last, core_time(core)), snap_pos=pos, prev_snap=pos,
                           snap_at=time.monotonic(), replayed=n)

    def _io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def _tell(self, what: str) -> None:
        line = f"relay {self.relay_id} {what} at {time.time():.3f}"
        log.info("%s", line)
        if self.say is not None:
            self.say(line)

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._wake.set()

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", encoding="utf-8")
        self._write([LogRecord({"kind": "relay_started", "ts": time.time_ns(), "relay": self.relay_id,
                                "shards_total": self.total, "order": self.config.order})])
        connection: asyncio.Task[None] | None = None
        stepper: asyncio.Task[None] | None = None
        try:
            connection = asyncio.create_task(self._connection_loop())
            stepper = asyncio.create_task(self._step_loop())
            done, _ = await asyncio.wait({connection, stepper}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
            raise RuntimeError("the relay stopped unexpectedly")
        finally:
            # Shielded: ``ClusterServer.stop`` cancels again every 0.25 s while the relay has not
            # stopped, and a second cancel used to cut the leases' release short (their thread's loop
            # then closed under pending NATS tasks: tracebacks at every stop while NATS was slow).
            # Every part is bounded by its own timeout.
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

    async def _shut_down(self, stepper: asyncio.Task[None] | None, connection: asyncio.Task[None] | None) -> None:
        """The stepper first (nothing more is published), then the last words on the connection still
        up, then the connection, then the shards (their successors start at once)."""
        try:
            if stepper is not None and not stepper.done():
                await stop_task(stepper)
            self._closing = True
            await self._say_goodbye()
            if connection is not None and not connection.done():
                await stop_task(connection)
            await self._release()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self._log_file:
                self._log_file.close()
                self._log_file = None

    async def _say_goodbye(self) -> None:
        """Every served shard's status offline and the relay's own, then DISCONNECT (the broker
        drops the last will): written as one buffer and flushed (at most 2 s)."""
        client = self._client
        if client is None or not client.connected:
            return
        try:
            out = [o for srv in self.servers.values() for o in srv.core.shutdown()]
            out.append(Publish(process_status_topic(self.prefix, self.relay_id), m.RelayStatus(self.relay_id, False),
                               retain=True))
            self._send(client, out)
            await client.disconnect(timeout=2.0)
        except BaseException as exc:  # noqa: BLE001 - the broker may be gone already
            log.info("last words not sent: %s", exc)

    async def _release(self) -> None:
        """Stop serving every shard, then give the shards up."""
        for task in list(self._starting.values()):
            task.cancel()
        servers, self.servers = dict(self.servers), {}
        for srv in servers.values():
            await self._io(_close_quietly, srv.journal)
        try:
            await asyncio.wait_for(self.ownership.close(), 10)
        except BaseException as exc:  # noqa: BLE001 - leases run out by themselves
            log.warning("giving up the shards: %s", exc)

    def _keep_under(self) -> tuple[bytes, ...]:
        """The action topic heads the relay listens to: its served shards'."""
        return tuple(f"{self.prefix}/m/{shard}/".encode() for shard in self.servers)

    def _refilter(self) -> None:
        """The served shards changed: the connection's parser keeps only their actions from its next
        read on (what is already in the inbox is routed -- or dropped -- by the step)."""
        client = self._client
        if client is not None:
            client.set_topic_filter(self._act_head, self._keep_under())

    async def _connection_loop(self) -> None:
        status = process_status_topic(self.prefix, self.relay_id)
        will = Will(status, encode(m.RelayStatus(self.relay_id, False)), qos=1, retain=True)
        delay = RECONNECT_FIRST_S
        first = True
        node = 0
        lost_at: float | None = None
        attempts = 0
        while True:
            self.address = self.addresses[node % len(self.addresses)]
            attempts += 1
            conn: MqttConnection | None = None
            try:
                # The PUBLISHes of each read go straight into the inbox (``_on_messages``).
                conn = await mqtt_connect(self.address.host, self.address.port, client_id=self.client_id,
                                          on_messages=self._on_messages, on_oversize=self._on_oversize,
                                          username=self.address.username or RELAY_USER,
                                          password=self.address.password, will=will, keepalive=30,
                                          max_packet=self.max_payload + PACKET_HEADER_ALLOWANCE,
                                          socket_options=NODELAY, timeout=CONNECT_TIMEOUT_S)
                # Before any SUBSCRIBE: other shards' actions are skipped from the first read on.
                conn.set_topic_filter(self._act_head, self._keep_under())
                # The connection is the stepper's from here: an answer to a message that arrives
                # while the SUBACKs are awaited (NATS: up to 4 s during an election) goes out on it.
                self._client = conn
                try:
                    # Every shard's actions, once: gaining a shard then needs no SUBSCRIBE (see the module
                    # docstring).
                    await self._subscribe_topic(conn, self.topics.req_all)
                    await self._subscribe_topic(conn, self._act_all("+"))
                    # QoS 0: a PUBACK for a retained message waits on JetStream on NATS (not worth a reconnect)
                    conn.publish(status, encode(m.RelayStatus(self.relay_id, True)), qos=0, retain=True)
                    if lost_at is not None:
                        log.warning("reconnected to the broker %s %.2f s after losing it (%d attempt(s)) at %.3f",
                                    self.address.url, time.monotonic() - lost_at, attempts, time.time())
                    lost_at = None
                    attempts = 0
                    if first:
                        try:  # only now: a shard gained is served at once
                            await self.ownership.start()
                        except (MqttError, asyncio.CancelledError):
                            raise
                        except Exception as exc:  # noqa: BLE001 - one line for a person
                            raise ClusterError(str(exc) or type(exc).__name__) from exc
                        self.ready.set()
                    else:
                        self.reconnects += 1
                        log.warning("reconnected to the broker %s", self.address.url)
                        self._announce.extend(s for s in self.servers if s not in self._announce)
                    first = False
                    delay = RECONNECT_FIRST_S
                    self._wake.set()
                    raise await conn.wait_closed()  # nothing to do here until the connection ends
                finally:
                    if self._client is conn:
                        self._client = None
            except MqttError as exc:
                self._client = None
                if self._closing:
                    return  # the last words were said: no new connection
                node += 1  # a node that failed or went away: the next one (it comes round again last)
                if first and node >= len(self.addresses):
                    raise
                if first:
                    continue
                if lost_at is None:
                    lost_at = time.monotonic()
                    delay = RECONNECT_FIRST_S
                    log.warning("lost the broker %s (%s) at %.3f; trying the next node", self.address.url, exc,
                                time.time())
                else:
                    log.warning("broker %s: %s; next try in %.1f s", self.address.url, exc, delay)
                # Each node once without waiting (one that stopped refuses at once; a CONNECT that waits on
                # JetStream gives up after CONNECT_TIMEOUT_S), then backing off up to RECONNECT_MAX_S.
                if attempts >= len(self.addresses):
                    await asyncio.sleep(delay)
                    delay = min(RECONNECT_MAX_S, delay * 2)
            finally:
                if conn is not None:
                    conn.abort()  # a no-op once it has ended (a clean stop disconnected it first)

    def _on_messages(self, messages: list[Message]) -> None:
        """The PUBLISHes of one read from the broker (other shards' actions were skipped by the
        parser): stamped once, queued for the stepper."""
        t = time.time_ns()
        inbox = self._inbox
        if self._will_checks:
            for msg in messages:
                assert msg.topic is not None  # the connection drops messages whose topic is not UTF-8
                self._heard(msg.topic)
        for msg in messages:
            inbox.append((msg.topic, msg.payload, t))  # type: ignore[arg-type] # topic: not None (above)
        self._wake.set()

    def _on_oversize(self, topic: str, size: int) -> None:
        """A message far over ``max_payload`` (its bytes were skipped, never buffered): handed on
        as a payload one byte over the limit, which its shard's core answers ``too_large`` (as any
        payload over it: the step cuts those to that length)."""
        if topic.startswith(self._act_head.decode()) and shards.shard_of_act_topic(topic, self.prefix) not in self.servers:
            return
        if self._will_checks:
            self._heard(topic)
        self._inbox.append((topic, bytes(self.max_payload + 1), time.time_ns()))
        self._wake.set()

    def _heard(self, topic: str) -> None:
        """A client spoke (a request or an action): it is alive, whatever shard it plays in."""
        head = f"{self.prefix}/lobby/req/"
        if topic.startswith(head):
            client = topic[len(head):]
        else:
            rest, sep, client = topic.rpartition("/act/")
            if not sep:
                return
        for _, _, waiting in self._will_checks:
            waiting.discard(client)

    def _give_lost_wills(self) -> None:
        """The players of a taken-over shard not heard from since: their last will, now."""
        now = time.monotonic()
        due = [c for c in self._will_checks if c[0] <= now]
        if not due:
            return
        self._will_checks = [c for c in self._will_checks if c[0] > now]
        for _, srv, waiting in due:
            if self.servers.get(srv.shard) is not srv:
                continue  # lost meanwhile: its next owner checks
            for client in sorted(waiting):
                match = srv.core.matches.get(srv.core.client_match.get(client, ""))
                seat = match.seat_of(client) if match is not None else None
                if match is None or seat is None or match.players[seat].dropped_at is not None \
                        or match.status not in ("playing", "between"):
                    continue
                log.warning("shard %s: client %s not heard from since the takeover: its last will now", srv.shard, client)
                self.wills_given.append(client)
                self._inbox.append((self.topics.req(client), encode(m.Leave(dropped=True)), time.time_ns()))
                self._wake.set()

    def _act_all(self, shard: str) -> str:
        return f"{self.prefix}/m/{shard}/+/act/+"

    async def _subscribe_topic(self, client: MqttConnection, topic: str) -> None:
        """Subscribe, and make sure the broker granted it: NATS's MQTT refused QoS 1 subscriptions
        (SUBACK 0x80) when it could not create their JetStream consumers in time -- while a node was
        down and the cluster elected a new meta leader, a relay that moved to another node had every
        action subscription refused and its matches waited for ever. Now QoS 0 (``SUB_QOS``), but any
        refusal is still asked again in the background until granted (or the connection is gone).
        No SUBACK within ``SUBSCRIBE_TIMEOUT_S`` drops the connection (``MqttError``: reconnect)."""
        try:
            await client.subscribe([(topic, SUB_QOS)], timeout=SUBSCRIBE_TIMEOUT_S)
            return
        except SubscribeRefused:
            pass
        log.warning("the broker refused the subscription to %s at %.3f; asking again", topic, time.time())

        async def again() -> None:
            delay = 0.25
            while self._client is client:
                await asyncio.sleep(delay)
                delay = min(RECONNECT_MAX_S, delay * 2)
                try:
                    await client.subscribe([(topic, SUB_QOS)], timeout=SUBSCRIBE_TIMEOUT_S)
                except SubscribeRefused:
                    continue
                except MqttError:
                    return  # the connection is gone: the reconnect subscribes again
                log.warning("subscribed to %s at last", topic)
                return
        self._background(again())

    async def _step_loop(self) -> None:
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._will_checks:
                self._give_lost_wills()
            now = time.time_ns()
            deadlines = [d for d in (s.core.next_deadline() for s in self.servers.values()) if d is not None]
            due = bool(deadlines) and min(deadlines) <= now
            announce = bool(self._announce) and self._client is not None
            if not self._inbox and not due and not announce:
                delay = MAX_SLEEP_S if not deadlines else min(MAX_SLEEP_S, max(0.0, (min(deadlines) - now) / 1e9))
                self._wake.clear()
                await wait_event(self._wake, delay)
                continue
            await self.step()

    async def step(self) -> None:
        """One group-committed step over every served shard."""
        if self._announce and self._client is not None:
            todo, self._announce = self._announce, []
            fresh = [self.servers[shard] for shard in todo if shard in self.servers]
            self._emit([(server, self._announcement(server)) for server in fresh])
            for server in fresh:
                log.info("shard %s: announced (status online, %d match(es)) %.2f s after serving it", server.shard,
                         len(server.core.matches), time.monotonic() - server.served_at)
        inbox, self._inbox = self._inbox[:MAX_BATCH], self._inbox[MAX_BATCH:]
        batches: dict[str, tuple[ShardServer, list[Entry], list[Any]]] = {}
        servers = self.servers
        req_head = f"{self.prefix}/lobby/req/"
        for topic, payload, t in inbox:
            if topic.startswith(req_head):
                client = topic[len(req_head):]
                shard = shards.route_request(client, payload[:self.max_payload + 1], self.total)
                if shard == shards.KNOWN:
                    targets = [s for s in servers.values() if client in s.core.client_match]
                else:
                    srv = servers.get(shard)
                    targets = [srv] if srv is not None else []
            else:
                shard_name = shards.shard_of_act_topic(topic, self.prefix)
                srv = servers.get(shard_name) if shard_name is not None else None
                targets = [srv] if srv is not None else []
            if len(payload) > self.max_payload:
                payload = payload[:self.max_payload + 1]  # still too large: the core answers ``too_large``
            for srv in targets:
                batch = batches.get(srv.shard)
                if batch is None:
                    batch = batches[srv.shard] = (srv, [], [])
                now = srv.now(t)
                batch[1].append(Msg(topic, payload, now))
                batch[2].extend(srv.core.handle(topic, payload, now))
        t = time.time_ns()
        for srv in list(servers.values()):
            deadline = srv.core.next_deadline()
            if deadline is not None and deadline <= srv.now(t):
                batch = batches.get(srv.shard)
                if batch is None:
                    batch = batches[srv.shard] = (srv, [], [])
                batch[1].append(Tick(srv.last_now))
                batch[2].extend(srv.core.tick(srv.last_now))
        if not batches:
            return
        work = list(batches.values())
        results = await asyncio.gather(*(self._io(srv.journal.append, entries, srv.fence)
                                         for srv, entries, _ in work), return_exceptions=True)
        held = self.ownership.owned()  # read now: the leases live on their own thread and may know more
        done: list[tuple[ShardServer, list[Any]]] = []
        answered: list[ShardServer] = []
        for (srv, entries, out), result in zip(work, results):
            if self.servers.get(srv.shard) is not srv:
                continue  # lost meanwhile: not a word more for it
            if held.get(srv.shard) != srv.fence:  # the lease is gone; its on_loss has not reached us yet
                log.warning("shard %s: its lease is gone; stopped serving it", srv.shard)
                await self._drop(srv, rebuild=False)
                continue
            if isinstance(result, FencedError):
                log.warning("shard %s: %s; stopped serving it", srv.shard, result)
                await self._drop(srv, rebuild=False)
                continue
            if isinstance(result, BaseException):
                log.warning("shard %s: journal append failed (%s: %s); rebuilding it from its journal",
                            srv.shard, type(result).__name__, result)
                await self._drop(srv, rebuild=True)
                continue
            srv.steps += 1
            done.append((srv, out))
            if out and not srv.answered and any(isinstance(e, Msg) for e in entries):
                srv.answered = True
                answered.append(srv)
        # Every shard's outputs of the step: one buffer, one write (``_drop`` above never waits).
        self._emit(done)
        for srv in answered:
            self._tell(f"answers on shard {srv.shard} ({time.monotonic() - srv.served_at:.2f} s after serving it)")
        for srv, _ in done:
            await self._maybe_snapshot(srv)

    async def _drop(self, srv: ShardServer, rebuild: bool) -> None:
        if self.servers.get(srv.shard) is srv:
            del self.servers[srv.shard]
            self._refilter()
        self.lost.append((srv.shard, time.monotonic()))
        self._tell(f"stopped serving shard {srv.shard}")
        self._background(self._io(_close_quietly, srv.journal))
        if rebuild and srv.shard in self.ownership.owned() and srv.shard not in self._starting:
            fence = self.ownership.owned()[srv.shard]
            await self._on_gain(srv.shard, fence)

    async def _maybe_snapshot(self, srv: ShardServer) -> None:
        journal = srv.journal
        pos = journal.last_position()
        if pos - srv.snap_pos < self.snapshot_every and not (
                time.monotonic() - srv.snap_at >= self.snapshot_every_s and pos > srv.snap_pos):
            return
        blob = await self._io(pickle.dumps, srv.core, pickle.HIGHEST_PROTOCOL)
        srv.snap_at = time.monotonic()
        try:
            await self._io(journal.save_snapshot, pos, blob)
            keep = srv.snap_pos
            srv.prev_snap, srv.snap_pos = srv.snap_pos, pos
            if keep > 0:
                await self._io(journal.compact, keep)
        except JournalError as exc:  # the next one will do: the journal still holds every entry
            log.warning("shard %s: snapshot not saved (%s)", srv.shard, exc)

    def _announcement(self, srv: ShardServer) -> list[Any]:
        """What a shard's new server publishes: its status online and match list, then each match's
        snapshot and each player's view, so that every client resyncs."""
        core = srv.core
        now = srv.now(time.time_ns())
        out: list[Any] = list(core.startup(now))
        for match in core.matches.values():
            core._publish_snapshot(match, now, out)  # noqa: SLF001 - builds messages from the state
            core._send_views(match, out)  # noqa: SLF001
        return out

    def _emit(self, outs: list[tuple[ShardServer, list[Any]]]) -> None:
        """Write the shards' log lines and publish all their messages at once (one buffer, one write)."""
        everything: list[Any] = []
        for srv, out in outs:
            records = [o for o in out if isinstance(o, LogRecord)]
            if records:
                self._write(records, srv.shard)
            everything += out
        client = self._client
        if client is not None and everything:
            failed = self._send(client, everything)
            if failed:
                # The connection dropped: the connection task reconnects and every served shard is
                # announced again then; what this step said is in the state its clients will get.
                self.publish_failures += failed
                log.warning("%d publish(es) failed (%s); waiting for the broker", failed, self._last_failure)

    _last_failure = ""

    def _send(self, client: MqttConnection, out: list[Any]) -> int:
        """Publish ``out``'s messages as one buffer (``relay.shell.send_publishes``); how many could
        not be written. Never raises for a dropped connection."""
        failed, why = send_publishes(client, out)
        if failed:
            self._last_failure = why
        return failed

    def _write(self, records: list[LogRecord], shard: str | None = None) -> None:
        if self.records is not None:
            self.records.extend(dict(r.record, shard=shard) for r in records)
        if self._log_file is not None:
            for r in records:
                self._log_file.write(json.dumps(dict(r.record, shard=shard) if shard is not None else r.record,
                                                default=str) + "\n")
            self._log_file.flush()


def sqlite_opener(data_dir: str | Path, durable: bool = True) -> JournalOpener:
    """One SQLite journal per shard, each in ``DIR/shard-{n}`` (locked by the relay that opens it):
    the static (no NATS) set-up, several relays on one broker and one machine."""
    base = Path(data_dir)

    def open_shard(shard: str) -> Journal:
        try:
            return open_journal(base / f"shard-{shard}", durable=durable)
        except JournalError as exc:
            if "is in use by" in str(exc):  # the directory lock: another relay serves this shard
                raise ConfigConflict(f"shard {shard} is already served by another relay ({exc}); "
                                     f"two relays were given the same shard") from exc
            raise

    return open_shard


class ClusterServer:
    """A ``ClusterRelay`` started in the running loop (like ``relay.local.LocalServer``): ``start``
    returns once the relay is connected and taking part; ``stop`` hands its shards over."""

    def __init__(self, relay: ClusterRelay, on_stop: Callable[[], Any] | None = None) -> None:
        self.relay = relay
        self._on_stop = on_stop
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self, timeout_s: float = 30.0) -> None:
        self._task = asyncio.create_task(self.relay.run())
        ready = asyncio.create_task(self.relay.ready.wait())
        done, _ = await asyncio.wait({self._task, ready}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._task in done:
            await self._task  # raises why it stopped
        if not self.relay.ready.is_set():
            await self.stop()
            raise ConnectionError(f"the relay could not start on {self.relay.address.url}")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task, tries=40)
        if self._on_stop is not None:
            result = self._on_stop()
            if asyncio.iscoroutine(result):
                await result

    async def __aenter__(self) -> ClusterServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def make_cluster_server(broker_url: str, *, cluster_url: str | None, shards: list[str] | None,
                              shards_total: int, data_dir: str | Path | None, topics: Topics | None = None,
                              config: RelayConfig | None = None, log_path: str | Path | None = None,
                              max_payload: int = DEFAULT_MAX_PAYLOAD, durable: bool = True,
                              lease_ttl_s: float | None = None, say: Callable[[str], None] | None = None
                              ) -> ClusterServer:
    """What ``blink serve --broker URL (--cluster NATS_URL | --shards LIST)`` runs (see relay/local.py).
    With a cluster, ``shards`` are pinned to this relay (the leases refuse a shard pinned twice)."""
    from mqttkit import parse_url

    address = [parse_url(u.strip()) for u in broker_url.split(",") if u.strip()]
    prefix = (topics or Topics()).prefix
    config = config or RelayConfig()
    if cluster_url is None:
        if shards is None or data_dir is None:
            raise ValueError("without a cluster a relay needs its shards and a data directory")
        relay = ClusterRelay(address, StaticOwnership(shards), sqlite_opener(data_dir, durable), shards_total, prefix,
                             config, config.relay_id, log_path, max_payload, say=say)
        return ClusterServer(relay)
    return await nats_cluster_server(address, cluster_url, shards_total, prefix, config, log_path, max_payload,
                                     pinned=shards or (), lease_ttl_s=lease_ttl_s, say=say)


async def nats_cluster_server(address: Sequence[BrokerAddress], cluster_url: str, shards_total: int, prefix: str,
                              config: RelayConfig, log_path: str | Path | None, max_payload: int,
                              pinned: Sequence[str] = (), lease_ttl_s: float | None = None,
                              say: Callable[[str], None] | None = None) -> ClusterServer:
    """Leases and journals in the JetStream of the NATS cluster at ``cluster_url`` (``a,b,c`` for several
    nodes): one NATS connection for every shard's journal, another for the leases."""
    try:
        from relay.jetstream import JetStreamJournal, NatsLink
        from relay.leases import NatsLeases, ThreadedLeases
    except ImportError as exc:
        raise ClusterError(f"this installation cannot use a NATS cluster ({exc}): install nats-py") from exc
    link = await asyncio.to_thread(NatsLink, cluster_url)  # JournalError in one line: unreachable, no JetStream
    try:
        kwargs: dict[str, Any] = {"pinned": pinned, "relay_id": config.relay_id}
        if lease_ttl_s is not None:
            kwargs["ttl"] = lease_ttl_s
        leases = ThreadedLeases(NatsLeases(cluster_url, shards_total, **kwargs))
    except Exception as exc:
        await asyncio.to_thread(link.close)
        raise ClusterError(str(exc)) from exc

    def open_shard(shard: str) -> Journal:
        return JetStreamJournal(link, shard)

    relay = ClusterRelay(address, leases, open_shard, shards_total, prefix, config, config.relay_id, log_path,
                         max_payload, say=say)
    return ClusterServer(relay, on_stop=lambda: asyncio.to_thread(link.close))


def core_time(core: RelayCore) -> int:
    """The latest time a restored core has seen, near enough (its last publication)."""
    return max((t for book in core.fair.published.values() for t in book.values()), default=0)


def _close_quietly(journal: Journal) -> None:
    try:
        journal.close()
    except Exception as exc:  # noqa: BLE001 - closing a journal whose backend is gone
        log.info("closing a journal: %s", exc)


__all__ = ["ClusterError", "ClusterRelay", "ClusterServer", "ConfigConflict", "make_cluster_server", "sqlite_opener", "JournalOpener", "ShardServer", "process_status_topic",
           "shard_status_id"]
