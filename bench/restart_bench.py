"""Restart with many live matches: time from starting ``blink serve`` to its "running" line.

How this works
--------------
The set-up of bench/RESULTS.md's restart measurement (issue 11), in one script: a Mosquitto of
its own on a free port (``blink --prefix P broker-config DIR --port PORT``), a relay ``blink
--prefix P serve --broker LOGIN_URL --data DATA``, and ``blink --prefix P load --server
mqtt://127.0.0.1:PORT --relay-pid PID --matches N --pace human --duration S``. After ``--kill-at``
seconds of load the relay is killed with SIGKILL; the load generator is stopped too ("quiet"),
and the data directory is copied aside. Then, ``--restarts`` times: the copy is put back, the
relay started on it, and the time from starting the process to its "running" line (printed once
it has recovered, connected, subscribed and published its online status) is reported with the
relay's own recovery line, the relay's CPU time (user + system) by then, and the time until the relay answers a request: a client (connected to
the broker before the relay starts) sends a ``Ping`` every 50 ms from the start and the first
``Pong`` counts (the relay answers requests once it has recovered, come online and published every
match's snapshot and every player's view for the clients to resync). The relay is then stopped.

    .venv/bin/python bench/restart_bench.py --matches 1000 --kill-at 75 --restarts 3
    .venv/bin/python bench/restart_bench.py --reuse DIR   # restart again from a kept journal copy
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python bench/restart_bench.py --reuse DIR   # another version's relay

The figures are wall-clock on whatever machine runs it: compare runs of the same journal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BLINK = [sys.executable, "-m", "client.cli"] if not (Path(sys.executable).parent / "blink").exists() \
    else [str(Path(sys.executable).parent / "blink")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_line(proc: subprocess.Popen[str], needle: str, deadline_s: float) -> tuple[str, list[str]]:
    lines: list[str] = []
    end = time.monotonic() + deadline_s
    assert proc.stdout is not None
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the relay exited before printing {needle!r}: {lines}")
        lines.append(line.rstrip())
        if needle in line:
            return line, lines
    raise RuntimeError(f"no {needle!r} within {deadline_s} s")


def start_relay(prefix: str, url: str, data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*BLINK, "--prefix", prefix, "serve", "--broker", url, "--data", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)


async def first_pong(prefix: str, port: int, started: threading.Event, box: dict[str, float]) -> None:
    """Ping the relay every 50 ms from the moment it is started; note when the first Pong arrives."""
    import aiomqtt

    from protocol import messages as m
    from protocol.codec import decode, encode
    from protocol.topics import Topics

    topics = Topics(prefix=prefix)
    me = f"p{os.urandom(16).hex()}"
    async with aiomqtt.Client("127.0.0.1", port, identifier=me) as client:
        await client.subscribe(topics.client(me), qos=0)
        box["connected"] = 1.0
        while not started.is_set():
            await asyncio.sleep(0.005)
        t0 = box["t0"]

        async def pinger() -> None:
            while True:
                await client.publish(topics.req(me), encode(m.Ping(t0=time.time_ns())), qos=0)
                await asyncio.sleep(0.05)

        task = asyncio.create_task(pinger())
        try:
            async for msg in client.messages:
                payload = msg.payload if isinstance(msg.payload, bytes) else b""
                try:
                    if isinstance(decode(payload), m.Pong):
                        box["pong_s"] = time.monotonic() - t0
                        return
                except Exception:  # noqa: BLE001 - anything else on the topic is not the answer
                    continue
        finally:
            task.cancel()


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far: steadier than wall time on a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restart(prefix: str, port: int, url: str, data: Path) -> dict[str, Any]:
    box: dict[str, float] = {}
    started = threading.Event()
    pinger = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(first_pong(prefix, port, started, box), 180)),
                              daemon=True)
    pinger.start()
    deadline = time.monotonic() + 60
    while "connected" not in box and time.monotonic() < deadline:
        time.sleep(0.01)
    start = box["t0"] = time.monotonic()
    relay = start_relay(prefix, url, data)
    started.set()
    try:
        _, _ = wait_line(relay, "running with", 600)
        serving = time.monotonic() - start
        cpu = process_cpu(relay.pid)
        rec, _ = wait_line(relay, "blink relay: recovered", 60)
        pinger.join(180)
        return {"start_to_serving_s": round(serving, 3), "cpu_to_serving_s": round(cpu, 3),
                "start_to_first_answer_s": round(box.get("pong_s", -1), 3), "recovered": rec.strip()}
    finally:
        relay.send_signal(signal.SIGINT)
        try:
            relay.wait(30)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait()


def journal_prefix(data: Path) -> str | None:
    """The topic prefix a kept journal was written with (a recovered relay keeps its own topics)."""
    import sqlite3

    db = sqlite3.connect(f"file:{data / 'journal.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT topic FROM entries WHERE topic IS NOT NULL LIMIT 1").fetchone()
    finally:
        db.close()
    if row is None:
        return None
    for marker in ("/lobby/req/", "/m/"):
        if marker in row[0]:
            return str(row[0].split(marker)[0])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--matches", type=int, default=1000)
    ap.add_argument("--kill-at", type=float, default=75.0, help="seconds of load before the kill -9")
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--reuse", type=Path, default=None, help="a kept journal copy: skip the load, only restart")
    ap.add_argument("--keep", type=Path, default=None, help="keep the killed relay's data directory here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="restart-bench-"))
    work.chmod(0o755)  # started as root, Mosquitto drops to its own user and must read its files
    prefix = (journal_prefix(args.reuse) if args.reuse else None) or f"rb{os.getpid()}"
    port = free_port()
    procs: list[subprocess.Popen[Any]] = []
    report: dict[str, Any] = {"matches": args.matches, "kill_at_s": args.kill_at, "restarts": []}
    try:
        out = subprocess.run([*BLINK, "--prefix", prefix, "broker-config", str(work / "broker"), "--port", str(port)],
                             capture_output=True, text=True, check=True, cwd=ROOT).stdout
        url = next(line for line in out.splitlines() if line.startswith("mqtt://"))
        broker = subprocess.Popen(["mosquitto", "-c", str(work / "broker" / "mosquitto.conf")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(broker)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"Mosquitto did not start on port {port}")
        data = work / "data"
        kept = args.reuse
        if kept is None:
            relay = start_relay(prefix, url, data)
            procs.append(relay)
            wait_line(relay, "running with", 120)
            load = subprocess.Popen([*BLINK, "--prefix", prefix, "load", "--server", f"mqtt://127.0.0.1:{port}",
                                     "--relay-pid", str(relay.pid), "--matches", str(args.matches), "--pace", "human",
                                     "--duration", str(args.kill_at + 600), "--timeout", "120", "--json"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
            procs.append(load)
            time.sleep(args.kill_at)  # a benchmark's schedule, not a synchronisation
            relay.kill()
            relay.wait()
            load.send_signal(signal.SIGINT)
            try:
                load.wait(30)
            except subprocess.TimeoutExpired:
                load.kill()
                load.wait()
            kept = args.keep or (work / "kept")
            shutil.copytree(data, kept, dirs_exist_ok=True)
            report["kept"] = str(kept)
        for _ in range(args.restarts):
            shutil.rmtree(data, ignore_errors=True)
            shutil.copytree(kept, data)
            (data / "journal.lock").unlink(missing_ok=True)
            r = restart(prefix, port, url, data)
            report["restarts"].append(r)
            if not args.json:
                print(f"start -> serving {r['start_to_serving_s']:.2f} s ({r['cpu_to_serving_s']:.2f} s CPU), "
                      f"first answer {r['start_to_first_answer_s']:.2f} s"
                      f"   {r['recovered']}", flush=True)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(work / "data", ignore_errors=True)
        shutil.rmtree(work / "broker", ignore_errors=True)
        if not (work / "kept").exists():
            shutil.rmtree(work, ignore_errors=True)  # else the killed relay's journal stays there (reported)
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
