"""The relay's asyncio shell: moves bytes between MQTT and ``RelayCore``, keeps time, journals, writes the log.

How this works
--------------
Two tasks share one event loop, so the core is never entered concurrently:

- the *connection* task holds the MQTT connection (``mqttkit.connection``, a bare
  ``asyncio.Protocol`` MQTT 3.1.1 client: paho's reader under aiomqtt cost about 0.6 ms a message
  here): it subscribes to every client's request topic and every match's action topics; every
  read from the broker is parsed whole, and its PUBLISHes (often many) come to ``_on_messages`` as
  one list -- no task, queue or loop turn per message -- which stamps them once with the relay's
  monotonic time and the wall clock (see "Time" below), passes them through the intake and puts
  them in an inbox. A message far over ``max_payload`` is not even buffered (its sender is told
  ``too_large``). A flood's excess costs as little as can be (on Mosquitto, which cannot limit a
  client's rate): the same refused topic is charged in bulk for the rest of a read; once its
  sender is at the floor of its intake bucket, the connection drops that topic's packets in the
  parser, unbuilt, until the sender could have a token back (``Intake.hold_ns``; counted and
  charged by ``_on_dropped``), and reads the flood in large chunks (``mqttkit.connection``'s
  ``COALESCE_S``); a read of nothing admitted does not wake the stepper. When the broker goes
  away (restarted, the connection taken over, a network blip) it reconnects with backoff (0.1 s doubling to 5 s),
  resubscribes, and asks the stepper to republish; the core is kept. Only the very first
  connection may fail for good (a wrong URL or password is reported, not retried for ever).
- the *stepper* runs one step per event-loop turn (group commit): it takes the messages already
  in the inbox (at most ``MAX_BATCH``), hands them to ``core.handle(topic, payload, now_ns)`` in
  arrival order (the relay is the only sequencer), calls ``core.tick(now_ns)`` if a deadline of
  the core is due, appends all those inputs (pings too: they spend the sender's request tokens
  and keep it seen, so the core is only replayed exactly from every input) to the journal as ONE batch (one durable write, run in a writer thread so the loop keeps receiving
  meanwhile: the next batch grows while this one is written),
  and only then publishes the step's outputs and writes its event-log lines. So a player hears
  ``ActionAccepted`` only once the journal holds the action, and the journal holds exactly the
  ``now_ns``/``wall_ns`` values the core was given, so replay is exact. A commit costs about 0.1 ms
  of CPU (SQLite's transaction and the fsync) however little it holds, and on a quiet machine a
  busy relay's steps hold a message or two each at human pace (``bench/step_bench.py``: ~0.4 ms
  of CPU for a step of one play, 0.12-0.15 ms a play in steps of 16, on a loaded machine). A group
  commit that made a busy relay wait 1 ms between steps was measured and not kept: ~3 % less CPU
  an action at 1,000 matches, a worse p99 at 300 (bench/RESULTS.md, session 6). The writer is one long-lived
  thread fed by a queue (``_JournalWriter``): ``asyncio.to_thread`` cost 2-3x the CPU per step
  for the same hop.

Publishing. A step's outputs go out together, without a trip through the event loop per message
and without a system call per message: the QoS-0 messages of a step (everything the core sends,
retained ones too) are packed as MQTT PUBLISH packets, back to back, into one buffer, and that buffer
is written to the connection's transport, which sends it with one ``send`` straight away when
nothing is waiting to be written (else after what is). A QoS-1 message (none today) goes through
the connection's ``publish`` (packet ids, acknowledgements), after the buffer so far, keeping the
order. A library's awaited publish costs a loop turn per message, and paho a ``send`` per message:
on this busy 2-core machine a loopback ``send`` took
0.3-0.9 ms, most of the relay's time per action (bench/RESULTS.md has the figures). A publish on a dropped
connection is counted and logged once per step, never raised: the connection task reconnects and
the stepper resyncs everyone then.

Time. The core runs on a monotonic clock (``time.monotonic_ns()`` plus an offset): deadlines,
holds, rate limits and timers never jump when the wall clock is set. The wall clock
(``time.time_ns()``) is read beside it and passed as ``wall_ns`` only to stamp events, snapshots,
pongs and log lines. Both are journalled. The wall clock is read as the core's monotonic time
plus one offset, measured once (the tightest of a few paired reads) and kept for the whole run:
two clocks read one after the other differ by a few microseconds each time, and a timer event
stamped that much early against the stamp of the event that armed it is one ``blink verify``
rightly refuses. The offset is measured again only when the wall clock has been set (it moved by
more than ``WALL_STEP_NS`` against the monotonic one). The monotonic clock restarts with the machine, so a
relay that recovers a core continues the core's time where its last input left it plus the wall
time elapsed since then (never backwards): a deadline due 2 s after the last input before a crash
is due 2 s after it still, or at once if the outage was longer.

Recovery (``--data DIR`` holding a journal): the latest snapshot (the core, ``relay/snapshot.py``) is loaded
-- a new journal gets a snapshot of the fresh core at position 0, so its seed and configuration
survive -- and every later entry is replayed. The event log's tail is then completed: the only
step whose log lines can be missing is the last one journalled before the crash (a step is
logged before the next one starts), so the replayed steps' lines after the last line found in
the log are appended, and a torn last line is cut. While replaying, the core runs as it did live
but builds no message that is only an output (``RelayCore.replaying``), and only its log records
are kept.

Resync. Once connected (the first time, and after every reconnect), the shell publishes the
relay's online status and the match list -- from then on it serves requests -- and then every
match's players' views and retained snapshot (``RelayCore.resync``), so that clients catch up on
whatever they missed. That is about three messages a match, ~0.25 ms of CPU each match to build:
seconds for thousands of matches on a busy machine, which requests must not wait behind. So it goes
out in chunks of ``RESYNC_CHUNK`` matches, one chunk per step *after* the step's requests and
timers (the running matches first), and the stepper lets the connection's reader run between two
chunks. A chunk's last message goes at QoS 1, and the next chunk waits for the broker's
acknowledgement (at most ``RESYNC_ACK_WAIT_S``): a broker slower than the relay (the embedded
amqtt, on the same event loop) would otherwise still be reading the whole resync from the socket
when the answer to a request came behind it. So every request is answered within a step or two of
its arrival, ahead of all but one chunk, while the resync goes on. A chunk is built from the state
as it is then: a view never lags behind an event already published.
A reconnect starts the resync again from the beginning; ``resynced`` is set when it is complete.

Snapshots. Every ``snapshot_every_s`` seconds or ``snapshot_every`` entries (but no sooner after the
last than ``SNAPSHOT_COST_RATIO`` times its CPU time) the core is saved, and the journal is
compacted up to the previous snapshot (two stay, in case the newest cannot be read): replay stays
short, and matches the core has forgotten leave the journal. Pickling the core holds the
interpreter for its whole length (0.2-0.3 s at 1,000 live matches, and the stepper would wait for
it: every play arriving meanwhile waited too). So, between two steps -- when the core stands
exactly for the journal's last position -- the shell forks: the child pickles its copy-on-write
copy of the core, writes it down a pipe and exits; a task reads it, saves it and compacts while
the stepper goes on. The child runs at idle CPU priority: on a machine whose cores the relay, its
broker and its players keep busy, pickling 1,000 matches took a core for 0.3-0.4 s every few
seconds and every process's tail latency with it; now it takes longer instead. The journal's lock
orders that write with the steps' appends. The child
touches (and so copies) the pages of what it pickles: memory grows by up to the core's size while
it runs. Where there is no ``fork`` (or none can be made) it is pickled in a worker thread while
the stepper waits, as before; ``snapshot()`` (tests, tools) always does that.

Memory. A relay of 1,000 live matches holds about 20-50 MB of Python objects, but its process grew
by about 120 kB more a match than that (``BLINK_MEMDUMP``, ``relay/memdiag.py``, showed where):
glibc's malloc raises its threshold for serving a large block by ``mmap`` to the size of the
largest one freed (up to 32 MB), and the threshold for giving the top of a heap back to twice that.
A snapshot's few-MB buffers, read in a worker thread (each of those has its arena), then came from
the heaps and stayed there when freed: 40-60 MB of free but resident heap at 1,000 matches. So the
relay fixes both thresholds as it starts (``tune_malloc``; an environment that sets glibc's own
``MALLOC_*`` variables or ``GLIBC_TUNABLES`` keeps its choice): a block of a megabyte or more is
mapped and unmapped on its own, and a heap gives back any free top over a megabyte. The reads of the
broker's socket (256 kB at most) stay below it. A forked child's snapshot is read straight into one
buffer of the length it announces (not read in pieces, joined and copied again without its head).

Outbound messages are published at QoS 0: every public event carries a gap-free ``seq``, so a
client that misses one asks for a resync. The relay's status topic is retained and set to
offline by the MQTT last will. The relay logs in as user ``relay`` with the password in its
broker URL under a client id that is random per start and never published. A payload over
``max_payload`` is not handed to the core (nor journalled): its sender (known from the topic) is
told ``too_large`` and it is logged, at most once a second per sender.

The shell is the only place that reads the clock or the OS's randomness (for the seed and the
client id).
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import gc
from array import array
from collections import deque
import json
import logging
import os
import queue
import secrets
import signal
import struct
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, NoReturn, Sequence

from mqttkit import DEFAULT_MAX_PAYLOAD, NODELAY, RELAY_USER, BrokerAddress, wait_event
from mqttkit.connection import MqttConnection, MqttError, Will
from mqttkit.connection import connect as mqtt_connect
from mqttkit.packets import Message, pack_publish
from protocol import messages as m
from protocol.codec import Encoder, encode
from protocol.topics import Topics, valid_id

from relay import memdiag
from relay import snapshot as snapshots
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.journal import Entry, Journal, JournalError, Msg, Tick, feed
from relay.limits import RELAY_INTAKE_SLACK, Intake

log = logging.getLogger("blink.relay")

MAX_SLEEP_S = 0.05
MAX_BATCH = 512  # messages handled (and journalled as one write) per step
#: Matches whose views and snapshot are republished per step after a (re)connect, after the step's
#: requests (about 0.2-0.3 ms of CPU a BLINK match here: a chunk delays an answer by ~10-15 ms).
RESYNC_CHUNK = 50
#: The next chunk waits for the broker's acknowledgement of the last one (see the header's Resync),
#: but never longer than this.
RESYNC_ACK_WAIT_S = 1.0
RESYNC_IN_FLIGHT = 2  # chunks sent and not yet acknowledged, at most
TOO_LARGE_QUIET_NS = 1_000_000_000
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 5.0
WALL_STEP_NS = 50_000_000  # the wall clock moved this much against the monotonic one: it was set
SNAPSHOT_EVERY_S = 10.0
#: Entries after which a snapshot is due: replay costs about 0.2 ms of CPU an entry (BLINK plays),
#: so a restart replays at most about 0.2 s of them (it was 20,000: 4 s or more).
SNAPSHOT_EVERY = 1_000
#: ... but a snapshot costs the running relay its own time (0.2-0.3 s of CPU at 1,000 live
#: matches, the stepper waits): the next one comes no sooner than this many times its CPU time
#: after it, so snapshots never take more than about a tenth of the relay's CPU, however busy it is.
SNAPSHOT_COST_RATIO = 10.0
#: Take snapshots in a forked child (see the header's Snapshots); off: in a worker thread while the
#: stepper waits (where there is no fork).
FORK_SNAPSHOTS = True
#: The cyclic collector's oldest generation: never on its own (``run``), once this often instead.
GC_NEVER = 1 << 30
GC_FULL_EVERY_S = 600.0
RESIDENCE_KEPT = 5_000_000  # residence times kept for BLINK_RESIDENCE (40 MB at most)
#: Room for a PUBLISH's header and topic beside its payload: a packet over ``max_payload`` plus this
#: is not buffered at all (its sender is told ``too_large`` all the same).
PACKET_HEADER_ALLOWANCE = 1024
#: glibc malloc's thresholds, fixed as the relay starts (see the header's Memory): a block this
#: large or larger is mmapped (so it is unmapped when freed), and a heap's free top over this much
#: is given back. Both above the largest read of the broker's socket (asyncio's 256 kB).
MALLOC_MMAP_THRESHOLD = 1 << 20
MALLOC_TRIM_THRESHOLD = 1 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (glibc's malloc.h)
LOG_TAIL_BYTES = 1 << 20  # how much of the event log's end recovery reads to find where it stops
_SHELL_ONLY = ("relay_started",)  # log lines the core never writes


class RelayShell:
    def __init__(self, address: BrokerAddress, topics: Topics | None = None, config: RelayConfig | None = None,
                 seed: int | None = None, log_path: str | Path | None = None,
                 max_payload: int = DEFAULT_MAX_PAYLOAD, journal: Journal | None = None,
                 snapshot_every_s: float = SNAPSHOT_EVERY_S, snapshot_every: int = SNAPSHOT_EVERY) -> None:
        self.address = address
        self.topics = topics or Topics()
        self.config = config or RelayConfig()
        self.max_payload = max_payload
        # Unique per start and never published (the status topic names relay_id, not this): nobody
        # can knock the relay off its broker by connecting under its client id.
        self.client_id = f"blink-{self.config.relay_id}-{secrets.token_hex(8)}"
        self._refused: dict[str, int] = {}  # sender -> when it was last told ``too_large`` (ns)
        self.intake = Intake.for_config(self.config, RELAY_INTAKE_SLACK)  # before decoding (Mosquitto cannot limit rates)
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "big")
        self.core = RelayCore(self.topics, self.config, self.seed)
        self.journal = journal
        self.snapshot_every_s = snapshot_every_s
        self.snapshot_every = snapshot_every
        self.log_path = Path(log_path) if log_path else None
        self._log_file: IO[str] | None = None
        self._client: MqttConnection | None = None
        self._inbox: list[tuple[str, bytes, int, int]] = []  # topic, payload, monotonic ns, wall ns
        #: The core's time is ``time.monotonic_ns() + _mono_offset`` (set by ``_resume_clock``).
        self._mono_offset = 0
        #: The wall clock is the core's time plus ``_wall_offset`` (see the header's Time).
        self._wall_offset = _wall_minus_mono()
        self.publish_failures = 0  # messages a dropped connection would not take
        self._wake = asyncio.Event()
        self._resync = False  # set on (re)connect: the stepper republishes status, snapshots and views
        #: Matches whose snapshot and views are still to be republished since the last (re)connect,
        #: a chunk per step (see the header's Resync).
        self._resync_left: deque[str] = deque()
        self.resync_chunk = RESYNC_CHUNK
        self._resync_began = 0.0
        self._resync_sent = 0  # matches republished since the last (re)connect (``resync_matches`` once done)
        self.resync_matches = 0
        #: The chunks the broker has not acknowledged yet: their final message's (QoS 1) info, and
        #: when each was sent.
        self._resync_acks: deque[tuple[asyncio.Future[bytes], float]] = deque()
        self._last_qos1: asyncio.Future[bytes] | None = None  # the PUBACK of ``_send``'s last QoS-1 publish
        self.ready = asyncio.Event()
        #: Set once every match has been republished after the first connection (``resync_s``: how
        #: long after coming online that took); set again after each reconnect's resync.
        self.resynced = asyncio.Event()
        self.resync_s = 0.0
        self.records: list[dict[str, Any]] | None = None  # set to a list to keep records in memory (tests)
        #: One line about what recovery did (None for a fresh journal or none at all); ``recovery_s``
        #: is how long reading the snapshot and replaying took.
        self.recovered: str | None = None
        self.recovery_s = 0.0
        self.snapshot_s = 0.0  # CPU seconds the last snapshot took to serialise (it spaces them out)
        self.reconnects = 0
        self.steps = 0  # steps taken with something to journal or publish (each one commit with the journal on)
        self._snap_pos = 0
        self._snap_at = time.monotonic()
        self._prev_snap = 0
        self._gc_full_at = time.monotonic()
        #: A benchmark's view from inside (``BLINK_RESIDENCE=FILE``): how long each message waited
        #: between the read that brought it and the write of its step's outputs; the percentiles
        #: are written to FILE when the relay stops.
        self._residence_file = os.environ.get("BLINK_RESIDENCE") or None
        #: (8 bytes a time: as a list of ints, 40; they were a benchmark's measurable share of the relay's memory)
        self._residence: array[int] | None = array("q") if self._residence_file else None
        self._snap_task: asyncio.Task[None] | None = None  # a snapshot being saved while steps go on
        self._writer = _JournalWriter(journal) if journal is not None else None  # the steps' appends

    # ------------------------------------------------------------------ recovery

    def now(self) -> tuple[int, int]:
        """The core's (monotonic, wall) time in ns."""
        mono = time.monotonic_ns() + self._mono_offset
        moved = time.time_ns() - mono - self._wall_offset
        if abs(moved) > WALL_STEP_NS:
            # The wall clock was set (not the jitter of reading two clocks: see the header).
            log.warning("the wall clock moved by %.3f s; event stamps follow it", moved / 1e9)
            self._wall_offset = _wall_minus_mono() - self._mono_offset
        return mono, mono + self._wall_offset

    def _resume_clock(self) -> None:
        """Continue a recovered core's monotonic time: where its last input left it, plus the wall
        time elapsed since (a restart may be a reboot: the monotonic clock then starts again at 0,
        and it never says how long the relay was down). Never backwards."""
        last_mono, last_wall = self.core.last_clock()
        if last_mono == 0 and last_wall == 0:
            return  # a fresh core: nothing to continue
        wall_minus_mono = _wall_minus_mono()
        mono = time.monotonic_ns()
        wall = mono + wall_minus_mono
        self._mono_offset = last_mono + max(0, wall - last_wall) - mono
        # Normally the same offset as before the restart (the core's time was continued by the
        # wall time elapsed), so a timer armed before the crash is stamped consistently after it.
        self._wall_offset = wall_minus_mono - self._mono_offset

    def recover(self) -> None:
        """Rebuild the core from the journal (see the header). Called by ``run``; idempotent."""
        # Unpickling and replaying allocate millions of objects that all stay alive: the cyclic
        # garbage collector would walk the growing heap again and again (measured: 1,000 matches
        # recovered in 6.8 s with it, 1.6 s without). Afterwards the recovered objects are frozen
        # out of its way (refcounting still frees them as the matches move on).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._recover()
        finally:
            if was_enabled:
                gc.enable()
        if self.recovered is not None:
            gc.freeze()

    def _recover(self) -> None:
        journal = self.journal
        if journal is None or self._snap_pos or self.recovered is not None:
            return
        started = time.monotonic()
        snapshot = journal.latest_snapshot()
        if snapshot is None and journal.last_position() == 0:
            # A new journal: the fresh core at position 0 carries the seed and the configuration.
            journal.save_snapshot(0, snapshots.dump(self.core))
            self._snap_at = time.monotonic()
            return
        if snapshot is None:
            raise JournalError("the journal holds entries but no snapshot to start them from: "
                               "move the data directory aside to start afresh")
        pos, blob = snapshot
        cpu = time.thread_time()
        core = snapshots.load(blob, f"the journal's snapshot at {pos}")  # refuses a newer format in one line
        # Writing a snapshot costs about twice reading it: until the first one is measured, that
        # spaces it out, so a restarted relay does not spend its first moments on one.
        self.snapshot_s = 2 * (time.thread_time() - cpu)
        replayed: list[tuple[Entry, list[Any]]] = []
        # Replay keeps only the log records (the resync after recovery sends fresh views and
        # snapshots), so the core does not build the messages that are only outputs (views,
        # snapshots, private updates: a third of replaying BLINK plays); it still does everything
        # that changes its state, the coalesced snapshots' schedule included.
        core.replaying = True
        try:
            for _, entry in journal.read(pos + 1):
                if isinstance(entry, Msg):
                    out = core.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns)
                else:
                    out = core.tick(entry.now_ns, entry.wall_ns)
                replayed.append((entry, [o for o in out if isinstance(o, LogRecord)]))
        finally:
            del core.replaying  # back to the class's False (and out of every later snapshot's pickle)
        self.core = core
        # The journal's seed and configuration win: the matches were made with them.
        self.seed, self.config, self.topics = core.seed, core.config, core.topics
        self._snap_pos = self._prev_snap = pos
        self._snap_at = time.monotonic()
        written = self._complete_log([r for _, recs in replayed for r in recs])
        self.recovery_s = time.monotonic() - started
        live = sum(1 for x in core.matches.values() if x.status != "over")
        self.recovered = (f"recovered {len(core.matches)} match(es) ({live} running) from the journal: snapshot at "
                          f"{pos} + {len(replayed)} entries replayed in {self.recovery_s:.2f} s"
                          + (f"; {written} event-log line(s) the crash had cut were written" if written else ""))

    def _complete_log(self, records: list[LogRecord]) -> int:
        """Append to the event log the replayed records it lacks; return how many. The log holds a
        prefix of ``records`` (after what the snapshot covers); its last line tells how long."""
        path = self.log_path
        if path is None or not records:
            return 0
        lines = [json.dumps(r.record, default=str) for r in records]
        have = 0
        try:
            with open(path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(0, size - LOG_TAIL_BYTES)
                f.seek(start)
                tail = f.read()
                if tail and not tail.endswith(b"\n"):  # a torn last line: cut it
                    cut = tail.rfind(b"\n") + 1
                    f.truncate(start + cut)
                    tail = tail[:cut]
        except FileNotFoundError:
            tail = b""
        last = None
        for raw in reversed(tail.decode("utf-8", "replace").splitlines()):
            try:
                kind = json.loads(raw).get("kind")
            except (ValueError, AttributeError):
                continue
            if kind in _SHELL_ONLY or (kind == "bad_input" and '"code": "too_large"' in raw):
                continue  # lines the shell writes on its own, not replayed
            last = raw
            break
        if last is not None:
            for i in range(len(lines) - 1, -1, -1):
                if lines[i] == last:
                    have = i + 1
                    break
        missing = records[have:]
        if missing:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                for line in lines[have:]:
                    f.write(line + "\n")
        return len(missing)

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        tune_malloc()
        memdump = memdiag.target()  # a benchmark's diagnostic (relay/memdiag.py)
        dump = (memdiag.install(memdump, asyncio.get_running_loop().add_signal_handler, self._memdiag_lines)
                if memdump else None)
        self.recover()
        self._resume_clock()
        thresholds = gc.get_threshold()
        # The cyclic collector's full passes walk every object the relay holds (25-55 ms each at 300
        # live matches, more at 1,000: every play that came meanwhile waited) and found nothing to
        # free (measured: the relay makes almost no reference cycles; the young generations, still
        # collected, catch those). So the oldest generation is collected on the stepper's schedule
        # (``GC_FULL_EVERY_S``), not whenever enough objects have grown old.
        gc.set_threshold(thresholds[0], thresholds[1], GC_NEVER)
        self._gc_full_at = time.monotonic()
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", encoding="utf-8")
        self._write([LogRecord({"kind": "relay_started", "seed": self.seed, "ts": time.time_ns(),
                                "order": self.config.order, "relay": self.config.relay_id})])
        tasks: list[asyncio.Task[None]] = []
        try:
            # The first connection must work (a wrong URL or password is reported at once); a
            # failure of either task (a journal that cannot be written) ends the relay.
            tasks = [asyncio.create_task(self._connection_loop()), asyncio.create_task(self._step_loop())]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # raises what ended it
            raise RuntimeError("the relay stopped unexpectedly")
        finally:
            if self._snap_task is not None:
                tasks.append(self._snap_task)
            for t in tasks:
                if not t.done():
                    t.cancel()
                    try:
                        await t
                    except BaseException:  # noqa: BLE001 - it was asked to stop
                        pass
            if self._log_file:
                self._log_file.close()
                self._log_file = None
            gc.set_threshold(*thresholds)
            if self._residence_file and self._residence is not None:
                _write_residence(self._residence_file, self._residence, self.steps)
            if dump is not None:
                dump("exit")

    def _memdiag_lines(self) -> list[str]:
        """What ``BLINK_MEMDUMP``'s reports say about the relay beside the process's memory."""
        statuses: dict[str, int] = {}
        for match in self.core.matches.values():
            statuses[match.status] = statuses.get(match.status, 0) + 1
        return [f"matches {len(self.core.matches)} {statuses}",
                f"residence times kept {len(self._residence) if self._residence is not None else 0}"]

    async def _connection_loop(self) -> None:
        will = Will(self.topics.relay_status(self.config.relay_id),
                    encode(m.RelayStatus(self.config.relay_id, False)), qos=1, retain=True)
        delay = RECONNECT_FIRST_S
        first = True
        while True:
            conn: MqttConnection | None = None
            try:
                # The relay logs in as "relay" unless the URL names a user: the shipped Mosquitto ACL
                # gives that user the right to publish events and private messages. Incoming
                # messages go from the connection's reads straight into the inbox (see the header).
                conn = await mqtt_connect(self.address.host, self.address.port, client_id=self.client_id,
                                          on_messages=self._on_messages, on_oversize=self._on_oversize,
                                          username=self.address.username or RELAY_USER,
                                          password=self.address.password, will=will, keepalive=30,
                                          max_packet=self.max_payload + PACKET_HEADER_ALLOWANCE,
                                          socket_options=NODELAY)
                # The connection is the stepper's from here: a request can arrive in the same read
                # as the SUBACK (the subscription is live on the broker before its SUBACK leaves),
                # and its answer must have somewhere to go.
                self._client = conn
                try:
                    await conn.subscribe([(t, 1) for t in self.core.subscriptions()])
                    if not first:
                        self.reconnects += 1
                        log.warning("reconnected to the broker %s", self.address.url)
                    first = False
                    delay = RECONNECT_FIRST_S
                    self._resync = True
                    self._wake.set()
                    raise await conn.wait_closed()  # nothing to do here until the connection ends
                except asyncio.CancelledError:
                    # Stopping: say so on the retained status while the connection is up.
                    try:
                        await asyncio.wait_for(self._publish(conn, self.core.shutdown()), 2)
                    except BaseException:  # noqa: BLE001 - the broker may be gone already
                        pass
                    raise
                finally:
                    self._client = None
            except MqttError as exc:
                self._client = None
                if first:
                    raise
                log.warning("lost the broker %s (%s); reconnecting in %.1f s", self.address.url, exc, delay)
                await asyncio.sleep(delay)
                delay = min(RECONNECT_MAX_S, delay * 2)
            finally:
                if conn is not None:
                    conn.abort()  # a no-op once it has ended (a clean stop disconnected it above)

    def _on_messages(self, messages: list[Message]) -> None:
        """The PUBLISHes of one read from the broker: stamped once (they arrived together),
        admitted by the intake, queued for the stepper."""
        mono = time.monotonic_ns()
        now = mono + self._mono_offset
        wall = now + self._wall_offset
        intake = self.intake
        admit = intake.admit
        inbox = self._inbox
        before = len(inbox)
        # A flood repeats one topic: once it is refused, the same topic is refused for the rest
        # of this read (one instant: nothing refills), so those are only counted, in one go.
        refused: str | None = None
        more = 0
        for msg in messages:
            topic = msg.topic
            assert topic is not None  # the connection drops messages whose topic is not UTF-8
            if topic == refused:
                more += 1
                continue
            if more:
                intake.refuse_more(more)  # charged to ``refused``'s bucket, before another admit
                more = 0
            if admit(topic, mono):  # else a flood's excess (relay/limits.py Intake): dropped undecoded
                inbox.append((topic, msg.payload, now, wall))
            else:
                refused = topic
                hold = intake.hold_ns()
                if hold and self._client is not None:
                    # Its sender is at the floor of its bucket: until it could have a token back,
                    # the connection drops that topic's messages without building them.
                    self._client.drop_until(topic.encode(), mono + hold, self._on_dropped)
        if more:
            intake.refuse_more(more)
        if len(inbox) > before:
            self._wake.set()  # a read of nothing but dropped messages does not wake the stepper

    def _on_dropped(self, topic: bytes, n: int) -> None:
        """``n`` messages of a flooder the connection dropped unbuilt (see ``_on_messages``):
        counted and charged to its bucket; while it stays at its floor, the drop goes on."""
        mono = time.monotonic_ns()
        hold = self.intake.refuse(topic.decode("utf-8", "replace"), n, mono)
        if hold and self._client is not None:
            self._client.drop_until(topic, mono + hold, self._on_dropped)

    def _on_oversize(self, topic: str, size: int) -> None:
        """A message far over ``max_payload`` (its bytes were skipped, never buffered): as for any
        payload over the limit, its sender is told ``too_large`` (see ``_too_large``)."""
        mono = time.monotonic_ns()
        if not self.intake.admit(topic, mono):
            return
        now = mono + self._mono_offset
        self._emit(self._too_large(topic, size, now, now + self._wall_offset))

    async def _step_loop(self) -> None:
        while True:
            deadline = self.core.next_deadline()
            now = time.monotonic_ns() + self._mono_offset
            resync = (self._resync or (self._resync_left and self._resync_acked())) and self._client is not None
            if not self._inbox and not resync and (deadline is None or deadline > now):
                delay = MAX_SLEEP_S if deadline is None else min(MAX_SLEEP_S, max(0.0, (deadline - now) / 1e9))
                self._wake.clear()
                await wait_event(self._wake, delay)
            await self.step()
            if time.monotonic() - self._gc_full_at >= GC_FULL_EVERY_S:
                gc.collect()
                self._gc_full_at = time.monotonic()
            if self._resync_left and self._resync_acked():
                # A step with nothing to journal never waits: give the connection's reader a turn,
                # so requests that came meanwhile are in the inbox for the next step, before the
                # next chunk of the resync.
                await asyncio.sleep(0)

    async def step(self) -> None:
        """One group-committed step: every message already received, a due tick, one journal write,
        then the outputs."""
        if self._resync and self._client is not None:
            self._resync = False
            now, wall = self.now()
            self._emit(self.core.startup(now))  # online: from here on requests are served
            self.ready.set()
            # Every match's snapshot and views follow, a chunk per step after the step's requests.
            self._resync_left = deque(self._resync_order())
            self._resync_began, self._resync_sent = time.monotonic(), 0
            self._resync_acks.clear()
            self.resynced.clear()
        # At most MAX_BATCH messages a step: an overloaded relay still answers the oldest first
        # without waiting for a whole backlog, and snapshots still come between steps.
        inbox, self._inbox = self._inbox[:MAX_BATCH], self._inbox[MAX_BATCH:]
        entries: list[Entry] = []
        out: list[Any] = []
        core = self.core
        journalling = self.journal is not None
        for topic, payload, now_ns, wall_ns in inbox:
            if len(payload) > self.max_payload:
                out.extend(self._too_large(topic, len(payload), now_ns, wall_ns))
                continue
            if journalling:
                entries.append(Msg(topic, payload, now_ns, wall_ns))
            out.extend(core.handle(topic, payload, now_ns, wall_ns))
        deadline = core.next_deadline()
        now, wall = self.now()
        if deadline is not None and deadline <= now:
            entries.append(Tick(now, wall))
            out.extend(core.tick(now, wall))
        journal = self.journal
        if entries or out:
            self.steps += 1
        if journal is not None and entries:
            # Before anything of this step is published: nothing a player hears accepted is lost.
            writer = self._writer
            if writer is None or writer.journal is not journal:  # (a journal given after __init__)
                writer = self._writer = _JournalWriter(journal)
            await writer.append(entries)
        if out:
            self._emit(out)
        residence = self._residence
        if residence is not None and len(residence) < RESIDENCE_KEPT:
            done = time.monotonic_ns() + self._mono_offset
            residence.extend(done - arrived for _, _, arrived, _ in inbox)
        if self._resync_left and self._client is not None and self._resync_acked():
            self._last_qos1 = None
            self._emit(self._resync_chunk())
            if self._last_qos1 is not None:
                self._resync_acks.append((self._last_qos1, time.monotonic()))
        if journal is not None and (journal.last_position() - self._snap_pos >= self.snapshot_every
                                    or (time.monotonic() - self._snap_at >= self.snapshot_every_s
                                        and journal.last_position() > self._snap_pos)):
            if self._snap_task is not None:
                pass  # one is being written (a forked child's): the next step asks again after it
            elif FORK_SNAPSHOTS and hasattr(os, "fork"):
                self._fork_snapshot()
            else:
                await self.snapshot()

    async def snapshot(self, force: bool = False) -> None:
        """Save the core (between two steps) and compact the journal up to the previous snapshot.
        Skipped (unless ``force``) when the last one ended less than ``SNAPSHOT_COST_RATIO`` times
        its own CPU time ago: the stepper asks again after its next step."""
        journal = self.journal
        if journal is None:
            return
        if not force and time.monotonic() - self._snap_at < self.snapshot_s * SNAPSHOT_COST_RATIO:
            return
        pos = journal.last_position()
        # In a worker thread, so the connection keeps receiving; only the stepper (awaiting here)
        # changes the core, so it holds still while it is pickled.
        blob, self.snapshot_s = await asyncio.to_thread(_dump_timed, self.core)
        self._snap_at = time.monotonic()
        await asyncio.to_thread(journal.save_snapshot, pos, blob)
        keep = self._snap_pos  # two snapshots stay: the newest, and one to fall back to
        self._prev_snap, self._snap_pos = self._snap_pos, pos
        if keep > 0:
            await asyncio.to_thread(journal.compact, keep)

    def _fork_snapshot(self) -> None:
        """Start a snapshot without stopping the stepper (see the header's Snapshots): between two
        steps -- the core stands exactly for the journal's last position -- fork; the child pickles
        its copy of the core and sends it down a pipe, and a task saves it while steps go on."""
        journal = self.journal
        if journal is None or time.monotonic() - self._snap_at < self.snapshot_s * SNAPSHOT_COST_RATIO:
            return
        pos = journal.last_position()
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or process left for a child: pickle here, as without fork
            os.close(read_fd)
            os.close(write_fd)
            log.warning("cannot fork for a snapshot (%s); taking it in the relay's process", exc)
            self._snap_task = asyncio.create_task(self.snapshot())
            self._snap_task.add_done_callback(self._snapshot_done)
            return
        if pid == 0:  # the child: nothing but pickle, write and leave
            _snapshot_child(self.core, read_fd, write_fd)
        os.close(write_fd)
        self._snap_task = asyncio.create_task(self._collect_snapshot(pid, read_fd, pos))
        self._snap_task.add_done_callback(self._snapshot_done)

    def _snapshot_done(self, task: asyncio.Task[None]) -> None:
        self._snap_task = None
        if not task.cancelled() and task.exception() is not None:
            # A journal that cannot be written also fails the next append, which ends the relay:
            # here it is only said.
            log.warning("a snapshot failed: %s", task.exception())
        self._wake.set()

    async def _collect_snapshot(self, pid: int, read_fd: int, pos: int) -> None:
        """Read the forked child's snapshot, save it at ``pos`` and compact (the journal's lock
        orders this with the steps' appends)."""
        journal = self.journal
        assert journal is not None
        try:
            blob, cpu_s, received = await asyncio.to_thread(_read_snapshot, read_fd)
            status = (await asyncio.to_thread(os.waitpid, pid, 0))[1]
            pid = 0
            if status != 0 or blob is None:
                self._snap_at = time.monotonic()  # try again later, as spaced as ever
                log.warning("a snapshot's child process failed (status %d, %d bytes); trying again later",
                            status, received)
                return
            self.snapshot_s = cpu_s
            self._snap_at = time.monotonic()
            # A bytearray: the journals take any bytes-like blob (a copy to bytes would be one more
            # snapshot-sized block at once).
            await asyncio.to_thread(journal.save_snapshot, pos, blob)
            del blob
            keep = self._snap_pos  # two snapshots stay: the newest, and one to fall back to
            self._prev_snap, self._snap_pos = self._snap_pos, pos
            if keep > 0:
                await asyncio.to_thread(journal.compact, keep)
        finally:
            if pid:  # cancelled (stopping) before the child was reaped
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except OSError:
                    pass

    def _resync_order(self) -> list[str]:
        """The matches to republish after a (re)connect: the running ones first (their players are
        waiting for the next play), then the others (waiting for players, between games, over)."""
        matches = self.core.matches
        live = [c for c, x in matches.items() if x.status in ("playing", "between")]
        return live + [c for c, x in matches.items() if x.status not in ("playing", "between")]

    def _wake_on_ack(self, _future: asyncio.Future[bytes]) -> None:
        self._wake.set()

    def _resync_acked(self) -> bool:
        """May the next chunk of the resync go? Once the broker has acknowledged the last one (it
        has read everything before it), or ``RESYNC_ACK_WAIT_S`` after it was sent."""
        acks = self._resync_acks
        while acks and (acks[0][0].done() or time.monotonic() - acks[0][1] >= RESYNC_ACK_WAIT_S):
            acks.popleft()
        return len(acks) < RESYNC_IN_FLIGHT

    def _resync_chunk(self) -> list[Any]:
        """The next ``resync_chunk`` matches' views and snapshots (read-only on the core: built from
        the state as it is now, so a view never lags behind an event already published). A match
        that ended and left meanwhile is skipped; one created meanwhile is not in the list (its
        players heard everything as it happened)."""
        core, left = self.core, self._resync_left
        now, wall = self.now()
        out: list[Any] = []
        for _ in range(min(self.resync_chunk, len(left))):
            part = core.resync(left.popleft(), now, wall)
            if part:  # else the match has left meanwhile (over, and its linger ran out)
                out.extend(part)
                self._resync_sent += 1
        if left and out and isinstance(out[-1], Publish):
            out[-1] = dataclasses.replace(out[-1], qos=1)  # acknowledged: the next chunk waits for it
        if not left:
            self.resync_s = time.monotonic() - self._resync_began
            self.resync_matches = self._resync_sent
            self.resynced.set()
            log.info("resynced %d match(es) in %.2f s after coming online", self._resync_sent, self.resync_s)
        return out

    def _too_large(self, topic: str, size: int, now_ns: int, wall_ns: int) -> list[Any]:
        """A payload over the limit is not decoded. Its sender (known from the topic) is told
        ``too_large`` and it is logged, once a second per sender at most: a flood costs one line."""
        act = self.topics.parse_act(topic)
        client = act[1] if act else self.topics.parse_req(topic)
        key = client or "?"
        if now_ns - self._refused.get(key, -TOO_LARGE_QUIET_NS) < TOO_LARGE_QUIET_NS:
            return []
        if len(self._refused) > 10_000:
            self._refused.clear()
        self._refused[key] = now_ns
        detail = f"{size} bytes > {self.max_payload}"
        out: list[Any] = [LogRecord({"kind": "bad_input", "code": "too_large", "ts": wall_ns,
                                     "client": key[:80], "detail": detail})]
        if client and valid_id(client):
            reply = m.ActionRejected(act[0][:16], -1, "too_large", detail) if act else m.RequestRejected("too_large", detail)
            out.append(Publish(self.topics.client(client), reply))
        return out

    def _emit(self, out: list[Any]) -> None:
        """Write a step's log lines and publish its messages, all at once (see "Publishing")."""
        records = [o for o in out if isinstance(o, LogRecord)]
        if records:
            self._write(records)
        client = self._client
        if client is not None:
            failed = self._send(client, out)
            if failed:
                # The connection dropped: the connection task reconnects and the stepper resyncs
                # everyone then; what this step would have said is in the state they will get.
                self.publish_failures += failed
                log.warning("%d publish(es) failed (%s); waiting for the broker", failed, self._last_failure)

    _last_failure = ""

    def _send(self, client: MqttConnection, out: list[Any]) -> int:
        """Publish ``out``'s messages as one buffer (see "Publishing"); how many could not be written."""
        failed, why = send_publishes(client, out, self._on_qos1)
        if failed:
            self._last_failure = why
        return failed

    def _on_qos1(self, future: asyncio.Future[bytes]) -> None:
        # A broker's acknowledgement wakes the stepper: the resync's next chunk waits for one.
        future.add_done_callback(self._wake_on_ack)
        self._last_qos1 = future

    async def _publish(self, client: MqttConnection, out: list[Any]) -> None:
        """Publish, then disconnect once it is written (for the last words before stopping)."""
        self._send(client, out)
        await client.disconnect()

    def _write(self, records: list[LogRecord]) -> None:
        if self.records is not None:
            self.records.extend(r.record for r in records)
        if self._log_file is not None:
            for r in records:
                self._log_file.write(json.dumps(r.record, default=str) + "\n")
            self._log_file.flush()
        for r in records:
            if r.record.get("kind") == "bad_input":
                log.info("bad input: %s", r.record)


def send_publishes(client: MqttConnection, out: Sequence[Any],
                   on_qos1: Callable[[asyncio.Future[bytes]], None] | None = None) -> tuple[int, str]:
    """Write the ``Publish``es of ``out`` (a relay's step, other items skipped) to ``client``: the
    QoS-0 ones packed back to back into one buffer and written at once, a QoS-1 one through the
    connection's ``publish`` in its place (``on_qos1`` is given its acknowledgement's future).
    Never raises for a dropped connection: returns how many could not be written, and why."""
    publishes = [o for o in out if isinstance(o, Publish)]
    if not publishes:
        return 0, ""
    if not client.connected:
        return len(publishes), "not connected"
    buf = bytearray()
    failed, why = 0, ""
    encode_one = Encoder()  # one Packer for the step's messages (this runs in the loop's thread)
    for o in publishes:
        payload = o.msg if isinstance(o.msg, (bytes, bytearray)) else encode_one(o.msg)
        try:
            if o.qos == 0:
                pack_publish(buf, o.topic, payload, o.retain)
                continue
            if buf:
                client.write(buf)
                buf = bytearray()
            if on_qos1 is None:
                client.publish(o.topic, payload, o.qos, o.retain)
            else:
                future = client.publish(o.topic, payload, o.qos, o.retain, wait=True)
                if future is not None:
                    on_qos1(future)
        except (ValueError, MqttError) as exc:  # a bad topic; the connection dropped under it
            why = f"{type(exc).__name__}: {exc}"
            failed += 1
    if buf:
        try:
            client.write(buf)
        except MqttError as exc:  # the connection broke under it
            why = f"{type(exc).__name__}: {exc}"
            failed += sum(1 for o in publishes if o.qos == 0)  # an upper bound: what this step sent
    return failed, why


class _JournalWriter:
    """The steps' journal appends, in a thread of their own (the event loop keeps receiving while
    one is written). One long-lived thread fed by a queue, not ``asyncio.to_thread``: a default
    executor's hop (context copy, work item, a concurrent future chained to an asyncio one) cost
    about 2-3x the CPU of this one (a queue put, and ``call_soon_threadsafe`` back), and the relay
    makes one per step. The thread leaves after ``IDLE_S`` without work and is started again by
    the next append (a shell whose loop is gone leaves no thread behind). Appends are written in
    the order they were asked for; each answer goes to the loop that asked."""

    IDLE_S = 5.0

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._queue: queue.SimpleQueue[tuple[Sequence[Entry], asyncio.Future[None], asyncio.AbstractEventLoop]] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def append(self, entries: Sequence[Entry]) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self._lock:
            self._queue.put((entries, done, loop))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="blink-journal", daemon=True).start()
        return done

    def _run(self) -> None:
        q = self._queue
        while True:
            try:
                entries, done, loop = q.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:  # (an append puts under this lock: none can be left behind)
                    if q.empty():
                        self._running = False
                        return
                continue
            error: BaseException | None = None
            try:
                self.journal.append(entries)
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


def _write_residence(path: str, values: Sequence[int], steps: int = 0) -> None:
    """Percentiles (ms) of the residence times, one line: ``50:0.41 90:1.2 99:5.3 99.9:9.8 100:12.0 n=...
    steps=...`` (``n`` messages in ``steps`` steps)."""
    xs = sorted(values) or [0]
    parts = [f"{q:g}:{xs[min(len(xs) - 1, int(q / 100 * len(xs)))] / 1e6:.3f}" for q in (50, 90, 99, 99.9, 100)]
    try:
        with open(path, "w") as f:
            f.write(" ".join(parts) + f" n={len(values)} steps={steps}\n")
    except OSError as exc:
        log.warning("cannot write the residence times to %s: %s", path, exc)


def _wall_minus_mono() -> int:
    """The wall clock minus the monotonic clock, from the tightest of a few paired reads."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) // 2)
    assert best is not None
    return best[1]


#: A forked child's answer: the snapshot's length and the CPU seconds it took, then the snapshot.
_CHILD_HEAD = struct.Struct("<Qd")


def _snapshot_child(core: RelayCore, read_fd: int, write_fd: int) -> NoReturn:
    """In a child forked between two steps: pickle the core (this process's copy of it, as it was at
    the fork), write it to the pipe and exit at once -- no cleanup of what belongs to the parent."""
    code = 1
    try:
        os.close(read_fd)
        # A signal meant for the relay's process group must not reach the parent's event loop through
        # the wake-up descriptor this child shares with it: the child just dies of it.
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        gc.disable()
        _background()
        started = time.process_time()
        blob = snapshots.dump(core)
        _write_all(write_fd, _CHILD_HEAD.pack(len(blob), time.process_time() - started))
        _write_all(write_fd, blob)  # (not head + blob: a copy of the whole snapshot)
        code = 0
    finally:
        os._exit(code)


def _background() -> None:
    """This process runs only on CPU time nobody else wants (a snapshot's child: the relay, its
    broker and its players come first; the snapshot just takes longer on a busy machine)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux
        try:
            os.nice(19)
        except OSError:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_snapshot(fd: int) -> tuple[bytearray | None, float, int]:
    """A forked child's answer (closes ``fd``): the snapshot -- read straight into one buffer of the
    length its head announces (see the header's Memory) -- the CPU seconds it took, and how many
    bytes came in all. The snapshot is None unless it came whole and nothing came after it."""
    try:
        head = bytearray(_CHILD_HEAD.size)
        received = _read_into(fd, head)
        if received < len(head):
            return None, 0.0, received
        length, cpu_s = _CHILD_HEAD.unpack(head)
        blob = bytearray(length)
        got = _read_into(fd, blob)
        received += got
        more = len(os.read(fd, 1)) if got == length else 0
        received += more
        return (blob if got == length and not more else None), cpu_s, received
    finally:
        os.close(fd)


def _read_into(fd: int, buf: bytearray) -> int:
    """Fill ``buf`` from ``fd`` (fewer bytes only at the end of the stream); how many came."""
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            break
        got += n
    return got


_malloc_tuned = False


def tune_malloc() -> bool:
    """Fix glibc malloc's mmap and trim thresholds for this process (see the header's Memory), once.
    Not where the environment sets glibc's malloc itself, nor where the C library is not glibc.
    Whether they were set."""
    global _malloc_tuned
    if _malloc_tuned:
        return True
    if any(k.startswith("MALLOC_") for k in os.environ) or "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        if not hasattr(libc, "gnu_get_libc_version"):
            return False  # another C library: its mallopt (if any) means something else
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _malloc_tuned = bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD))
    return _malloc_tuned


def _dump_timed(core: RelayCore) -> tuple[bytes, float]:
    """The core's snapshot blob and the CPU time serialising it took (this thread's only: the wall
    time of a busy machine, or of the event loop receiving meanwhile, is not the snapshot's cost)."""
    started = time.thread_time()
    blob = snapshots.dump(core)
    return blob, time.thread_time() - started


#: Kept for older importers; the packer is ``mqttkit.packets.pack_publish``.
_pack_publish = pack_publish


__all__ = ["RelayShell", "feed", "send_publishes"]
