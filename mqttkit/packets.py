"""MQTT 3.1.1 packets for a client: packing what it sends, parsing what it reads, many packets a read.

How this works
--------------
Packing: one function per packet a client sends (CONNECT, SUBSCRIBE, PUBLISH, the QoS acks,
PINGREQ, DISCONNECT). ``pack_publish`` appends to a caller's ``bytearray``, so a relay step's
messages become one buffer written with one ``send``.

Parsing: ``Parser.feed(data)`` takes whatever one socket read returned -- part of a packet, many
packets, or the end of one and the start of the next -- and returns every complete packet in it,
in order: ``Message`` for a PUBLISH (topic, payload, QoS, packet id), ``Control`` for the rest
(kind, flags, body). A packet split across reads waits in a buffer until the bytes it announced
are there (the buffer is only joined and parsed again once enough has arrived, so a large packet
arriving in many pieces is not re-parsed at each). Control packets are checked as soon as their
header is read (only the kinds a broker sends to a client, with their fixed flags and exact
sizes), so a bogus length never makes the parser wait for, or buffer, megabytes.

A PUBLISH longer than ``max_packet`` is not buffered: once its topic (and packet id) are read the
parser reports an ``Oversize`` (topic and payload size, so the reader can tell the sender) and
skips the rest of it as it streams in.

Anything that breaks the framing (a remaining length over four bytes, a topic running past its
packet, QoS 3, a packet kind or flags a broker never sends to a client, a control packet of the
wrong size) raises ``PacketError`` -- the only exception ``feed`` raises; it carries the packets
parsed before the bad one. The connection must then be dropped: the stream has lost its framing.
``feed(data, drop)`` counts (``skipped``) and does not return the QoS-0 PUBLISHes whose topic is
exactly ``drop`` (raw bytes): no object is built for a flood the reader would refuse anyway.
A topic that is not UTF-8 does not break the framing: its ``Message`` has ``topic=None`` (it is
still acknowledged, then dropped).

Filtering: a reader that subscribes wider than it listens (a cluster relay hears every shard's
actions and serves a few) sets ``drop_under`` and ``keep_under``: a QoS-0 PUBLISH whose topic bytes
start with ``drop_under`` and with none of ``keep_under`` is skipped where it lies in the read --
no topic decoded, no slice, no ``Message`` -- and counted in ``filtered``. A QoS 1 or 2 PUBLISH is
never filtered (it must be acknowledged). The filter can change between two reads.
"""

from __future__ import annotations

from typing import NamedTuple

from mqttkit import MqttkitError

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = 8, 9, 10, 11, 12, 13, 14

MAX_REMAINING = 268_435_455  # the largest remaining length four bytes can say
PINGREQ_PACKET = b"\xc0\x00"
DISCONNECT_PACKET = b"\xe0\x00"

#: The control packets a broker sends a client: kind -> (fixed-header flags, exact size or -1 for
#: "at least 3" (SUBACK: packet id and one return code or more)).
_CONTROL = {CONNACK: (0, 2), PUBACK: (0, 2), PUBREC: (0, 2), PUBREL: (2, 2), PUBCOMP: (0, 2), SUBACK: (0, -1),
            UNSUBACK: (0, 2), PINGRESP: (0, 0)}
_NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
          8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
          14: "DISCONNECT"}
#: A SUBACK for a few subscriptions is a few bytes; a longer one is not ours.
MAX_SUBACK = 1024


class PacketError(MqttkitError, ValueError):
    """The stream broke MQTT's framing; the connection must be dropped. ``packets``: those parsed
    before the bad one (deliver them first)."""

    def __init__(self, reason: str, packets: list[Packet] | None = None) -> None:
        super().__init__(reason)
        self.packets: list[Packet] = packets if packets is not None else []


class Message(NamedTuple):
    """An incoming PUBLISH. ``topic`` is None when it is not UTF-8 (acknowledge, then drop it)."""
    topic: str | None
    payload: bytes
    qos: int
    pid: int  # 0 at QoS 0
    retain: bool
    dup: bool


class Oversize(NamedTuple):
    """A PUBLISH longer than ``max_packet``: its payload was skipped, not buffered."""
    topic: str | None
    size: int  # the payload's length in bytes
    qos: int
    pid: int


class Control(NamedTuple):
    kind: int
    flags: int
    body: bytes


Packet = Message | Oversize | Control


def packet_name(kind: int) -> str:
    return _NAMES.get(kind, f"reserved type {kind}")


class Parser:
    """Incremental MQTT 3.1.1 parser for a client's incoming stream (see the module header)."""

    __slots__ = ("max_packet", "drop_under", "keep_under", "filtered", "_rest", "_need", "_skip", "skipped")

    def __init__(self, max_packet: int = MAX_REMAINING) -> None:
        self.max_packet = max_packet
        #: QoS-0 PUBLISHes under ``drop_under`` and under none of ``keep_under`` are skipped (header).
        self.drop_under: bytes | None = None
        self.keep_under: tuple[bytes, ...] = ()
        self.filtered = 0  # PUBLISHes skipped by that filter
        self._rest = bytearray()  # the start of a packet not complete yet
        self._need = 0  # how many bytes _rest must hold before parsing is worth trying again
        self._skip = 0  # bytes still to skip of an oversized PUBLISH
        self.skipped = 0  # QoS-0 PUBLISHes on ``feed``'s ``drop`` topic, counted and not returned

    @property
    def buffered(self) -> int:
        return len(self._rest)

    def feed(self, data: bytes, drop: bytes | None = None) -> list[Packet]:
        """Every complete packet in ``data`` (and what came before it), in order -- except QoS-0
        PUBLISHes whose topic is exactly ``drop`` (raw bytes): those are only counted
        (``skipped``), no object is built for them (a flood repeats one topic)."""
        out: list[Packet] = []
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return out
            data = data[self._skip:]
            self._skip = 0
        if self._rest:
            self._rest += data
            if len(self._rest) < self._need:
                return out
            buf = bytes(self._rest)
            self._rest = bytearray()
        else:
            buf = bytes(data)
        n = len(buf)
        i = 0
        max_packet = self.max_packet
        drop_under = self.drop_under
        keep_under = self.keep_under
        append = out.append
        while i < n:
            first = buf[i]
            kind = first >> 4
            j = i + 1
            rl = 0
            shift = 0
            while True:  # the remaining length: 7 bits a byte, least significant first, at most 4
                if j >= n:
                    return self._wait(buf, i, j - i + 1, out)
                b = buf[j]
                j += 1
                rl |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift >= 28:
                    raise PacketError("a remaining length longer than four bytes", out)
            end = j + rl
            if kind == PUBLISH:
                qos = (first >> 1) & 3
                if qos == 3:
                    raise PacketError("a PUBLISH at QoS 3", out)
                head = 4 if qos else 2  # topic length (+ packet id)
                if rl < head:
                    raise PacketError(f"a PUBLISH of {rl} bytes cannot hold its topic", out)
                if j + 2 > n:
                    if rl > max_packet:
                        return self._wait(buf, i, j + 2 - i, out)
                    return self._wait(buf, i, end - i, out)
                tl = (buf[j] << 8) | buf[j + 1]
                if tl + head > rl:
                    raise PacketError(f"a PUBLISH topic of {tl} bytes runs past its packet of {rl}", out)
                ts = j + 2
                te = ts + tl
                ps = te + 2 if qos else te
                if rl > max_packet:
                    if ps > n:
                        return self._wait(buf, i, ps - i, out)
                    pid = ((buf[te] << 8) | buf[te + 1]) if qos else 0
                    if (drop_under is not None and not qos and buf.startswith(drop_under, ts, te)
                            and not buf.startswith(keep_under, ts, te)):
                        self.filtered += 1
                    else:
                        append(Oversize(_topic(buf[ts:te]), end - ps, qos, pid))
                    if end > n:
                        self._skip = end - n
                        return out
                    i = end
                    continue
                if end > n:
                    return self._wait(buf, i, end - i, out)
                if not qos:
                    if drop is not None and buf[ts:te] == drop:
                        self.skipped += 1  # the flood topic the reader refuses
                        i = end
                        continue
                    if drop_under is not None and buf.startswith(drop_under, ts, te) \
                            and not buf.startswith(keep_under, ts, te):
                        self.filtered += 1  # not listened to: skipped where it lies
                        i = end
                        continue
                pid = ((buf[te] << 8) | buf[te + 1]) if qos else 0
                try:
                    topic: str | None = buf[ts:te].decode()
                except UnicodeDecodeError:
                    topic = None
                append(Message(topic, buf[ps:end], qos, pid, bool(first & 1), bool(first & 8)))
            else:
                spec = _CONTROL.get(kind)
                if spec is None:
                    raise PacketError(f"a {packet_name(kind)} packet, which a broker never sends to a client", out)
                flags, size = spec
                if first & 0x0F != flags:
                    raise PacketError(f"a {packet_name(kind)} with flags {first & 0x0F:#x}", out)
                if (rl != size) if size >= 0 else not 3 <= rl <= MAX_SUBACK:
                    raise PacketError(f"a {packet_name(kind)} of {rl} bytes", out)
                if end > n:
                    return self._wait(buf, i, end - i, out)
                append(Control(kind, flags, buf[j:end]))
            i = end
        return out

    def _wait(self, buf: bytes, start: int, need: int, out: list[Packet]) -> list[Packet]:
        """Keep the incomplete packet from ``start``; parse again once ``need`` bytes are there."""
        self._rest = bytearray(buf[start:])
        self._need = need
        return out


def _topic(raw: bytes) -> str | None:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


# --------------------------------------------------------------------------------- packing


def _remaining(buf: bytearray, n: int) -> None:
    if n > MAX_REMAINING:
        raise ValueError("message too large for MQTT")
    while True:  # 7 bits a byte, least significant first
        byte, n = n & 0x7F, n >> 7
        buf.append(byte | 0x80 if n else byte)
        if not n:
            return


def _string(buf: bytearray, raw: bytes) -> None:
    if len(raw) > 0xFFFF:
        raise ValueError("a string over 65,535 bytes")
    buf += len(raw).to_bytes(2, "big")
    buf += raw


def check_topic(topic: str) -> bytes:
    """A topic to publish to, as UTF-8; ValueError if it is not one."""
    t = topic.encode("utf-8")
    if not t or len(t) > 0xFFFF or "+" in topic or "#" in topic or "\0" in topic:
        raise ValueError(f"not a topic to publish to: {topic[:80]!r}")
    return t


def pack_publish(buf: bytearray, topic: str, payload: bytes | bytearray, retain: bool = False, v5: bool = False,
                 qos: int = 0, pid: int = 0) -> None:
    """Append a PUBLISH packet to ``buf`` (MQTT 3.1.1, or 5 with no properties)."""
    t = check_topic(topic)
    remaining = 2 + len(t) + len(payload) + (1 if v5 else 0) + (2 if qos else 0)
    if remaining > MAX_REMAINING:
        raise ValueError("message too large for MQTT")
    buf.append(0x30 | (qos << 1) | (1 if retain else 0))
    _remaining(buf, remaining)
    buf += len(t).to_bytes(2, "big")
    buf += t
    if qos:
        buf += pid.to_bytes(2, "big")
    if v5:
        buf.append(0)  # no properties
    buf += payload


def pack_connect(client_id: str, keepalive: int, username: str | None = None, password: str | None = None,
                 will: tuple[str, bytes, int, bool] | None = None, clean: bool = True) -> bytes:
    """CONNECT (3.1.1). ``will``: (topic, payload, qos, retain)."""
    if not 0 <= keepalive <= 0xFFFF:
        raise ValueError("keepalive must be 0-65535 s")
    if password is not None and username is None:
        raise ValueError("MQTT 3.1.1 has no password without a user name")
    flags = 0x02 if clean else 0
    body = bytearray(b"\x00\x04MQTT\x04")
    if will is not None:
        flags |= 0x04 | (will[2] << 3) | (0x20 if will[3] else 0)
    if username is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body.append(flags)
    body += keepalive.to_bytes(2, "big")
    _string(body, client_id.encode("utf-8"))
    if will is not None:
        _string(body, check_topic(will[0]))
        _string(body, will[1])
    if username is not None:
        _string(body, username.encode("utf-8"))
    if password is not None:
        _string(body, password.encode("utf-8"))
    out = bytearray(b"\x10")
    _remaining(out, len(body))
    return bytes(out + body)


def pack_subscribe(pid: int, subscriptions: list[tuple[str, int]]) -> bytes:
    body = bytearray(pid.to_bytes(2, "big"))
    for topic, qos in subscriptions:
        if not topic or qos not in (0, 1, 2):
            raise ValueError(f"not a subscription: {topic[:80]!r} at QoS {qos}")
        _string(body, topic.encode("utf-8"))
        body.append(qos)
    out = bytearray(b"\x82")
    _remaining(out, len(body))
    return bytes(out + body)


def pack_unsubscribe(pid: int, topics: list[str]) -> bytes:
    body = bytearray(pid.to_bytes(2, "big"))
    for topic in topics:
        _string(body, topic.encode("utf-8"))
    out = bytearray(b"\xa2")
    _remaining(out, len(body))
    return bytes(out + body)


def pack_ack(kind: int, pid: int) -> bytes:
    """PUBACK, PUBREC, PUBREL (flags 2) or PUBCOMP for packet id ``pid``."""
    return bytes(((kind << 4) | (2 if kind == PUBREL else 0), 2)) + pid.to_bytes(2, "big")


__all__ = ["CONNACK", "DISCONNECT_PACKET", "PINGREQ_PACKET", "PUBACK", "PUBCOMP", "PUBLISH", "PUBREC", "PUBREL",
           "PINGRESP", "SUBACK", "UNSUBACK", "Control", "Message", "Oversize", "Packet", "Parser", "PacketError",
           "check_topic", "pack_ack", "pack_connect", "pack_publish", "pack_subscribe", "pack_unsubscribe",
           "packet_name"]
