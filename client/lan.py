"""LAN hosting and discovery: DNS-SD over multicast DNS (the ``zeroconf`` package).

How this works
--------------
A host (``blink serve --lan``; later the window's "Host a match") registers one DNS-SD service of
type ``_blink._tcp.local.``: instance name "<host name> <relay id>", the broker's port, the
machine's LAN addresses, and a small TXT record -- relay id, protocol version, how many matches
are waiting, and up to ``MAX_TXT_MATCHES`` of them (code, game, seats taken, seats).

The advertiser learns the waiting matches the way any client does: it subscribes to the relay's
retained ``lobby/matches`` over MQTT on loopback. That leaves the relay untouched (no callback
threaded through the core and the shell), works the same whichever broker the relay uses, and
the window can reuse it for a relay it did not start. TXT changes are coalesced (at most one
re-announcement per ``UPDATE_INTERVAL_S``) so a busy lobby does not flood the network.

A browser (``blink lan``, later the menu's "LAN games") listens for the service type and reads
each host's records from zeroconf's cache. TXT values come from the network: decoding skips
anything malformed instead of failing.

Interfaces: we never let zeroconf pick "all" interfaces. It gets the IPv4 addresses of interfaces
that are up, have MULTICAST set and are not loopback (or exactly the ones named with
``--interface``); if there are none, ``NoMulticast`` says so.

The TXT encoding and the port choice are pure functions, tested without a network.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from protocol.codec import PROTOCOL_VERSION, DecodeError, decode
from protocol.topics import DEFAULT_PREFIX, Topics

log = logging.getLogger("blink.lan")

SERVICE_TYPE = "_blink._tcp.local."
#: Matches listed in the TXT record; the rest are only counted (``n``). DNS-SD asks for small TXT
#: records (ideally a few hundred bytes): ten entries of about 20 bytes each stay well inside.
MAX_TXT_MATCHES = 10
#: How many ports after the requested one ``choose_port`` tries.
PORT_TRIES = 20
#: Shortest time between two re-announcements of a changed TXT record.
UPDATE_INTERVAL_S = 1.0

# Linux interface flags (``/sys/class/net/IF/flags``, as in <net/if.h>).
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_MULTICAST = 0x1000


class LanError(RuntimeError):
    """A LAN problem the user can understand from its message."""


class NoMulticast(LanError):
    """No interface can send or receive multicast DNS."""


class NoFreePort(LanError):
    pass


# --------------------------------------------------------------------------------------------
# The TXT record (pure)


@dataclass(frozen=True)
class LanMatch:
    code: str
    game: str
    taken: int
    seats: int

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "game": self.game, "players": self.taken, "seats": self.seats}


def _token(text: Any, limit: int) -> str | None:
    """A code or game name fit for the TXT record: short, letters/digits/-/_ only, else None."""
    if not isinstance(text, str) or not 0 < len(text) <= limit:
        return None
    return text if all(c.isascii() and (c.isalnum() or c in "-_") for c in text) else None


def _small_int(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value <= 999 else None


def _match_from_list_entry(entry: Any) -> LanMatch | None:
    """One entry of the relay's ``lobby/matches`` list -> LanMatch (None if unusable)."""
    if not isinstance(entry, Mapping):
        return None
    code, game = _token(entry.get("code"), 12), _token(entry.get("game"), 16)
    seats = _small_int(entry.get("seats"))
    players = entry.get("players", [])
    taken = len(players) if isinstance(players, (list, tuple)) else _small_int(players)
    if code is None or game is None or seats is None or taken is None:
        return None
    return LanMatch(code, game, taken, seats)


def encode_txt(relay: str, matches: Iterable[Any], version: int = PROTOCOL_VERSION,
               prefix: str = DEFAULT_PREFIX, limit: int = MAX_TXT_MATCHES) -> dict[str, str]:
    """The TXT record's keys: ``relay``, ``v`` (protocol version), ``n`` (waiting matches in all),
    ``m0``..``m{limit-1}`` ("CODE:game:taken:seats", in the relay's order), and ``p`` (the topic
    prefix) only when it is not the default. ``matches`` are ``lobby/matches`` entries (dicts) or
    ``LanMatch``; unusable entries are left out and not counted."""
    usable = [m if isinstance(m, LanMatch) else _match_from_list_entry(m) for m in matches]
    listed = [m for m in usable if m is not None]
    txt = {"relay": relay[:64], "v": str(version), "n": str(len(listed))}
    if prefix != DEFAULT_PREFIX:
        txt["p"] = prefix[:64]
    for i, m in enumerate(listed[:max(0, limit)]):
        txt[f"m{i}"] = f"{m.code}:{m.game}:{m.taken}:{m.seats}"
    return txt


@dataclass(frozen=True)
class Advert:
    """What a TXT record says (decoded)."""

    relay: str = ""
    version: int | None = None
    waiting: int = 0
    matches: tuple[LanMatch, ...] = ()
    prefix: str = DEFAULT_PREFIX


def _text(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def decode_txt(props: Mapping[Any, Any]) -> Advert:
    """TXT properties (bytes or str keys and values, as zeroconf gives them) -> Advert.

    Untrusted: every malformed value is skipped, never raised."""
    txt: dict[str, str] = {}
    for k, v in props.items():
        key, value = _text(k), _text(v)
        if key is not None and value is not None:
            txt[key] = value
    relay = "".join(c for c in txt.get("relay", "") if c.isprintable())[:64]
    version = int(txt["v"]) if txt.get("v", "").isdigit() and len(txt["v"]) <= 6 else None
    matches: list[LanMatch] = []
    for i in range(MAX_TXT_MATCHES):
        parts = txt.get(f"m{i}", "").split(":")
        if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 for p in parts[2:]):
            continue
        code, game = _token(parts[0], 12), _token(parts[1], 16)
        if code is not None and game is not None:
            matches.append(LanMatch(code, game, int(parts[2]), int(parts[3])))
    waiting = int(txt["n"]) if txt.get("n", "").isdigit() and len(txt["n"]) <= 6 else len(matches)
    prefix = txt.get("p") or DEFAULT_PREFIX
    if not all(c.isprintable() and c not in "+#" for c in prefix):
        prefix = DEFAULT_PREFIX
    return Advert(relay, version, max(waiting, len(matches)), tuple(matches), prefix)


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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def choose_port(host: str, first: int, tries: int = PORT_TRIES) -> int:
    return pick_port(first, lambda p: port_is_free(host, p), tries)


# --------------------------------------------------------------------------------------------
# Interfaces


@dataclass(frozen=True)
class Interface:
    name: str
    addresses: tuple[str, ...]  # IPv4
    up: bool
    multicast: bool
    loopback: bool
    networks: tuple[str, ...] = ()  # the same addresses with their prefix, "10.0.0.2/24"


def _flags(name: str) -> int | None:
    try:
        with open(f"/sys/class/net/{name}/flags", encoding="ascii") as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return None


def list_interfaces() -> list[Interface]:
    """This machine's interfaces with their IPv4 addresses. Flags come from Linux's sysfs; where
    there is none, an interface with an address counts as up and multicast-capable unless it is
    a loopback address."""
    import ifaddr  # zeroconf's own dependency

    found: list[Interface] = []
    for adapter in ifaddr.get_adapters():
        v4 = tuple(str(ip.ip) for ip in adapter.ips if ip.is_IPv4)
        nets = tuple(f"{ip.ip}/{ip.network_prefix}" for ip in adapter.ips if ip.is_IPv4)
        flags = _flags(adapter.name)
        if flags is None:
            loop = any(ipaddress.ip_address(a).is_loopback for a in v4)
            found.append(Interface(adapter.name, v4, True, not loop, loop, nets))
        else:
            found.append(Interface(adapter.name, v4, bool(flags & IFF_UP), bool(flags & IFF_MULTICAST),
                                   bool(flags & IFF_LOOPBACK), nets))
    return found


def mdns_addresses(chosen: Sequence[str] | None = None) -> list[str]:
    """IPv4 addresses for zeroconf: those of the interfaces named (by name or address) in
    ``chosen``, or of every interface that is up, multicast-capable and not loopback.
    NoMulticast (with the reason) if that leaves nothing usable."""
    ifs = list_interfaces()
    if chosen:
        out: list[str] = []
        for want in chosen:
            match = [i for i in ifs if i.name == want or want in i.addresses]
            if not match:
                raise LanError(f"no network interface is named or has the address {want!r}")
            i = match[0]
            if not (i.up and i.multicast) or i.loopback or not i.addresses:
                why = "is down" if not i.up else "is loopback" if i.loopback else \
                    "has no IPv4 address" if not i.addresses else "has multicast turned off"
                raise NoMulticast(f"interface {i.name} {why}: multicast DNS cannot use it")
            out.extend([want] if want in i.addresses else list(i.addresses))
        return list(dict.fromkeys(out))
    usable = [a for i in ifs if i.up and i.multicast and not i.loopback for a in i.addresses]
    if not usable:
        raise NoMulticast("no network interface with multicast is up (only loopback or none): "
                          "cannot use the local network")
    return list(dict.fromkeys(usable))


def _zeroconf_error(exc: OSError) -> NoMulticast:
    return NoMulticast(f"multicast DNS is not available here: {exc.strerror or exc}")


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


def parse_match_list(payload: bytes | bytearray) -> list[dict[str, Any]] | None:
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
                 prefix: str = DEFAULT_PREFIX) -> None:
        self.port = port
        self.relay_id = relay_id
        self.prefix = prefix
        self.interfaces = mdns_addresses(interfaces)  # NoMulticast before anything starts
        self.addresses = list(addresses) if addresses else list(self.interfaces)
        self.host_name = _label((host_name or socket.gethostname()).split(".")[0], 63)
        self.name = instance_name(relay_id, host_name)
        self.txt = encode_txt(relay_id, [], prefix=prefix)
        self._zc: Any = None
        self._info: Any = None
        self._pending: dict[str, str] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def service_name(self) -> str:
        """The registered name (zeroconf may have added " (2)" after a clash)."""
        return str(self._info.name) if self._info is not None else f"{self.name}.{SERVICE_TYPE}"

    def _service_info(self, txt: Mapping[str, str], name: str) -> Any:
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
            raise _zeroconf_error(exc) from exc
        except ZeroconfError as exc:  # e.g. not running: the sockets could not be used
            await self.stop()
            raise LanError(f"could not advertise over multicast DNS: {type(exc).__name__} {exc}") from exc
        self._task = asyncio.create_task(self._updater())

    def update(self, matches: Iterable[Any]) -> None:
        """New waiting matches: the TXT record follows within ``UPDATE_INTERVAL_S``."""
        txt = encode_txt(self.relay_id, matches, prefix=self.prefix)
        if txt != (self._pending or self.txt):
            self._pending = txt
            self._wake.set()

    async def _updater(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            txt, self._pending = self._pending, None
            if txt is None or txt == self.txt or self._zc is None:
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

    def __init__(self, host: str, port: int, on_matches: Callable[[list[dict[str, Any]]], None],
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
                 host_name: str | None = None) -> None:
        topics = topics or Topics()
        # A broker bound to one address is reachable only there: advertise just that one.
        only = [broker_host] if broker_host not in ("0.0.0.0", "", "127.0.0.1", "localhost") else None
        self.advertiser = Advertiser(port, relay_id, addresses=only, interfaces=interfaces, host_name=host_name,
                                     prefix=topics.prefix)
        self.follower = MatchFollower(broker_host, port, self.advertiser.update, topics)

    async def __aenter__(self) -> Advertiser:
        await self.advertiser.start()
        self.follower.start()
        return self.advertiser

    async def __aexit__(self, *exc: Any) -> None:
        await self.follower.stop()
        await self.advertiser.stop()


def lan_urls(port: int, host: str = "0.0.0.0", chosen: Sequence[str] | None = None) -> list[str]:
    """How friends reach a broker on ``host``:``port`` (every LAN address when it listens on all)."""
    if host not in ("0.0.0.0", ""):
        return [f"mqtt://{host}:{port}"]
    try:
        addrs = mdns_addresses(chosen)
    except LanError:
        addrs = [a for i in list_interfaces() if i.up and not i.loopback for a in i.addresses]
    return [f"mqtt://{a}:{port}" for a in addrs]


# --------------------------------------------------------------------------------------------
# Browsing


@dataclass(frozen=True)
class Host:
    name: str  # the DNS-SD instance name, e.g. "desk relay-0"
    address: str  # the first IPv4 address
    port: int
    relay: str
    matches: tuple[LanMatch, ...] = ()
    waiting: int = 0  # waiting matches in all (the TXT lists at most MAX_TXT_MATCHES)
    version: int | None = None
    addresses: tuple[str, ...] = ()
    prefix: str = DEFAULT_PREFIX
    server: str = ""

    @property
    def url(self) -> str:
        return f"mqtt://{self.address}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port, "url": self.url,
                "relay": self.relay, "version": self.version, "addresses": list(self.addresses),
                "waiting": self.waiting, "matches": [m.to_dict() for m in self.matches],
                "prefix": self.prefix}


def reachable_first(addresses: Sequence[str], networks: Sequence[str]) -> list[str]:
    """A host advertises every address it has (LAN, VPN, container bridges): put first those
    inside one of our own networks ("10.0.0.2/24"), which we can reach directly."""
    nets = []
    for n in networks:
        try:
            nets.append(ipaddress.ip_interface(n).network)
        except ValueError:
            continue

    def local(a: str) -> bool:
        try:
            return any(ipaddress.ip_address(a) in net for net in nets)
        except ValueError:
            return False

    return sorted(addresses, key=lambda a: not local(a))  # stable: the host's order otherwise


def host_from_info(name: str, port: int | None, addresses: Sequence[str], props: Mapping[Any, Any],
                   server: str = "", networks: Sequence[str] = ()) -> Host | None:
    """A resolved service -> Host (None without an address or a port)."""
    if not addresses or not port:
        return None
    addresses = reachable_first(addresses, networks)
    advert = decode_txt(props)
    instance = name[: -len(SERVICE_TYPE) - 1] if name.endswith("." + SERVICE_TYPE) else name
    return Host(instance, addresses[0], port, advert.relay, advert.matches, advert.waiting, advert.version,
                tuple(addresses), advert.prefix, server)


class LanBrowser:
    """Watches the LAN for blink hosts in zeroconf's own thread; ``hosts()`` at any time (the
    window polls it; ``browse`` waits a while and asks once)."""

    def __init__(self, interfaces: Sequence[str] | None = None) -> None:
        self.interfaces = mdns_addresses(interfaces)
        self.networks = [n for i in list_interfaces() for n in i.networks
                         if n.split("/")[0] in self.interfaces]
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self._zc: Any = None
        self._browser: Any = None

    def start(self) -> LanBrowser:
        from zeroconf import IPVersion, ServiceBrowser, Zeroconf

        try:
            self._zc = Zeroconf(interfaces=self.interfaces, ip_version=IPVersion.V4Only)
            self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])
        except OSError as exc:
            self.close()
            raise _zeroconf_error(exc) from exc
        return self

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        with self._lock:
            if state_change is ServiceStateChange.Removed:
                self._names.discard(name)
            else:
                self._names.add(name)

    def hosts(self, resolve_timeout: float = 1.0) -> list[Host]:
        """The hosts seen so far, resolved (from the cache when the host's answer carried
        everything, as it normally does; otherwise asked for, up to ``resolve_timeout``)."""
        from zeroconf import IPVersion, ServiceInfo

        if self._zc is None:
            return []
        with self._lock:
            names = sorted(self._names)
        found: list[Host] = []
        for name in names:
            info = ServiceInfo(SERVICE_TYPE, name)
            try:
                if not info.load_from_cache(self._zc):
                    info.request(self._zc, int(resolve_timeout * 1000))
            except OSError as exc:
                raise _zeroconf_error(exc) from exc
            host = host_from_info(name, info.port, info.parsed_addresses(IPVersion.V4Only), info.properties or {},
                                  info.server or "", self.networks)
            if host is not None:
                found.append(host)
        return sorted(found, key=lambda h: (h.name.lower(), h.address, h.port))

    def close(self) -> None:
        browser, self._browser = self._browser, None
        zc, self._zc = self._zc, None
        if browser is not None:
            browser.cancel()
        if zc is not None:
            zc.close()

    def __enter__(self) -> LanBrowser:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def browse(timeout: float = 2.0, interfaces: Sequence[str] | None = None) -> list[Host]:
    """Listen for ``timeout`` seconds, then return every blink host found on the LAN.

    NoMulticast if this machine cannot do multicast DNS; LanError for a bad interface."""
    with LanBrowser(interfaces) as browser:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))  # the browsing window itself: answers arrive in zeroconf's thread
        return browser.hosts()


__all__ = ["SERVICE_TYPE", "MAX_TXT_MATCHES", "LanError", "NoMulticast", "NoFreePort", "LanMatch", "Advert",
           "encode_txt", "decode_txt", "pick_port", "port_is_free", "choose_port", "Interface", "list_interfaces",
           "mdns_addresses", "Advertiser", "MatchFollower", "advertise", "lan_urls", "Host", "LanBrowser",
           "browse", "instance_name", "parse_match_list", "host_from_info"]


# --------------------------------------------------------------------------------------------
# `blink serve --lan` (kept here so the command itself only gains a few lines)


def lan_port(host: str, port: int, interfaces: Sequence[str] | None, warn: Callable[[str], None]) -> int:
    """Before the broker starts: check ``--interface`` (LanError if it names nothing usable) and
    take ``port`` or the next free one, saying which."""
    if host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback):
        raise LanError(f"--host {host} is loopback: nobody else could reach it (leave out --host)")
    if interfaces:
        mdns_addresses(interfaces)
    chosen = choose_port(host, port)
    if chosen != port:
        warn(f"port {port} is taken; hosting on {chosen}")
    return chosen


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


class lan_hosting:  # noqa: N801 - used as ``async with lan_hosting(...)``
    """Print how friends join and advertise while the block runs. No multicast is not fatal for a
    host: it is said once and friends can still join by address."""

    def __init__(self, port: int, relay_id: str, host: str, interfaces: Sequence[str] | None,
                 topics: Topics | None, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
        self.port, self.relay_id, self.host, self.interfaces = port, relay_id, host, interfaces
        self.topics, self.say, self.warn = topics, say, warn
        self._adv: advertise | None = None

    async def __aenter__(self) -> lan_hosting:
        urls = lan_urls(self.port, self.host, self.interfaces)
        where = ", ".join(u.removeprefix("mqtt://").rsplit(":", 1)[0] for u in urls) or "no LAN address found"
        self.say(f"LAN host: this machine is {where}; listening on {self.host}:{self.port}")
        for url in urls:
            self.say(f"  friends join with:  blink play --server {url}   (or blink bot --server {url} ...)")
        try:
            adv = advertise(self.port, self.relay_id, self.host, self.interfaces, self.topics)
            service = await adv.__aenter__()
        except LanError as exc:
            self.warn(f"not advertised on the local network: {exc}; friends can still join by address")
            return self
        self._adv = adv
        self.say(f"advertised as \"{service.service_name.removesuffix('.' + SERVICE_TYPE)}\" ({SERVICE_TYPE}) "
                 f"on {', '.join(service.interfaces)}: `blink lan` lists it")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._adv is not None:
            await self._adv.__aexit__(None, None, None)


def table(hosts: Sequence[Host]) -> str:
    """``blink lan``'s readable listing, with how to join the first open match."""
    lines = [f"{'HOST':28s} {'ADDRESS':21s} {'RELAY':12s} OPEN MATCHES (code game players/seats)"]
    for h in hosts:
        games = ", ".join(f"{m.code} {m.game} {m.taken}/{m.seats}" for m in h.matches) or "none"
        more = f" (+{h.waiting - len(h.matches)} more)" if h.waiting > len(h.matches) else ""
        lines.append(f"{h.name[:28]:28s} {h.address + ':' + str(h.port):21s} {h.relay[:12]:12s} {games}{more}")
    first = next((h for h in hosts if h.matches), hosts[0] if hosts else None)
    if first is not None:
        code = f" --match {first.matches[0].code}" if first.matches else ""
        lines.append(f"join: blink play --server {first.url}{code}")
    return "\n".join(lines)
