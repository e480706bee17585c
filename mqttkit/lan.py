"""What a LAN host and a LAN browser share: the DNS-SD service, its TXT record, the interfaces.

How this works
--------------
A host registers one DNS-SD service of type ``_blink._tcp.local.`` (``relay/hosting/lanhost.py``); a
browser listens for that type (``client/lan.py``). Both speak the TXT record defined here -- relay
id, protocol version, how many matches are waiting, and up to ``MAX_TXT_MATCHES`` of them (code,
game, seats taken, seats) -- and both run multicast DNS on the interfaces chosen here. TXT values
come from the network: decoding skips anything malformed instead of failing. The record's
encoding and decoding are pure functions, tested without a network.

Interfaces: zeroconf is never left to pick "all" interfaces. It gets the IPv4 addresses of
interfaces that are up, have MULTICAST set and are not loopback (or exactly the ones named with
``--interface``); if there are none, ``NoMulticast`` says so.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from mqttkit import MqttkitError, Scheme
from protocol.codec import PROTOCOL_VERSION
from protocol.topics import DEFAULT_PREFIX

SERVICE_TYPE = "_blink._tcp.local."
#: Matches listed in the TXT record; the rest are only counted (``n``). DNS-SD asks for small TXT
#: records (ideally a few hundred bytes): ten entries of about 20 bytes each stay well inside.
MAX_TXT_MATCHES = 10

# Linux interface flags (``/sys/class/net/IF/flags``, as in <net/if.h>).
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_MULTICAST = 0x1000


class LanError(MqttkitError, RuntimeError):
    """A LAN problem the user can understand from its message."""


class NoMulticast(LanError):
    """No interface can send or receive multicast DNS."""


# --------------------------------------------------------------------------------------------
# The TXT record (pure)


@dataclass(frozen=True)
class LanMatch:
    code: str
    game: str
    taken: int
    seats: int

    def to_dict(self) -> dict[str, str | int]:
        return {"code": self.code, "game": self.game, "players": self.taken, "seats": self.seats}


def _token(text: object, limit: int) -> str | None:
    """A code or game name fit for the TXT record: short, letters/digits/-/_ only, else None."""
    if not isinstance(text, str) or not 0 < len(text) <= limit:
        return None
    return text if all(c.isascii() and (c.isalnum() or c in "-_") for c in text) else None


def _small_int(value: object) -> int | None:
    return value if type(value) is int and 0 <= value <= 999 else None


def match_from_list_entry(entry: object) -> LanMatch | None:
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


def encode_txt(relay: str, matches: Iterable[object], version: int = PROTOCOL_VERSION,
               prefix: str = DEFAULT_PREFIX, limit: int = MAX_TXT_MATCHES, scheme: Scheme = "mqtt") -> dict[str, str]:
    """The TXT record's keys: ``relay``, ``v`` (protocol version), ``n`` (waiting matches in all),
    ``m0``..``m{limit-1}`` ("CODE:game:taken:seats", in the relay's order), ``p`` (the topic
    prefix) only when it is not the default, and ``s`` (the URL scheme of the advertised port,
    ``mqtts`` for TLS) only when it is not ``mqtt``. ``matches`` are ``lobby/matches`` entries (dicts) or
    ``LanMatch``; unusable entries are left out and not counted."""
    usable = [m if isinstance(m, LanMatch) else match_from_list_entry(m) for m in matches]
    listed = [m for m in usable if m is not None]
    txt = {"relay": relay[:64], "v": str(version), "n": str(len(listed))}
    if prefix != DEFAULT_PREFIX:
        txt["p"] = prefix[:64]
    if scheme != "mqtt":
        txt["s"] = scheme
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
    scheme: Scheme = "mqtt"  # how to speak to the advertised port


def _text(value: object) -> str | None:
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
    scheme: Scheme = "mqtts" if txt.get("s") == "mqtts" else "mqtt"
    return Advert(relay, version, max(waiting, len(matches)), tuple(matches), prefix, scheme)


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


def zeroconf_error(exc: OSError) -> NoMulticast:
    return NoMulticast(f"multicast DNS is not available here: {exc.strerror or exc}")
