"""A player's identity without an account: an Ed25519 key, proven by a signature over the relay's challenge.

How this works
--------------
A player that wants to be rated holds an Ed25519 key of its own (the client keeps it in its data
directory, one per player name). Before it asks for a seat it asks the relay for a challenge
(``Challenge``); the relay answers ``Challenged(nonce)``, the nonce being the relay's wall clock
when it answered. The player then sends its public key, the nonce and its signature over
``challenge_message(client, nonce)`` with the join, create or quick match. The relay takes the key
only when the signature is good (``verify``) and the nonce is no older than ``CHALLENGE_TTL_NS``
(and not from the future by more than that): the message names the sender's client id -- a secret
only its holder can publish under -- so a signature seen once cannot seat anybody else, nor the
same client long after. The nonce needs no memory on the relay's side, so any relay of a cluster
can check a proof whatever relay handed out the challenge.

A key is named to people by its ``fingerprint``: the first hex digits of its SHA-256, enough to
tell two players of the same name apart on a leaderboard.

Everything here is pure: the key comes in as bytes, time as an integer, and no refusal is an
exception (``verify`` says yes or no).
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["CHALLENGE_TTL_NS", "KEY_BYTES", "SIG_BYTES", "challenge_message", "fingerprint", "verify"]

KEY_BYTES = 32  # an Ed25519 public key
SIG_BYTES = 64  # an Ed25519 signature
#: How long a challenge stays good: a join is asked again for at most half a minute, a relay's clock
#: may stand a little apart from another relay's of the same cluster.
CHALLENGE_TTL_NS = 300 * 1_000_000_000
_DOMAIN = b"blink identity v1\x00"


def challenge_message(client: str, nonce: int) -> bytes:
    """What a player signs to prove it holds its key: a label, its client id and the relay's nonce."""
    return _DOMAIN + client.encode("utf-8", "replace") + b"\x00" + nonce.to_bytes(8, "big", signed=True)


def fingerprint(key: bytes) -> str:
    """A key's short name for people: 8 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:8]


def verify(key: bytes, sig: bytes, message: bytes) -> bool:
    """Is ``sig`` the signature of ``message`` by the holder of public ``key``? False for anything
    that is not a key and a signature of the right length, never an exception."""
    if len(key) != KEY_BYTES or len(sig) != SIG_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(sig, message)
    except (InvalidSignature, ValueError):
        return False
    return True
