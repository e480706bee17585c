"""`blink load` throughput with the relay's journal on against the journal off, in the same run.

How this works
--------------
The aim: journalling every input costs `blink load` throughput no more than 10 %. Each
run starts a Mosquitto of its own on a free port (``blink --prefix P broker-config DIR --port
PORT``), a relay ``blink --prefix P serve --broker LOGIN_URL`` either with ``--data DIR`` (the
journal as deployed: one fsync per step) or with ``--no-journal``, and ``blink --prefix P load
--server mqtt://127.0.0.1:PORT --relay-pid PID --matches N --pace PACE --duration S --json``; then
stops all three. Runs alternate off, on, off, on, ... (``--rounds`` pairs), so both see the same
machine, and the script prints every run (actions/s, verdict p50/p99, relay CPU) and the ratio of
the means, journal on / journal off.

    .venv/bin/python bench/journal_onoff.py --matches 50 --pace max --duration 30 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import stop  # noqa: E402
from mqttkit import free_port  # noqa: E402
BLINK = [sys.executable, "-m", "client.cli"] if not (Path(sys.executable).parent / "blink").exists() \
    else [str(Path(sys.executable).parent / "blink")]


def one_run(journal: bool, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="journal-onoff-"))
    work.chmod(0o755)  # started as root, Mosquitto drops to its own user and must read its files
    prefix = f"jo{os.getpid()}"
    port = free_port()
    procs: list[subprocess.Popen[Any]] = []
    try:
        out = subprocess.run([*BLINK, "--prefix", prefix, "broker-config", str(work / "broker"), "--port", str(port)],
                             capture_output=True, text=True, check=True, cwd=ROOT).stdout
        url = next(line for line in out.splitlines() if line.startswith("mqtt://"))
        procs.append(subprocess.Popen(["mosquitto", "-c", str(work / "broker" / "mosquitto.conf")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.1)
        store = ["--data", str(work / "data")] if journal else ["--no-journal"]
        relay = subprocess.Popen([*BLINK, "--prefix", prefix, "serve", "--broker", url, *store],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        procs.append(relay)
        assert relay.stdout is not None
        line = relay.stdout.readline()
        if "running with" not in line:
            raise RuntimeError(f"the relay did not start: {line!r}")
        load = subprocess.run([*BLINK, "--prefix", prefix, "load", "--server", f"mqtt://127.0.0.1:{port}",
                               "--relay-pid", str(relay.pid), "--matches", str(args.matches), "--pace", args.pace,
                               "--duration", str(args.duration), "--json"],
                              capture_output=True, text=True, cwd=ROOT, timeout=args.duration + 300)
        if load.returncode != 0:
            raise RuntimeError(f"blink load failed: {load.stderr.strip()[-300:]}")
        report: dict[str, Any] = json.loads(load.stdout)
        report["journal"] = journal
        report["load_avg"] = os.getloadavg()[0]
        return report
    finally:
        for p in reversed(procs):
            stop(p, signal.SIGINT, 20)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--matches", type=int, default=50)
    ap.add_argument("--pace", choices=("human", "max"), default="max")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs (off, on)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for journal in (False, True):
            r = one_run(journal, args)
            runs.append(r)
            if not args.json:
                v = r.get("verdict_ms", {})
                print(f"journal {'on ' if journal else 'off'}  {r['actions_per_s']:8.1f} actions/s  verdict p50 "
                      f"{v.get('p50', -1):7.1f} ms  p99 {v.get('p99', -1):7.1f} ms  relay CPU {r.get('relay_cpu_pct')} %  "
                      f"unanswered {r.get('unanswered')}  load {r['load_avg']:.1f}", flush=True)
    mean = {j: sum(r["actions_per_s"] for r in runs if r["journal"] is j) / args.rounds for j in (False, True)}
    ratio = mean[True] / mean[False] if mean[False] else float("nan")
    if args.json:
        print(json.dumps({"runs": runs, "mean_off": mean[False], "mean_on": mean[True], "ratio_on_off": ratio}))
    else:
        print(f"mean actions/s: journal off {mean[False]:.1f}, on {mean[True]:.1f}; on/off = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
