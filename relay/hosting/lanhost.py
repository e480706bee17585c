"""Hosting on the LAN: advertise a broker + relay over multicast DNS (the ``zeroconf`` package).

How this works
--------------
A host (``blink serve --lan``, or the window's local relay in ``blink play``) registers one DNS-SD
service of type ``_blink._tcp.local.``: instance name "<host name> <relay id>", the broker's port,
the machine's LAN addresses, and the TXT record of ``mqttkit/lan.py``.

The advertiser learns the waiting matches the way any client does: it subscribes to the relay's
retained ``lobby/matches`` over MQTT on loopback. That leaves the relay untouched (no callback
threaded through the core and the shell), works the same whichever broker the relay uses, and
serves a relay the window started as well. TXT changes are coalesced (at most one
re-announcement per ``UPDATE_INTERVAL_S``) so a busy lobby does not flood the network.

``lan_port`` takes the requested port or the next free one (a pure choice over a real check);
``lan_hosting`` prints how friends join and advertises while ``blink serve --lan`` runs.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from mqttkit import PortInUse, Scheme, check_port
from mqttkit.lan import (SERVICE_TYPE, LanError, encode_txt, list_interfaces, mdns_addresses,
                         zeroconf_error)
from protocol.codec import DecodeError, decode
from protocol.topics import DEFAULT_PREFIX, Topics
from relay import RelayError

if TYPE_CHECKING:  # zeroconf is imported where it is used: a relay that is not on the LAN never loads it
    from zeroconf import ServiceInfo
    from zeroconf.asyncio import AsyncZeroconf

log = logging.getLogger("blink.lan")

#: How many ports after the requested one ``choose_port`` tries.
PORT_TRIES = 20
#: Shortest time between two re-announcements of a changed TXT record.
UPDATE_INTERVAL_S = 1.0


class NoFreePort(RelayError, LanError):
    pass


# --------------------------------------------------------------------------------------------
# The port (pure choice, real check)


def pick_port(first: int, is_free: Callable[[int], bool], tries: int = PORT_TRIES) -> int:
    """The first port from ``first`` on (at most ``tries`` of them, none above 65535) that
    ``is_free``; NoFreePort otherwise."""
    last = min(65535, first + tries - 1)
    for port in range(first, last + 1):
        if is_free(port):
            return port
    raise NoFreePort(f"ports {first}-{last} are all taken: pick another with --port")


def port_is_free(host: str, port: int) -> bool:
    """Could a listening socket bind host:port now? (The same test as the broker's own check:
    SO_REUSEADDR, so a port only in TIME_WAIT counts as free.)"""
    try:
        check_port(host, port)
    except PortInUse:
        return False
    return True


def choose_port(host: str, first: int, tries: int = PORT_TRIES) -> int:
    return pick_port(first, lambda p: port_is_free(host, p), tries)


# --------------------------------------------------------------------------------------------
# Advertising


def _label(text: str, limit: int) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in text).strip("-")[:limit] \
        or "blink"


def instance_name(relay_id: str, host_name: str | None = None) -> str:
    """"<host> <relay>", at most 63 bytes (a DNS label)."""
    host = _label((host_name or socket.gethostname()).split(".")[0], 40)
    relay = "".join(c if c.isprintable() and c != "." else "-" for c in relay_id) or "relay"
    return f"{host} {relay}".encode("utf-8")[:63].decode("utf-8", "ignore").strip()


def parse_match_list(payload: bytes | bytearray) -> list[Mapping[str, object]] | None:
    """A ``lobby/matches`` payload -> its entries; [] for a cleared retained message; None if it
    is not a match list."""
    from protocol.messages import MatchList

    if not payload:
        return []
    try:
        msg = decode(payload)
    except DecodeError:
        return None
    return [dict(e) for e in msg.matches if isinstance(e, Mapping)] if isinstance(msg, MatchList) else None


class Advertiser:
    """One registered ``_blink._tcp`` service; ``update`` rewrites its TXT record (coalesced)."""

    def __init__(self, port: int, relay_id: str, addresses: Sequence[str] | None = None,
                 interfaces: Sequence[str] | None = None, host_name: str | None = None,
                 prefix: str = DEFAULT_PREFIX, scheme: Scheme = "mqtt") -> None:
        self.port = port
        self.relay_id = relay_id
        self.prefix = prefix
        self.scheme = scheme
        self.interfaces = mdns_addresses(interfaces)  # NoMulticast before anything starts
        self.addresses = list(addresses) if addresses else list(self.interfaces)
        self.host_name = _label((host_name or socket.gethostname()).split(".")[0], 63)
        self.name = instance_name(relay_id, host_name)
        self.txt = encode_txt(relay_id, [], prefix=prefix, scheme=scheme)
        self._zc: AsyncZeroconf | None = None
        self._info: ServiceInfo | None = None
        self._pending: dict[str, str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def service_name(self) -> str:
        """The registered name (zeroconf may have added " (2)" after a clash)."""
        return str(self._info.name) if self._info is not None else f"{self.name}.{SERVICE_TYPE}"

    def _service_info(self, txt: Mapping[str, str], name: str) -> ServiceInfo:
        from zeroconf import ServiceInfo

        return ServiceInfo(SERVICE_TYPE, name, port=self.port, properties=dict(txt),
                           server=f"{self.host_name}.local.", parsed_addresses=self.addresses)

    async def start(self) -> None:
        from zeroconf import Error as ZeroconfError, IPVersion
        from zeroconf.asyncio import AsyncZeroconf

        try:
            self._zc = AsyncZeroconf(interfaces=self.interfaces, ip_version=IPVersion.V4Only)
            self._info = self._service_info(self.txt, f"{self.name}.{SERVICE_TYPE}")
            await (await self._zc.async_register_service(self._info, allow_name_change=True))
        except OSError as exc:
            await self.stop()
            raise zeroconf_error(exc) from exc
        except ZeroconfError as exc:  # e.g. not running: the sockets could not be used
            await self.stop()
            raise LanError(f"could not advertise over multicast DNS: {type(exc).__name__} {exc}") from exc
        self._task = asyncio.create_task(self._updater())

    def update(self, matches: Iterable[object]) -> None:
        """New waiting matches: the TXT record follows within ``UPDATE_INTERVAL_S``."""
        txt = encode_txt(self.relay_id, matches, prefix=self.prefix, scheme=self.scheme)
        if txt != (self._pending or self.txt):
            self._pending = txt
            self._wake.set()

    async def _updater(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            txt, self._pending = self._pending, None
            if txt is None or txt == self.txt or self._zc is None or self._info is None:
                continue
            self.txt = txt
            self._info = self._service_info(txt, self._info.name)
            try:
                await (await self._zc.async_update_service(self._info))
            except Exception as exc:  # noqa: BLE001 - e.g. a vanished interface: keep serving, retry next change
                log.info("could not announce the new match list: %s", exc)
            await asyncio.sleep(UPDATE_INTERVAL_S)  # rate limit: the latest list wins meanwhile

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        zc, self._zc = self._zc, None
        if zc is not None:
            try:  # unregisters (goodbye packets: browsers drop us at once) and closes the sockets
                await asyncio.wait_for(zc.async_close(), timeout=5)
            except (OSError, asyncio.TimeoutError) as exc:
                log.info("zeroconf did not close cleanly: %s", exc)


class MatchFollower:
    """Keeps an Advertiser's TXT record in step with the relay's retained ``lobby/matches``, as an
    ordinary MQTT client (reconnects with backoff if the broker goes away)."""

    def __init__(self, host: str, port: int, on_matches: Callable[[list[Mapping[str, object]]], None],
                 topics: Topics | None = None) -> None:
        # A broker bound to every interface is reached on loopback.
        self.host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        self.port = port
        self.topics = topics or Topics()
        self.on_matches = on_matches
        self.client_id = "lan-" + secrets.token_hex(16)  # a client id is a secret: 128 bits
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        import aiomqtt

        backoff = 0.2
        while True:
            try:
                async with aiomqtt.Client(self.host, self.port, identifier=self.client_id, keepalive=30) as client:
                    await client.subscribe(self.topics.match_list, qos=1)
                    backoff = 0.2
                    async for msg in client.messages:
                        payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
                        matches = parse_match_list(payload)
                        if matches is not None:
                            self.on_matches(matches)
            except aiomqtt.MqttError as exc:
                log.info("match list: %s (retrying)", exc)
            await asyncio.sleep(backoff)  # reconnect backoff
            backoff = min(backoff * 2, 5.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


class advertise:  # noqa: N801 - used as ``async with advertise(...)``
    """Advertise a broker + relay on the LAN and keep its open matches current::

        async with advertise(port, relay_id, broker_host="0.0.0.0") as adv:
            print(adv.service_name)

    ``interfaces``: names or addresses to advertise on (default: every multicast interface)."""

    def __init__(self, port: int, relay_id: str, broker_host: str = "127.0.0.1",
                 interfaces: Sequence[str] | None = None, topics: Topics | None = None,
                 host_name: str | None = None, tls_port: int | None = None, tls_host: str | None = None) -> None:
        topics = topics or Topics()
        # A listener bound to one address is reachable only there: advertise just that one.
        listens = broker_host if tls_port is None or tls_host is None else tls_host
        only = [listens] if listens not in ("0.0.0.0", "", "127.0.0.1", "localhost") else None
        # With TLS the TLS listener is what is advertised; the match list is still followed on the plain one.
        self.advertiser = Advertiser(tls_port or port, relay_id, addresses=only, interfaces=interfaces,
                                     host_name=host_name, prefix=topics.prefix,
                                     scheme="mqtt" if tls_port is None else "mqtts")
        self.follower = MatchFollower(broker_host, port, self.advertiser.update, topics)

    async def __aenter__(self) -> Advertiser:
        await self.advertiser.start()
        self.follower.start()
        return self.advertiser

    async def __aexit__(self, *exc: object) -> None:
        await self.follower.stop()
        await self.advertiser.stop()


def lan_urls(port: int, host: str = "0.0.0.0", chosen: Sequence[str] | None = None, scheme: Scheme = "mqtt") -> list[str]:
    """How friends reach a broker on ``host``:``port`` (every LAN address when it listens on all)."""
    if host not in ("0.0.0.0", ""):
        return [f"{scheme}://{host}:{port}"]
    try:
        addrs = mdns_addresses(chosen)
    except LanError:
        addrs = [a for i in list_interfaces() if i.up and not i.loopback for a in i.addresses]
    return [f"{scheme}://{a}:{port}" for a in addrs]


# --------------------------------------------------------------------------------------------
# `blink serve --lan`


def lan_port(host: str, port: int, interfaces: Sequence[str] | None, warn: Callable[[str], None]) -> int:
    """Before the broker starts: check ``--interface`` (LanError if it names nothing usable) and
    take ``port`` or the next free one, saying which."""
    if interfaces:
        mdns_addresses(interfaces)
    chosen = choose_port(host, port)
    if chosen != port:
        warn(f"port {port} is taken; hosting on {chosen}")
    return chosen


class lan_hosting:  # noqa: N801 - used as ``async with lan_hosting(...)``
    """Print how friends join and advertise while the block runs. No multicast is not fatal for a
    host: it is said once and friends can still join by address."""

    def __init__(self, port: int, relay_id: str, host: str, interfaces: Sequence[str] | None,
                 topics: Topics | None, say: Callable[[str], None], warn: Callable[[str], None],
                 tls_port: int | None = None, tls_host: str | None = None) -> None:
        self.port, self.relay_id, self.host, self.interfaces = port, relay_id, host, interfaces
        self.tls_port, self.tls_host = tls_port, host if tls_host is None else tls_host
        self.topics, self.say, self.warn = topics, say, warn
        self._adv: advertise | None = None

    async def __aenter__(self) -> lan_hosting:
        if self.tls_port is None:
            urls = lan_urls(self.port, self.host, self.interfaces)
            listening = f"{self.host}:{self.port}"
        else:
            urls = lan_urls(self.tls_port, self.tls_host, self.interfaces, "mqtts")
            listening = f"{self.host}:{self.port}, TLS on {self.tls_host}:{self.tls_port}"
        if urls:
            where = ", ".join(u.split("://", 1)[1].rsplit(":", 1)[0] for u in urls)
            self.say(f"LAN host: this machine is {where}; listening on {listening}")
        else:
            self.say(f"LAN host: this machine has no LAN address (no network interface but loopback is up): "
                     f"nobody else can reach it yet; listening on {listening}")
        for url in urls:
            self.say(f"  friends join with:  blink play --server {url}   (or blink bot --server {url} ...)")
        try:
            adv = advertise(self.port, self.relay_id, self.host, self.interfaces, self.topics, tls_port=self.tls_port,
                            tls_host=self.tls_host)
            service = await adv.__aenter__()
        except LanError as exc:
            self.warn(f"not advertised on the local network: {exc}"
                      + ("; friends can still join by address" if urls else ""))
            return self
        self._adv = adv
        self.say(f"advertised as \"{service.service_name.removesuffix('.' + SERVICE_TYPE)}\" ({SERVICE_TYPE}) "
                 f"on {', '.join(service.interfaces)}: `blink lan` lists it")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._adv is not None:
            await self._adv.__aexit__(None, None, None)
