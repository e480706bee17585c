"""The relay shell's CPU per step and per message, journal on: no broker.

What it measures
----------------
``Relay.step()`` as the stepper runs it -- the inbox's BLINK plays handed to the core, the
batch appended to a real SQLite journal (``synchronous=FULL``: an fsync per commit, in the shell's
journal thread), the outputs encoded and packed for a connection that only counts the bytes --
with ``--batch`` plays in the inbox per step, over ``--steps`` steps spread over ``--pool`` live
matches (plays chosen by the real rules engine from the true state, as ``bench/core_bench.py``).
The figure is the process's CPU time (every thread: the journal's thread and its fsyncs
included) per step and per play, minus the time spent choosing the plays. The core is the same
in both revisions compared, so the difference is the shell's and the journal's per-step and
per-message costs. ``--root DIR`` runs another revision's shell (``git archive REV | tar -x -C
DIR``); ``--against DIR`` runs both, alternating, each in its own process.

    .venv/bin/python bench/step_bench.py [--batch 1,4,16] [--steps 2000] [--json]
    .venv/bin/python bench/step_bench.py --against /tmp/base [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _shell(address: Any, config: Any, journal: Any) -> Any:
    """A single relay on ``journal`` that never snapshots, as the revision measured builds one (a
    compared revision may take its settings as keywords)."""
    from relay.runtime import Relay

    try:
        from relay.ownership import WholeSpace
        from relay.runtime import RelaySettings
    except ImportError:
        return Relay(address, config=config, seed=3, journal=journal, snapshot_every_s=1e9, snapshot_every=10**9)
    return Relay(address, RelaySettings(config=config, seed=3, snapshot_every_s=1e9, snapshot_every=10**9),
                 WholeSpace(journal))


def measure(batch: int, steps: int, pool: int) -> dict[str, float]:
    from bench.core_bench import S, Bench
    from relay.storage import open_journal
    from relay.runtime import Relay
    from mqttkit import BrokerAddress

    class Sink:
        """A connection that takes every write and keeps only the byte count."""

        connected = True
        written = 0

        def write(self, data: bytes | bytearray) -> None:
            self.written += len(data)

    bench = Bench(seed=3)
    with tempfile.TemporaryDirectory(prefix="blink-step-bench-") as tmp:
        journal = open_journal(Path(tmp) / "data")
        shell = _shell(BrokerAddress("127.0.0.1", 1), bench.core.config, journal)
        shell.core = bench.core  # the bench's core, with its relaxed limits
        sink = Sink()
        shell._client = sink  # type: ignore[assignment]  # noqa: SLF001 - as the connection task sets it
        for i in range(pool):
            bench.new_match(i)
        bench.advance(4 * S)  # past the countdown

        async def run() -> tuple[float, float, int]:
            chose = 0.0
            i = idle = 0
            done = 0
            cpu0 = time.process_time()
            for _ in range(steps):
                c0 = time.thread_time()
                inbox: list[tuple[str, bytes, int]] = []
                # The core's clock is the bench's: a message read at monotonic ``t`` is at ``t + offset``.
                offset = shell.whole.mono_offset = bench.now - time.monotonic_ns()
                while len(inbox) < batch:
                    code = bench.codes[i % len(bench.codes)]
                    i += 1
                    nxt = bench.next_play(code)
                    if nxt is None:
                        idle += 1
                        if idle >= len(bench.codes):
                            bench.advance(S)
                            idle = 0
                            bench.renew()
                        continue
                    idle = 0
                    bench.now += 1_000_000
                    inbox.append((nxt[0], nxt[1], bench.now - offset))  # (one play a match per step)
                chose += time.thread_time() - c0
                shell._inbox = inbox  # noqa: SLF001 - as the connection task fills it
                await shell.step()
                done += len(inbox)
            return time.process_time() - cpu0 - chose, chose, done

        cpu, chose, done = asyncio.run(run())
        journal.close()
    return {"batch": batch, "steps": steps, "plays": done, "us_per_step": round(cpu / steps * 1e6, 1),
            "us_per_play": round(cpu / done * 1e6, 2), "choosing_us_per_play": round(chose / done * 1e6, 2),
            "bytes_out": sink.written}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", default="1,4,16", help="plays per step, comma-separated")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--pool", type=int, default=400, help="live matches the plays are spread over")
    p.add_argument("--root", type=Path, help="run this checkout's shell (another revision)")
    p.add_argument("--against", type=Path, metavar="DIR", help="run DIR's shell and this one, alternating")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    batches = [int(x) for x in args.batch.split(",") if x.strip()]
    here = Path(__file__).resolve().parent.parent
    if args.against is not None:
        rows: list[dict[str, Any]] = []
        for r in range(args.rounds):
            for side, root in (("base", args.against.resolve()), ("this", here)):
                cmd = [sys.executable, str(here / "bench" / "step_bench.py"), "--root", str(root), "--json",
                       "--batch", args.batch, "--steps", str(args.steps), "--pool", str(args.pool)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                for row in json.loads(out.stdout):
                    row.update(side=side, round=r, load=round(os.getloadavg()[0], 2))
                    rows.append(row)
                    if not args.json:
                        print(f"{side:5s} round {r}  batch {row['batch']:3d}  {row['us_per_step']:8.1f} us/step"
                              f"  {row['us_per_play']:7.2f} us/play  load {row['load']}", flush=True)
        if args.json:
            print(json.dumps(rows))
        return 0
    root = (args.root or here).resolve()
    sys.path.insert(0, str(root))
    os.chdir(root)
    results = [measure(b, args.steps, args.pool) for b in batches]
    if args.json:
        print(json.dumps(results))
    else:
        for row in results:
            print(f"batch {row['batch']:3d}  {row['us_per_step']:8.1f} us/step  {row['us_per_play']:7.2f} us/play"
                  f"  (choosing {row['choosing_us_per_play']} us/play, not counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
