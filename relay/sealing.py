"""The relay's side of sealed play (``blink serve --seal``): its identity on disk, and the seal between
the broker and the judge.

How this works
--------------
The identity (``protocol.seal.RelayIdentity``: an Ed25519 and an X25519 private key) lives in the
data directory, ``seal-identity``, mode 600, made at the first sealed start and read at every later
one, so the pin players were given stays true across restarts; with ``--no-journal`` it is fresh for
every start and lives in memory only. A relay refuses an identity file that others may read.

``Sealing`` is one start of the relay (its epoch and start time drawn here: the shell's randomness
and clock). The runtime hands it every incoming payload before anything else sees it
(``open``): what opens goes on, as the client's plain message, to the intake, the judge and the
journal, as on a broker that keeps players apart; what does not -- unsealed, cut, altered, replayed,
sealed for another client or an earlier start -- is dropped there, counted by reason
(``dropped``) and said in one log line per reason and second, so a flood of forgeries costs one
line a second and nobody's rate. ``wire`` is the other way: each payload the relay publishes is
sealed for the one client whose private topic it goes to, or signed for all (the status with the
relay's keys); a private message for a client that has not spoken to this start of the relay (no
session yet) is dropped -- that client asks again once it has the new status.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections import Counter
from pathlib import Path

from protocol.seal import EPOCH_BYTES, OVERHEAD, RelayIdentity, RelaySeal, SealError
from protocol.topics import Topics
from relay import RelayError

log = logging.getLogger("blink.relay")

IDENTITY_FILE = "seal-identity"
_HEADER = "blink relay identity 1"
QUIET_NS = 1_000_000_000  # a reason's drops are said once a second at most

__all__ = ["IDENTITY_FILE", "IdentityError", "OVERHEAD", "Sealing", "fresh_identity", "load_identity"]


class IdentityError(RelayError, RuntimeError):
    """The identity file cannot be used: one line that names it and says why."""


def fresh_identity() -> RelayIdentity:
    return RelayIdentity(os.urandom(32), os.urandom(32))


def load_identity(data_dir: str | Path | None) -> RelayIdentity:
    """The relay's identity from ``data_dir`` (made there, mode 600, the first time); a fresh one in
    memory without a data directory."""
    if data_dir is None:
        return fresh_identity()
    path = Path(data_dir) / IDENTITY_FILE
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise IdentityError(f"cannot write the relay's identity {path}: {exc.strerror or exc}") from exc
    identity = fresh_identity()
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{_HEADER}\nsign {identity.sign_private.hex()}\nbox {identity.box_private.hex()}\n")
        f.flush()
        os.fsync(f.fileno())
    return identity


def _read(path: Path) -> RelayIdentity:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise IdentityError(f"the relay's identity {path} may be read by others (mode {stat.S_IMODE(mode):o}): "
                                f"chmod 600 {path}")
        lines = path.read_text(encoding="ascii").splitlines()
    except OSError as exc:
        raise IdentityError(f"cannot read the relay's identity {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        lines = []
    keys = dict(line.split(" ", 1) for line in lines[1:] if " " in line)
    try:
        if not lines or lines[0] != _HEADER:
            raise ValueError("no header")
        return RelayIdentity(bytes.fromhex(keys["sign"]), bytes.fromhex(keys["box"]))
    except (KeyError, ValueError):
        raise IdentityError(f"{path} is not a relay identity (remove it to make a new one; players then need "
                            "the new URL)") from None


class Sealing:
    """One start of a sealed relay (see the module header)."""

    def __init__(self, identity: RelayIdentity, topics: Topics) -> None:
        self.seal = RelaySeal(identity, os.urandom(EPOCH_BYTES), time.time_ns())
        self.pin = self.seal.pin
        self._private = f"{topics.prefix}/c/"
        self._status = (f"{topics.prefix}/relay/", f"{topics.prefix}/relays/")
        self.dropped: Counter[str] = Counter()  # by reason, incoming and outgoing
        self._said: dict[str, tuple[int, int]] = {}  # reason -> (last line's ns, drops silenced since)

    def open(self, topic: str, payload: bytes, now_ns: int) -> bytes | None:
        """The plain message a client sealed, or None (dropped, counted and said; see the header)."""
        try:
            return self.seal.open(topic, payload, now_ns)
        except SealError as exc:
            self._drop(exc, topic, now_ns)
            return None

    def wire(self, topic: str, payload: bytes) -> bytes | None:
        """A payload as it goes out: sealed for its client, or signed; None if it cannot be sealed."""
        if not payload:
            return payload  # clearing a retained message
        if topic.startswith(self._private):
            try:
                return self.seal.seal(topic[len(self._private):], topic, payload)
            except SealError as exc:
                self._drop(exc, topic, time.monotonic_ns())
                return None
        if topic.startswith(self._status) and topic.endswith("/status"):
            return self.seal.status(topic, payload)
        return self.seal.sign(topic, payload)

    def _drop(self, exc: SealError, topic: str, now_ns: int) -> None:
        self.dropped[exc.reason] += 1
        last = self._said.get(exc.reason)
        if last is not None and now_ns - last[0] < QUIET_NS:
            self._said[exc.reason] = (last[0], last[1] + 1)
            return
        self._said[exc.reason] = (now_ns, 0)
        more = f" ({last[1]} more since the last line)" if last and last[1] else ""
        what = "a message to" if topic.startswith(self._private) and exc.reason == "no_keys" else "a message on"
        log.warning("sealed relay: dropped %s %s: %s%s", what, topic[:160], exc, more)
