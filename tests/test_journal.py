"""The relay's journal: real SQLite files in tmp_path, real second processes for the lock."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import messages as m
from protocol.codec import encode
from protocol.rules import blink
from protocol.topics import Topics
from relay.core import RelayCore
from relay.storage.journal import (
    SCHEMA_VERSION, Entry, FencedError, Journal, JournalError, Msg, SqliteJournal, Tick, default_data_dir,
    open_journal, replay,
)

T = Topics()
S = 1_000_000_000
ROOT = Path(__file__).resolve().parent.parent


def entries(n: int, start: int = 0) -> list[Entry]:
    return [Msg(f"blink/v1/m/0/ABCDE/act/c{i % 3}", bytes([i % 256]) * (i % 7), start + i) if i % 4
            else Tick(start + i) for i in range(n)]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[SqliteJournal]:
    j = open_journal(tmp_path / "data")
    yield j
    j.close()


# ---------------------------------------------------------------------------------------------- basics

def test_batches_round_trip_with_monotonic_positions_across_a_restart(tmp_path: Path) -> None:
    batches = [entries(1), entries(10, 100), [], entries(3, 200)]
    with open_journal(tmp_path) as j:
        ends = [j.append(b) for b in batches]
        assert ends == [1, 11, 11, 14] and j.last_position() == 14
        assert [e for _, e in j.read()] == [e for b in batches for e in b]
        assert [p for p, _ in j.read()] == list(range(1, 15))
        assert [p for p, _ in j.read(12)] == [12, 13, 14]
        assert list(j.read(15)) == []
    with open_journal(tmp_path) as j:
        assert j.recovery_note is None and j.last_position() == 14
        assert j.append([Tick(7)]) == 15
        assert list(j.read(14)) == [(14, batches[3][-1]), (15, Tick(7))]


def test_reading_spans_many_chunks(journal: SqliteJournal) -> None:
    batch = entries(2500)
    journal.append(batch)
    assert [e for _, e in journal.read()] == batch
    assert [p for p, _ in journal.read(1000)] == list(range(1000, 2501))


def test_one_transaction_per_append_whatever_the_batch_size(tmp_path: Path) -> None:
    j = SqliteJournal(tmp_path / "j.db")
    statements: list[str] = []
    j._conn.set_trace_callback(statements.append)
    for size in (1, 50, 200):
        j.append(entries(size))
    commits = [s for s in statements if s.strip().upper() == "COMMIT"]
    begins = [s for s in statements if s.strip().upper().startswith("BEGIN")]
    assert len(commits) == 3 and len(begins) == 3 and j.commits == 3
    # each commit is really over: another connection sees every entry at once
    other = sqlite3.connect(tmp_path / "j.db")
    assert other.execute("SELECT count(*) FROM entries").fetchone()[0] == 251
    other.close()
    j.close()


def test_the_journal_is_in_wal_mode_with_full_sync_by_default(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "a.db") as j:
        assert j._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert j._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with SqliteJournal(tmp_path / "b.db", durable=False) as j:
        assert j._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_snapshot_and_compaction_keep_positions_growing(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(10))
        with pytest.raises(JournalError, match="no snapshot covers"):
            j.compact(5)
        j.save_snapshot(10, b"state at 10")
        with pytest.raises(JournalError, match="stored position"):
            j.save_snapshot(11, b"future")
        assert j.compact(10) == 10
        assert list(j.read()) == [] and j.latest_snapshot() == (10, b"state at 10")
        assert j.append([Tick(1)]) == 11
    with open_journal(tmp_path) as j:  # an emptied table does not restart positions at 1
        assert j.last_position() == 11 and j.append([Tick(2)]) == 12
        assert [p for p, _ in j.read()] == [11, 12]


def test_a_stale_fence_is_refused_and_changes_nothing(journal: SqliteJournal) -> None:
    assert journal.append(entries(2), fence=3) == 2
    assert journal.append(entries(1), fence=4) == 3  # a newer owner takes over
    with pytest.raises(FencedError, match="fence 3 is older than 4"):
        journal.append(entries(5), fence=3)
    assert journal.last_position() == 3 and len(list(journal.read())) == 3
    assert journal.append([Tick(9)], fence=4) == 4
    assert journal.append([], fence=9) == 4  # an owner can announce its epoch before it has anything to write
    with pytest.raises(FencedError):
        journal.append([Tick(10)], fence=4)
    assert journal.append([Tick(10)]) == 5  # unfenced: the single-process relay, fenced by its directory lock


def test_the_sqlite_journal_satisfies_the_interface(tmp_path: Path) -> None:
    j: Journal = SqliteJournal(tmp_path / "j.db")
    j.append([Tick(1)])
    j.close()
    with pytest.raises(JournalError, match="closed"):
        j.append([Tick(2)])


def test_default_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "blink"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")  # the XDG spec says: ignore it
    assert default_data_dir() == Path.home() / ".local" / "share" / "blink"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir() == Path.home() / ".local" / "share" / "blink"


# ---------------------------------------------------------------------------------------------- refusals

def test_a_journal_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(3))
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(JournalError, match="newer version of blink") as err:
        open_journal(tmp_path)
    assert "\n" not in str(err.value)
    # the refusal released the lock and left the journal as it was
    db = sqlite3.connect(tmp_path / "journal.db")
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 3
    db.close()


def test_a_data_directory_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    # Root passes every permission check, so these paths fail for anyone: under a regular file.
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(JournalError, match="cannot create the data directory"):
        open_journal(tmp_path / "afile" / "data")
    with pytest.raises(JournalError, match="not a directory|cannot create"):
        open_journal(tmp_path / "afile")


def test_a_read_only_directory_is_refused() -> None:
    """A mode-555 directory, opened by an unprivileged user (root would write into it anyway).

    That user ('nobody', uid 65534) may not be able to read the checkout or its venv (a clone in a
    home folder of mode 700): the journal module and its package -- standard library only -- are
    copied into the readable folder and run by the base interpreter, and if even that interpreter
    is closed to the user, the test is skipped with the reason."""
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv to drop privileges")
    base = Path(tempfile.mkdtemp(prefix="blink-ro-"))  # not tmp_path: mode 700, closed to 'nobody'
    try:
        base.chmod(0o755)
        (base / "ro").mkdir(mode=0o555)
        src = base / "src"
        (src / "relay" / "storage").mkdir(parents=True)
        for name in ("__init__.py", "storage/__init__.py", "storage/journal.py"):
            shutil.copy(ROOT / "relay" / name, src / "relay" / name)
        for d in (src, src / "relay", src / "relay" / "storage"):
            d.chmod(0o755)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_root else []
        python = getattr(sys, "_base_executable", sys.executable)  # the venv's site-packages are not needed
        can_run = subprocess.run([*drop, python, "-c", "pass"], capture_output=True, text=True, timeout=60)
        if can_run.returncode != 0:
            pytest.skip(f"the unprivileged user cannot run {python}: {can_run.stderr.strip()[-200:]}")
        code = "import sys\nfrom relay.storage.journal import open_journal\nopen_journal(sys.argv[1])"
        done = subprocess.run([*drop, python, "-I", "-c", f"import sys; sys.path.insert(0, {str(src)!r})\n{code}",
                               str(base / "ro")], cwd=src, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "JournalError: the data directory" in done.stderr and "is not writable" in done.stderr
        assert not any((base / "ro").iterdir())
    finally:
        (base / "ro").chmod(0o755)
        shutil.rmtree(base)


HOLDER = """
import sys
import tempfile
from pathlib import Path
from relay.storage.journal import Tick, open_journal
j = open_journal(Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    print(j.append([Tick(i), Tick(i)]), flush=True)
print("ready", flush=True)
sys.stdin.read()
"""


def start_holder(data: Path, batches: int = 0) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data), str(batches)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:  # waits for the holder to say it holds the journal
        if line.strip() == "ready":
            return proc, lines
        lines.append(line.strip())
    proc.kill()
    raise AssertionError(f"the holder exited with {proc.wait()} before it was ready")


def test_a_second_process_is_refused_with_the_holders_pid_until_the_holder_dies(tmp_path: Path) -> None:
    proc, _ = start_holder(tmp_path)
    try:
        with pytest.raises(JournalError, match=f"in use by process {proc.pid}"):
            open_journal(tmp_path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open_journal(tmp_path) as j:  # the kernel freed the dead holder's lock
        assert (tmp_path / "journal.lock").read_text().strip() == str(os.getpid())


def test_a_second_journal_in_the_same_process_is_refused_too(journal: SqliteJournal, tmp_path: Path) -> None:
    with pytest.raises(JournalError, match=f"in use by process {os.getpid()}"):
        open_journal(tmp_path / "data")


def test_every_acknowledged_batch_survives_kill_9(tmp_path: Path) -> None:
    proc, acked = start_holder(tmp_path, batches=40)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert acked[-1] == "80"
    with open_journal(tmp_path) as j:
        assert j.recovery_note is None
        assert j.last_position() == 80
        assert [e for _, e in j.read()] == [Tick(i) for i in range(40) for _ in range(2)]


# ---------------------------------------------------------------------------------------------- damage

def test_a_corrupt_tail_is_set_aside_and_reported_in_one_line(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        for i in range(5):
            j.append(entries(4, 10 * i))
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("UPDATE entries SET payload = x'deadbeef' WHERE pos = 18")  # as a bad sector would
    db.commit()
    db.close()
    with open_journal(tmp_path) as j:
        note = j.recovery_note
        assert note is not None and "\n" not in note
        assert "entry 18 failed its checksum" in note and "kept entries up to 17" in note and "3 later" in note
        assert j.last_position() == 17
        assert [e for _, e in j.read()] == [e for i in range(5) for e in entries(4, 10 * i)][:17]
        assert j.append([Tick(99)]) == 18
    with open_journal(tmp_path) as j:  # recovered once, sound afterwards
        assert j.recovery_note is None and j.last_position() == 18
    db = sqlite3.connect(tmp_path / "journal.db")
    assert [r[0] for r in db.execute("SELECT pos FROM discarded ORDER BY pos")] == [18, 19, 20]
    db.close()


def test_a_missing_entry_ends_the_valid_prefix(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(10))
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("DELETE FROM entries WHERE pos = 6")
    db.commit()
    db.close()
    with open_journal(tmp_path) as j:
        assert j.recovery_note is not None and "entry 6 is missing" in j.recovery_note
        assert j.last_position() == 5


def test_a_torn_wal_drops_only_the_last_unfinished_batch(tmp_path: Path) -> None:
    batches = [entries(20, 100 * i) for i in range(6)]
    live = tmp_path / "live"
    j = open_journal(live)
    for b in batches:
        j.append(b)
    # The files as a crash would leave them (the WAL is not checkpointed while the journal is open),
    # with the last write torn half-way.
    crash = tmp_path / "crash"
    crash.mkdir()
    shutil.copy(live / "journal.db", crash / "journal.db")
    shutil.copy(live / "journal.db-wal", crash / "journal.db-wal")
    j.close()
    wal = crash / "journal.db-wal"
    with open(wal, "r+b") as f:
        f.truncate(wal.stat().st_size - 2000)
    with open_journal(crash) as k:
        got = [e for _, e in k.read()]
        assert got == [e for b in batches[:-1] for e in b]  # a whole batch or nothing
        assert k.append([Tick(1)]) == 101


def test_a_truncated_database_file_keeps_its_readable_prefix(tmp_path: Path) -> None:
    big = [Msg("blink/v1/m/0/ABCDE/act/c1", bytes([i % 256]) * 100, i) for i in range(3000)]
    with open_journal(tmp_path) as j:
        for k in range(0, 3000, 100):
            j.append(big[k:k + 100])
    db = tmp_path / "journal.db"
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0  # checkpointed on close
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size * 2 // 3)
    with open_journal(tmp_path) as j:
        note = j.recovery_note
        assert note is not None and "\n" not in note and "damaged" in note and "journal.db.damaged-1" in note
        kept = [e for _, e in j.read()]
        assert 0 < len(kept) < 3000 and kept == big[:len(kept)]
        assert j.last_position() == len(kept)
        assert j.append([Tick(5)]) == len(kept) + 1
    assert (tmp_path / "journal.db.damaged-1").exists()
    with open_journal(tmp_path) as j:
        assert j.recovery_note is None and j.last_position() == len(kept) + 1


def test_a_corrupt_snapshot_is_not_used(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(5))
        j.save_snapshot(3, b"three")
        j.save_snapshot(5, b"five")
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("UPDATE snapshots SET blob = x'00' WHERE pos = 5")
    db.commit()
    db.close()
    with open_journal(tmp_path) as j:
        assert j.recovery_note is not None and "snapshot" in j.recovery_note
        assert j.latest_snapshot() == (3, b"three")
        assert [p for p, _ in j.read(4)] == [4, 5]


def test_a_snapshot_lives_in_a_file_beside_the_journal_and_leaves_with_compaction(tmp_path: Path) -> None:
    """The blob is not written inside the database (an 8-13 MB write held every append there):
    a file of its own, named by a small row; compaction deletes the files of what it drops."""
    with open_journal(tmp_path) as j:
        j.append(entries(6))
        j.save_snapshot(3, b"three" * 1000)
        j.save_snapshot(5, b"five" * 1000)
        files = sorted(p.name for p in tmp_path.glob("journal.db.snapshot-*"))
        assert files == ["journal.db.snapshot-3", "journal.db.snapshot-5"]
        assert (tmp_path / "journal.db.snapshot-5").read_bytes() == b"five" * 1000
        db = sqlite3.connect(tmp_path / "journal.db")
        assert max(len(b) for (b,) in db.execute("SELECT blob FROM snapshots")) < 100  # only a name
        db.close()
        assert j.latest_snapshot() == (5, b"five" * 1000)
        j.compact(5)
        assert sorted(p.name for p in tmp_path.glob("journal.db.snapshot-*")) == ["journal.db.snapshot-5"]
        j.append(entries(1, 6))
    with open_journal(tmp_path) as j:
        assert j.recovery_note is None
        assert j.latest_snapshot() == (5, b"five" * 1000)
        assert [p for p, _ in j.read(6)] == [6, 7]


def test_a_damaged_or_missing_snapshot_file_is_not_used_and_strays_are_removed(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(7))
        j.save_snapshot(3, b"three")
        j.save_snapshot(5, b"five")
        j.save_snapshot(7, b"seven")
    (tmp_path / "journal.db.snapshot-7").write_bytes(b"sevex")  # a bad disk
    (tmp_path / "journal.db.snapshot-5").unlink()  # lost
    stray = tmp_path / "journal.db.snapshot-9.tmp"  # a crash while one was being written
    stray.write_bytes(b"half")
    with open_journal(tmp_path) as j:
        assert j.recovery_note is not None and "2 snapshot(s) that failed their checksum" in j.recovery_note
        assert j.latest_snapshot() == (3, b"three")
        assert [p for p, _ in j.read(4)] == [4, 5, 6, 7]
    assert not stray.exists()
    assert sorted(p.name for p in tmp_path.glob("journal.db.snapshot-*")) == ["journal.db.snapshot-3"]


def test_a_journal_with_snapshots_inside_is_read_and_migrated(tmp_path: Path) -> None:
    """Schema 2 kept each snapshot in its row: such a journal is read as it is."""
    with open_journal(tmp_path) as j:
        j.append(entries(4))
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("INSERT INTO snapshots VALUES (4, ?, ?)", (b"inline", __import__("zlib").crc32(b"inline")))
    db.execute("UPDATE meta SET value=2 WHERE key='schema'")
    db.commit()
    db.close()
    with open_journal(tmp_path) as j:
        assert j.recovery_note is not None and "schema 2 to" in j.recovery_note
        assert j.latest_snapshot() == (4, b"inline")
        j.append(entries(1, 4))
        j.save_snapshot(5, b"file")
        assert j.latest_snapshot() == (5, b"file")
        j.compact(5)
        assert j.latest_snapshot() == (5, b"file")


# ---------------------------------------------------------------------------------------------- replay

class Recorder:
    """A real RelayCore that also keeps every output, to compare whole runs."""

    def __init__(self, core: RelayCore) -> None:
        self.core = core
        self.outputs: list[str] = []

    def handle(self, topic: str, payload: bytes, now_ns: int) -> Any:
        out = self.core.handle(topic, payload, now_ns)
        self.outputs.extend(repr(o) for o in out)
        return out

    def tick(self, now_ns: int) -> Any:
        out = self.core.tick(now_ns)
        self.outputs.extend(repr(o) for o in out)
        return out


def new_core() -> Recorder:
    return Recorder(RelayCore(T, seed=42))


def restore(blob: bytes) -> Recorder:
    return Recorder(pickle.loads(blob))


def fingerprint(core: RelayCore) -> dict[str, Any]:
    return {code: (mt.seq, mt.status, mt.game_index, list(mt.wins), mt.winner, repr(mt.results), repr(mt.state))
            for code, mt in core.matches.items()} | {"stats": repr(core.stats), "clients": dict(core.client_match)}


def test_replay_after_snapshots_and_compaction_rebuilds_the_same_match(tmp_path: Path) -> None:
    """A whole BLINK match driven through a real core, every input journalled; the core rebuilt
    from the full journal and from a snapshotted, compacted one is the live core."""
    full = SqliteJournal(tmp_path / "full.db", durable=False)
    live = SqliteJournal(tmp_path / "live.db", durable=False)
    core = new_core()
    now = 0

    def step(batch: list[Entry]) -> None:
        for entry in batch:  # the shell journals a turn's inputs, then hands them to the core
            if isinstance(entry, Msg):
                core.handle(entry.topic, entry.payload, entry.now_ns)
            else:
                core.tick(entry.now_ns)
        full.append(batch)
        live.append(batch)

    step([Msg(T.req("a"), encode(m.CreateMatch(name="ann")), now)])
    code = next(iter(core.core.matches))
    step([Msg(T.req("b"), encode(m.JoinMatch(name="bob", match=code)), now)])
    match = core.core.matches[code]
    ids = {"a": 0, "b": 0}
    snapshots = 0
    outputs_at_snapshot = 0
    for turn in range(20_000):
        if match.status == "over":
            break
        now += S // 20
        batch: list[Entry] = [Tick(now)]
        core.tick(now)
        if match.status == "playing":
            for seat, client in enumerate(("a", "b")):
                acts = blink.legal_actions(match.state, seat)
                if acts:
                    ids[client] += 1
                    act = m.Act(id=ids[client], seq=match.seq, action=blink.action_to_wire(acts[0]))
                    msg = Msg(T.act(code, client), encode(act), now)
                    core.handle(msg.topic, msg.payload, msg.now_ns)
                    batch.append(msg)
        full.append(batch)
        live.append(batch)
        if turn % 60 == 59:  # a periodic snapshot bounds replay; compaction drops what it covers
            position = live.last_position()
            live.save_snapshot(position, pickle.dumps(core.core))
            live.compact(position)
            snapshots += 1
            outputs_at_snapshot = len(core.outputs)
    assert match.status == "over" and snapshots >= 2
    assert live.latest_snapshot() is not None
    assert next(live.read())[0] > 1  # compacted: a full replay from it is impossible

    from_full = replay(full, new_core)
    from_live = replay(live, new_core, restore)
    assert fingerprint(from_full.core) == fingerprint(core.core)
    assert fingerprint(from_live.core) == fingerprint(core.core)
    assert from_full.outputs == core.outputs  # every event, view and answer, in order
    assert from_live.outputs == core.outputs[outputs_at_snapshot:]
    with pytest.raises(JournalError, match="needs a restore"):
        replay(live, new_core)
    full.close()
    live.close()


# ---------------------------------------------------------------------------------------------- property

entry_strategy = st.one_of(
    st.builds(Msg, st.text(max_size=40), st.binary(max_size=300), st.integers(-2**63, 2**63 - 1)),
    st.builds(Tick, st.integers(-2**63, 2**63 - 1)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(entry_strategy, max_size=12), max_size=8))
def test_any_batches_read_back_identically(tmp_path: Path, batches: list[list[Entry]]) -> None:
    path = tmp_path / "prop.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    flat = [e for b in batches for e in b]
    with SqliteJournal(path, durable=False) as j:
        ends = [j.append(b) for b in batches]
        assert ends == [sum(len(b) for b in batches[:i + 1]) for i in range(len(batches))]
        assert list(j.read()) == list(enumerate(flat, 1))
    with SqliteJournal(path, durable=False) as j:
        assert j.recovery_note is None
        assert list(j.read()) == list(enumerate(flat, 1))


def test_a_file_damaged_beyond_repair_is_refused_clearly(tmp_path: Path) -> None:
    with open_journal(tmp_path) as j:
        j.append(entries(10))
    with open(tmp_path / "journal.db", "r+b") as f:
        f.write(b"garbage!" * 16)  # the header is gone: SQLite does not know the file any more
    with pytest.raises(JournalError, match="damaged beyond repair.*move it aside") as err:
        open_journal(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(JournalError, match="damaged beyond repair"):  # the same answer, no crash loop
        open_journal(tmp_path)


def test_a_truncated_compacted_journal_keeps_its_snapshot_and_positions(tmp_path: Path) -> None:
    big = [Msg("t", bytes([i % 256]) * 100, i) for i in range(3000)]
    with open_journal(tmp_path) as j:
        for k in range(0, 3000, 100):
            j.append(big[k:k + 100])
        j.save_snapshot(1500, b"state at 1500")
        j.compact(1000)
    db = tmp_path / "journal.db"
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size * 2 // 3)
    with open_journal(tmp_path) as j:
        assert j.recovery_note is not None and "damaged" in j.recovery_note
        assert j.latest_snapshot() == (1500, b"state at 1500")
        kept = list(j.read())
        assert kept[0][0] > 1000 and kept == [(p, big[p - 1]) for p in range(kept[0][0], kept[-1][0] + 1)]
        assert kept[-1][0] >= 1500 and j.last_position() == kept[-1][0]


def test_a_snapshot_at_position_zero_carries_what_a_fresh_core_needs(tmp_path: Path) -> None:
    """The relay's seed and settings must survive a restart too: a snapshot of the fresh core at 0."""
    with open_journal(tmp_path) as j:
        j.save_snapshot(0, pickle.dumps(RelayCore(T, seed=1234)))
        j.append([Msg(T.req("a"), encode(m.CreateMatch(name="ann")), 5)])
    with open_journal(tmp_path) as j:
        core = replay(j, lambda: RelayCore(T, seed=0), pickle.loads)
    assert core.seed == 1234
    assert list(core.matches) == list(replay_fresh_with_seed(1234).matches)


def replay_fresh_with_seed(seed: int) -> RelayCore:
    core = RelayCore(T, seed=seed)
    core.handle(T.req("a"), encode(m.CreateMatch(name="ann")), 5)
    return core


def test_damage_that_appears_while_open_stops_a_read_with_a_clear_error(journal: SqliteJournal) -> None:
    journal.append(entries(10))
    other = sqlite3.connect(journal.path)
    other.execute("UPDATE entries SET now_ns = now_ns + 1 WHERE pos = 4")
    other.commit()
    other.close()
    got = []
    with pytest.raises(JournalError, match="damaged at entry 4"):
        for pos, _ in journal.read():
            got.append(pos)
    assert got == [1, 2, 3]


def test_the_shells_journal_writer_appends_in_order_and_hands_back_errors(tmp_path: Path) -> None:
    """``relay.shard.JournalWriter``: appends asked for without waiting are written in the order
    asked, each answer reaches the loop that asked (a loop per ``asyncio.run`` here), and a journal
    that cannot be written raises in the step that waits for it."""
    import asyncio

    from relay.storage import JournalError, Msg
    from relay.shard import JournalWriter as _JournalWriter

    journal = open_journal(tmp_path / "data")
    writer = _JournalWriter(journal)
    topic = "blink/v1/lobby/req/c1"

    async def burst(start: int) -> None:
        waits = [writer.append([Msg(topic, encode(m.Ping(t0=start + i)), start + i, start + i)]) for i in range(20)]
        await asyncio.gather(*waits)

    asyncio.run(burst(0))
    asyncio.run(burst(100))  # another loop: the same thread, or a new one, answers it
    assert [e.now_ns for _, e in journal.read(1)] == list(range(20)) + list(range(100, 120))
    journal.close()

    async def after_close() -> None:
        await writer.append([Msg(topic, encode(m.Ping(t0=1)), 1, 1)])

    with pytest.raises(JournalError):
        asyncio.run(after_close())
