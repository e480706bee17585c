"""Sealed play: the relay's identity, a key agreed per player, private messages sealed, public ones signed.

How this works
--------------
On a broker that enforces nothing -- a public one, any client reading and writing every topic -- a
topic can neither say who wrote a message nor keep it from other readers. With sealing the bytes
say both, and the broker's rules no longer matter.

Identities. The relay has an Ed25519 signing key and an X25519 key (``RelayIdentity``; its shell
keeps them in its data directory). Its *pin* (``fingerprint``) is a hash of the two public keys;
the host hands it to players in the URL they connect with (``mqtt://HOST:PORT/?pin=PIN``), never
through the broker. A client has an X25519 key of its own, fresh per process, and its client id is
a hash of the public key (``client_id``): a message on a client's topics that does not carry the key
whose hash is the topic's last level is not that client's, whatever the broker let through.

Epochs. Every start of the relay draws an *epoch* (8 bytes of the shell's randomness) and notes
its start time. The relay's status (retained) carries both public keys, the epoch and the start
time, signed: a client takes the keys only when they hash to its pin, and an epoch only from a
status newer than the one it holds (so an old status replayed cannot roll it back). A player's
session keys come from X25519 between its key and the relay's, through HKDF salted with the epoch,
one key each way; a message sealed under an earlier start is refused by the relay, so nothing
captured before a restart can be replayed after it, when the relay's memory of what it saw is gone.

Envelopes. Every sealed payload starts with 0xC1, a byte msgpack never uses, so it is never taken for
a message or a bundle, and an unsealed one is never taken for sealed:

- ``C1 'S' epoch body sig``: a public message (events, snapshot, match list), signed (Ed25519, one
  signature a bundle: the relay publishes one payload per topic and step);
- ``C1 'K' epoch started sign_pub box_pub body sig``: the relay's status, with the keys;
- ``C1 'C' epoch client_pub counter box tag``: a client's request or play (ChaCha20-Poly1305);
- ``C1 'R' epoch instance counter box tag``: the relay's message to one client.

A signature covers a domain label, the topic and everything before it; a box's associated data is
the topic and its header: no payload moves to another topic, or from one client to another.

Replays. A client numbers its messages (``counter``, from 1, per epoch); the relay keeps a window of
the last ``WINDOW`` numbers per client and drops one it has seen or one older than the window: a play
replayed is dropped before the relay's gate, and counts against nobody's rate. A client's last will
(``Leave(dropped=True)``, sealed when it connects) is numbered apart (``WILL`` bit and the
connection's number) and taken once. The relay's messages to a client are numbered per session
*instance* (a count of the sessions the relay opened this epoch, in the nonce): a session the relay
forgot and opened again never reuses a nonce under its key, and the client drops an older instance.

Everything here is pure: keys, epochs, times and counters come in as bytes and integers, and every
refusal is a ``SealError`` with its ``reason`` (``Reason``), never another exception, whatever the
bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
from dataclasses import dataclass, field
from typing import Literal

from protocol import ProtocolError

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: Why a sealed payload was refused (or could not be made).
Reason = Literal[
    "unsealed",  # a plain message where only sealed ones are taken (no downgrade)
    "cut",  # too short, or not an envelope of this version
    "forged",  # a box that does not open or a signature that does not verify: altered, or not from the key
    "replayed",  # a counter already seen, or older than the window
    "other_epoch",  # sealed under another start of the relay
    "other_sender",  # a client key that is not the one the topic names
    "wrong_pin",  # a relay status whose keys do not hash to the pin
    "stale",  # a relay status older than the one held
    "no_keys",  # nothing to open or seal with yet (no status heard, no session with that client)
    "full",  # the relay holds as many sessions as it may
]

MAGIC = 0xC1
SIGNED, STATUS, FROM_CLIENT, TO_CLIENT = b"S"[0], b"K"[0], b"C"[0], b"R"[0]
KEY_BYTES = 32
SIG_BYTES = 64
TAG_BYTES = 16
EPOCH_BYTES = 8
_SIGN_LABEL = b"blink-seal-1 signed\x00"
_SESSION_LABEL = b"blink-seal-1 session\x00"
_PIN_LABEL = b"blink-seal-1 pin\x00"
_ID_PERSON = b"blink-client-id"

#: Counters a side remembers behind the highest seen (a client's own messages may arrive reordered).
WINDOW = 1024
#: A last will's counter: this bit, and the number of the connection that set it.
WILL = 1 << 63
#: The most a sealed payload adds to its body (a status: 2 + 8 + 8 + 32 + 32 + 64).
OVERHEAD = 146

PIN_CHARS = 26  # 128 bits in base32, lower case, no padding
_PIN = re.compile(r"[a-z2-7]{%d}" % PIN_CHARS)

_HEAD_SIGNED = 2 + EPOCH_BYTES
_HEAD_STATUS = _HEAD_SIGNED + 8 + 2 * KEY_BYTES
_HEAD_FROM = 2 + EPOCH_BYTES + KEY_BYTES + 8
_HEAD_TO = 2 + EPOCH_BYTES + 4 + 8
_U64 = struct.Struct(">Q")
_TO_NONCE = struct.Struct(">IQ")


class SealError(ProtocolError, ValueError):
    """A sealed payload refused, with why (``reason``) in a word and ``detail`` for a person."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason
        self.detail = detail


def is_sealed(data: bytes | bytearray | memoryview) -> bool:
    return len(data) > 0 and data[0] == MAGIC


def fingerprint(sign_pub: bytes, box_pub: bytes) -> str:
    """The relay's pin: 128 bits of a hash of both public keys, base32 (26 characters)."""
    digest = hashlib.sha256(_PIN_LABEL + sign_pub + box_pub).digest()[:16]
    return base64.b32encode(digest).decode("ascii").rstrip("=").lower()


def valid_pin(text: str) -> bool:
    return _PIN.fullmatch(text) is not None


def client_id(public: bytes) -> str:
    """The client id of a client's X25519 public key: ``s`` and 128 bits of its hash, in hex."""
    return "s" + hashlib.blake2b(public, digest_size=16, person=_ID_PERSON).hexdigest()


def _signed_message(topic: str, head_and_body: bytes | memoryview) -> bytes:
    encoded = topic.encode()
    return _SIGN_LABEL + len(encoded).to_bytes(2, "big") + encoded + bytes(head_and_body)


def _session_keys(shared: bytes, epoch: bytes, client_pub: bytes, relay_box_pub: bytes) -> tuple[bytes, bytes]:
    """(client -> relay key, relay -> client key) of one client in one epoch."""
    if shared == bytes(KEY_BYTES):
        raise SealError("forged", "a key of low order")
    okm = HKDF(algorithm=hashes.SHA256(), length=2 * KEY_BYTES, salt=epoch,
               info=_SESSION_LABEL + client_pub + relay_box_pub).derive(shared)
    return okm[:KEY_BYTES], okm[KEY_BYTES:]


class Window:
    """The counters seen of one sender: the highest, and which of the ``WINDOW`` below it."""

    __slots__ = ("high", "seen")

    def __init__(self) -> None:
        self.high = 0
        self.seen = 0  # bit i: counter ``high - i`` was taken

    def fresh(self, n: int) -> bool:
        """Would ``n`` be taken (not seen, not older than the window)?"""
        if n > self.high:
            return True
        back = self.high - n
        return back < WINDOW and not (self.seen >> back) & 1

    def take(self, n: int) -> None:
        if n > self.high:
            shift = n - self.high
            self.seen = ((self.seen << shift) | 1) & ((1 << WINDOW) - 1) if shift < WINDOW else 1
            self.high = n
        else:
            self.seen |= 1 << (self.high - n)


# ------------------------------------------------------------------------------------ the relay's side


@dataclass(frozen=True)
class RelayIdentity:
    """The relay's two private keys (32 bytes each), as its shell stores them."""

    sign_private: bytes = field(repr=False)
    box_private: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.sign_private) != KEY_BYTES or len(self.box_private) != KEY_BYTES:
            raise ValueError("a relay identity is two 32-byte keys")

    @property
    def sign_public(self) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.sign_private).public_key().public_bytes_raw()

    @property
    def box_public(self) -> bytes:
        return X25519PrivateKey.from_private_bytes(self.box_private).public_key().public_bytes_raw()

    @property
    def pin(self) -> str:
        return fingerprint(self.sign_public, self.box_public)


class _RelaySession:
    __slots__ = ("public", "inbound", "outbound", "window", "will", "instance", "sent", "last_ns")

    def __init__(self, public: bytes, inbound: ChaCha20Poly1305, outbound: ChaCha20Poly1305, instance: int,
                 now_ns: int) -> None:
        self.public = public
        self.inbound = inbound
        self.outbound = outbound
        self.window = Window()
        self.will = 0  # the highest will's connection number taken
        self.instance = instance
        self.sent = 0
        self.last_ns = now_ns


#: Sessions the relay holds at most, and how long one must be unheard from before it may be forgotten:
#: longer than the longest grace a seat can wait (600 s), so a player whose session is forgotten is
#: gone from every match, and what it sent before can do nothing when replayed.
MAX_SESSIONS = 100_000
SESSION_IDLE_NS = 900 * 1_000_000_000


class RelaySeal:
    """The relay's end for one start (``epoch``, ``started_ns``): opens what clients send, seals what
    it says to one client, signs what it says to all. ``open`` and ``seal`` raise ``SealError``."""

    def __init__(self, identity: RelayIdentity, epoch: bytes, started_ns: int, max_sessions: int = MAX_SESSIONS,
                 idle_ns: int = SESSION_IDLE_NS) -> None:
        if len(epoch) != EPOCH_BYTES:
            raise ValueError(f"an epoch is {EPOCH_BYTES} bytes")
        self.identity = identity
        self.epoch = epoch
        self.started_ns = started_ns
        self._signer = Ed25519PrivateKey.from_private_bytes(identity.sign_private)
        self._box = X25519PrivateKey.from_private_bytes(identity.box_private)
        self.sign_public = self._signer.public_key().public_bytes_raw()
        self.box_public = self._box.public_key().public_bytes_raw()
        self.pin = fingerprint(self.sign_public, self.box_public)
        self.max_sessions = max_sessions
        self.idle_ns = idle_ns
        self.sessions: dict[str, _RelaySession] = {}
        self._instances = 0
        self._signed_head = bytes((MAGIC, SIGNED)) + epoch
        self._status_head = (bytes((MAGIC, STATUS)) + epoch + _U64.pack(started_ns) + self.sign_public
                             + self.box_public)

    # -- in

    def open(self, topic: str, data: bytes, now_ns: int) -> bytes:
        """The body of a client's sealed request or play on ``topic`` (whose last level is the client
        id), or ``SealError``. A replay is refused here, before anything counts it."""
        if len(data) < _HEAD_FROM + TAG_BYTES or data[0] != MAGIC or data[1] != FROM_CLIENT:
            if not data or data[0] != MAGIC:
                raise SealError("unsealed", "a plain message where only sealed ones are taken")
            raise SealError("cut", f"{len(data)} bytes: not a client's sealed message")
        if data[2:10] != self.epoch:
            raise SealError("other_epoch", "sealed for another start of the relay")
        public = data[10:42]
        client = topic.rpartition("/")[2]
        session = self.sessions.get(client)
        fresh = session is None or session.public != public
        if fresh:
            if client_id(public) != client:
                raise SealError("other_sender", f"the key is not {client[:40]!r}'s")
            session = self._session(public, now_ns)  # kept only once a box opens with it
        assert session is not None
        counter = _U64.unpack_from(data, 42)[0]
        will = counter & WILL
        if will:
            if counter ^ WILL <= session.will:
                raise SealError("replayed", f"last will {counter ^ WILL} already taken")
        elif counter == 0 or not session.window.fresh(counter):
            raise SealError("replayed", f"counter {counter}")
        head = data[:_HEAD_FROM]
        try:
            body = session.inbound.decrypt(b"\0\0\0\0" + data[42:50], data[_HEAD_FROM:], head + topic.encode())
        except InvalidTag:
            raise SealError("forged", "the box does not open") from None
        if fresh:
            self._keep(client, session, now_ns)
        if will:
            session.will = counter ^ WILL
        else:
            session.window.take(counter)
        session.last_ns = now_ns
        return body

    def _session(self, public: bytes, now_ns: int) -> _RelaySession:
        try:
            shared = self._box.exchange(X25519PublicKey.from_public_bytes(public))
        except ValueError:
            raise SealError("forged", "not a usable public key") from None
        inbound, outbound = _session_keys(shared, self.epoch, public, self.box_public)
        return _RelaySession(public, ChaCha20Poly1305(inbound), ChaCha20Poly1305(outbound), 0, now_ns)

    def _keep(self, client: str, session: _RelaySession, now_ns: int) -> None:
        if len(self.sessions) >= self.max_sessions:
            self._forget_idle(now_ns)
            if len(self.sessions) >= self.max_sessions:
                raise SealError("full", f"{len(self.sessions)} sessions, none idle")
        self._instances += 1
        session.instance = self._instances
        self.sessions[client] = session

    def _forget_idle(self, now_ns: int) -> None:
        idle = [c for c, s in self.sessions.items() if now_ns - s.last_ns >= self.idle_ns]
        for c in idle:
            del self.sessions[c]

    # -- out

    def seal(self, client: str, topic: str, body: bytes) -> bytes:
        """``body`` for ``client`` alone on ``topic`` (its private topic); ``SealError("no_keys")`` for
        a client that has not spoken to this start of the relay (it asks again once it has the status)."""
        session = self.sessions.get(client)
        if session is None:
            raise SealError("no_keys", f"no session with {client[:40]!r}")
        session.sent += 1
        nonce = _TO_NONCE.pack(session.instance, session.sent)
        head = bytes((MAGIC, TO_CLIENT)) + self.epoch + nonce
        return head + session.outbound.encrypt(nonce, body, head + topic.encode())

    def sign(self, topic: str, body: bytes) -> bytes:
        """``body`` for everyone on ``topic``, signed."""
        signed = self._signed_head + body
        return signed + self._signer.sign(_signed_message(topic, signed))

    def status(self, topic: str, body: bytes) -> bytes:
        """The relay's status ``body`` with its keys, epoch and start, signed."""
        signed = self._status_head + body
        return signed + self._signer.sign(_signed_message(topic, signed))


# ------------------------------------------------------------------------------------ a client's side


@dataclass(frozen=True)
class Pinned:
    """What a client took from the relay's status: its keys, this start's epoch and start time."""

    sign_public: bytes
    box_public: bytes
    epoch: bytes
    started_ns: int


class ClientSeal:
    """A client's end (its X25519 private key, 32 bytes, and the pin of the relay it trusts).

    ``open_status`` takes the relay's keys from its status (checked against the pin) and keys the
    session for the relay's current start; ``seal`` and ``will`` seal what the client sends;
    ``open`` opens what it receives (its private messages, the signed public ones)."""

    def __init__(self, private: bytes, pin: str) -> None:
        if not valid_pin(pin):
            raise ValueError(f"not a pin: {pin!r}")
        self._key = X25519PrivateKey.from_private_bytes(private)
        self.public = self._key.public_key().public_bytes_raw()
        self.client_id = client_id(self.public)
        self.pin = pin
        self.pinned: Pinned | None = None
        self._verify: Ed25519PublicKey | None = None
        self._outbound: ChaCha20Poly1305 | None = None
        self._inbound: ChaCha20Poly1305 | None = None
        self._sent = 0
        self._instance = 0
        self._window = Window()

    @property
    def keyed(self) -> bool:
        return self._outbound is not None

    @property
    def epoch(self) -> bytes | None:
        return self.pinned.epoch if self.pinned is not None else None

    def open_status(self, topic: str, data: bytes) -> tuple[bytes, bool]:
        """The body of a relay status on ``topic`` and whether it started a new epoch (the session
        is keyed afresh: a last will sealed before is void), or ``SealError``."""
        if not is_sealed(data):
            raise SealError("unsealed", "a relay status without keys: this relay does not seal")
        if len(data) < _HEAD_STATUS + SIG_BYTES or data[1] != STATUS:
            raise SealError("cut", f"{len(data)} bytes: not a sealed relay status")
        sign_public, box_public = data[_HEAD_SIGNED + 8:_HEAD_SIGNED + 40], data[_HEAD_SIGNED + 40:_HEAD_STATUS]
        if fingerprint(sign_public, box_public) != self.pin:
            raise SealError("wrong_pin", f"a relay whose pin is {fingerprint(sign_public, box_public)}")
        verify = self._verify or Ed25519PublicKey.from_public_bytes(sign_public)
        signed = data[:-SIG_BYTES]
        try:
            verify.verify(data[-SIG_BYTES:], _signed_message(topic, signed))
        except InvalidSignature:
            raise SealError("forged", "the status's signature does not verify") from None
        epoch = data[2:10]
        started = _U64.unpack_from(data, _HEAD_SIGNED)[0]
        body = data[_HEAD_STATUS:-SIG_BYTES]
        held = self.pinned
        if held is not None and held.epoch == epoch:
            return body, False
        if held is not None and started <= held.started_ns:
            raise SealError("stale", "a status of an earlier start of the relay")
        shared = self._key.exchange(X25519PublicKey.from_public_bytes(box_public))
        outbound, inbound = _session_keys(shared, epoch, self.public, box_public)
        self.pinned = Pinned(sign_public, box_public, epoch, started)
        self._verify = verify
        self._outbound, self._inbound = ChaCha20Poly1305(outbound), ChaCha20Poly1305(inbound)
        self._sent, self._instance, self._window = 0, 0, Window()
        return body, True

    def seal(self, topic: str, body: bytes) -> bytes:
        """A request or play, sealed for the relay (``SealError("no_keys")`` before a status)."""
        self._sent += 1
        return self._box(topic, body, self._sent)

    def will(self, topic: str, body: bytes, connection: int) -> bytes:
        """The last will of connection number ``connection`` (1, 2, ... for this process)."""
        if not 0 < connection < WILL:
            raise ValueError("a connection number is positive")
        return self._box(topic, body, WILL | connection)

    def _box(self, topic: str, body: bytes, counter: int) -> bytes:
        if self._outbound is None or self.pinned is None:
            raise SealError("no_keys", "no relay status heard yet")
        head = bytes((MAGIC, FROM_CLIENT)) + self.pinned.epoch + self.public + _U64.pack(counter)
        return head + self._outbound.encrypt(b"\0\0\0\0" + head[42:50], body, head + topic.encode())

    def open(self, topic: str, data: bytes) -> bytes:
        """The body of a sealed message the relay sent: for this client alone, or signed for all."""
        if not is_sealed(data):
            raise SealError("unsealed", "a plain message where only sealed ones are taken")
        if len(data) < 2:
            raise SealError("cut", "no envelope")
        kind = data[1]
        if kind == TO_CLIENT:
            return self._open_private(topic, data)
        if kind == SIGNED:
            return self._open_signed(topic, data)
        if kind == STATUS:
            return self.open_status(topic, data)[0]
        raise SealError("cut", f"an envelope of kind {kind}")

    def _open_private(self, topic: str, data: bytes) -> bytes:
        if len(data) < _HEAD_TO + TAG_BYTES:
            raise SealError("cut", f"{len(data)} bytes: not a sealed private message")
        pinned, inbound = self.pinned, self._inbound
        if pinned is None or inbound is None:
            raise SealError("no_keys", "no relay status heard yet")
        if data[2:10] != pinned.epoch:
            raise SealError("other_epoch", "sealed for another start of the relay")
        instance, counter = _TO_NONCE.unpack_from(data, 10)
        if instance < self._instance or (instance == self._instance and not self._window.fresh(counter)):
            raise SealError("replayed", f"session {instance}, counter {counter}")
        head = data[:_HEAD_TO]
        try:
            body = inbound.decrypt(data[10:_HEAD_TO], data[_HEAD_TO:], head + topic.encode())
        except InvalidTag:
            raise SealError("forged", "the box does not open") from None
        if instance > self._instance:
            self._instance, self._window = instance, Window()
        self._window.take(counter)
        return body

    def _open_signed(self, topic: str, data: bytes) -> bytes:
        if len(data) < _HEAD_SIGNED + SIG_BYTES:
            raise SealError("cut", f"{len(data)} bytes: not a signed message")
        pinned, verify = self.pinned, self._verify
        if pinned is None or verify is None:
            raise SealError("no_keys", "no relay status heard yet")
        if data[2:10] != pinned.epoch:
            raise SealError("other_epoch", "signed by another start of the relay")
        try:
            verify.verify(data[-SIG_BYTES:], _signed_message(topic, data[:-SIG_BYTES]))
        except InvalidSignature:
            raise SealError("forged", "the signature does not verify") from None
        return data[_HEAD_SIGNED:-SIG_BYTES]


__all__ = ["ClientSeal", "MAGIC", "OVERHEAD", "PIN_CHARS", "Pinned", "Reason", "RelayIdentity", "RelaySeal",
           "SealError", "WILL", "WINDOW", "Window", "client_id", "fingerprint", "is_sealed", "valid_pin"]
