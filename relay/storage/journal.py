"""The relay's journal: a durable, ordered record of every input of the core, so that a crash loses nothing.

How this works
--------------
The judging core is deterministic: fed the same inputs (``handle(topic, payload, now_ns)`` and
``tick(now_ns)`` calls, in the same order) it produces the same state and the same outputs. So the
journal stores *inputs*, not state: every message and every tick the shell hands to the core is
appended here **before** the outputs of that step are published (a player hears "accepted" only
after the journal holds the action). Recovery is ``replay``: start from the latest snapshot (or a
fresh core), feed every later entry back into the core, discard the outputs, then publish fresh
snapshots and views so that clients resync.

The interface (``Journal``) is small on purpose, so that another backend (NATS JetStream, one
stream per shard) can stand behind it:

- ``append(batch, fence=None) -> position``: one batch is one durable write (group commit: the
  shell appends the inputs of one event-loop turn as one batch, so the cost of a durable write is
  shared by every input of the turn). Positions are per entry, start at 1 and only ever grow,
  also across compaction and restarts. ``fence``: an owner's epoch; a backend refuses an append
  whose fence is older than the newest one it has seen (``FencedError``), so a relay that lost
  its lease cannot write behind its successor's back. ``fence=None`` skips the check: the
  single-process default is fenced by its directory lock instead.
- ``read(from_position) -> (position, entry), ...`` in order, ``from_position`` included.
- ``save_snapshot(position, blob)`` / ``latest_snapshot()``: an opaque blob (the caller's
  serialised core) that stands for every entry up to and including ``position``.
- ``compact(up_to_position)``: drop the entries that a snapshot already covers. Finished matches
  leave the live journal this way: the next snapshot no longer contains them, and compacting up
  to it drops their inputs (their public event log lives on in the ``--log`` file).

The embedded backend, ``SqliteJournal``, is one SQLite file (stdlib ``sqlite3``) in WAL mode:

- Durability: ``synchronous=FULL`` by default, so every commit fsyncs the WAL and an acknowledged
  batch survives a power cut or an OS crash, not only a crash of the relay. ``durable=False``
  selects ``synchronous=NORMAL``: in WAL mode a commit then reaches the OS (it survives ``kill
  -9`` of the relay, the failure that matters most) but is fsynced only at checkpoints, so a
  power cut may lose the last batches (never corrupt the file). ``bench/journal_bench.py``
  measures both.
- Group commit: ``append`` is one ``BEGIN IMMEDIATE … COMMIT``, whatever the batch size.
- Records: one row per entry (``pos``, ``kind``, ``now_ns``, ``topic``, ``payload`` as a BLOB,
  ``wall_ns``) with a CRC-32 over all of them. ``now_ns`` is the core's monotonic time (it orders
  and times everything), ``wall_ns`` the wall clock the shell read with it (it only stamps events
  and log lines): replay needs both to reproduce the same outputs. A row whose ``wall_ns`` is NULL
  (schema 1, whose core had one clock) means ``wall_ns == now_ns`` and keeps its schema-1
  checksum, so opening a schema-1 journal migrates it in place by adding the column (no row is
  rewritten). SQLite's own WAL checksums already drop a torn last transaction
  whole; the per-entry CRC also catches damage SQLite cannot see (a bad disk, a stray writer).
- On open the live entries are verified in order (checksum, and positions without gaps): at the
  first bad one the valid prefix is kept and the rest is set aside (table ``discarded``); if the
  file itself is damaged (SQLite reports it malformed) the readable prefix is copied into a fresh
  file and the damaged one is moved aside. Either way ``recovery_note`` says what happened in one
  line; it is ``None`` when the journal was sound.
- Snapshots: each blob is written to a file of its own beside the journal
  (``journal.db.snapshot-POS``: written, fsynced, renamed into place) *outside* the journal's
  lock, and then a one-row transaction records its position, name and CRC. A snapshot of 1,000
  live matches is 8-13 MB: written inside the database, it held every append (and so every
  player's answer) for tens of milliseconds each time. Compaction deletes the files of the
  snapshots it drops; opening removes files no row names (a crash between the two writes) and
  drops rows whose file is missing or fails its CRC. A schema-2 journal keeps its snapshots in the
  row; they are read as they are.
- A ``meta`` table holds the schema version (a journal written by a newer version is refused with
  a clear ``JournalError``; an older one is migrated), the newest fence and the position compaction
  reached.

``open_journal(data_dir)`` is what ``blink serve --data DIR`` uses: it creates the directory,
checks that it is really writable (by creating a file: root passes every permission check), takes
an exclusive ``fcntl.flock`` on ``DIR/journal.lock`` and writes its pid into it. A second process
is refused with a message naming that pid; the kernel releases the lock when its holder dies, so
a crashed relay never leaves a stale lock behind.

``replay(journal, core_factory, restore)`` rebuilds a core: ``restore(blob)`` of the latest
snapshot (or ``core_factory()`` when there is none), then ``feed`` of every later entry into the
core's ``handle``/``tick`` (duck-typed: anything with those two methods), outputs discarded.

``SqliteJournal`` may be used from any thread, one call at a time (calls are serialised by a
mutex), so a shell can run ``append`` in ``asyncio.to_thread`` if it wants the fsync off its loop.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import sqlite3
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

from relay import RelayError

SCHEMA_VERSION = 3  # 2: entries carry wall_ns beside the monotonic now_ns; 3: snapshots in files of their own
#: A snapshot row whose blob starts with this names the file beside the journal that holds the snapshot.
SNAPSHOT_FILE = b"blink-snapshot-file\x00"
READ_CHUNK = 1024  # rows fetched per query while reading: no statement stays open across a yield

KIND_MSG = 0
KIND_TICK = 1


class JournalError(RelayError):
    """The journal cannot be used as asked; the message is meant for a human, in one line."""


class FencedError(JournalError):
    """An append carried a fence older than one the journal has already seen: a stale owner."""


@dataclass(frozen=True, slots=True)
class Msg:
    """One message handed to ``core.handle(topic, payload, now_ns, wall_ns)``. ``now_ns`` is the
    core's monotonic time; ``wall_ns`` the wall clock (None: the same as ``now_ns``, as in
    schema-1 entries, whose core had one clock)."""

    topic: str
    payload: bytes
    now_ns: int
    wall_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """One ``core.tick(now_ns, wall_ns)`` call (``wall_ns`` as in ``Msg``)."""

    now_ns: int
    wall_ns: int | None = None


Entry = Msg | Tick


class Journal(Protocol):
    """What the relay needs from a journal; ``SqliteJournal`` is the embedded backend."""

    #: One line describing what recovery on open did (a discarded tail), or None if nothing.
    recovery_note: str | None

    def append(self, batch: Sequence[Entry], fence: int | None = None) -> int:
        """Store ``batch`` durably as one write; return the position of its last entry (the
        current last position for an empty batch). Raises ``FencedError`` for a stale fence."""
        ...

    def read(self, from_position: int = 1) -> Iterator[tuple[int, Entry]]:
        """Every stored entry at ``from_position`` or later, in order."""
        ...

    def last_position(self) -> int:
        """The position of the newest entry (0 when nothing was ever appended)."""
        ...

    def save_snapshot(self, position: int, blob: bytes | bytearray) -> None:
        """Record that ``blob`` (any bytes-like: the shell passes the buffer it read a snapshot into)
        stands for every entry up to and including ``position``."""
        ...

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """The newest snapshot as (position, blob), or None."""
        ...

    def compact(self, up_to_position: int) -> int:
        """Drop entries at or before ``up_to_position`` (a snapshot must cover them); return how many."""
        ...

    def close(self) -> None:
        ...


# ---------------------------------------------------------------------------------------------- records

_HEAD = struct.Struct("<qBqI")  # pos, kind, now_ns, len(topic)


_WALL = struct.Struct("<q")


def _crc(pos: int, kind: int, now_ns: int, topic: bytes, payload: bytes, wall_ns: int | None = None) -> int:
    # The position is inside the checksum: a row that is intact but in the wrong place is caught too.
    # Without wall_ns it is schema 1's checksum, so schema-1 rows stay valid after the migration.
    crc = zlib.crc32(payload, zlib.crc32(topic, zlib.crc32(_HEAD.pack(pos, kind, now_ns, len(topic)))))
    return crc if wall_ns is None else zlib.crc32(_WALL.pack(wall_ns), crc)


Row = tuple[int, int, int, str | None, bytes | None, int, int | None]
#: A row as SQLite hands it back: whatever the file holds, checked before it is trusted.
StoredRow = Sequence[object]


def _row(pos: int, entry: Entry) -> Row:
    if isinstance(entry, Msg):
        wall = entry.wall_ns
        topic = entry.topic.encode("utf-8")
        payload = bytes(entry.payload)
        return (pos, KIND_MSG, entry.now_ns, entry.topic, payload,
                _crc(pos, KIND_MSG, entry.now_ns, topic, payload, wall), wall)
    if isinstance(entry, Tick):
        wall = entry.wall_ns
        return pos, KIND_TICK, entry.now_ns, None, None, _crc(pos, KIND_TICK, entry.now_ns, b"", b"", wall), wall
    raise TypeError(f"a journal entry is a Msg or a Tick, not {type(entry).__name__}")


def _entry(row: StoredRow) -> Entry | None:
    """The entry a stored row holds, or None when the row fails its checksum or makes no sense."""
    pos, kind, now_ns, topic, payload, crc, wall = row
    if type(pos) is not int or type(kind) is not int or type(now_ns) is not int or type(crc) is not int:
        return None  # only INTEGERs are packed into the checksum
    try:
        if wall is not None and type(wall) is not int:
            return None
        if kind == KIND_MSG and isinstance(topic, str) and isinstance(payload, bytes):
            if _crc(pos, kind, now_ns, topic.encode("utf-8"), payload, wall) == crc:
                return Msg(topic, payload, now_ns, wall)
        elif kind == KIND_TICK and topic is None and payload is None:
            if _crc(pos, kind, now_ns, b"", b"", wall) == crc:
                return Tick(now_ns, wall)
    except (UnicodeEncodeError, struct.error, TypeError):
        pass
    return None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    pos INTEGER PRIMARY KEY, kind INTEGER NOT NULL, now_ns INTEGER NOT NULL,
    topic TEXT, payload BLOB, crc INTEGER NOT NULL, wall_ns INTEGER);
CREATE TABLE IF NOT EXISTS snapshots (pos INTEGER PRIMARY KEY, blob BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS discarded (
    pos INTEGER, kind INTEGER, now_ns INTEGER, topic TEXT, payload BLOB, crc INTEGER, reason TEXT, wall_ns INTEGER);
"""
_COLUMNS = "pos, kind, now_ns, topic, payload, crc, wall_ns"
#: Schema 1 had no wall_ns: read as NULL (the same as now_ns).
_COLUMNS_V1 = "pos, kind, now_ns, topic, payload, crc, NULL"


# ---------------------------------------------------------------------------------------------- SQLite

class SqliteJournal:
    """The embedded journal: one SQLite file in WAL mode (see the module's header)."""

    def __init__(self, path: str | Path, *, durable: bool = True, lock: DirLock | None = None) -> None:
        self.path = Path(path)
        self.durable = durable
        self.recovery_note: str | None = None
        self.commits = 0  # durable writes made by this object (one per non-empty append)
        self._lock = lock
        self._mutex = threading.Lock()
        self._closed = False
        self._connection: sqlite3.Connection | None = None
        self._notes: list[str] = []  # what recovery on open did, for recovery_note
        try:
            try:
                self._open()
            except sqlite3.DatabaseError as exc:
                primary = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # extended codes carry it in the low byte
                if primary not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                    raise
                # The file itself is damaged (a lost or torn page): copy out what is readable.
                self._notes.clear()  # anything done to the damaged file before is moot now
                note = self._salvage(_why(exc))
                self._open()
                self._notes.insert(0, note)
            if self._notes:
                self.recovery_note = f"journal {self.path}: " + "; ".join(self._notes)
        except JournalError:
            self._abandon()
            raise
        except (sqlite3.Error, OSError) as exc:
            self._abandon()
            raise JournalError(f"cannot open the journal {self.path}: {_why(exc)}") from exc

    # ---- opening

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            raise JournalError(f"the journal {self.path} is closed")
        return self._connection

    def _open(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = self._connect()
        self._init_schema()
        self._last, self._compacted = self._recover()

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are ours (BEGIN IMMEDIATE … COMMIT), one per append.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                raise JournalError(f"the journal {self.path} cannot use WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
            conn.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back after a burst
        except BaseException:
            conn.close()
            raise
        return conn

    def _init_schema(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif int(row[0]) > SCHEMA_VERSION:
                raise JournalError(
                    f"the journal {self.path} was written by a newer version of blink (journal schema "
                    f"{row[0]}, this version reads up to {SCHEMA_VERSION}): upgrade blink, or use another "
                    f"data directory")
            elif int(row[0]) < SCHEMA_VERSION:
                self._migrate(int(row[0]))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _migrate(self, schema: int) -> None:
        """Bring an older journal up to ``SCHEMA_VERSION`` (inside ``_init_schema``'s transaction)."""
        conn = self._conn
        if schema < 2:
            # Schema 2 adds wall_ns; existing rows keep NULL (= now_ns) and their checksums.
            for table in ("entries", "discarded"):
                have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
                if "wall_ns" not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN wall_ns INTEGER")
        conn.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION,))
        self._notes.append(f"migrated from journal schema {schema} to {SCHEMA_VERSION}")

    def _meta(self, key: str, default: int = 0) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if row is None else int(row[0])

    def _recover(self) -> tuple[int, int]:
        """Verify the live entries and snapshots; keep the valid prefix. Returns (last, compacted)."""
        conn = self._conn
        compacted = self._meta("compacted")
        notes = self._notes
        # Snapshots first: one that fails its checksum is dropped; the newest valid one is used.
        rows = conn.execute("SELECT pos, blob, crc FROM snapshots").fetchall()
        bad_snaps = [pos for pos, stored, crc in rows if self._snapshot_blob(stored, crc) is None]
        # A snapshot file no row names (a crash between writing it and recording it, or after a
        # compaction committed and before its files went): nothing stands on it.
        named = {p.name for p in self._snapshot_files(stored for pos, stored, _ in rows if pos not in bad_snaps)}
        for orphan in self.path.parent.glob(f"{glob.escape(self.path.name)}.snapshot-*"):
            if orphan.name not in named:
                orphan.unlink(missing_ok=True)
        if bad_snaps:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM snapshots WHERE pos=?", [(p,) for p in bad_snaps])
            conn.execute("COMMIT")
            notes.append(f"dropped {len(bad_snaps)} snapshot(s) that failed their checksum "
                         f"(at {', '.join(map(str, sorted(bad_snaps)))})")
        newest_snap = conn.execute("SELECT max(pos) FROM snapshots").fetchone()[0]
        if compacted and (newest_snap is None or newest_snap < compacted):
            raise JournalError(
                f"the journal {self.path} was compacted up to {compacted} but no valid snapshot covers "
                f"it: its state cannot be rebuilt; move the data directory aside to start afresh")
        # Replay needs the newest snapshot and the entries after it: those must be sound. Entries a
        # snapshot covers are not read again unless a compaction-less replay asks for them.
        base = max(compacted, newest_snap or 0)
        expected = base + 1
        bad_at: int | None = None
        reason = ""
        # (a damaged file raises sqlite3.DatabaseError here: the caller salvages it)
        for row in conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE pos > ? ORDER BY pos", (base,)):
            if row[0] != expected:
                bad_at, reason = expected, f"entry {expected} is missing (next is {row[0]})"
                break
            if _entry(row) is None:
                bad_at, reason = expected, f"entry {expected} failed its checksum"
                break
            expected += 1
        last = expected - 1
        if bad_at is not None:
            notes.append(self._set_aside(bad_at, reason))
        return last, compacted

    def _set_aside(self, from_pos: int, reason: str) -> str:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"INSERT INTO discarded ({_COLUMNS}, reason) SELECT {_COLUMNS}, ? FROM entries WHERE pos >= ?",
                         (reason, from_pos))
            count, top = conn.execute("SELECT count(*), max(pos) FROM entries WHERE pos >= ?", (from_pos,)).fetchone()
            conn.execute("DELETE FROM entries WHERE pos >= ?", (from_pos,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return (f"{reason}; kept entries up to {from_pos - 1}, set aside {count} later entr"
                f"{'y' if count == 1 else 'ies'} (up to {top}) in table 'discarded'")

    def _salvage(self, why: str) -> str:
        """Copy what is readable of a damaged file into a fresh one and move the damaged one aside.

        Kept: meta, the newest valid snapshot, and the longest run of valid entries after the
        compaction point (or, if that run breaks before the snapshot, after the snapshot)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        old = sqlite3.connect(self.path, isolation_level=None)
        try:
            # writable_schema lets SQLite open a file shorter than its header says (a truncated
            # file); query_only makes sure nothing is written to the damaged file.
            old.execute("PRAGMA writable_schema=ON")
            old.execute("PRAGMA query_only=ON")
            try:
                meta = dict(old.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.DatabaseError as exc:
                detail = why if _why(exc) == why else f"{why}; {_why(exc)}"
                raise JournalError(f"the journal {self.path} is damaged beyond repair ({detail}): "
                                   f"move it aside to start afresh") from exc
            if int(meta.get("schema", 0)) > SCHEMA_VERSION:
                raise JournalError(f"the journal {self.path} is damaged ({why}) and was written by a newer "
                                   f"version of blink: repair it with that version")
            compacted = int(meta.get("compacted", 0))
            try:
                snaps = [(p, b, c) for p, b, c in old.execute("SELECT pos, blob, crc FROM snapshots ORDER BY pos DESC")
                         if self._snapshot_blob(b, c) is not None and p >= compacted][:1]
            except sqlite3.DatabaseError:
                snaps = []
            if compacted and not snaps:
                raise JournalError(f"the journal {self.path} is damaged ({why}) and no snapshot covering its "
                                   f"compacted part is readable: move it aside to start afresh")
            base = snaps[0][0] if snaps else 0
            columns = _COLUMNS if int(meta.get("schema", 0)) >= 2 else _COLUMNS_V1
            rows = _valid_run(old, compacted, columns)
            if compacted + len(rows) < base:
                compacted, rows = base, _valid_run(old, base, columns)  # the snapshot stands for the lost ones
        finally:
            old.close()
        last = compacted + len(rows)
        meta["compacted"] = compacted
        meta["schema"] = SCHEMA_VERSION  # the rows are copied into a fresh file of this schema
        fresh = self.path.with_name(self.path.name + ".rebuild")
        for p in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
            p.unlink(missing_ok=True)
        new = sqlite3.connect(fresh, isolation_level=None)
        try:
            new.execute("PRAGMA journal_mode=WAL")
            new.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    new.execute(statement)
            new.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(meta.items()))
            new.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", snaps)
            new.executemany(f"INSERT INTO entries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            new.execute("COMMIT")
            new.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            new.close()
        n = 1
        while Path(f"{self.path}.damaged-{n}").exists():
            n += 1
        aside = Path(f"{self.path}.damaged-{n}")
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                os.replace(side, Path(f"{aside}{suffix}"))
        os.replace(fresh, self.path)
        _fsync_dir(self.path.parent)
        return f"the file is damaged ({why}); kept entries up to {last}, moved the damaged file to {aside.name}"

    # ---- the interface

    def last_position(self) -> int:
        return self._last

    def append(self, batch: Sequence[Entry], fence: int | None = None) -> int:
        with self._mutex:
            self._check_open()
            if not batch and fence is None:
                return self._last
            rows = [_row(self._last + 1 + i, e) for i, e in enumerate(batch)]
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if fence is not None:
                        newest = conn.execute("SELECT value FROM meta WHERE key='fence'").fetchone()
                        if newest is not None and fence < int(newest[0]):
                            raise FencedError(f"append refused: fence {fence} is older than {newest[0]}, "
                                              f"the journal has a newer owner")
                        if newest is None or fence > int(newest[0]):
                            conn.execute("INSERT OR REPLACE INTO meta VALUES ('fence', ?)", (fence,))
                    conn.executemany(f"INSERT INTO entries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise JournalError(f"cannot append to the journal {self.path}: {_why(exc)}") from exc
            self.commits += 1
            self._last += len(rows)
            return self._last

    def read(self, from_position: int = 1) -> Iterator[tuple[int, Entry]]:
        pos = max(from_position, self._compacted + 1)
        while True:
            with self._mutex:
                self._check_open()
                rows = self._conn.execute(
                    f"SELECT {_COLUMNS} FROM entries WHERE pos >= ? ORDER BY pos LIMIT ?", (pos, READ_CHUNK)).fetchall()
            if not rows:
                return
            for row in rows:
                entry = _entry(row)
                if entry is None or row[0] != pos:
                    raise JournalError(f"the journal {self.path} is damaged at entry {pos}: reopen it to recover")
                yield pos, entry
                pos += 1

    def save_snapshot(self, position: int, blob: bytes | bytearray) -> None:
        with self._mutex:
            self._check_open()
            self._check_snapshot_position(position)
        # The blob goes to a file of its own, written outside the lock: appends go on meanwhile
        # (see the header's Snapshots). Only the small row that names it is a journal write.
        name = self._snapshot_name(position)
        final = self.path.with_name(name)
        tmp = self.path.with_name(name + ".tmp")
        crc = zlib.crc32(blob)
        try:
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                if self.durable:
                    os.fsync(f.fileno())
            os.replace(tmp, final)
            if self.durable:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise JournalError(f"cannot save a snapshot beside the journal {self.path}: {_why(exc)}") from exc
        with self._mutex:
            self._check_open()
            self._check_snapshot_position(position)
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?)",
                                   (position, SNAPSHOT_FILE + name.encode(), crc))
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                final.unlink(missing_ok=True)
                raise JournalError(f"cannot save a snapshot in the journal {self.path}: {_why(exc)}") from exc
            self.commits += 1

    def _check_snapshot_position(self, position: int) -> None:
        if not self._compacted <= position <= self._last:
            raise JournalError(f"a snapshot must stand for a stored position ({self._compacted}..{self._last}), "
                               f"not {position}")

    def _snapshot_name(self, position: int) -> str:
        return f"{self.path.name}.snapshot-{position}"

    def _snapshot_blob(self, stored: object, crc: object) -> bytes | None:
        """A snapshot row's blob -- kept in the row (schema 2) or in the file the row names --
        or None if it is missing or fails its checksum."""
        if not isinstance(stored, bytes):
            return None
        if stored.startswith(SNAPSHOT_FILE):
            name = stored[len(SNAPSHOT_FILE):].decode("utf-8", "replace")
            if "/" in name or not name.startswith(f"{self.path.name}.snapshot-"):
                return None
            try:
                blob = self.path.with_name(name).read_bytes()
            except OSError:
                return None
        else:
            blob = stored
        return blob if zlib.crc32(blob) == crc else None

    def _snapshot_files(self, stored: Iterable[object]) -> list[Path]:
        return [self.path.with_name(b[len(SNAPSHOT_FILE):].decode("utf-8", "replace")) for b in stored
                if isinstance(b, bytes) and b.startswith(SNAPSHOT_FILE)]

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        with self._mutex:
            self._check_open()
            for pos, stored, crc in self._conn.execute("SELECT pos, blob, crc FROM snapshots ORDER BY pos DESC"):
                blob = self._snapshot_blob(stored, crc)
                if blob is not None:
                    return int(pos), blob
            return None

    def compact(self, up_to_position: int) -> int:
        with self._mutex:
            self._check_open()
            if up_to_position <= self._compacted:
                return 0
            if up_to_position > self._last:
                raise JournalError(f"cannot compact up to {up_to_position}: the journal ends at {self._last}")
            covered = self._conn.execute("SELECT max(pos) FROM snapshots").fetchone()[0]
            if covered is None or covered < up_to_position:
                raise JournalError(f"cannot compact up to {up_to_position}: no snapshot covers it "
                                   f"(newest snapshot: {covered})")
            conn = self._conn
            gone = self._snapshot_files(b for (b,) in conn.execute("SELECT blob FROM snapshots WHERE pos < ?",
                                                                    (up_to_position,)))
            try:
                conn.execute("BEGIN IMMEDIATE")
                dropped = conn.execute("DELETE FROM entries WHERE pos <= ?", (up_to_position,)).rowcount
                # A snapshot older than the compaction point stands for entries that are gone.
                conn.execute("DELETE FROM snapshots WHERE pos < ?", (up_to_position,))
                conn.execute("DELETE FROM discarded WHERE pos <= ?", (up_to_position,))
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (up_to_position,))
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise JournalError(f"cannot compact the journal {self.path}: {_why(exc)}") from exc
            self.commits += 1
            self._compacted = up_to_position
            for path in gone:
                path.unlink(missing_ok=True)
            return int(dropped)

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            try:
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
            finally:
                self._release()

    def __enter__(self) -> SqliteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError(f"the journal {self.path} is closed")

    def _abandon(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._closed = True
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


# ---------------------------------------------------------------------------------------------- the data directory

class DirLock:
    """An exclusive ``flock`` on ``DIR/journal.lock`` holding the owner's pid (freed by the kernel on death)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "journal.lock"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise JournalError(f"cannot create the lock file {self.path}: {_why(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"process {holder}" if holder else "another process"
                raise JournalError(f"the data directory {data_dir} is in use by {who} (another relay?): "
                                   f"stop it, or give this one another --data directory") from exc
            raise JournalError(f"cannot lock {self.path}: {_why(exc)}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)  # the pid of a relay that has stopped is no one's business
            except OSError:
                pass
            os.close(fd)  # closing drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def default_data_dir() -> Path:
    """The per-user data directory of ``blink serve``: ``$XDG_DATA_HOME/blink`` or ``~/.local/share/blink``."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"  # XDG: relative is ignored
    return base / "blink"


def open_journal(data_dir: str | Path, *, durable: bool = True) -> SqliteJournal:
    """The journal of a data directory: created if needed, checked writable, locked against a second relay."""
    data_dir = Path(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalError(f"cannot create the data directory {data_dir}: {_why(exc)}") from exc
    if not data_dir.is_dir():
        raise JournalError(f"the data directory {data_dir} is not a directory")
    try:
        # os.access is not enough: root passes it even where writing fails (read-only mounts).
        with tempfile.TemporaryFile(dir=data_dir, prefix=".blink-probe-"):
            pass
    except OSError as exc:
        raise JournalError(f"the data directory {data_dir} is not writable: {_why(exc)}") from exc
    lock = DirLock(data_dir)
    return SqliteJournal(data_dir / "journal.db", durable=durable, lock=lock)


def _valid_run(conn: sqlite3.Connection, after: int, columns: str = _COLUMNS) -> list[StoredRow]:
    """The valid, gap-free entries after position ``after`` of a damaged file, up to the first bad one."""
    rows: list[StoredRow] = []
    try:
        for row in conn.execute(f"SELECT {columns} FROM entries WHERE pos > ? ORDER BY pos", (after,)):
            if row[0] != after + len(rows) + 1 or _entry(row) is None:
                break
            rows.append(row)
    except sqlite3.DatabaseError:
        pass  # the damage: everything before it is kept
    return rows


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# ---------------------------------------------------------------------------------------------- replay

class Replayable(Protocol):
    """The part of the relay core that replay drives (``relay.core.RelayCore`` fits)."""

    def handle(self, topic: str, payload: bytes, now_ns: int, wall_ns: int | None = None) -> object: ...

    def tick(self, now_ns: int, wall_ns: int | None = None) -> object: ...


C = TypeVar("C", bound=Replayable)


def feed(core: Replayable, entries: Iterable[Entry]) -> None:
    """Feed entries into a core in order, discarding its outputs (they were published before the crash)."""
    for entry in entries:
        # wall_ns only when there is one: an entry without it was handled with the one clock.
        if isinstance(entry, Msg):
            if entry.wall_ns is None:
                core.handle(entry.topic, entry.payload, entry.now_ns)
            else:
                core.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns)
        elif entry.wall_ns is None:
            core.tick(entry.now_ns)
        else:
            core.tick(entry.now_ns, entry.wall_ns)


def replay(journal: Journal, core_factory: Callable[[], C], restore: Callable[[bytes], C] | None = None) -> C:
    """Rebuild the core a journal stands for: the latest snapshot (``restore(blob)``) or a fresh core
    (``core_factory()``), then every later entry. Outputs are discarded."""
    snapshot = journal.latest_snapshot()
    if snapshot is None:
        core, start = core_factory(), 1
    else:
        if restore is None:
            raise JournalError(f"the journal has a snapshot at {snapshot[0]}: replaying it needs a restore function")
        core, start = restore(snapshot[1]), snapshot[0] + 1
    feed(core, (entry for _, entry in journal.read(start)))
    return core
