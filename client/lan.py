"""Finding blink hosts on the LAN: DNS-SD over multicast DNS (the ``zeroconf`` package).

How this works
--------------
A browser (``blink lan``, the menu's "LAN games") listens for the service type of
``mqttkit/lan.py`` and reads each host's records from zeroconf's cache (asking only for what the
host's answer did not carry). A host advertises every address it has; those inside one of this
machine's own networks come first, since they can be reached directly. The host itself is
advertised by ``relay/hosting/lanhost.py``.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from mqttkit import Scheme
from mqttkit.lan import SERVICE_TYPE, LanMatch, decode_txt, list_interfaces, mdns_addresses, zeroconf_error
from protocol.topics import DEFAULT_PREFIX

if TYPE_CHECKING:
    from zeroconf import ServiceBrowser, ServiceStateChange, Zeroconf

__all__ = ["Browser", "Host", "LanBrowser", "browse", "host_from_info", "reachable_first", "table"]


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
    scheme: Scheme = "mqtt"  # "mqtts": the advertised port speaks TLS

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}:{self.port}"

    def to_dict(self) -> dict[str, object]:
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


def host_from_info(name: str, port: int | None, addresses: Sequence[str], props: Mapping[bytes, bytes | None],
                   server: str = "", networks: Sequence[str] = ()) -> Host | None:
    """A resolved service -> Host (None without an address or a port)."""
    if not addresses or not port:
        return None
    addresses = reachable_first(addresses, networks)
    advert = decode_txt(props)
    instance = name[: -len(SERVICE_TYPE) - 1] if name.endswith("." + SERVICE_TYPE) else name
    return Host(instance, addresses[0], port, advert.relay, advert.matches, advert.waiting, advert.version,
                tuple(addresses), advert.prefix, server, advert.scheme)


class Browser(Protocol):
    """What the window's LAN scene asks of a browser (a ``LanBrowser``, or a test's)."""

    def hosts(self, resolve_timeout: float = 1.0) -> list[Host]: ...

    def close(self) -> None: ...


class LanBrowser:
    """Watches the LAN for blink hosts in zeroconf's own thread; ``hosts()`` at any time (the
    window polls it; ``browse`` waits a while and asks once)."""

    def __init__(self, interfaces: Sequence[str] | None = None) -> None:
        self.interfaces = mdns_addresses(interfaces)
        self.networks = [n for i in list_interfaces() for n in i.networks
                         if n.split("/")[0] in self.interfaces]
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self._zc: Zeroconf | None = None
        self._browser: ServiceBrowser | None = None

    def start(self) -> LanBrowser:
        from zeroconf import IPVersion, ServiceBrowser, Zeroconf

        try:
            self._zc = Zeroconf(interfaces=self.interfaces, ip_version=IPVersion.V4Only)
            self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])
        except OSError as exc:
            self.close()
            raise zeroconf_error(exc) from exc
        return self

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
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
                raise zeroconf_error(exc) from exc
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

    def __exit__(self, *exc: object) -> None:
        self.close()


def browse(timeout: float = 2.0, interfaces: Sequence[str] | None = None) -> list[Host]:
    """Listen for ``timeout`` seconds, then return every blink host found on the LAN.

    NoMulticast if this machine cannot do multicast DNS; LanError for a bad interface."""
    with LanBrowser(interfaces) as browser:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))  # the browsing window itself: answers arrive in zeroconf's thread
        return browser.hosts()


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
        prefix = f" --prefix {first.prefix}" if first.prefix != DEFAULT_PREFIX else ""  # else no relay is seen
        lines.append(f"join: blink{prefix} play --server {first.url}{code}")
    return "\n".join(lines)
