"""How a broker's connection set-up time grows with the clients it already holds.

How this works
--------------
Starts ``blink serve --no-journal --port P`` (``--embedded`` unless ``--broker-kind default``; from
``--serve-root``, to compare revisions), then connects ``--clients`` clients one after another, as
the load generator's players do (CONNECT, then SUBSCRIBE to the client's private topic and to a
match's events), each waiting for its SUBACK before the next starts, and keeps them all open. It
prints the median and 90th percentile time of a connection (CONNECT to SUBACK) and the broker's CPU
per connection in each batch of ``--batch``: flat when set-up costs the same however many clients
are there, rising when it grows with them.

    .venv/bin/python bench/connect_bench.py --clients 800
    .venv/bin/python bench/connect_bench.py --clients 800 --serve-root /tmp/old
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import cpu_s, stop  # noqa: E402
from client import new_client_id  # noqa: E402
from mqttkit import free_port  # noqa: E402
from mqttkit.connection import connect as mqtt_connect  # noqa: E402
from protocol.topics import Topics  # noqa: E402


async def run(port: int, broker_pid: int, clients: int, batch: int, topics: Topics) -> None:
    conns = []
    print("clients  connect p50 / p90 ms  broker CPU ms per connection", flush=True)
    try:
        for first in range(0, clients, batch):
            times = []
            cpu0 = cpu_s(broker_pid)
            for i in range(first, min(clients, first + batch)):
                cid = new_client_id("c")
                t0 = time.perf_counter()
                conn = await mqtt_connect("127.0.0.1", port, client_id=cid, on_messages=lambda msgs: None, keepalive=30,
                                          timeout=30)
                await conn.subscribe([(topics.client(cid), 0), (topics.ev(f"M{i // 2}"), 0)], timeout=30)
                times.append(1000 * (time.perf_counter() - t0))
                conns.append(conn)
            cpu = 1000 * (cpu_s(broker_pid) - cpu0) / len(times)
            q = statistics.quantiles(times, n=10)
            print(f"{first + len(times):>7}  {statistics.median(times):8.2f} / {q[8]:6.2f}  {cpu:8.2f}", flush=True)
    finally:
        for conn in conns:
            conn.abort()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=800, help="clients to connect in all")
    p.add_argument("--batch", type=int, default=100, help="clients per line of the report")
    p.add_argument("--broker-kind", choices=("embedded", "default"), default="embedded")
    p.add_argument("--serve-root", type=Path, default=ROOT, metavar="DIR", help="run blink serve from this checkout")
    args = p.parse_args()
    if args.clients < 1 or args.batch < 1:
        p.error("--clients and --batch must be positive")
    port = free_port()
    prefix = f"connect{port}/v1"
    serve = subprocess.Popen([sys.executable, "-m", "client.cli", "--prefix", prefix, "serve", "--no-journal",
                              "--port", str(port), *(["--embedded"] if args.broker_kind == "embedded" else [])],
                             cwd=args.serve_root.resolve(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        found = re.search(r"pid (\d+)\)", line)
        if found is None:
            print(f"connect_bench: blink serve did not start: {line.strip()!r}", file=sys.stderr)
            return 1
        asyncio.run(run(port, int(found.group(1)), args.clients, args.batch, Topics(prefix)))
    finally:
        stop(serve, signal.SIGINT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
