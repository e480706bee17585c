"""`blink serve` on its own broker at 10 to 400 concurrent human-pace BLINK matches.

How this works
--------------
For every step (``--steps``, default 10, 50, 100, 200, 400 matches) the script starts, as separate
processes and fresh for that step: ``blink serve --no-journal --port P`` exactly as a user would
start it -- with ``--embedded`` (the default here) the embedded broker with the relay inside it, one
process, with ``--broker-kind default`` whatever ``blink serve`` chooses (an installed Mosquitto in a
child process) --
then ``blink load --server mqtt://127.0.0.1:P --relay-pid RELAY --matches N --duration S --json``.
``blink load`` reports the verdict times and the relay's CPU and RSS over its measured window (with
the embedded broker, the broker's work is in it); a broker child is the pid the "running" line
names, and what only the outside can see is added here: the broker's CPU share (sampled from /proc every 0.25 s; the busiest window of the measured length in
the run -- an upper bound of its share in the measured window) and its RSS at the end of the run,
and the machine's load average.

    .venv/bin/python bench/serve_curve.py                              # the whole curve, ~4 minutes
    .venv/bin/python bench/serve_curve.py --steps 200 --duration 20 --json
    .venv/bin/python bench/serve_curve.py --broker-kind default       # Mosquitto, where installed
    .venv/bin/python bench/serve_curve.py --steps 200 --serve-root /tmp/old   # another revision's serve

``CURVE_SERVE_ERR=FILE`` keeps ``blink serve``'s stderr in FILE. A ``--profile DIR`` runs ``blink
serve`` under cProfile (``python -m cProfile``): it writes ``DIR/serve-STEP.prof`` when it stops.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import cpu_s, stop  # noqa: E402
from mqttkit import free_port  # noqa: E402

SAMPLE_S = 0.25


class CpuSampler(threading.Thread):
    """A process's CPU seconds every ``SAMPLE_S``, to find its busiest window afterwards."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.samples.append((time.monotonic(), cpu_s(self.pid)))
            except (OSError, IndexError, ValueError):
                return
            self.done.wait(SAMPLE_S)

    def busiest_pct(self, window: float) -> float | None:
        """The highest CPU share over any ``window`` seconds of the samples (all of them if shorter)."""
        s = self.samples
        if len(s) < 2:
            return None
        best = 0.0
        j = 0
        for i in range(len(s)):
            while j < len(s) - 1 and s[j][0] - s[i][0] < window:
                j += 1
            span = s[j][0] - s[i][0]
            if span <= 0:
                break
            best = max(best, (s[j][1] - s[i][1]) / span)
            if j == len(s) - 1 and span < window:
                break
        return round(100 * best, 1)


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def one_step(matches: int, duration: float, embedded: bool, prefix: str, profile: Path | None,
             serve_root: Path = ROOT) -> dict[str, Any]:
    port = free_port()
    profiled = ["-m", "cProfile", "-o", str(profile / f"serve-{matches}.prof")] if profile is not None else []
    err = open(os.environ.get("CURVE_SERVE_ERR", os.devnull), "ab")
    serve = subprocess.Popen([sys.executable, *profiled, "-m", "client.cli", "--prefix", prefix, "serve", "--no-journal",
                              "--port", str(port), *(["--embedded"] if embedded else [])], cwd=serve_root,
                             stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        found = re.search(r"\(([^()]*?)pid (\d+)\)", line)
        if "running" not in line or found is None:
            return {"matches": matches, "error": f"blink serve did not start: {line.strip()!r}"}
        broker_pid = int(found.group(2))
        inside = broker_pid == serve.pid  # the embedded broker: its work is the relay's process's
        threading.Thread(target=lambda: serve.stdout.read() if serve.stdout else None, daemon=True).start()
        sampler = CpuSampler(broker_pid)
        sampler.start()
        broker_cpu0, started = cpu_s(broker_pid), time.monotonic()
        load = subprocess.run([sys.executable, "-m", "client.cli", "--prefix", prefix, "load", "--server",
                               f"mqtt://127.0.0.1:{port}", "--relay-pid", str(serve.pid), "--matches", str(matches),
                               "--duration", str(duration), "--json"], cwd=ROOT, capture_output=True, text=True)
        elapsed = time.monotonic() - started
        broker_all = cpu_s(broker_pid) - broker_cpu0
        broker_rss = rss_mb(broker_pid)
        sampler.done.set()
        sampler.join()
        if load.returncode != 0:
            return {"matches": matches, "error": (load.stderr.strip().splitlines() or ["?"])[-1]}
        result: dict[str, Any] = json.loads(load.stdout)
        result["broker"] = "embedded (inside the relay)" if inside else found.group(1).split("(")[0].strip() or "default"
        result["broker_cpu_pct"] = None if inside else sampler.busiest_pct(duration)
        result["broker_cpu_whole_run_pct"] = None if inside else round(100 * broker_all / elapsed, 1)
        result["broker_rss_mb"] = None if inside else broker_rss
        result["load_average"] = round(os.getloadavg()[0], 2)
        return result
    finally:
        stop(serve, signal.SIGINT)
        err.close()


HEADER = ("matches  actions/s  verdict p50 / p99 ms  unansw  relay cpu / rss      broker cpu / rss     gen cpu"
          "  gen lag p99  load")


def row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['matches']:>7,}  error: {r['error']}"
    v, lag = r["verdict_ms"], r["generator_lag_ms"]
    return (f"{r['matches']:>7,}  {r['actions_per_s']:>9,.1f}  {v['p50']:8.2f} /{v['p99']:8.2f}  {r['unanswered']:>6}"
            f"  {r['relay_cpu_pct'] or 0:5.1f} % / {r['relay_rss_mb'] or 0:5.1f} MB"
            f"  {r['broker_cpu_pct'] or 0:5.1f} % / {r['broker_rss_mb'] or 0:5.1f} MB"
            f"  {r.get('generator_cpu_pct') or 0:5.1f} %  {lag['p99']:8.1f}  {r['load_average']:5.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="10,50,100,200,400", help="matches per step, comma-separated")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per step")
    p.add_argument("--broker-kind", choices=("embedded", "default"), default="embedded",
                   help="embedded: blink serve --embedded; default: the broker blink serve chooses")
    p.add_argument("--json", action="store_true", help="one JSON list of every step's result")
    p.add_argument("--profile", type=Path, metavar="DIR", help="profile blink serve (cProfile) into DIR")
    p.add_argument("--serve-root", type=Path, default=ROOT, metavar="DIR",
                   help="run blink serve from this checkout (e.g. `git archive REV | tar -x -C DIR`), to compare revisions")
    args = p.parse_args()
    try:
        steps = [int(x) for x in args.steps.split(",") if x.strip()]
    except ValueError:
        p.error(f"--steps must be numbers, not {args.steps!r}")
    if not steps or any(n < 1 for n in steps):
        p.error("--steps must be positive numbers")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    results = []
    if not args.json:
        print(f"blink serve ({args.broker_kind} broker), {args.duration:.0f} s a step, {os.cpu_count()} CPUs")
        print(HEADER, flush=True)
    for n in steps:
        r = one_step(n, args.duration, args.broker_kind == "embedded", f"serve{os.getpid()}/v1",
                     args.profile.resolve() if args.profile else None, args.serve_root.resolve())
        results.append(r)
        if not args.json:
            print(row(r), flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
