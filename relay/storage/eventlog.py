"""The relay's event log: one JSON line per ``LogRecord``, appended as steps publish, completed after a crash.

How this works
--------------
The judge says what happened as ``LogRecord``s; the runtime hands each step's records here after the
step's journal write, so the log never holds a line the journal lacks. A relay of several shards
tags each line with its shard (one file serves them all). ``records`` keeps the rows in memory too
(a test reads them without a file).

A crash can cut only the last step's lines: recovery replays the journal, and ``complete_log``
appends the replayed rows after the last line the file holds (and cuts a torn last line), so the
log reads as if nothing happened -- ``blink verify`` checks it against the rules.

A shard taken over from another relay has its past in that relay's log, not in this one: here its
matches would start in the middle, which no reader can check. So a relay whose log has not the last
line of such a shard writes each of its matches' kept public events (``kept``: the judge keeps the
last ``PAST_EVENTS`` of each for late spectators) that the log lacks, before its own: each relay's
log holds whole matches (one longer than that starts where the kept events do).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from relay.model import LogRecord

log = logging.getLogger("blink.relay")

LOG_TAIL_BYTES = 1 << 20  # how much of the event log's end recovery reads to find where it stops
RUNTIME_ONLY = ("relay_started",)  # log lines the judge never writes (the runtime's own)


class EventLog:
    """The event log file of one relay process (``path`` None: none), and its rows in memory when
    ``records`` is a list."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.records: list[dict[str, object]] | None = None  # JSON rows
        self._file: IO[str] | None = None

    def open(self) -> None:
        if self.path is not None and self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cut_torn_line(self.path)  # a relay killed mid-write: its next line must not continue that one
            self._file = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, records: Sequence[LogRecord], shard: str | None = None) -> None:
        rows = log_rows(records, shard)
        if self.records is not None:
            self.records.extend(rows)
        if self._file is not None:
            self._file.writelines(json.dumps(row, default=str) + "\n" for row in rows)
            self._file.flush()
        for row in rows:
            if row.get("kind") == "bad_input":
                log.info("bad input: %s", row)


def cut_torn_line(path: Path) -> None:
    """Cut the log's last line if it has no end (a write cut short by a kill)."""
    try:
        with open(path, "rb+") as f:
            end = f.seek(0, os.SEEK_END)
            if not end:
                return
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return
            start = max(0, end - LOG_TAIL_BYTES)
            f.seek(start)
            tail = f.read()
            f.truncate(start + tail.rfind(b"\n") + 1 if b"\n" in tail else start)
    except FileNotFoundError:
        return


def log_rows(records: Sequence[LogRecord], shard: str | None) -> list[dict[str, object]]:
    """The event log's rows of ``records`` (tagged with ``shard`` for a relay of several)."""
    return [r.record if shard is None else dict(r.record, shard=shard) for r in records]


def complete_log(path: Path | None, records: list[LogRecord], shard: str | None = None,
                 kept: Mapping[str, Sequence[Mapping[str, object]]] | None = None) -> int:
    """Append to the event log the replayed records it lacks; how many. The log holds a prefix of
    ``records``; its last line (of ``shard``, for a relay of several) tells how long. When it does
    not (another relay served the shard since), it gets instead, per match, the event rows of
    ``kept`` after the last seq it holds of that match (see the module header)."""
    if path is None or (not records and not kept):
        return 0
    lines = [json.dumps(row, default=str) for row in log_rows(records, shard)]
    try:
        with open(path, "rb+") as f:
            start = max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES)
            f.seek(start)
            tail = f.read()
            if tail and not tail.endswith(b"\n"):  # a torn last line: cut it
                tail = tail[:tail.rfind(b"\n") + 1]
                f.truncate(start + len(tail))
    except FileNotFoundError:
        tail = b""
    last = None
    tail_lines = tail.decode("utf-8", "replace").splitlines()
    for raw in reversed(tail_lines):
        try:
            row = json.loads(raw)
            kind = row.get("kind")
        except (ValueError, AttributeError):
            continue
        if kind in RUNTIME_ONLY or (kind == "bad_input" and row.get("code") == "too_large") \
                or (shard is not None and row.get("shard") != shard):
            continue  # lines the runtime writes on its own, not replayed; another shard's
        last = raw
        break
    have = next((i + 1 for i in range(len(lines) - 1, -1, -1) if lines[i] == last), 0)
    if shard is not None:
        # The log's lines of this shard need not follow the replay's order (the kept events of a
        # taken-over shard are written match by match), and the replay may hold matches whose start
        # is in another relay's log: each match gets the events that continue it, by seq.
        lines = _continuing(_seen(tail_lines, shard), lines[have:] if last is not None and have else [],
                            [json.dumps(dict(row, shard=shard), default=str)
                             for rows in (kept or {}).values() for row in rows])
        have = 0
    if have < len(lines):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines[have:])
    return len(lines) - have


def _seen(tail: Sequence[str], shard: str) -> dict[str, int]:
    """The last seq of every match of ``shard`` that the log's ``tail`` holds."""
    seen: dict[str, int] = {}
    for raw in tail:
        if f'"shard": "{shard}"' not in raw:
            continue
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("shard") == shard and type(row.get("seq")) is int and "type" in row:
            code = str(row.get("match"))
            seen[code] = max(seen.get(code, 0), row["seq"])
    return seen


def _continuing(seen: dict[str, int], *sources: Sequence[str]) -> list[str]:
    """The lines of ``sources``, in order, that continue the log: a match's event whose seq is the
    next one after the log's (or 1, for a match it lacks), and a record of a match it holds."""
    following = {code: seq + 1 for code, seq in seen.items()}
    out = []
    for source in sources:
        for line in source:
            row = json.loads(line)
            code = row.get("match")
            if "type" in row and type(row.get("seq")) is int:
                if row["seq"] != following.get(str(code), 1):
                    continue  # the log has it already, or lacks what comes before it
                following[str(code)] = row["seq"] + 1
            elif code is not None and str(code) not in following:
                continue  # a record of a match this log does not hold
            out.append(line)
    return out


__all__ = ["EventLog", "complete_log", "log_rows"]
