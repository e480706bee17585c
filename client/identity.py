"""A player's identity on disk: an Ed25519 key per player name, made on first use, no account.

How this works
--------------
A relay rates a player by a key it proved it holds (``protocol/identity.py``). The key is made the
first time a name plays and kept in the data directory, ``DATA/blink/identities/NAME.key`` (``DATA``
is ``$XDG_DATA_HOME`` or ``~/.local/share``), mode 600 in a folder of mode 700: the same name on the
same machine is the same player from one run to the next. ``--identity FILE`` names another file
(made there if it does not exist): a player can carry its key to another machine, or keep several.
A bot has one per difficulty, its median reaction time (``bot-0.35s.key``; the window's ``normal``
is ``bot-1s.key``), so each difficulty climbs its own rating.

The file is one header line and the private key in hex; a file that others may read, or that is not
an identity, is refused in one line (``PlayerKeyError``), never used half.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TypedDict

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocol.identity import challenge_message, fingerprint
from client import ClientError

__all__ = ["Identity", "PlayerKeyError", "Proof", "bot_identity_path", "identities_dir", "identity_path", "load_identity"]

_HEADER = "blink player identity 1"


class PlayerKeyError(ClientError, ValueError):
    """An identity file that cannot be used: one line that names it and says why."""



class Proof(TypedDict, total=False):
    """What a join carries to prove a key: the fields of ``JoinMatch`` and its kin (none: unrated)."""

    key: bytes
    nonce: int
    sig: bytes

class Identity:
    """A player's key: what it proves to a relay with each join."""

    def __init__(self, private: bytes, path: Path | None = None) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(private)
        self.public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.fingerprint = fingerprint(self.public)
        self.path = path

    def prove(self, client_id: str, nonce: int) -> Proof:
        """The proof a join carries: the public key, the relay's nonce and the signature over both
        and this client id (``key``, ``nonce``, ``sig``: the fields of ``JoinMatch`` and its kin)."""
        return Proof(key=self.public, nonce=nonce, sig=self._key.sign(challenge_message(client_id, nonce)))


def identities_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "blink" / "identities"


def _file_name(name: str) -> str:
    """A file name for a player name: the name itself where it is plain, else a plain part and a hash."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40].lstrip(".") or "player"
    if plain == name:
        return f"{plain}.key"
    return f"{plain}-{fingerprint(name.encode())}.key"


def identity_path(name: str) -> Path:
    """Where the key of the player ``name`` is kept."""
    return identities_dir() / _file_name(name)


def bot_identity_path(reaction_s: float) -> Path:
    """Where the key of a bot of a difficulty -- its median reaction time -- is kept (``bot-0.35s.key``)."""
    return identities_dir() / _file_name(f"bot-{reaction_s:g}s")


def load_identity(path: str | Path) -> Identity:
    """The identity in ``path``, made there (mode 600) if there is none yet."""
    path = Path(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise PlayerKeyError(f"cannot write the identity {path}: {exc.strerror or exc}") from exc
    private = os.urandom(32)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{_HEADER}\n{private.hex()}\n")
        f.flush()
        os.fsync(f.fileno())
    return Identity(private, path)


def _read(path: Path) -> Identity:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PlayerKeyError(f"the identity {path} may be read by others (mode {stat.S_IMODE(mode):o}): "
                                f"chmod 600 {path}")
        lines = path.read_text(encoding="ascii").splitlines()
    except OSError as exc:
        raise PlayerKeyError(f"cannot read the identity {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        lines = []
    try:
        if len(lines) < 2 or lines[0] != _HEADER:
            raise ValueError("no header")
        private = bytes.fromhex(lines[1].strip())
        if len(private) != 32:
            raise ValueError("not a key")
        return Identity(private, path)
    except ValueError:
        raise PlayerKeyError(f"{path} is not a blink player identity (move it aside to make a new one: the "
                            "rating it held stays with the old key)") from None
