"""Each player's own permissions on a NATS cluster: the relays answer nats-server's auth callout.

How this works
--------------
A node configured by ``relay/cluster/natsauth.py`` knows one user, ``relay`` (its password, bcrypt-hashed),
and hands every other connection to an *auth callout* (nats-server 2.10 and newer): it publishes an
authorization request -- a JWT naming, among other things, the connection's kind and, for MQTT,
its client id -- on ``$SYS.REQ.USER.AUTH`` and lets the connection in only with an answer signed by
the *issuer* its configuration names, before the ``authorization { timeout }``. Every relay answers
on its lease connection (``relay/cluster/leases.py``: a thread of its own, never held up by the relay's
event loop), in one queue group, so each request is answered once, by whichever relay is up:

- the issuer is an account nkey (Ed25519) **derived from the relay's password** (``issuer_seed``):
  whoever logs in as ``relay`` can sign, and the nodes' configuration holds only the public key,
  so ``blink serve --password-file`` needs nothing more;
- ``decide`` (pure) reads the request: an MQTT connection with a valid client id (``valid_id``) and
  no user name is a player, and may publish only on its own request and action topics and
  subscribe only to its own private topic and the public ones (events, snapshots, match lists,
  relay statuses). Nothing else is needed for QoS 1: nats-server 2.10+ delivers a QoS 1
  subscription through an internal subscription of its own (``$MQTT.sub.<nuid>``), checked
  against the client's topic, not against these permissions. Anything else -- a core-NATS
  connection, a user name, a missing or odd client id -- is refused with a reason, which the node
  logs;
- the answer (``answer``) is an authorization-response JWT for that node (audience: its server id;
  subject: the user nkey the node made for this one connection, so it is good for nothing else)
  wrapping a user JWT with those permissions, both signed by the issuer.

The requests are not checked for a node's signature: only the nodes publish on that subject (nats-server
denies it to every connection of the account but in the callout's own, ``relay``, and players
speak MQTT, which cannot name a ``$SYS`` subject), and a forged request would only get its sender
-- a relay already -- a user that it could have made itself.

With no relay running, no request is answered and every player is refused (at the timeout): players
connect whenever a relay runs. The nkey encoding (base32, CRC-16, prefix bytes) is ``nkeys``, the
NATS project's own Python implementation (what nats-py itself uses for nkey logins), in blink's
``cluster`` extra.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from protocol.topics import valid_id
from relay import RelayError

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg as NatsMsg
    from nats.aio.subscription import Subscription

log = logging.getLogger("blink.relay.callout")

SUBJECT = "$SYS.REQ.USER.AUTH"
QUEUE = "blink-callout"
ACCOUNT = "$G"  # the account players are placed in: the nodes' only one (no accounts block)
_LABEL = b"blink nats auth callout issuer v1"
NKEYS_HINT = "pip install nkeys, part of blink's cluster extra"


class CalloutError(RelayError):
    """The auth callout cannot be set up (one line for a person)."""


class Signer(Protocol):
    """An nkeys key pair, as the callout signs with it (nkeys is untyped)."""

    @property
    def public_key(self) -> bytes: ...

    def sign(self, input: bytes) -> bytes: ...


class _Nkeys(Protocol):
    """What the callout uses of the nkeys module."""

    PREFIX_BYTE_ACCOUNT: int

    def encode_seed(self, src: bytes, prefix: int) -> bytes: ...

    def from_seed(self, seed: bytearray) -> Signer: ...


def _nkeys() -> _Nkeys:
    try:
        import nkeys  # untyped: wrapped here
    except ImportError as exc:
        raise CalloutError(f"per-player permissions on NATS need the nkeys package: {NKEYS_HINT}") from exc
    module: _Nkeys = nkeys  # the module, read through the protocol above
    return module


def issuer_seed(password: str) -> bytes:
    """The issuer's nkey seed (``SA...``), derived from the relay's password (128 random bits)."""
    raw = hmac.new(password.encode(), _LABEL, hashlib.sha256).digest()
    nk = _nkeys()
    return bytes(nk.encode_seed(raw, nk.PREFIX_BYTE_ACCOUNT))


def issuer_public(password: str) -> str:
    """The issuer's public key (``A...``): what the nodes' ``auth_callout { issuer }`` names."""
    return str(_signer(issuer_seed(password)).public_key.decode())


def _signer(seed: bytes) -> Signer:
    return _nkeys().from_seed(bytearray(seed))


def password_of(servers: str | Sequence[str]) -> str | None:
    """The password of the first NATS URL that carries one (how the relay logs in), else None."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    for url in items:
        url = url.strip()
        parts = urllib.parse.urlsplit(url if "://" in url else f"nats://{url}")
        if parts.password:
            return urllib.parse.unquote(parts.password)
    return None


# ---------------------------------------------------------------------------------------------- the decision

def subject(topic: str) -> str:
    """An MQTT topic (filter) as nats-server's MQTT maps it to a NATS subject: ``/`` separates tokens,
    a ``.`` inside a level becomes ``//``, ``+`` and ``#`` become ``*`` and ``>`` (blink's topics:
    no empty levels, no spaces)."""
    return ".".join(level.replace(".", "//") for level in topic.split("/")).replace("+", "*").replace("#", ">")


@dataclass(frozen=True)
class Grant:
    """A player's permissions (NATS subjects)."""

    client: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


@dataclass(frozen=True)
class Refusal:
    reason: str


def player_grant(client: str, prefix: str) -> Grant:
    """What the player with MQTT client id ``client`` may do: publish its requests and actions, read
    its private topic and the public ones."""
    p = subject(prefix)
    me = subject(client)
    return Grant(client,
                 publish=(f"{p}.lobby.req.{me}", f"{p}.m.*.*.act.{me}"),
                 subscribe=(f"{p}.c.{me}", f"{p}.m.*.*.ev", f"{p}.m.*.*.snap", f"{p}.lobby.matches",
                            f"{p}.lobby.matches.*", f"{p}.relay.*.status"))


def _part(value: object) -> Mapping[str, object]:
    """A part of a request's claims that is an object (absent or empty: an empty one); ValueError
    for anything else (a request that cannot be read is not answered)."""
    if not value:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object was expected, not {type(value).__name__}")
    return value


def decide(request: Mapping[str, object], prefix: str) -> Grant | Refusal:
    """The permissions for the connection an authorization request (its JWT's claims) is about."""
    nats = _part(request.get("nats"))
    info = _part(nats.get("client_info"))
    opts = _part(nats.get("connect_opts"))
    if info.get("type") != "mqtt":
        return Refusal(f"only MQTT players are let in by the callout, not a {info.get('type') or '?'} "
                       f"connection (relays log in as relay)")
    if opts.get("user") or opts.get("pass") or opts.get("auth_token") or opts.get("jwt"):
        return Refusal("players connect without a user name or password")
    client = info.get("mqtt_id")
    if not isinstance(client, str) or not valid_id(client):
        return Refusal(f"MQTT client id {str(client)[:80]!r} is not a player id (1-64 letters, digits, '-', '_', '.')")
    return player_grant(client, prefix)


# ---------------------------------------------------------------------------------------------- JWTs

def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_of(token: bytes | str) -> dict[str, object]:
    """A JWT's claims (its middle part), not checked (see the module doc)."""
    text = token.decode() if isinstance(token, bytes) else token
    parts = text.strip().split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT")
    claims = json.loads(_unb64(parts[1]))
    if not isinstance(claims, dict):
        raise ValueError("JWT claims are not an object")
    return claims


def encode_jwt(claims: Mapping[str, object], signer: Signer) -> str:
    """A NATS JWT (``ed25519-nkey``), its id (``jti``) a hash of the claims without it (nats-server
    reads the id but does not check how it was made)."""
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}, separators=(",", ":")).encode())
    body = dict(claims, jti="")
    digest = hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).digest()
    body["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    signature = signer.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{_b64(bytes(signature))}"


def answer(request: Mapping[str, object], decision: Grant | Refusal, signer: Signer, issuer: str,
           now: int | None = None) -> bytes:
    """The authorization response to ``request``: the user with ``decision``'s permissions, or its refusal."""
    nats = _part(request.get("nats"))
    user = str(nats.get("user_nkey") or "")
    server = str(_part(nats.get("server_id")).get("id") or "")
    at = int(time.time()) if now is None else now
    response: dict[str, object] = {"type": "authorization_response", "version": 2}
    if isinstance(decision, Refusal):
        response["error"] = decision.reason
    else:
        perms = {"pub": {"allow": list(decision.publish)}, "sub": {"allow": list(decision.subscribe)},
                 "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}
        response["jwt"] = encode_jwt({"iat": at, "iss": issuer, "sub": user, "aud": ACCOUNT, "nats": perms}, signer)
    return encode_jwt({"iat": at, "iss": issuer, "sub": user, "aud": server, "nats": response}, signer).encode()


# ---------------------------------------------------------------------------------------------- the service

class Callout:
    """Answers the cluster's auth callout on a nats-py connection (see the module docstring)."""

    def __init__(self, password: str, prefix: str) -> None:
        self.prefix = prefix
        self._signer = _signer(issuer_seed(password))
        self.issuer = str(self._signer.public_key.decode())
        self._sub: Subscription | None = None
        self.granted = 0
        self.refused = 0

    async def start(self, nc: NATS) -> None:
        self._sub = await nc.subscribe(SUBJECT, queue=QUEUE, cb=self._on_request)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 -- the connection is going anyway
                pass

    async def _on_request(self, msg: NatsMsg) -> None:
        try:
            request = claims_of(msg.data)
            decision = decide(request, self.prefix)
            reply = answer(request, decision, self._signer, self.issuer)
        except Exception as exc:  # noqa: BLE001 -- a request we cannot read: no answer, the node refuses
            log.warning("an auth callout request could not be read: %s", exc)
            return
        if isinstance(decision, Refusal):
            self.refused += 1
            log.info("auth callout: refused (%s)", decision.reason)
        else:
            self.granted += 1
        try:
            await msg.respond(reply)
        except Exception as exc:  # noqa: BLE001 -- the client will connect again
            log.info("auth callout: the answer could not be sent: %s", exc)


__all__ = ["ACCOUNT", "Callout", "CalloutError", "Grant", "Refusal", "SUBJECT", "Signer", "answer", "claims_of", "decide",
           "encode_jwt", "issuer_public", "issuer_seed", "password_of", "player_grant", "subject"]
