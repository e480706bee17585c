"""The relay's curve at 1 to 2,000 concurrent human-pace BLINK matches.

How this works
--------------
For every step (``--steps``, default 1, 10, 100, 300, 1000, 2000 matches) the script starts, as
separate processes and fresh for that step: a Mosquitto on a free loopback port (anonymous,
no persistence, ``set_tcp_nodelay true``, ``max_queued_messages 10000``), ``blink serve --broker``
on it exactly as a user would start it (the journal on, in a temporary ``--data`` directory, fsync
every batch: the default), and ``blink load --server URL --relay-pid PID --matches N --duration S
--json``. It adds to ``blink load``'s own figures what only the outside can see: Mosquitto's CPU
share, the machine's load average, and (``--residence``) the relay's own residence time -- from the
read of a message to the write of its outputs -- as the relay measures it when
``BLINK_RESIDENCE`` names a file (relay/memdiag.py writes its percentiles there at exit). The
generator's event-loop lag in ``blink load``'s output says when the generator, not the relay, was
the limit. ``CURVE_RELAY_ERR=FILE`` keeps the relay's stderr (its warnings) in FILE. The relay
inherits the environment, so ``BLINK_MEMDUMP=/tmp/mem-{pid}.txt`` (``relay/memdiag.py``) has each
step's relay write where its memory is when it stops (``BLINK_MEMDUMP_FRAMES=0``: without
tracemalloc, which slows the relay several times over; with it, use fewer matches).

    .venv/bin/python bench/load_curve.py                        # the whole curve, ~3 minutes
    .venv/bin/python bench/load_curve.py --steps 1000 --duration 30 --json
    .venv/bin/python bench/load_curve.py --journal off          # compare: no journal
    .venv/bin/python bench/load_curve.py --steps 1000 --relay-root /tmp/old   # another revision's relay

(Both processes run with this checkout's Python environment; ``-m client.cli`` imports the code of
the directory it runs in.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import cpu_s, find_mosquitto, stop, wait_port  # noqa: E402
from mqttkit import free_port  # noqa: E402


def one_step(matches: int, duration: float, journal: str, residence: bool, prefix: str,
             relay_root: Path = ROOT, generator_root: Path = ROOT) -> dict[str, Any]:
    binary = find_mosquitto()
    if binary is None:
        raise SystemExit("load_curve: mosquitto is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="blink-curve-"))
    tmp.chmod(0o755)  # Mosquitto started as root drops to its own user
    procs: list[subprocess.Popen[Any]] = []
    try:
        port = free_port()
        conf = tmp / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "set_tcp_nodelay true\nmax_queued_messages 10000\nlog_dest stderr\nlog_type error\n")
        conf.chmod(0o644)
        broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(broker)
        wait_port(port)
        url = f"mqtt://127.0.0.1:{port}"
        env = dict(os.environ)
        res_file = tmp / "residence.txt"
        if residence:
            env["BLINK_RESIDENCE"] = str(res_file)
        journal_args = {"full": ["--data", str(tmp / "data")],
                        "normal": ["--data", str(tmp / "data"), "--sync", "normal"],
                        "off": ["--no-journal"]}[journal]
        relay = subprocess.Popen([sys.executable, "-m", "client.cli", "--prefix", prefix, "serve", "--broker", url,
                                  *journal_args], cwd=relay_root, env=env,
                                 stdout=subprocess.DEVNULL, stderr=open(os.environ.get("CURVE_RELAY_ERR", tmp / "relay.err"), "wb"))
        procs.append(relay)
        broker_cpu0 = cpu_s(broker.pid)
        started = time.monotonic()
        load = subprocess.run([sys.executable, "-m", "client.cli", "--prefix", prefix, "load", "--server", url,
                               "--relay-pid", str(relay.pid), "--matches", str(matches), "--duration", str(duration),
                               "--json"], cwd=generator_root, capture_output=True, text=True)
        elapsed = time.monotonic() - started
        broker_cpu = cpu_s(broker.pid) - broker_cpu0
        loadavg = os.getloadavg()[0]
        if load.returncode != 0:
            return {"matches": matches, "error": (load.stderr.strip().splitlines() or ["?"])[-1]}
        result: dict[str, Any] = json.loads(load.stdout)
        # Mosquitto's share over the whole `blink load` run (set-up included): an upper bound of its
        # share in the measured window.
        result["broker_cpu_pct"] = round(100 * broker_cpu / elapsed, 1)
        result["load_average"] = round(loadavg, 2)
        stop(relay, signal.SIGINT)
        if residence and res_file.exists():
            parts = res_file.read_text().split()
            result["relay_residence_ms"] = dict(
                (k, float(v)) for k, v in (part.split(":") for part in parts if ":" in part))
            counts = dict(part.split("=", 1) for part in parts if "=" in part)
            steps, n = counts.get("steps", ""), counts.get("n", "")
            if steps.isdigit() and int(steps) and n.isdigit():
                # messages per step (the whole run, set-up included): with the journal on, per commit
                result["relay_msgs_per_step"] = round(int(n) / int(steps), 2)
        return result
    finally:
        for proc in reversed(procs):
            stop(proc, signal.SIGINT if proc is not procs[0] else signal.SIGTERM)
        shutil.rmtree(tmp, ignore_errors=True)


def row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['matches']:>7,}  error: {r['error']}"
    v, lag = r["verdict_ms"], r["generator_lag_ms"]
    res = r.get("relay_residence_ms")
    res_s = f"{res.get('50', 0):6.2f} /{res.get('99', 0):7.2f}" if res else "      --      "
    return (f"{r['matches']:>7,}  {r['actions_per_s']:>9,.1f}  {v['p50']:7.2f} /{v['p90']:8.2f} /{v['p99']:8.2f}"
            f"  {r['unanswered']:>6}  {res_s}  {r['relay_cpu_pct'] or 0:5.1f} %  {r['relay_rss_mb'] or 0:6.1f} MB"
            f"  {r.get('generator_cpu_pct') or 0:5.1f} %  {r['broker_cpu_pct']:5.1f} %  {lag['p50']:6.1f} /{lag['p99']:7.1f}"
            f"  {r['load_average']:5.2f}")


HEADER = ("matches  actions/s  verdict p50 / p90 / p99 ms  unansw  relay res p50/p99  relay cpu  relay rss"
          "  gen cpu  mosq cpu  gen lag p50/p99 ms  load")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="1,10,100,300,1000,2000", help="matches per step, comma-separated")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per step")
    p.add_argument("--journal", choices=("full", "normal", "off"), default="full",
                   help="the relay's journal: full (blink serve's default), normal (--sync normal) or off")
    p.add_argument("--no-residence", dest="residence", action="store_false",
                   help="do not ask the relay for its residence times")
    p.add_argument("--json", action="store_true", help="one JSON list of every step's result")
    p.add_argument("--relay-root", type=Path, default=ROOT, metavar="DIR",
                   help="run the relay from this checkout (e.g. `git archive REV | tar -x -C DIR`), to compare revisions")
    p.add_argument("--generator-root", type=Path, default=ROOT, metavar="DIR",
                   help="run `blink load` from this checkout")
    args = p.parse_args()
    try:
        steps = [int(x) for x in args.steps.split(",") if x.strip()]
    except ValueError:
        p.error(f"--steps must be numbers, not {args.steps!r}")
    if not steps or any(n < 1 for n in steps):
        p.error("--steps must be positive numbers")
    results = []
    if not args.json:
        print(f"journal {args.journal}, {args.duration:.0f} s a step, {os.cpu_count()} CPUs")
        print(HEADER, flush=True)
    for n in steps:
        r = one_step(n, args.duration, args.journal, args.residence, f"curve{os.getpid()}/v1",
                     args.relay_root.resolve(), args.generator_root.resolve())
        results.append(r)
        if not args.json:
            print(row(r), flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
