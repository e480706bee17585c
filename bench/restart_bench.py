"""Restart with many live matches: recovery, the "running" line, the first answer, the whole resync.

How this works
--------------
The restart measurement of docs/performance.md, in one script: a Mosquitto of
its own on a free port (``blink --prefix P broker-config DIR --port PORT``), a relay ``blink
--prefix P serve --broker LOGIN_URL --data DATA``, and ``blink --prefix P load --server
mqtt://127.0.0.1:PORT --relay-pid PID --matches N --pace human --duration S``. After ``--kill-at``
seconds of load the relay is killed with SIGKILL; the load generator is stopped too ("quiet"),
and the data directory is copied aside. Then, ``--restarts`` rounds: in each, for every broker of
``--brokers``, the copy is put back and the relay started on it -- on the Mosquitto (``mosquitto``)
or with its embedded amqtt broker on a free port (``embedded``: ``blink --prefix P serve --port
PORT --data DATA``; the journal does not depend on the broker) -- and the script reports, each
from starting the relay's process:

- ``recovery``: the relay's own figure (reading the snapshot + replaying the journal's tail, from
  its "recovered" line);
- ``running``: its "running" line (printed once it has recovered, connected, subscribed and
  published its online status), with the relay's CPU time (user + system) by then;
- ``first answer``: a client that pings every 50 ms from the start (connected to the Mosquitto
  before the relay starts; to the embedded broker as soon as it accepts connections) gets its
  first ``Pong``;
- ``all resynced``: the same client, subscribed to every match's retained snapshot topic, has
  received a fresh snapshot of every match the relay recovered (the relay republishes each
  match's views and then its snapshot, so a snapshot seen means its views went out before it);
  ``relay says``: when the relay's own "every match resynced" line came.

The relay is then stopped.

    .venv/bin/python bench/restart_bench.py --matches 1000 --kill-at 75 --restarts 3 --keep DIR
    .venv/bin/python bench/restart_bench.py --reuse DIR --restarts 3 --brokers mosquitto,embedded
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python bench/restart_bench.py --reuse DIR   # another version's relay

The figures are wall-clock on whatever machine runs it: compare runs of the same journal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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

from bench.benchkit import cpu_s, stop  # noqa: E402

BLINK = [sys.executable, "-m", "client.cli"] if not (Path(sys.executable).parent / "blink").exists() \
    else [str(Path(sys.executable).parent / "blink")]
BROKERS = ("mosquitto", "embedded")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lines:
    """The relay's output, read in a thread: each line with the monotonic time it was read."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip()))
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def find(self, needle: str) -> float | None:
        """When the first line containing ``needle`` was read, or None (yet)."""
        with self._cond:
            return next((at for at, line in self.lines if needle in line), None)

    def wait(self, needle: str, deadline_s: float) -> tuple[float, str]:
        """(when, line) of the first line containing ``needle``."""
        end = time.monotonic() + deadline_s
        with self._cond:
            while True:
                for at, line in self.lines:
                    if needle in line:
                        return at, line
                if self._done:
                    raise RuntimeError(f"the relay exited before printing {needle!r}: {[x for _, x in self.lines]}")
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no {needle!r} within {deadline_s} s: {[x for _, x in self.lines]}")
                self._cond.wait(left)


def start_relay(prefix: str, url: str | None, data: Path, port: int | None = None) -> subprocess.Popen[str]:
    """``url``: the relay's login on the Mosquitto; None: its embedded broker on ``port``."""
    where = ["--broker", url] if url else ["--port", str(port)]
    return subprocess.Popen([*BLINK, "--prefix", prefix, "serve", *where, "--data", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)


async def watch(prefix: str, port: int, early: bool, started: threading.Event, box: dict[str, Any]) -> None:
    """Ping the relay every 50 ms from the moment it is started; note when the first Pong arrives
    and when a fresh snapshot of every recovered match (``box["expect"]``, set once the relay has
    said how many) has arrived. ``early``: connect before the relay starts (an outside broker);
    otherwise connect as soon as the relay's embedded broker takes connections."""
    import aiomqtt

    from protocol import messages as m
    from protocol.codec import decode_all, encode
    from protocol.topics import Topics

    topics = Topics(prefix=prefix)
    me = f"p{os.urandom(16).hex()}"
    snap_filter = topics.snap("+").replace(f"/{topics.shard}/", "/+/")

    async def connect() -> aiomqtt.Client:
        while True:
            client = aiomqtt.Client("127.0.0.1", port, identifier=me)
            try:
                await client.__aenter__()
            except aiomqtt.MqttError:
                if early:
                    raise
                await asyncio.sleep(0.02)  # the embedded broker is not listening yet
                continue
            await client.subscribe(topics.client(me), qos=0)
            await client.subscribe(snap_filter, qos=0)
            return client

    if early:
        client = await connect()
        box["connected"] = 1.0
    while not started.is_set():
        await asyncio.sleep(0.005)
    t0 = box["t0"]
    if not early:
        client = await connect()
    box["connect_s"] = time.monotonic() - t0
    seen: set[str] = set()
    try:

        async def pinger() -> None:
            while "pong_s" not in box:
                await client.publish(topics.req(me), encode(m.Ping(t0=time.time_ns())), qos=0)
                await asyncio.sleep(0.05)

        task = asyncio.create_task(pinger())
        try:
            async for msg in _until_dropped(client, box):
                payload = msg.payload if isinstance(msg.payload, bytes) else b""
                try:
                    decoded_all = decode_all(payload)
                except Exception:  # noqa: BLE001 - anything else on the topic is not the answer
                    continue
                for decoded in decoded_all:
                    if isinstance(decoded, m.Pong) and "pong_s" not in box:
                        box["pong_s"] = time.monotonic() - t0
                    elif isinstance(decoded, m.Snapshot) and (not early or not msg.retain):
                        # A retained snapshot on an outside broker is from before the restart; on the
                        # embedded one (started with the relay) every snapshot is the restarted relay's.
                        if decoded.match not in seen:
                            seen.add(decoded.match)
                            box.setdefault("firsts", []).append(time.monotonic() - t0)
                            box["snaps_seen"] = len(seen)
                        if "expect" in box and len(seen) >= box["expect"] and "all_snaps_s" not in box:
                            box["all_snaps_s"] = box["firsts"][box["expect"] - 1]
                if "pong_s" in box and ("all_snaps_s" in box or box.get("give_up")):
                    return
        finally:
            task.cancel()
    finally:
        try:
            await client.__aexit__(None, None, None)
        except aiomqtt.MqttError:  # already gone with the embedded broker
            pass


async def _until_dropped(client: Any, box: dict[str, Any]) -> Any:
    """The client's messages; the end of them once the relay (with its embedded broker) is stopped."""
    import aiomqtt

    try:
        async for msg in client.messages:
            yield msg
    except aiomqtt.MqttError:
        if not box.get("give_up"):
            raise


def restart(prefix: str, port: int, url: str | None, data: Path) -> dict[str, Any]:
    """One restart on ``data``: on the Mosquitto at ``port`` (``url``: the relay's login), or with
    the relay's embedded broker on ``port`` (``url`` None)."""
    box: dict[str, Any] = {}
    started = threading.Event()
    early = url is not None
    watcher = threading.Thread(target=lambda: asyncio.run(asyncio.wait_for(watch(prefix, port, early, started, box), 180)),
                               daemon=True)
    watcher.start()
    deadline = time.monotonic() + 60
    while early and "connected" not in box and time.monotonic() < deadline:
        time.sleep(0.01)
    start = box["t0"] = time.monotonic()
    relay = start_relay(prefix, url, data, port)
    started.set()
    lines = Lines(relay)
    try:
        at, _ = lines.wait("running with", 600)
        cpu = cpu_s(relay.pid)  # CPU seconds: steadier than wall time on a busy machine
        _, rec = lines.wait("blink relay: recovered", 60)
        found = re.search(r"recovered (\d+) match\(es\).* in ([0-9.]+) s", rec)
        if found:
            box["expect"] = int(found.group(1))
        # Until the relay says it has resynced every match and the watcher has seen every snapshot
        # (a relay from before that line never says it: then the watcher's figure alone).
        resynced_at: float | None = None
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if resynced_at is None:
                resynced_at = lines.find("every match resynced")
                said = re.search(r"every match resynced \((\d+) still open\)", "\n".join(x for _, x in lines.lines))
                if said:  # matches that ended during the outage left at the relay's first tick
                    box["expect"] = int(said.group(1))
                    firsts = list(box.get("firsts", []))
                    if len(firsts) >= box["expect"] and "all_snaps_s" not in box:
                        box["all_snaps_s"] = firsts[box["expect"] - 1]
            if "all_snaps_s" in box and (resynced_at is not None or time.monotonic() - start > box["all_snaps_s"] + 5):
                break
            firsts = box.get("firsts", [])
            if resynced_at is None and "pong_s" in box and firsts and time.monotonic() - start > max(firsts[-1], box["pong_s"]) + 5:
                break  # a relay that never says it has resynced (older): no new match for 5 s
            if resynced_at is not None and time.monotonic() > resynced_at + 30:
                break  # the snapshots the relay sent are not all coming (a match left meanwhile)
            time.sleep(0.02)
        box["give_up"] = True
        watcher.join(60)
        return {"broker": "mosquitto" if early else "embedded",
                "recovery_s": float(found.group(2)) if found else -1.0,
                "start_to_serving_s": round(at - start, 3), "cpu_to_serving_s": round(cpu, 3),
                "start_to_first_answer_s": round(box.get("pong_s", -1), 3),
                "start_to_all_resynced_s": round(box.get("all_snaps_s", -1), 3),
                "relay_says_resynced_s": round(resynced_at - start, 3) if resynced_at is not None else -1.0,
                "matches": box.get("expect", -1), "snapshots_seen": box.get("snaps_seen", 0),
                "recovered": rec.strip()}
    finally:
        stop(relay, signal.SIGINT, 30)


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
    ap.add_argument("--brokers", default="mosquitto",
                    help="comma-separated, restarted in this order each round: mosquitto, embedded (default mosquitto)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if not brokers or any(b not in BROKERS for b in brokers):
        ap.error(f"--brokers takes {', '.join(BROKERS)}, comma-separated")
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
            Lines(relay).wait("running with", 120)  # and its output is read on: a full pipe would stall it
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
            for which in brokers:
                shutil.rmtree(data, ignore_errors=True)
                shutil.copytree(kept, data)
                (data / "journal.lock").unlink(missing_ok=True)
                if which == "mosquitto":
                    r = restart(prefix, port, url, data)
                else:
                    for attempt in range(3):
                        try:
                            r = restart(prefix, free_port(), None, data)
                            break
                        except RuntimeError as exc:  # the free port was taken meanwhile (a shared machine)
                            if "already in use" not in str(exc) or attempt == 2:
                                raise
                r["load_avg"] = os.getloadavg()[0]
                report["restarts"].append(r)
                if not args.json:
                    print(f"{which:9}  recovery {r['recovery_s']:.2f} s, running {r['start_to_serving_s']:.2f} s "
                          f"({r['cpu_to_serving_s']:.2f} s CPU), first answer {r['start_to_first_answer_s']:.2f} s, "
                          f"all {r['snapshots_seen']}/{r['matches']} resynced {r['start_to_all_resynced_s']:.2f} s "
                          f"(relay says {r['relay_says_resynced_s']:.2f} s), load {r['load_avg']:.1f}"
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
