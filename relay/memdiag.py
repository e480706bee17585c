"""The relay's diagnostics for benchmarks (its memory, its messages' residence), and malloc's tuning.

How this works
--------------
``Diagnostics`` is what a relay is asked to report; nothing of it changes what the relay does.
``Diagnostics.from_environ`` reads the documented diagnostic variables (docs/architecture.md,
"Diagnostics"), and the hosting entry points alone call it -- ``blink serve``, the local relay of
``blink play`` and the tests' servers -- handing the result down in ``RelaySettings``:

- ``BLINK_RESIDENCE=FILE``: the relay writes percentiles of its messages' residence (from the read
  to the write of their step's outputs) to FILE when it stops (``write_residence``);
- ``BLINK_MEMDUMP=FILE`` and ``BLINK_MEMDUMP_FRAMES=N``: the memory reports below.

When ``memdump`` names a file (``{pid}`` in it is replaced by the process id), the relay
calls ``install`` as it starts: ``tracemalloc`` traces every Python allocation from then on
with ``memdump_frames`` frames of traceback (default 10; ``0`` leaves tracemalloc off -- it
made the relay need three to four times the CPU a play, so a loaded relay falls behind and its
backlog shows in the figures, and it adds its own memory: RSS figures are taken without it), and
SIGUSR2 appends a report to FILE. One more is appended when the relay stops (and then, last,
what ``malloc_trim(0)`` gives back). A report holds:

- the process's ``VmRSS``/``VmHWM`` and ``/proc/self/smaps_rollup`` (what the kernel counts);
- glibc's ``mallinfo2`` (the main arena's heap, bytes in use, bytes free but kept, mmapped
  chunks; all arenas' totals) and ``malloc_info``'s XML (one line a heap), where glibc is the C
  library -- the gap between RSS and what Python holds is often the allocator's;
- CPython's own small-object allocator (``sys._debugmallocstats``'s totals: arenas, bytes in
  blocks in use and free; it says nothing while tracemalloc runs);
- the number and ``sys.getsizeof`` total of the objects the cyclic collector tracks, by type
  (containers only: str, bytes and int are not tracked, tracemalloc sees them);
- tracemalloc's total and its largest allocation sites, by traceback and by line.

Nothing of the report changes what the relay does; it reads only. A caller may pass extra lines
(the relay gives the number of matches).

``tune_malloc`` does change one thing, as every relay starts: glibc's malloc raises its threshold
for serving a large block by ``mmap`` to the size of the largest one freed (up to 32 MB), and the
threshold for giving the top of a heap back to twice that. A snapshot's few-MB buffers, read in a
worker thread (each has its arena), then came from the heaps and stayed there when freed: 40-60 MB
of free but resident heap at 1,000 matches. So both are fixed at 1 MB (above the largest read of
the broker's socket, 256 kB): a block that large is mapped and unmapped on its own, and a heap
gives back any free top over it. An environment that sets glibc's ``MALLOC_*`` variables or
``GLIBC_TUNABLES`` keeps its choice.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import functools
import os
import logging
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger("blink.relay")
MALLOC_MMAP_THRESHOLD = 1 << 20
MALLOC_TRIM_THRESHOLD = 1 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (glibc's malloc.h)
DEFAULT_FRAMES = 10


@dataclass(frozen=True)
class Diagnostics:
    """What a relay reports for a benchmark (see the header); the default reports nothing."""

    residence: str | None = None  # the file for the residence percentiles
    memdump: str | None = None  # the memory reports' file (``{pid}``: the process id)
    memdump_frames: int = DEFAULT_FRAMES  # tracemalloc's frames (0: off)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Diagnostics:
        """The documented diagnostic variables (see the header); one that is not a number is left at
        its default."""
        frames = environ.get("BLINK_MEMDUMP_FRAMES", "")
        return cls(environ.get("BLINK_RESIDENCE") or None, environ.get("BLINK_MEMDUMP") or None,
                   int(frames) if frames.isdigit() else DEFAULT_FRAMES)

    def memdump_target(self) -> str | None:
        """The memory reports' file, ``{pid}`` replaced (None: no reports)."""
        return self.memdump.replace("{pid}", str(os.getpid())) if self.memdump else None


@functools.cache
def tune_malloc() -> bool:
    """Fix glibc malloc's mmap and trim thresholds for this process (see the header), once (a second
    call answers the first's result); not where the environment sets glibc's malloc itself, nor
    where the C library is not glibc (its mallopt, if any, means something else). Whether they are set."""
    if any(k.startswith("MALLOC_") for k in os.environ) or "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD))


TOP_TRACEBACKS = 25
TOP_LINES = 40
TOP_TYPES = 40


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
              "keepcost")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def install(path: str, add_signal_handler: Callable[[int, Callable[[], None]], None] | None = None,
            extra: Callable[[], list[str]] | None = None, frames: int = DEFAULT_FRAMES) -> Callable[[str], None]:
    """Start tracing (``frames`` of traceback; 0: off) and, given ``add_signal_handler`` (an event
    loop's), append a report on SIGUSR2; returns the function that appends one (``label`` heads it)."""
    if frames > 0 and not tracemalloc.is_tracing():
        tracemalloc.start(frames)

    def dump(label: str) -> None:
        write_report(path, label, extra() if extra else [])

    if add_signal_handler is not None:
        import signal

        try:
            add_signal_handler(signal.SIGUSR2, lambda: dump("SIGUSR2"))
        except (RuntimeError, ValueError, NotImplementedError, AttributeError):
            pass  # a loop outside the main thread, or no SIGUSR2 here: the report at exit only
    return dump


def write_report(path: str, label: str, extra: list[str]) -> None:
    lines = [f"=== memdiag {label} pid {os.getpid()} at {time.strftime('%H:%M:%S')} ==="]
    lines += extra
    lines += _proc_lines()
    lines += _malloc_lines()
    lines += _pymalloc_lines()
    lines += _gc_lines()
    lines += _tracemalloc_lines()
    if label == "exit":
        lines += _trim_lines()
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n")


def _proc_lines() -> list[str]:
    out = []
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads")):
                out.append(line)
        out.append("-- smaps_rollup")
        out += Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]
    except OSError as exc:
        out.append(f"(no /proc: {exc})")
    return out


def _malloc_lines() -> list[str]:
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return ["(no glibc mallinfo2)"]
    libc.mallinfo2.restype = _Mallinfo2
    mi = libc.mallinfo2()
    kb = {name: getattr(mi, name) // 1024 for name in _MALLINFO2}
    out = ["-- glibc mallinfo2 (kB): " + " ".join(f"{k}={v}" for k, v in kb.items())]
    # malloc_info writes XML to a FILE*: into a memory stream, read back here.
    try:
        buf, size = ctypes.c_char_p(), ctypes.c_size_t()
        libc.open_memstream.restype = ctypes.c_void_p
        stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        text = (buf.value or b"").decode("ascii", "replace")
        libc.free(buf)
        out.append("-- malloc_info heaps (size / total / mprotect, kB):")
        for part in text.split("<heap nr=")[1:]:
            nr = part.split('"')[1]
            head = part.split("</sizes>")[1] if "</sizes>" in part else part
            fields = {}
            for tag in ('<total type="fast"', '<total type="rest"', '<system type="current"', '<aspace type="total"'):
                at = head.find(tag)
                if at >= 0:
                    fields[tag.split('"')[1]] = int(head[at:].split('size="')[1].split('"')[0]) // 1024
            out.append(f"  heap {nr}: " + " ".join(f"{k}={v}" for k, v in fields.items()))
    except (AttributeError, OSError, ValueError, IndexError) as exc:
        out.append(f"(malloc_info failed: {exc})")
    return out


def _pymalloc_lines() -> list[str]:
    """The totals of ``sys._debugmallocstats()`` (CPython's small-object allocator: its arenas are
    mmapped, outside glibc's heaps), which it prints to the C stderr: caught in a temporary file."""
    if not hasattr(sys, "_debugmallocstats"):
        return []
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("ascii", "replace")
    keep = ("# arenas", "# bytes in allocated blocks", "# bytes in available blocks", "unused pools",
            "# bytes lost to", "Total")
    return ["-- pymalloc (sys._debugmallocstats)"] + [
        "  " + " ".join(line.split()) for line in text.splitlines() if line.startswith(keep) or "unused pools" in line]


def _trim_lines() -> list[str]:
    """What glibc could give back: ``malloc_trim(0)``, then RSS again (at exit only: it changes
    the process it measures)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return []
    before = _rss_kb()
    libc.malloc_trim(0)
    return [f"-- malloc_trim(0) at exit: VmRSS {before} -> {_rss_kb()} kB"]


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _gc_lines() -> list[str]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
    out = [f"-- gc-tracked objects: {sum(counts.values())}, {sum(sizes.values()) // 1024} kB (getsizeof, shallow)"]
    for name, size in sizes.most_common(TOP_TYPES):
        out.append(f"  {size // 1024:>9} kB {counts[name]:>9}  {name}")
    return out


def _tracemalloc_lines() -> list[str]:
    if not tracemalloc.is_tracing():
        return ["-- tracemalloc off (memdump_frames 0)"]
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)])
    current, peak = tracemalloc.get_traced_memory()
    out = [f"-- tracemalloc: {current // 1024} kB traced now, {peak // 1024} kB at peak, "
           f"{tracemalloc.get_tracemalloc_memory() // 1024} kB of its own"]
    out.append("-- by line")
    for stat in snap.statistics("lineno")[:TOP_LINES]:
        frame = stat.traceback[0]
        out.append(f"  {stat.size // 1024:>9} kB {stat.count:>9}  {frame.filename}:{frame.lineno}")
    out.append("-- by traceback")
    for stat in snap.statistics("traceback")[:TOP_TRACEBACKS]:
        out.append(f"  {stat.size // 1024:>9} kB {stat.count:>9}")
        for line in stat.traceback.format(most_recent_first=True)[::2]:
            out.append(f"        {line.strip()}")
    return out


def write_residence(path: str, values: Sequence[int], steps: int = 0) -> None:
    """``Diagnostics.residence``: percentiles (ms) of how long each message waited between its read
    and the write of its step's outputs, one line: ``50:0.41 90:1.2 99:5.3 99.9:9.8 100:12.0 n=...
    steps=...`` (``n`` messages in ``steps`` steps)."""
    xs = sorted(values) or [0]
    parts = [f"{q:g}:{xs[min(len(xs) - 1, int(q / 100 * len(xs)))] / 1e6:.3f}" for q in (50, 90, 99, 99.9, 100)]
    try:
        with open(path, "w") as f:
            f.write(" ".join(parts) + f" n={len(values)} steps={steps}\n")
    except OSError as exc:
        log.warning("cannot write the residence times to %s: %s", path, exc)
