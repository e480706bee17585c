"""A relay (and its broker) started in this process.

How this works
--------------
The client's commands that deliberately run a server in their own process -- ``blink serve``,
``blink match`` and ``blink play`` without ``--server``, ``blink latency`` without ``--server`` --
start it through ``relay.hosting`` (tests/test_imports.py checks they import nothing else of
``relay``). ``LocalServer`` starts,
in the running event loop, an embedded amqtt broker on a free loopback port (or the given port)
and a relay on it; or, given a broker URL, just the relay against that broker. ``address`` is
where players connect; the relay's own login (on the embedded broker: user ``relay`` and a secret
made at this start) never leaves this object. ``start_local`` is the same as a function: it
returns the started server, whose ``stop()`` ends both.

``data_dir``: the relay journals every input there (``relay/storage/journal.py``) and recovers from it on
start; the directory is locked while the relay runs. ``None`` (the default, tests' in-process
servers): no journal, the relay lives in memory only -- a throwaway server in a test has nothing
to recover and no business writing to disk. ``temporary_data_dir()`` gives the commands that
start a throwaway relay (``blink match``, ``latency``, ``load``, ``play``) a private directory of
their own, removed when they stop, so two of them never collide on a lock.

``ClusterServer`` is a relay of a cluster (``relay/runtime.py`` with ``shards_total``) started the
same way: ``cluster_server`` makes one for ``blink serve --shards``/``--cluster`` -- static shards
journalled side by side under ``data_dir`` (``sqlite_opener``), or leases and journals in a NATS
cluster's JetStream.

``ChildServer`` (``relay/hosting/localproc.py``) is the same embedded broker + relay in a child process of
its own: what ``blink play`` starts, so its window and the relay never share an event loop.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mqttkit import DEFAULT_MAX_PAYLOAD, BrokerAddress, TLSTrust, free_port, parse_url, stop_task
from protocol.topics import Topics
from relay.core import RelayConfig
from relay.cluster import ShardedSpace
from relay.ownership import StaticOwnership
from relay.memdiag import Diagnostics
from relay.runtime import Relay, RelaySettings
from relay.sealing import Sealing, load_identity
from relay.shard import ClusterError, ConfigConflict
from relay.storage import Journal, JournalError, open_journal

if TYPE_CHECKING:  # imported where it is started: a relay on an outside broker never loads amqtt (start-up time)
    from relay.embedded import EmbeddedBroker

__all__ = ["ClusterServer", "LocalServer", "cluster_server", "public_nats", "public_url", "sqlite_opener", "start_local", "temporary_data_dir"]


async def _run_until_ready(relay: Relay, timeout_s: float) -> asyncio.Task[None]:
    """The relay's run, once it is connected and serving or ``timeout_s`` passed; raises why it
    stopped if it did first (e.g. the broker is unreachable)."""
    task = asyncio.create_task(relay.run())
    ready = asyncio.create_task(relay.ready.wait())
    done, _ = await asyncio.wait({task, ready}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if task in done:
        await task
    return task


def temporary_data_dir() -> Path:
    """A private data directory for a throwaway relay (the caller removes it: ``LocalServer`` does
    when given ``remove_data_dir=True``)."""
    return Path(tempfile.mkdtemp(prefix="blink-relay-"))


class LocalServer:
    """An embedded broker plus relay on a free loopback port (or just a relay on a given broker).

    ``broker_url`` (``mqtt://relay:SECRET@host:port``) is the relay's login on an external broker;
    without it the embedded broker is started and the relay logs in with the broker's secret.
    ``max_payload``: the largest message the embedded broker passes on and the relay reads; ``tls``
    (certificate, key, port, host): the embedded broker also listens with TLS there."""

    def __init__(self, broker_url: str | None = None, seed: int | None = None, config: RelayConfig | None = None,
                 log_path: str | Path | None = None, host: str = "127.0.0.1", port: int | None = None,
                 relay: bool = True, topics: Topics | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 data_dir: str | Path | None = None, durable: bool = True, remove_data_dir: bool = False,
                 seal: bool = False, trust: TLSTrust | None = None,
                 tls: tuple[str, str, int, str] | None = None) -> None:
        topics = topics or Topics()
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.durable = durable
        self._remove_data_dir = remove_data_dir
        self.broker: EmbeddedBroker | None = None
        if broker_url:
            relay_address = parse_url(broker_url, trust)  # (``trust``: whom an mqtts:// broker believes)
        else:
            from relay.embedded import EmbeddedBroker

            self.broker = EmbeddedBroker(host, port or free_port(host), topics.prefix, max_payload, config)
            if tls is not None:  # (certificate, key, port, host): a TLS listener beside the plain one
                self.broker.serve_tls(*tls)
            relay_address = self.broker.relay_address
        #: Sealed play (``relay/sealing.py``): the identity from the data directory, a fresh one without.
        sealing = Sealing(load_identity(self.data_dir), topics) if seal and relay else None
        #: Where players connect (never the relay's credentials; with the relay's pin when it seals).
        self.address: BrokerAddress = relay_address.public().pinned(sealing.pin if sealing else None)
        # (the documented diagnostic variables: relay/memdiag.py)
        settings = RelaySettings(topics, config or RelayConfig(), seed, log_path=Path(log_path) if log_path else None,
                                 max_payload=max_payload, diagnostics=Diagnostics.from_environ())
        # The relay of an embedded broker stands inside it (relay/embedded/inprocess.py): no socket between them.
        connector = self.broker.connector() if self.broker is not None else None
        self.relay = Relay(relay_address, settings, seal=sealing, connector=connector) if relay else None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LocalServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        if self.relay is not None and self.data_dir is not None and self.relay.journal is None:
            # Before the broker takes its port: a held or unwritable directory is refused first.
            journal = open_journal(self.data_dir, durable=self.durable)
            self.relay.whole.attach(journal)
            if journal.recovery_note:
                print(journal.recovery_note, file=sys.stderr, flush=True)
        if self.broker is not None:
            await self.broker.start()
        if self.relay is not None:
            self._task = await _run_until_ready(self.relay, 15)
            if not self.relay.ready.is_set():
                raise ConnectionError(f"the relay could not start on {self.address.url}")

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The running relay (done when it stops or fails)."""
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            # A cancellation can be swallowed inside a client library's await; ask again until the
            # task is really gone (bounded), so a command never hangs on its way out.
            await stop_task(self._task)
        if self.broker is not None:
            try:
                await asyncio.wait_for(self.broker.stop(), timeout=5)
            except asyncio.TimeoutError:
                pass
        if self.relay is not None and self.relay.journal is not None:
            self.relay.journal.close()
            self.relay.whole.attach(None)
        if self._remove_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


async def start_local(broker_url: str | None = None, seed: int | None = None, config: RelayConfig | None = None,
                      log_path: str | Path | None = None, host: str = "127.0.0.1", port: int | None = None,
                      topics: Topics | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                      data_dir: str | Path | None = None) -> LocalServer:
    """Start an embedded broker and a relay (or a relay on ``broker_url``); ``.address`` is where
    players connect, ``await .stop()`` ends both."""
    server = LocalServer(broker_url, seed, config, log_path, host, port, topics=topics, max_payload=max_payload,
                         data_dir=data_dir)
    try:
        await server.start()
    except BaseException:
        await server.stop()
        raise
    return server


def public_url(broker_url: str) -> str:
    """Broker URL(s, comma-separated) without credentials (for printing)."""
    return ",".join(parse_url(u.strip()).public().url for u in broker_url.split(",") if u.strip())


def public_nats(cluster_url: str) -> str:
    """NATS URL(s, comma-separated) without credentials (for printing)."""
    from relay.cluster import shown

    return shown([u.strip() for u in cluster_url.split(",") if u.strip()]).replace(", ", ",")


def sqlite_opener(data_dir: str | Path, durable: bool = True) -> Callable[[str], Journal]:
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
    """A relay of a cluster started in the running loop (like ``LocalServer``): ``start`` returns
    once the relay is connected and taking part; ``stop`` hands its shards over."""

    def __init__(self, relay: Relay, on_stop: Callable[[], object] | None = None) -> None:
        self.relay = relay
        self._on_stop = on_stop
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self, timeout_s: float = 180.0) -> None:
        # (the relay waits up to a minute for each of a cluster's parts that is not ready yet: its own deadlines)
        self._task = await _run_until_ready(self.relay, timeout_s)
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

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def cluster_server(broker_url: str, *, cluster_url: str | None, shards: list[str] | None, shards_total: int,
                         data_dir: str | Path | None, topics: Topics | None = None, config: RelayConfig | None = None,
                         log_path: str | Path | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                         durable: bool = True, lease_ttl_s: float | None = None,
                         say: Callable[[str], None] | None = None, trust: TLSTrust | None = None) -> ClusterServer:
    """One of several relays on a shared broker (what ``blink serve --broker URL (--cluster NATS_URL
    | --shards LIST)`` runs): with ``cluster_url`` the shards are leased and journalled in that NATS
    cluster's JetStream (``shards`` pinned to this relay); else it serves exactly ``shards``, each
    journalled under ``data_dir`` (``a,b,c`` for several nodes of either). Returns a not yet started
    ``ClusterServer``."""
    address = [parse_url(u.strip(), trust) for u in broker_url.split(",") if u.strip()]
    topics = Topics((topics or Topics()).prefix)
    config = config or RelayConfig()
    settings = RelaySettings(topics, config, log_path=Path(log_path) if log_path else None, max_payload=max_payload,
                             diagnostics=Diagnostics.from_environ())  # (documented: relay/memdiag.py)
    if cluster_url is None:
        if shards is None or data_dir is None:
            raise ValueError("without a cluster a relay needs its shards and a data directory")
        return ClusterServer(Relay(address, settings, ShardedSpace(shards_total, sqlite_opener(data_dir, durable)),
                                   StaticOwnership(shards), say=say))
    try:
        from relay.cluster import START_WAIT_S, JetStreamJournal, NatsLink
        from relay.cluster import NatsLeases, ThreadedLeases
    except ImportError as exc:
        raise ClusterError(f"this installation cannot use a NATS cluster ({exc}): install nats-py") from exc
    # One NATS connection for every shard's journal, another for the leases.
    # JournalError in one line: refused, no JetStream, or not ready within START_WAIT_S (said once while waiting)
    link = await asyncio.to_thread(functools.partial(NatsLink, cluster_url, wait_s=START_WAIT_S, say=say))
    try:
        leasing = functools.partial(NatsLeases, cluster_url, shards_total, pinned=shards or (), relay_id=config.relay_id,
                                    prefix=topics.prefix)
        leases = ThreadedLeases(leasing() if lease_ttl_s is None else leasing(ttl=lease_ttl_s))
    except Exception as exc:
        await asyncio.to_thread(link.close)
        raise ClusterError(str(exc)) from exc
    relay = Relay(address, settings, ShardedSpace(shards_total, lambda shard: JetStreamJournal(link, shard)), leases,
                  say=say)
    return ClusterServer(relay, on_stop=lambda: asyncio.to_thread(link.close))
