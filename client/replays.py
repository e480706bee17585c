"""Recorded matches: where they are kept, how one is written as it is played, and the list of them.

How this works
--------------
The window records every match it plays or watches into the data directory's ``replays/``
folder (``$XDG_DATA_HOME/blink/replays`` or ``~/.local/share/blink/replays``, the same data
directory as ``blink serve``'s journal). A file holds one match's public events in the event-log
format of ``blink match --log`` (``client.matchrun.event_line``, one JSON object a line), so
``blink verify`` and ``blink replay`` read it like any other log.

``Recorder`` is the sink: events of any match may be offered to it (the window's recording
connection subscribes before the match exists, so it sees ``match_created`` at seq 1); once the
session knows its match code (``follow``), that match's events are written, in seq order (one that
comes early waits for those before it, up to ``HOLD_FOR_START`` events), each line flushed as it
comes, repeated seqs dropped. Nothing is written for a match that never sent an
event. ``list_replays`` reads the folder for the menu: game, players, date and the result of every
match of the recording (the first and each rematch; a forfeit as a forfeit), finished recordings
first, then those that stop early (a window closed during a rematch: playable up to the last
result; one that stops before any result cannot be verified, so it is not playable), newest first.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from protocol import messages as m
from protocol.events import logged_event
from protocol.match import (MATCH_EVENTS, GameStarted, MatchCreated, MatchOver, PlayerDropped, RematchStarted, SeatLeft,
                            SeatTaken)
from client.results import match_result_line


def replays_dir() -> Path:
    """``$XDG_DATA_HOME/blink/replays`` or ``~/.local/share/blink/replays``: the data directory of
    ``relay.storage.journal.default_data_dir`` (the same rule, written here because the client does not
    import the relay package), with a relative XDG_DATA_HOME ignored as the XDG spec says."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "blink" / "replays"


HOLD_FOR_START = 64  # live events held while a watched match's past events (from seq 1) are awaited


class Recorder:
    """Writes one match's public events to ``folder`` as they arrive (see the module header)."""

    def __init__(self, folder: str | Path, game: str = "") -> None:
        self.folder = Path(folder)
        self.game = game
        self.code: str | None = None
        self.path: Path | None = None
        self.last_seq = 0
        self.written = 0
        self.error: str | None = None
        self._early: dict[str, list[m.Event]] = {}
        self._held: dict[int, m.Event] = {}  # the followed match's events that came before their turn
        self._file: TextIO | None = None

    def follow(self, code: str) -> None:
        """The session's match is ``code``: write its events (those already seen first)."""
        if self.code == code:
            return
        self.close()
        self.code, self.last_seq, self.written, self._held = code, 0, 0, {}
        for ev in sorted(self._early.pop(code, []), key=lambda e: e.seq):
            self.offer(ev)
        self._early.clear()

    def note_game(self, name: str) -> None:
        """The game being recorded, when no ``match_created`` says it (a match watched late: its
        snapshot names the game); used for the file's name."""
        if name and self._file is None:
            self.game = name

    def offer(self, ev: m.Event) -> None:
        if self.code is None or ev.match != self.code:
            if self.code is None:  # not yet known which match is ours: keep a little of each
                early = self._early.setdefault(ev.match, [])
                if len(early) < 512:
                    early.append(ev)
            return
        if ev.seq <= self.last_seq or self.error is not None:
            return
        if ev.seq != self.last_seq + 1:
            # Out of order: a match watched late gets its live events before the re-sent past ones
            # (the session asks the relay for them from seq 1), or an event was lost. Held a while
            # so the file stays in seq order; past HOLD_FOR_START held, the gap is given up on.
            self._held[ev.seq] = ev
            if len(self._held) < HOLD_FOR_START:
                return
            self._flush_held()
            return
        self._write(ev)
        while self.last_seq + 1 in self._held:
            self._write(self._held.pop(self.last_seq + 1))

    def _flush_held(self) -> None:
        held, self._held = self._held, {}
        for seq in sorted(held):
            self._write(held[seq])

    def _write(self, ev: m.Event) -> None:
        if ev.seq <= self.last_seq or self.error is not None:
            return
        created = MATCH_EVENTS.read(ev)
        if isinstance(created, MatchCreated) and self.game == "":
            self.game = created.game_name
        try:
            f = self._open(ev)
            from client.matchrun import event_line

            f.write(json.dumps(event_line(ev)) + "\n")
            f.flush()
        except OSError as exc:  # a full disk or a read-only home: the game goes on unrecorded
            self.error = f"cannot record the match: {exc.strerror or exc}"
            return
        self.last_seq = ev.seq
        self.written += 1

    def _open(self, ev: m.Event) -> TextIO:
        if self._file is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
            created = MATCH_EVENTS.read(ev)
            game = (created.game_name if isinstance(created, MatchCreated) else "") or self.game or "match"
            path = self.folder / f"{stamp}-{game}-{ev.match}.jsonl"
            n = 2
            while path.exists():
                path = self.folder / f"{stamp}-{game}-{ev.match}-{n}.jsonl"
                n += 1
            self.path = path
            self._file = open(path, "a", encoding="utf-8")
        return self._file

    def close(self) -> None:
        if self._held and self.code is not None:
            self._flush_held()  # what came, with its gap
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        self.code = None
        self.path = None


@dataclass(frozen=True)
class ReplayEntry:
    path: Path
    game: str
    players: tuple[str, ...]
    started_ns: int
    result: str
    events: int
    #: the recording ends with the match's result (not during a rematch, nor cut off)
    finished: bool = True
    #: it can be watched: from seq 1, with at least one match to its result (a recording cut
    #: during a rematch plays up to the last result; one that stops before any cannot be verified)
    playable: bool = True

    @property
    def date(self) -> str:
        if not self.started_ns:
            return "?"
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started_ns / 1e9))


def describe_log(path: Path) -> ReplayEntry | None:
    """The list line of one recorded log (None when the file is not one)."""
    from protocol.verify import matches_phrase

    game, started, events, first_seq = "", 0, 0, None
    names: list[str] = []
    rounds: list[dict[str, object]] = []  # each match to its result: the first, then every rematch
    current: dict[str, object] = {"status": "unfinished"}
    left = ""  # who last left or was gone too long: a forfeit names them
    try:
        with open(path, encoding="utf-8") as f:
            for text in f:
                try:
                    d = json.loads(text)
                except ValueError:
                    continue
                if not isinstance(d, dict) or not isinstance(d.get("type"), str):
                    continue
                events += 1
                if first_seq is None:
                    first_seq = d.get("seq")
                match MATCH_EVENTS.read(logged_event(d)):
                    case MatchCreated(game_name=name):
                        game = name
                        started = int(d.get("ts") or 0) if type(d.get("ts")) is int else 0
                    case SeatTaken(name=name):
                        names.append(name)
                    case SeatLeft(player=seat) | PlayerDropped(player=seat):
                        left = names[seat] if 0 <= seat < len(names) else ""
                    case MatchOver(winner=winner, wins=wins, reason=reason):
                        current = {"status": "over", "winner": winner, "wins": list(wins), "reason": reason, "left": left}
                        rounds.append(current)
                    case RematchStarted():
                        current, left = {"status": "unfinished"}, ""
                    case GameStarted(players=players) if players:  # every seat's name, even if seen late
                        names = list(players)
    except (OSError, UnicodeDecodeError):
        return None
    if not events:
        return None
    if not started:
        try:
            started = int(path.stat().st_mtime * 1e9)
        except OSError:
            started = 0
    if not game:  # recorded from the middle: the file's name says the game (``Recorder._open``)
        parts = path.stem.split("-")
        game = parts[2] if len(parts) >= 4 else ""
    finished = current.get("status") == "over"
    playable = bool(rounds) and not (type(first_seq) is int and first_seq > 1)
    lines = [match_result_line(names, r) for r in rounds]
    # Each rematch is a match of its own, as ``blink verify`` counts them.
    result = (f"{matches_phrase(len(lines))}: " + " · ".join(lines)) if len(lines) > 1 else (lines[0] if lines else "")
    if not finished:
        result = f"{result} · then a rematch, unfinished" if result else "unfinished"
    if type(first_seq) is int and first_seq > 1:  # watched from the middle: no seeds of the start
        result += f" (recorded from event {first_seq} on: cannot be replayed)"
    return ReplayEntry(path, game or "?", tuple(names), started, result, events, finished, playable)


def list_replays(folder: str | Path | None = None, limit: int = 200) -> list[ReplayEntry]:
    """The recorded matches in ``folder`` (default: ``replays_dir()``): the finished ones first, then
    those that stop early; newest first in each."""
    base = Path(folder) if folder is not None else replays_dir()
    try:
        files = [p for p in base.iterdir() if p.suffix == ".jsonl" and p.is_file()]
    except OSError:
        return []
    files.sort(key=lambda p: (p.stat().st_mtime if p.exists() else 0, p.name), reverse=True)
    out = [e for e in (describe_log(p) for p in files[:limit]) if e is not None]
    out.sort(key=lambda e: (e.finished, e.started_ns, e.path.name), reverse=True)
    return out
