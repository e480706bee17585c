"""One shard a relay serves: its core, its journal and fence, its clock, its snapshots and recovery.

How this works
--------------
Time. The core runs on the monotonic clock plus ``mono_offset``, so deadlines and rate limits never
jump when the wall clock is set; the wall clock is the monotonic one plus an offset measured once
(the tightest of a few paired reads): two clocks read one after the other differ by microseconds
each time, and a timer event stamped that much before the event that armed it is one ``blink
verify`` rightly refuses. A recovered core continues from its last input plus the wall time elapsed
since, never backwards: the monotonic clock restarts with the machine, and a taken-over shard runs
on another one.

Recovery: the latest snapshot (``relay/storage/snapshot.py``) and every later entry replayed, the core
building no output-only message meanwhile; a fresh journal gets the fresh core's snapshot at 0, so
its seed and configuration survive, and the event log's tail is completed (``relay/storage/eventlog.py``).
The collector is off meanwhile (1,000 matches: 6.8 s with it, 1.6 s without) and the recovered
objects frozen out of its way.

Snapshots, every ``snapshot_every_s`` seconds or ``snapshot_every`` entries but no sooner than
``SNAPSHOT_COST_RATIO`` times the last one's CPU time, compact the journal to the previous one (two
stay). Serialising holds the interpreter (0.2-0.3 s at 1,000 matches), so between two steps the
process forks: the child serialises its copy-on-write core at idle priority down a pipe, and a task
saves it while steps go on; without ``fork`` a worker thread does it while the stepper waits.

Appends go through ``JournalWriter``, one long-lived thread a journal fed by a queue, so the loop
keeps receiving and several shards write side by side (``asyncio.to_thread`` cost 2-3x the CPU).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import queue
import signal
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from relay.storage import snapshot as snapshots
from relay.core import LogRecord, RelayCore
from relay.storage import complete_log
from relay.judge import past_event
from relay.storage import Entry, Journal, JournalError, Msg

log = logging.getLogger("blink.relay")
T = TypeVar("T")

SNAPSHOT_EVERY_S = 10.0
#: Replay costs about 0.2 ms of CPU an entry: a restart or takeover replays at most about 0.2 s.
SNAPSHOT_EVERY = 1_000
#: Snapshots never take more than about a tenth of the relay's CPU.
SNAPSHOT_COST_RATIO = 10.0
FORK_SNAPSHOTS = True  # off: in a worker thread while the stepper waits
_CHILD_HEAD = struct.Struct("<Qd")  # a forked child's answer: the snapshot's length and CPU seconds


class ClusterError(JournalError):
    """The cluster cannot be used as configured (unreachable, no JetStream, a conflict); one line."""


class ConfigConflict(ClusterError):
    """A shard's journal was made under another configuration (the shard count), or a shard was
    given to two relays."""


class Shard:
    """One served shard (see the module header). ``io`` runs the journal's blocking calls."""

    def __init__(self, name: str, core: RelayCore, journal: Journal | None, fence: int = 0, *,
                 log_path: Path | None = None, tagged: bool = False, snapshot_every: int = SNAPSHOT_EVERY,
                 snapshot_every_s: float = SNAPSHOT_EVERY_S,
                 io: concurrent.futures.Executor | None = None, wake: Callable[[], None] = lambda: None) -> None:
        self.name = name
        self.core = core
        self.fence = fence
        self.log_path = log_path
        self.tagged = tagged  # its log lines carry ``shard`` (a relay of several shards)
        self.snapshot_every, self.snapshot_every_s = snapshot_every, snapshot_every_s
        self.io = io
        self.wake = wake
        self.mono_offset = 0  # the core's time is ``time.monotonic_ns() + mono_offset``
        self.attach(journal)
        self.snap_pos = 0
        self.snap_at = time.monotonic()
        self.snapshot_s = 0.0  # CPU seconds the last snapshot took to serialise (it spaces them out)
        self.snapping_at = 0  # the journal position of the latest forked snapshot
        self.snap_task: asyncio.Task[None] | None = None  # a snapshot being saved while steps go on
        self.recovered: str | None = None  # what recovery did, in one line (None: nothing to recover)
        self.replayed = 0
        self.served_at = 0.0  # monotonic: when this relay began serving it
        self.answered = False  # has published an answer to a client's message since (said once)

    def attach(self, journal: Journal | None) -> None:
        """Journal from here on in ``journal`` (None: in memory); before it runs or after it stopped."""
        self.journal = journal
        self.writer = JournalWriter(journal) if journal is not None else None

    def resume_clock(self, wmm: int | None = None) -> None:
        """Continue a recovered core's time (see the header). Never backwards."""
        last_mono, last_wall = self.core.last_clock()
        if last_mono == 0 and last_wall == 0:
            return  # a fresh core: nothing to continue
        mono = time.monotonic_ns()
        self.mono_offset = last_mono + max(0, mono + (wall_minus_mono() if wmm is None else wmm) - last_wall) - mono

    def recover(self, check: Callable[[RelayCore], None] | None = None) -> None:
        """Rebuild the core from the journal (see the header); ``check`` may refuse the snapshot's
        core before anything is replayed. Idempotent."""
        journal = self.journal
        if journal is None or self.snap_pos or self.recovered is not None:
            return
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            started = time.monotonic()
            snapshot = journal.latest_snapshot()
            if snapshot is None and journal.last_position() == 0:
                journal.save_snapshot(0, snapshots.dump(self.core))
                self.snap_at = time.monotonic()
                return
            if snapshot is None:
                raise JournalError(f"the journal{self._of()} holds entries but no snapshot to start them from: "
                                   "move the data directory aside to start afresh")
            pos, blob = snapshot
            cpu = time.thread_time()
            core = snapshots.load(blob, f"the journal{self._of()}'s snapshot at {pos}")
            # Writing a snapshot costs about twice reading it: until the first is measured, that spaces it.
            self.snapshot_s = 2 * (time.thread_time() - cpu)
            if check is not None:
                check(core)
            records: list[LogRecord] = []
            core.replaying = True
            try:
                for _, entry in journal.read(pos + 1):
                    out = (core.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns)
                           if isinstance(entry, Msg) else core.tick(entry.now_ns, entry.wall_ns))
                    records.extend(o for o in out if isinstance(o, LogRecord))
                    self.replayed += 1
            finally:
                del core.replaying  # back to the class's False (and out of every later snapshot)
            self.core, self.snap_pos, self.snap_at = core, pos, time.monotonic()
            written = complete_log(self.log_path, records, self.name if self.tagged else None,
                                   kept_rows(core) if self.tagged and self.log_path is not None else None)
            live = sum(1 for x in core.matches.values() if x.status != "over")
            self.recovered = (f"recovered {len(core.matches)} match(es) ({live} running) from the journal{self._of()}: "
                              f"snapshot at {pos} + {self.replayed} entries replayed in "
                              f"{time.monotonic() - started:.2f} s"
                              + (f"; {written} event-log line(s) the crash had cut were written" if written else "")
                              # (a tampered ratings row: said here, and the relay goes on without it)
                              + "".join(f"; in the snapshot at {pos}, {line}" for line in core.refused_on_load()))
        finally:
            if was_enabled:
                gc.enable()
        if self.recovered is not None:
            gc.freeze()

    def _of(self) -> str:
        return f" of shard {self.name}" if self.tagged else ""

    # ------------------------------------------------------------------ snapshots

    async def maybe_snapshot(self) -> None:
        """Between two steps: start a snapshot if one is due (see the header)."""
        if self.journal is None or self.snap_task is not None:
            return  # (one being written: the next step asks again after it)
        pos = self.journal.last_position()
        if pos - self.snap_pos < self.snapshot_every and (
                time.monotonic() - self.snap_at < self.snapshot_every_s or pos <= self.snap_pos):
            return
        if FORK_SNAPSHOTS and hasattr(os, "fork"):
            self.fork_snapshot()
        else:
            await self.snapshot()

    def _spaced(self) -> bool:
        return time.monotonic() - self.snap_at < self.snapshot_s * SNAPSHOT_COST_RATIO

    async def snapshot(self, force: bool = False) -> None:
        """Save the core in a worker thread (the stepper waits: the core holds still) and compact.
        Skipped (unless ``force``) while the last one is too recent for its cost."""
        journal = self.journal
        if journal is None or (not force and self._spaced()):
            return
        pos = journal.last_position()
        blob, self.snapshot_s = await self._run(_dump_timed, self.core)
        self.snap_at = time.monotonic()
        await self._saved(journal, pos, blob)

    async def _saved(self, journal: Journal, pos: int, blob: bytes | bytearray) -> None:
        await self._run(journal.save_snapshot, pos, blob)
        keep = self.snap_pos  # two snapshots stay: the newest, and one to fall back to
        self.snap_pos = pos
        if keep > 0:
            await self._run(journal.compact, keep)

    def fork_snapshot(self) -> None:
        """Start a snapshot without stopping the stepper (see the header)."""
        journal = self.journal
        if journal is None or self._spaced():
            return
        pos = self.snapping_at = journal.last_position()
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or process left for a child: serialise here
            os.close(read_fd)
            os.close(write_fd)
            log.warning("cannot fork for a snapshot (%s); taking it in the relay's process", exc)
            self._track(self.snapshot())
            return
        if pid == 0:
            _snapshot_child(self.core, read_fd, write_fd)
        os.close(write_fd)
        self._track(self._collect(journal, pid, read_fd, pos))

    def _track(self, work: Awaitable[None]) -> None:
        def done(task: asyncio.Task[None]) -> None:
            self.snap_task = None
            if not task.cancelled() and task.exception() is not None:
                # A journal that cannot be written fails the next append too, which says so: only logged here.
                log.warning("a snapshot%s failed: %s", self._of(), task.exception())
            self.wake()
        self.snap_task = asyncio.ensure_future(work)
        self.snap_task.add_done_callback(done)

    async def _collect(self, journal: Journal, pid: int, read_fd: int, pos: int) -> None:
        try:
            blob, cpu_s, received = await self._run(_read_snapshot, read_fd)
            status = (await self._run(os.waitpid, pid, 0))[1]
            pid = 0
            self.snap_at = time.monotonic()
            if status != 0 or blob is None:
                log.warning("a snapshot's child process failed (status %d, %d bytes); trying again later",
                            status, received)
                return
            self.snapshot_s = cpu_s
            await self._saved(journal, pos, blob)
        finally:
            if pid:  # cancelled (stopping) before the child was reaped
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except OSError:
                    pass

    async def stop_snapshot(self) -> None:
        """Stopping: a snapshot being taken is abandoned (its child killed); the journal is as it was."""
        if self.snap_task is not None:
            self.snap_task.cancel()
            try:
                await self.snap_task
            except BaseException:  # noqa: BLE001 - it was asked to stop
                pass

    def _run(self, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self.io, fn, *args)


def kept_rows(core: RelayCore) -> dict[str, list[dict[str, object]]]:
    """Each match's kept public events as the event log's rows (what ``Events.event`` logged)."""
    return {code: [{"kind": "event", "match": code, "seq": ev.seq, "ts": ev.ts, "game": ev.game_index, "type": ev.type,
                    **ev.data} for ev in (past_event(code, k) for k in kept)]
            for code, (kept, _) in core.events.past.items()}


def close_quietly(journal: Journal | None) -> None:
    """Close a journal, whatever state its backend is in (in a worker thread)."""
    try:
        if journal is not None:
            journal.close()
    except Exception as exc:  # noqa: BLE001 - closing a journal whose backend is gone
        log.info("closing a journal: %s", exc)


def check_shard(shard: str, total: int, prefix: str) -> Callable[[RelayCore], None]:
    """Refuses a shard's recovered core made under another shard count or prefix (in one line)."""
    def check(core: RelayCore) -> None:
        if core.config.shards_total != total or core.topics.shard != shard or core.topics.prefix != prefix:
            raise ConfigConflict(
                f"shard {shard}'s journal was made with {core.config.shards_total} shard(s) and prefix "
                f"{core.topics.prefix!r}; this relay has --shards-total {total} and prefix {prefix!r}: "
                f"every relay of a cluster must use the same")
    return check


class JournalWriter:
    """A journal's appends in a thread of their own, which leaves after ``IDLE_S`` without work and
    is started again by the next append; written in the order asked, each answer to its own loop."""

    IDLE_S = 5.0

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._queue: queue.SimpleQueue[
            tuple[Sequence[Entry], int | None, asyncio.Future[None], asyncio.AbstractEventLoop]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def append(self, entries: Sequence[Entry], fence: int | None = None) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self._lock:
            self._queue.put((entries, fence, done, loop))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="blink-journal", daemon=True).start()
        return done

    def _run(self) -> None:
        q = self._queue
        while True:
            try:
                entries, fence, done, loop = q.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:  # (an append puts under this lock: none can be left behind)
                    if q.empty():
                        self._running = False
                        return
                continue
            error: BaseException | None = None
            try:
                self.journal.append(entries, fence)
            except BaseException as exc:  # noqa: BLE001 - handed to the step that waits for it
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, done, error)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


def wall_minus_mono() -> int:
    """The wall clock minus the monotonic clock, from the tightest of a few paired reads."""
    best: tuple[int, int] = (1 << 62, 0)
    for _ in range(5):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        best = min(best, (b - a, w - (a + b) // 2))
    return best[1]


def _dump_timed(core: RelayCore) -> tuple[bytes, float]:
    """The core's snapshot and the CPU time serialising it took (this thread's only)."""
    started = time.thread_time()
    blob = snapshots.dump(core)
    return blob, time.thread_time() - started


def _snapshot_child(core: RelayCore, read_fd: int, write_fd: int) -> NoReturn:
    """In a child forked between two steps: serialise the core, write it to the pipe and exit at
    once -- no cleanup of what belongs to the parent."""
    code = 1
    try:
        os.close(read_fd)
        # A signal meant for the relay's process group must not reach the parent's event loop
        # through the wake-up descriptor this child shares with it: the child just dies of it.
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        gc.disable()
        try:  # only CPU time nobody else wants: the relay, its broker and its players come first
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):  # not Linux
            try:
                os.nice(19)
            except OSError:
                pass
        started = time.process_time()
        blob = snapshots.dump(core)
        for part in (_CHILD_HEAD.pack(len(blob), time.process_time() - started), blob):  # (not head + blob: a copy)
            view = memoryview(part)
            while view:
                view = view[os.write(write_fd, view):]
        code = 0
    finally:
        os._exit(code)


def _read_snapshot(fd: int) -> tuple[bytearray | None, float, int]:
    """A forked child's answer (closes ``fd``): the snapshot (None unless it came whole and nothing
    after it), the CPU seconds it took, and how many bytes came in all."""
    try:
        head = bytearray(_CHILD_HEAD.size)
        received = _read_into(fd, head)
        if received < len(head):
            return None, 0.0, received
        length, cpu_s = _CHILD_HEAD.unpack(head)
        blob = bytearray(length)
        got = _read_into(fd, blob)
        more = len(os.read(fd, 1)) if got == length else 0
        return (blob if got == length and not more else None), cpu_s, received + got + more
    finally:
        os.close(fd)


def _read_into(fd: int, buf: bytearray) -> int:
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            break
        got += n
    return got


__all__ = ["ClusterError", "ConfigConflict", "JournalWriter", "Shard", "check_shard", "close_quietly",
           "wall_minus_mono"]
