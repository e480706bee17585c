"""Seat tokens kept on disk, so a player can take their seat back after a crash or a lost
connection (``blink play --rejoin``, ``blink bot --rejoin``).

How this works
--------------
When the relay seats a player it sends a secret token in ``MatchJoined``. ``save`` writes it, with
the broker's address, the match code and the player's name, to ``DATA/blink/seats/CODE-SEAT.json``
(``DATA`` is ``$XDG_DATA_HOME`` or ``~/.local/share``), readable by the user only, and copies it to
``last-KIND.json`` (``play`` or ``bot``) -- what a bare ``--rejoin`` reads. ``load`` reads one back
and checks it; a missing or damaged file is a ``SeatFileError`` with a readable message.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from client import ClientError


class SeatFileError(ClientError, ValueError):
    pass


@dataclass(frozen=True)
class SavedSeat:
    server: str
    match: str
    seat: int
    name: str
    token: str


def seats_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "blink" / "seats"


def last_path(kind: str) -> Path:
    return seats_dir() / f"last-{kind}.json"


def save(seat: SavedSeat, kind: str) -> Path:
    """Write the seat's file (and ``last-KIND.json``); returns the seat's own file."""
    folder = seats_dir()
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(seat))
    path = folder / f"{seat.match}-{seat.seat}.json"
    for target in (path, last_path(kind)):
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a secret: the user's only
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    return path


def load(path: str | Path | None, kind: str) -> SavedSeat:
    """The seat saved in ``path`` (None: the last one saved by a ``kind`` run)."""
    where = Path(path) if path else last_path(kind)
    try:
        data = json.loads(where.read_text())
    except FileNotFoundError:
        raise SeatFileError(f"no saved seat at {where} (a seat is saved when a match is joined)") from None
    except (OSError, ValueError) as exc:
        raise SeatFileError(f"cannot read the saved seat {where}: {exc}") from None
    try:
        seat = SavedSeat(str(data["server"]), str(data["match"]), int(data["seat"]), str(data["name"]),
                         str(data["token"]))
    except (KeyError, TypeError, ValueError):
        raise SeatFileError(f"{where} is not a saved seat") from None
    if not seat.match or not seat.token:
        raise SeatFileError(f"{where} is not a saved seat")
    return seat
