"""Capacity on a NATS cluster: ``blink load`` against 1 relay and against 2 relays, side by side.

How this works
--------------
For each relay count R (``--relays 1,2``) a fresh 3-node NATS cluster is started (``blink cluster
up``'s functions; fresh so that no journal or lease of the previous step is replayed), R relays
``blink serve --broker MQTT --cluster NATS --shards-total S`` are started (each its own node first)
and waited for until every shard is served, then ``blink load --server MQTT --matches N --pace max
--duration D --json`` runs its players on the cluster's first node. The relays' CPU is read from
``/proc/PID/stat`` around the measured window; the figures are what ``blink load`` reports
(actions/s, play -> verdict percentiles, unanswered plays) plus the relays' CPU share and
their CPU per action (all relays' CPU during the run / actions played: with R relays every relay
receives every action, so this is where a relay's cost per received message shows), the NATS
nodes' CPU share (together) and the load generator's. The relays are started one after another
(each once it is running), as simultaneous starts race on creating the lease buckets.

The machine is shared and has 2 cores: NATS, the load generator and the relays all compete for them,
so the ratio between the two rows is what this shows, not absolute capacity.

    .venv/bin/python bench/cluster_load_bench.py --matches 40 --duration 20
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import cpu_s  # noqa: E402
from client.tools import nats_cluster  # noqa: E402

BLINK = [sys.executable, "-m", "client.cli"]
SERVES = re.compile(r"serves shard (\d+)")
STOPS = re.compile(r"stopped serving shard (\d+)")


def served(outs: list[Path]) -> set[str]:
    held: set[str] = set()
    for out in outs:
        mine: set[str] = set()
        for line in out.read_text(errors="replace").splitlines():
            if (g := SERVES.search(line)) is not None:
                mine.add(g.group(1))
            elif (g := STOPS.search(line)) is not None:
                mine.discard(g.group(1))
        held |= mine
    return held


def step(relays: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    with nats_cluster.running_cluster(3, tmp / f"nats{relays}") as cluster:
        procs: list[subprocess.Popen[bytes]] = []
        outs: list[Path] = []
        try:
            for i in range(relays):
                out = tmp / f"r{relays}-{i}.out"
                brokers = ",".join(cluster.mqtt[i:] + cluster.mqtt[:i])
                procs.append(subprocess.Popen(
                    [*BLINK, "serve", "--broker", brokers, "--cluster", ",".join(cluster.nats),
                     "--shards-total", str(args.shards), "--relay-id", f"r{i}", "--data", str(tmp / f"d{relays}-{i}")],
                    stdout=open(out, "wb"), stderr=subprocess.STDOUT, cwd=ROOT))
                outs.append(out)
                # One after the other: relays starting at the very same moment race on creating the
                # cluster's lease buckets ("cannot set up the leases: nats: no response from stream").
                up = time.monotonic() + 60
                while "running on broker" not in out.read_text(errors="replace"):
                    if time.monotonic() > up or procs[-1].poll() is not None:
                        raise SystemExit(f"relay r{i} did not start: {out.read_text(errors='replace')[-300:]}")
                    time.sleep(0.1)
            deadline = time.monotonic() + 120
            want = {str(s) for s in range(args.shards)}
            while not (served(outs) == want and all(SERVES.search(o.read_text(errors="replace")) for o in outs)):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise SystemExit(f"the relays did not serve every shard: {[o.read_text()[-300:] for o in outs]}")
                time.sleep(0.2)
            time.sleep(2 * 4.0)  # let the shards settle (balancing moves one shard per tick)
            before = [cpu_s(p.pid) for p in procs]
            nats_before = [cpu_s(n.pid) for n in cluster.nodes]
            t0 = time.monotonic()
            load = subprocess.run([*BLINK, "load", "--server", cluster.mqtt[0], "--matches", str(args.matches),
                                   "--pace", args.pace, "--duration", str(args.duration), "--json"],
                                  capture_output=True, text=True, cwd=ROOT, timeout=args.duration + 300)
            wall = time.monotonic() - t0
            used = [cpu_s(p.pid) - b for p, b in zip(procs, before)]
            nats_used = sum(cpu_s(n.pid) - b for n, b in zip(cluster.nodes, nats_before))
            if load.returncode != 0:
                raise SystemExit(f"blink load failed: {load.stderr.strip()[-500:]}")
            report = json.loads(load.stdout)
            actions = report.get("actions") or 0
            return {"relays": relays, "load": report, "relay_cpu_share": [round(u / wall, 3) for u in used],
                    # every relay's CPU over the run (settling and drain included) per action played
                    "relay_cpu_us_per_action": round(sum(used) / actions * 1e6, 1) if actions else None,
                    "nats_cpu_share": round(nats_used / wall, 3),  # the 3 nodes together (of 2 cores)
                    "shards_per_relay": [len(served([o])) for o in outs]}
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relays", default="1,2")
    ap.add_argument("--matches", type=int, default=40)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--pace", default="max", choices=["max", "human"])
    ap.add_argument("--shards", type=int, default=8)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="blink-cluster-load-") as tmp:
        for r in [int(x) for x in args.relays.split(",")]:
            rows.append(step(r, args, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    print(f"{'relays':>6} {'actions/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'unanswered':>10} {'relay cpu':>18} "
          f"{'relay cpu µs/action':>20} {'nats cpu':>8} {'generator cpu':>13}")
    for row in rows:
        load = row["load"]
        print(f"{row['relays']:>6} {load.get('actions_per_s', '?'):>10} {str(load.get('verdict_ms', {}).get('p50', '?')):>7} "
              f"{str(load.get('verdict_ms', {}).get('p99', '?')):>7} {str(load.get('unanswered', '?')):>10} "
              f"{str(row['relay_cpu_share']):>18} {str(row.get('relay_cpu_us_per_action')):>20} "
              f"{str(row.get('nats_cpu_share')):>8} {str(load.get('generator_cpu_pct', '?')) + ' %':>13}")
    if len(rows) >= 2 and rows[0]["load"].get("actions_per_s"):
        print(f"ratio {rows[-1]['relays']} relays / {rows[0]['relays']}: "
              f"{rows[-1]['load']['actions_per_s'] / rows[0]['load']['actions_per_s']:.2f}")


if __name__ == "__main__":
    main()
