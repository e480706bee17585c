"""``blink serve``: set up and run one relay -- embedded broker or a given one, journal, LAN hosting,
or one relay of several sharing a broker.

How this works
--------------
``serve_relay(options, topics)`` checks the options that go together (or do not) before anything
starts, then runs until SIGINT or SIGTERM (so the relay stops in order and says so on its status
topic; then exit status 130 after Ctrl-C, as for any interrupted command, and 0 after SIGTERM, a
service manager's ordinary stop) or until the relay itself or its broker stops (one line, exit 1).
Alone (the default) it is a ``relay.hosting.local.LocalServer`` on ``--broker``, or without it on a broker
of its own: an installed Mosquitto with the generated configuration, in a child process
(``relay/hosting/servebroker.py``), else -- or with ``--embedded`` -- the embedded amqtt broker with
the relay inside it, in this one process (``relay/embedded/inprocess.py``); the "running" line says
which. The relay stops before its broker, on every way out. The journal is in the data directory
(recovered from on start), and with ``--lan`` all interfaces, the next free port and an advert
over multicast DNS (``relay/hosting/lanhost.py``); with ``--tls-cert``/``--tls-key`` its broker also
listens with TLS on ``--tls-host`` (default: ``--host``) and ``--tls-port`` (default 8883) -- the
plain listener on loopback and the TLS one on ``0.0.0.0`` face the internet with TLS only -- and a
LAN advert names that listener and the ``mqtts`` scheme. The "running" line says where each
listener is, and when only this machine can reach them, how to open them. With ``--cluster`` or ``--shards`` it is one relay of
several on a shared broker (``relay.hosting.local.cluster_server``): shards by lease in a NATS cluster's
JetStream, or pinned, each journalled on its own.

What it prints is what scripts wait for: the "running" line first, then where the journal is and
what was recovered, and after a recovery one line once every match has been resynced. A problem
the user can fix is a ``ServeError`` with its exit status (2 for options that do not go together,
found before anything starts; 1 at run time); anything else propagates for the caller to word.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from protocol.topics import Topics
from relay import RelayError

if TYPE_CHECKING:
    from mqttkit import Scheme, TLSTrust
    from protocol.match import Order
    from relay.runtime import Relay

USAGE = 2  # bad input on the command line
FAILED = 1  # a failure at run time
INTERRUPTED = 130  # Ctrl-C
DEFAULT_SHARDS_TOTAL = 8


class ServeError(RelayError):
    """A problem the user can fix: one line, and the exit status it ends with."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def usage(message: str) -> ServeError:
    """Options that do not go together: exit status 2, before anything starts."""
    return ServeError(message, USAGE)


@dataclass(frozen=True)
class ServeOptions:
    """``blink serve``'s options, as the command line gives them (None: not given)."""

    host: str | None = None
    port: int = 1883
    broker: str | None = None
    order: Order = "arrival"
    fair_cap_ms: float = 400.0
    seed: int | None = None
    log: str | None = None
    relay_id: str | None = None
    max_payload: int = 8192
    data: str | None = None
    no_journal: bool = False
    sync: Literal["full", "normal"] = "full"  # the journal: fsync every batch, or survive a crash of the relay only
    lan: bool = False
    interface: list[str] | None = None
    cluster: str | None = None
    shards_total: int | None = None
    lease_ttl: float | None = None
    password_file: str | None = None
    shards: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_port: int | None = None
    tls_host: str | None = None
    embedded: bool = False
    seal: bool = False
    ca: str | None = None  # with an mqtts:// --broker: believe only the CAs in this PEM file
    insecure: bool = False  # with an mqtts:// --broker: check no certificate
    web: str | None = None  # the spectator page's [HOST:]PORT (relay/web/)

    @property
    def trust(self) -> TLSTrust:
        """Whom an ``mqtts://`` ``--broker`` believes."""
        from mqttkit import TLSTrust

        return TLSTrust(self.ca, self.insecure)


def web_address(text: str) -> str:
    """``--web [HOST:]PORT`` checked (ValueError naming what is wrong), as the command line gives it."""
    from relay.web import parse_web

    parse_web(text)
    return text


def read_password(path: str | Path) -> str:
    """The relay's password from a file ``blink cluster up`` wrote (first line); ServeError in one
    line if unusable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ServeError(f"cannot read the password file {path}: {exc.strerror or exc}") from exc
    lines = text.splitlines()
    password = lines[0].strip() if lines else ""
    if not password:
        raise ServeError(f"the password file {path} is empty")
    if not all(c.isascii() and (c.isalnum() or c in "-._~") for c in password):
        # it goes into mqtt:// and nats:// URLs as is (nats-py does not unquote them)
        raise ServeError(f"the password in {path} has characters a URL cannot carry (use letters, digits, -._~)")
    return password


def with_password(urls: str, user: str, password: str) -> str:
    """Comma-separated URLs with ``user:password@`` added to each that has no password (a user name
    already in a URL is kept)."""
    out = []
    for url in urls.split(","):
        url = url.strip()
        scheme, rest = url.split("://", 1) if "://" in url else ("", url)
        userinfo, at, hostport = rest.rpartition("@")
        if at and ":" in userinfo:
            out.append(url)  # it has its own password
            continue
        name = userinfo if at else user
        out.append(f"{scheme + '://' if scheme else ''}{name}:{password}@{hostport}")
    return ",".join(out)


def _apply_password_file(options: ServeOptions) -> ServeOptions:
    """``--password-file``: the relay's credentials into its --broker and --cluster URLs (in memory only)."""
    if not options.password_file:
        return options
    if not options.broker:
        raise usage("--password-file is for a broker given with --broker (the embedded broker makes its own "
                    "relay secret)")
    from mqttkit import RELAY_USER

    try:
        password = read_password(options.password_file)
    except ServeError as exc:  # a file named on the command line: bad input, as a missing --tls-cert is
        raise usage(str(exc)) from exc
    return dataclasses.replace(
        options, broker=with_password(options.broker, RELAY_USER, password),
        cluster=with_password(options.cluster, RELAY_USER, password) if options.cluster else options.cluster)


class _Stop:
    """Set by SIGINT or SIGTERM (where the loop can take signal handlers), so a relay stops in order
    and says so on its status topic; ``status`` is then the exit status: 130 after Ctrl-C (SIGINT),
    as a shell expects of an interrupted program, 0 after SIGTERM (a service manager's stop)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.status = 0
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._signalled, sig)
            except (NotImplementedError, RuntimeError):
                pass

    def _signalled(self, sig: int) -> None:
        if not self.event.is_set():
            self.status = INTERRUPTED if sig == signal.SIGINT else 0
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


def _say(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(f"blink serve: {line}", file=sys.stderr, flush=True)


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _say_resynced(relay: Relay) -> None:
    """After a recovery: one line once every match's snapshot and views have been republished
    (requests are served meanwhile; scripts such as bench/restart_bench.py time it)."""
    await relay.resynced.wait()
    print(f"blink relay: every match resynced ({relay.resync_matches} still open) {relay.resync_s:.2f} s "
          "after coming online", flush=True)


async def serve_relay(options: ServeOptions, topics: Topics) -> int:
    """Run the relay ``options`` describe until a signal stops it; 130 then after SIGINT, 0 after SIGTERM,
    ServeError otherwise."""
    options = _apply_password_file(options)
    tls = _tls_files(options)
    if options.cluster or options.shards or options.shards_total or options.lease_ttl is not None:
        if options.seal:
            raise usage("--seal is for a single relay: relays of a cluster (--cluster, --shards) share a broker "
                        "that keeps players apart by its own rules")
        if options.web:
            raise usage("--web serves the page of a single relay: leave it out with --cluster and --shards")
        return await _serve_cluster(options, topics)
    if options.web and options.seal:
        raise usage("--web reads the public stream as an ordinary spectator, which a sealed relay's signed "
                    "messages are not for: leave out --web or --seal")
    relay_id = options.relay_id or "relay-0"
    if options.broker and "," in options.broker:
        raise usage("several --broker URLs are for relays of a cluster (--cluster or --shards); give one")
    from relay.hosting.local import LocalServer
    from relay.model import RelayConfig
    from relay.storage import JournalError, default_data_dir

    config = RelayConfig(relay_id=relay_id, order=options.order, fair_cap_ns=int(options.fair_cap_ms * 1e6))
    if options.no_journal and options.data:
        raise ServeError("--no-journal and --data exclude each other")
    data_dir = None if options.no_journal else (options.data or default_data_dir())
    host, port = options.host or ("0.0.0.0" if options.lan else "127.0.0.1"), options.port
    lan: contextlib.AbstractAsyncContextManager[object] = contextlib.nullcontext()
    if options.interface and not options.lan:
        raise usage("--interface only goes with --lan")
    if options.lan and options.broker:
        raise usage("--lan hosts its own broker on this machine: leave out --broker")
    if options.lan and options.seal:
        raise usage("--seal is for a broker that keeps nobody apart, given with --broker; --lan's own broker keeps "
                    "players apart itself (and its advert could not carry the pin)")
    from mqttkit import DEFAULT_TLS_PORT

    tls_port = options.tls_port or DEFAULT_TLS_PORT
    tls_host = options.tls_host or host
    advertised, named = (tls_host, "--tls-host") if tls is not None and options.tls_host else (host, "--host")
    if options.lan and _loopback(advertised):  # --lan advertises the TLS listener when there is one
        raise usage(f"{named} {advertised} is loopback: nobody else could reach it (leave out {named})")
    from relay.hosting.servebroker import share_a_port

    if tls is not None and tls_port == port and share_a_port(host, tls_host):
        raise usage(f"--tls-port {tls_port} is the plain listener's --port too: give them different ports")
    if options.lan:  # all interfaces, the next free port, advertised over multicast DNS
        from mqttkit.lan import LanError
        from relay.hosting import lanhost

        try:
            port = lanhost.lan_port(host, port, options.interface, _warn)
        except LanError as err:
            raise ServeError(str(err)) from err
        lan = lanhost.lan_hosting(port, relay_id, host, options.interface, topics, _say, _warn,
                                  tls_port=tls_port if tls is not None else None, tls_host=tls_host)
    if options.embedded and options.broker:
        raise usage("--embedded runs the embedded broker: leave out --broker")
    from relay.hosting.servebroker import BrokerChild, BrokerFailed, choose, listeners_text

    child: BrokerChild | None = None
    inside = False  # the embedded broker, with the relay inside it (this process)
    if not options.broker:  # a broker of our own: Mosquitto in a process of its own, else the embedded one here
        binary = choose(options.embedded)
        if binary is not None:
            child = BrokerChild(host, port, topics.prefix, options.max_payload, binary,
                                tls=(tls[0], tls[1], tls_port) if tls is not None else None, tls_host=tls_host)
        else:
            inside = True
    web = None
    if options.web:
        from relay.web import WebServer, parse_web

        web = WebServer(topics.prefix, parse_web(options.web))
    stop = _Stop()
    try:
        async with contextlib.AsyncExitStack() as stack:
            if web is not None:  # its port first: taken, nothing else starts
                from relay.web import WebError

                try:
                    await stack.enter_async_context(web)
                except WebError as taken:
                    raise ServeError(str(taken)) from taken
            broker_url = options.broker
            if child is not None:
                try:
                    await stack.enter_async_context(child)
                except BrokerFailed as failed:
                    raise ServeError(str(failed)) from failed
                assert child.relay_address is not None
                broker_url = child.relay_address.login_url
            from relay.sealing import IdentityError

            try:
                server = LocalServer(broker_url,
                                     options.seed, config, options.log, host=host, port=port if inside else None,
                                     topics=topics, max_payload=options.max_payload, data_dir=data_dir,
                                     durable=options.sync == "full", seal=options.seal, trust=options.trust,
                                     tls=(tls[0], tls[1], tls_port, tls_host) if inside and tls is not None else None)
            except IdentityError as bad:
                raise ServeError(str(bad)) from bad
            await stack.enter_async_context(server)
            await stack.enter_async_context(lan)
            if child is not None:
                where = child.describe()
            elif inside:
                listeners: list[tuple[Scheme, str, int]] = [("mqtt", host, port)]
                if tls is not None:
                    listeners.append(("mqtts", tls_host, tls_port))
                where = f"the embedded broker (the relay inside it, pid {os.getpid()}) on {listeners_text(listeners)}"
            else:
                where = f"broker {server.address.url}"
            print(f"blink relay '{relay_id}' ({options.order} order) running with {where}; Ctrl-C stops it.",
                  flush=True)
            if web is not None:
                web.follow(server.address)
                print(f"blink relay's page for spectators: {web.url}", flush=True)
            # After the "running" line (scripts wait for it): where the journal is, what was recovered.
            assert server.relay is not None
            print(f"blink relay data (journal): {data_dir or 'none (--no-journal): matches live in memory only'}",
                  flush=True)
            if server.address.pin is not None:  # the URL is the players' only way to the relay's keys
                print(f"blink relay seals every message (pin {server.address.pin}); players connect with "
                      f"{server.address.url}", flush=True)
            resynced: asyncio.Task[None] | None = None
            if server.relay.recovered:
                print(f"blink relay: {server.relay.recovered}", flush=True)
                resynced = asyncio.create_task(_say_resynced(server.relay))
            relay_task = server.task
            assert relay_task is not None
            waiter = asyncio.create_task(stop.wait())
            waits: set[asyncio.Task[object]] = {waiter, relay_task}
            if child is not None:
                waits.add(child.exited)
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if resynced is not None:
                resynced.cancel()
            if child is not None and child.exited in done and not stop.is_set():
                raise ServeError(child.lost or "the broker stopped")
            if relay_task in done and not stop.is_set():
                exc = relay_task.exception()
                if isinstance(exc, JournalError):  # at run time: worded as any other failure of the relay
                    raise ServeError(f"{type(exc).__name__}: {exc}")
                if exc is not None:
                    raise exc
                raise ServeError("the relay stopped")
    except JournalError as exc:
        raise ServeError(str(exc)) from exc
    print("blink relay stopped.", flush=True)
    return stop.status


def _tls_files(options: ServeOptions) -> tuple[str, str] | None:
    """``--tls-cert``/``--tls-key``, checked to load and belong together (exit 2 if not), and only
    for the embedded broker: a broker given with --broker has its own TLS listener."""
    if options.tls_port is not None and options.tls_cert is None:
        raise usage("--tls-port goes with --tls-cert and --tls-key")
    if options.tls_host is not None and options.tls_cert is None:
        raise usage("--tls-host goes with --tls-cert and --tls-key")
    if options.tls_cert is None and options.tls_key is None:
        return None
    if options.broker:
        raise usage("--tls-cert/--tls-key are for the embedded broker: a broker given with --broker serves TLS "
                    "itself (`blink broker-config --tls-cert`, `blink cluster up --tls-cert`); connect to it with "
                    "--broker mqtts://…")
    from mqttkit import TLSProblem, check_tls_pair

    try:
        return check_tls_pair(options.tls_cert, options.tls_key)
    except TLSProblem as exc:
        raise usage(str(exc)) from exc


async def _serve_cluster(options: ServeOptions, topics: Topics) -> int:
    """``blink serve --broker URL --cluster NATS_URL`` (or ``--shards LIST``): one of several relays."""
    from relay.hosting import local
    from relay.model import RelayConfig
    from relay.storage import JournalError, default_data_dir

    if not options.broker:
        raise usage("--cluster and --shards serve a shared broker: give it with --broker MQTT_URL")
    if options.lan or options.interface or options.host:
        raise usage("--lan, --interface and --host are for the embedded broker, not for --cluster/--shards")
    if options.no_journal:
        raise usage("a relay of several keeps its shards in a journal (another relay takes them over from "
                    "it): leave out --no-journal")
    if options.seed is not None:
        raise usage("--seed is for a single relay: each shard draws its own seed when it is first served")
    if options.lease_ttl is not None and not options.cluster:
        raise usage("--lease-ttl is for leases in a cluster: it needs --cluster")
    total = options.shards_total or DEFAULT_SHARDS_TOTAL
    owned: list[str] | None = None
    if options.shards:
        owned = [x.strip() for x in options.shards.split(",") if x.strip()]
        bad = [x for x in owned if not (x.isdigit() and int(x) < total and str(int(x)) == x)]
        if bad or not owned:
            raise usage(f"--shards must list shard numbers from 0 to {total - 1} (--shards-total {total}), "
                        f"not {options.shards!r}")
        if len(set(owned)) != len(owned):
            raise usage(f"--shards names a shard twice: {options.shards!r}")
    elif not options.cluster:
        raise usage("--shards-total needs --cluster NATS_URL (or --shards LIST)")
    data_dir = options.data or (None if options.cluster else str(default_data_dir() / "shards"))
    relay_id = options.relay_id
    if relay_id is None:
        relay_id = f"relay-{os.urandom(4).hex()}" if options.cluster else "relay-0"
    if not all(c.isalnum() or c in "-_" for c in relay_id) or not relay_id:
        raise usage(f"--relay-id must be letters, digits, '-' or '_', not {relay_id!r}")
    config = RelayConfig(relay_id=relay_id, order=options.order, fair_cap_ns=int(options.fair_cap_ms * 1e6))
    stop = _Stop()
    try:
        server = await local.cluster_server(options.broker, cluster_url=options.cluster, shards=owned,
                                            shards_total=total, data_dir=data_dir, topics=topics, config=config,
                                            log_path=options.log, max_payload=options.max_payload,
                                            durable=options.sync == "full", lease_ttl_s=options.lease_ttl,
                                            say=lambda line: _say(f"blink {line}"), trust=options.trust)
        async with server:
            how = f"cluster {local.public_nats(options.cluster)}" if options.cluster else f"shards {','.join(owned or [])}"
            print(f"blink relay '{relay_id}' ({options.order} order) running on broker "
                  f"{local.public_url(options.broker)}, {how} of {total}; Ctrl-C stops it.", flush=True)
            relay_task = server.task
            assert relay_task is not None
            waiter = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({waiter, relay_task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if relay_task in done and not stop.is_set():
                exc = relay_task.exception()
                if isinstance(exc, JournalError):
                    raise ServeError(str(exc))
                if exc is not None:
                    raise exc
                raise ServeError("the relay stopped")
    except JournalError as exc:
        raise ServeError(str(exc)) from exc
    print("blink relay stopped.", flush=True)
    return stop.status
