"""Which Python MQTT client carries thousands of connections in one process (for ``blink load``)?

How this works
--------------
A Mosquitto is started here on a free port. For each library (``--libs``, default aiomqtt, gmqtt
and paho -- paho-mqtt driven straight from the asyncio loop with ``add_reader``/``add_writer``,
without aiomqtt's layer; also ``raw``, a bare QoS-0 protocol, and ``mqttkit``, the relay's own
connection) a separate Python process (a clean heap for the memory figure):

1. connects ``--clients`` clients, each with its own client id (64 connects in flight at a time),
   each subscribed to its own topic -- the shape of ``blink load``'s players;
2. idles ``--idle`` seconds: the CPU the library burns with nothing to do (keep-alive, per-client
   housekeeping tasks) and the event-loop lag;
3. runs a closed loop for ``--busy`` seconds: every client publishes to its own topic and, on
   receiving it, publishes again (one message in flight per client); messages/s and, the figure
   that matters, this process's CPU per message (one publish + one delivery);
4. disconnects.

The figures are the child's RSS growth per connection, connect rate, idle CPU %, busy msgs/s and
CPU µs per message, and the event-loop lag (p50/p99) in both phases.

    .venv/bin/python bench/mqtt_clients_bench.py --clients 2000
    .venv/bin/python bench/mqtt_clients_bench.py --clients 4000 --libs gmqtt,paho --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mqttkit import free_port  # noqa: E402

PAYLOAD = b"x" * 120  # about an Act's size
CONNECTS_IN_FLIGHT = 64


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ------------------------------------------------------------------------------- the libraries
# Each: ``connect(port, cid, on_message) -> handle``, ``publish(handle, topic, payload)`` (may be a
# coroutine), ``close(handle)``. on_message(topic: str, payload: bytes).

class AiomqttLib:
    name = "aiomqtt"

    async def connect(self, port: int, cid: str, on_message: Callable[[str, bytes], None]) -> Any:
        import aiomqtt

        client = aiomqtt.Client("127.0.0.1", port, identifier=cid, keepalive=60, max_queued_outgoing_messages=0)
        await client.__aenter__()
        await client.subscribe(f"bench/c/{cid}", qos=0)

        async def reader() -> None:
            async for msg in client.messages:
                on_message(str(msg.topic), msg.payload)  # type: ignore[arg-type]

        task = asyncio.create_task(reader())
        return client, task

    def publish(self, handle: Any, topic: str, payload: bytes) -> Any:
        return handle[0].publish(topic, payload, qos=0)

    async def close(self, handle: Any) -> None:
        handle[1].cancel()
        try:
            await handle[0].__aexit__(None, None, None)
        except Exception:  # noqa: BLE001
            pass


class GmqttLib:
    name = "gmqtt"

    async def connect(self, port: int, cid: str, on_message: Callable[[str, bytes], None]) -> Any:
        import gmqtt

        client = gmqtt.Client(cid, clean_session=True)

        def cb(c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
            on_message(topic, payload)
            return 0

        client.on_message = cb
        await client.connect("127.0.0.1", port, keepalive=60, version=4)
        client.subscribe(f"bench/c/{cid}", qos=0)
        await asyncio.sleep(0)
        return client

    def publish(self, handle: Any, topic: str, payload: bytes) -> None:
        handle.publish(topic, payload, qos=0)

    async def close(self, handle: Any) -> None:
        try:
            await handle.disconnect()
        except Exception:  # noqa: BLE001
            pass


class PahoLib:
    """paho-mqtt's client driven by the asyncio loop's reader/writer callbacks; one shared
    housekeeping timer for all clients (aiomqtt runs one task per client for that)."""

    name = "paho"

    def __init__(self) -> None:
        self.clients: list[Any] = []
        self._misc: asyncio.Task[None] | None = None

    async def connect(self, port: int, cid: str, on_message: Callable[[str, bytes], None]) -> Any:
        import paho.mqtt.client as mqtt

        loop = asyncio.get_running_loop()
        client: Any = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv311)
        connected = loop.create_future()

        def on_connect(c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
            if not connected.done():
                connected.set_result(rc)

        client.on_connect = on_connect
        client.on_message = lambda c, u, msg: on_message(msg.topic, msg.payload)
        client.on_socket_open = lambda c, u, sock: loop.add_reader(sock, c.loop_read)
        client.on_socket_close = lambda c, u, sock: loop.remove_reader(sock)
        client.on_socket_register_write = lambda c, u, sock: loop.add_writer(sock, c.loop_write)
        client.on_socket_unregister_write = lambda c, u, sock: loop.remove_writer(sock)
        client.connect("127.0.0.1", port, keepalive=60)
        client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.wait_for(connected, 10)
        client.subscribe(f"bench/c/{cid}", qos=0)
        self.clients.append(client)
        if self._misc is None:
            self._misc = asyncio.create_task(self._housekeeping())
        return client

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for c in self.clients:
                c.loop_misc()

    def publish(self, handle: Any, topic: str, payload: bytes) -> None:
        handle.publish(topic, payload, qos=0)

    async def close(self, handle: Any) -> None:
        handle.disconnect()


class RawLib:
    """Not a library: the floor. A bare MQTT 3.1.1 QoS-0 client on an asyncio.Protocol (CONNECT,
    SUBSCRIBE, PUBLISH; no keep-alive, no error handling), to show what a library's layers cost."""

    name = "raw"

    async def connect(self, port: int, cid: str, on_message: Callable[[str, bytes], None]) -> Any:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        transport, proto = await loop.create_connection(lambda: _RawProto(on_message, ready), "127.0.0.1", port)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cidb = cid.encode()
        body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cidb).to_bytes(2, "big") + cidb
        transport.write(b"\x10" + _varint(len(body)) + body)
        await asyncio.wait_for(ready, 10)
        topic = f"bench/c/{cid}".encode()
        body = b"\x00\x01" + len(topic).to_bytes(2, "big") + topic + b"\x00"
        transport.write(b"\x82" + _varint(len(body)) + body)
        return transport

    def publish(self, handle: Any, topic: str, payload: bytes) -> None:
        t = topic.encode()
        body = len(t).to_bytes(2, "big") + t + payload
        handle.write(b"\x30" + _varint(len(body)) + body)

    async def close(self, handle: Any) -> None:
        handle.write(b"\xe0\x00")
        handle.close()


class MqttkitLib:
    """The relay's own connection (mqttkit/connection.py): a read's PUBLISHes come as one batch;
    keep-alive, acknowledgements and error handling included (what ``raw`` leaves out)."""

    name = "mqttkit"

    async def connect(self, port: int, cid: str, on_message: Callable[[str, bytes], None]) -> Any:
        from mqttkit.connection import connect

        def on_messages(batch: list[Any]) -> None:
            for msg in batch:
                on_message(msg.topic, msg.payload)

        conn = await connect("127.0.0.1", port, client_id=cid, on_messages=on_messages, keepalive=60)
        await conn.subscribe([(f"bench/c/{cid}", 0)])
        return conn

    def publish(self, handle: Any, topic: str, payload: bytes) -> None:
        handle.publish(topic, payload)

    async def close(self, handle: Any) -> None:
        await handle.disconnect()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n % 128, n // 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class _RawProto(asyncio.Protocol):
    def __init__(self, on_message: Callable[[str, bytes], None], ready: asyncio.Future[None]) -> None:
        self.on_message, self.ready, self.buf = on_message, ready, b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        i = 0
        while len(buf) - i >= 2:
            n, mult, j = 0, 1, i + 1
            while True:
                if j >= len(buf):
                    self.buf = buf[i:]
                    return
                b = buf[j]
                n += (b & 0x7F) * mult
                mult *= 128
                j += 1
                if not b & 0x80:
                    break
            if j + n > len(buf):
                break
            kind = buf[i] >> 4
            if kind == 3:
                tl = int.from_bytes(buf[j:j + 2], "big")
                self.on_message(buf[j + 2:j + 2 + tl].decode(), buf[j + 2 + tl:j + n])
            elif kind == 2 and not self.ready.done():
                self.ready.set_result(None)
            i = j + n
        self.buf = buf[i:]


LIBS: dict[str, Any] = {"aiomqtt": AiomqttLib, "gmqtt": GmqttLib, "paho": PahoLib, "raw": RawLib,
                        "mqttkit": MqttkitLib}


# ------------------------------------------------------------------------------- one library, one process

async def lag_probe(stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.02)
        out.append(max(0.0, (time.perf_counter() - t - 0.02) * 1000))


async def run_lib(lib_name: str, port: int, n: int, idle_s: float, busy_s: float) -> dict[str, Any]:
    lib: Any = LIBS[lib_name]()
    busy = [False]
    count = [0]
    handles: list[Any] = [None] * n
    pending: set[asyncio.Task[Any]] = set()

    def make_handler(i: int) -> Callable[[str, bytes], None]:
        def on_message(topic: str, payload: bytes) -> None:
            count[0] += 1
            if busy[0]:
                r = lib.publish(handles[i], topic, payload)
                if r is not None:  # a coroutine (aiomqtt)
                    t = asyncio.ensure_future(r)
                    pending.add(t)
                    t.add_done_callback(pending.discard)
        return on_message

    base = rss_kb()
    sem = asyncio.Semaphore(CONNECTS_IN_FLIGHT)

    async def one(i: int) -> None:
        async with sem:
            handles[i] = await lib.connect(port, f"{lib_name[:2]}{i:05d}{os.getpid()}", make_handler(i))

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    connect_s = time.perf_counter() - t0
    print(f"connected {n} in {connect_s:.1f} s", file=sys.stderr, flush=True)
    await asyncio.sleep(1.0)  # subscriptions settle
    conn_kb = (rss_kb() - base) / n

    lag_idle: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(lag_probe(stop, lag_idle))
    c0, w0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(idle_s)
    idle_cpu = (time.process_time() - c0) / (time.perf_counter() - w0) * 100
    stop.set()
    await probe

    lag_busy: list[float] = []
    stop = asyncio.Event()
    busy[0] = True
    for i in range(n):
        r = lib.publish(handles[i], f"bench/c/{handles_id(lib_name, i)}", PAYLOAD)
        if r is not None:
            await r
    print("first publishes sent", file=sys.stderr, flush=True)
    await asyncio.sleep(1.0)  # warm-up
    probe = asyncio.create_task(lag_probe(stop, lag_busy))
    n0, c0, w0 = count[0], time.process_time(), time.perf_counter()
    await asyncio.sleep(busy_s)
    msgs, cpu, wall = count[0] - n0, time.process_time() - c0, time.perf_counter() - w0
    busy[0] = False
    stop.set()
    await probe
    print(f"busy phase done: {msgs} messages", file=sys.stderr, flush=True)
    await asyncio.sleep(0.5)
    for h in handles:
        await lib.close(h)
    return {"lib": lib_name, "clients": n, "connect_s": round(connect_s, 2),
            "connects_per_s": round(n / connect_s), "rss_kb_per_conn": round(conn_kb, 1),
            "idle_cpu_pct": round(idle_cpu, 1), "idle_lag_ms_p99": round(pct(lag_idle, 0.99), 2),
            "busy_msgs_per_s": round(msgs / wall), "busy_cpu_pct": round(cpu / wall * 100),
            "cpu_us_per_msg": round(cpu / max(1, msgs) * 1e6, 1),
            "busy_lag_ms_p50": round(pct(lag_busy, 0.5), 2), "busy_lag_ms_p99": round(pct(lag_busy, 0.99), 2)}


def handles_id(lib_name: str, i: int) -> str:
    return f"{lib_name[:2]}{i:05d}{os.getpid()}"


# ------------------------------------------------------------------------------- the driver

def start_mosquitto() -> tuple[subprocess.Popen[bytes], int, Path]:
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="blink-clients-bench-"))
    tmp.chmod(0o755)
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    "set_tcp_nodelay true\nmax_queued_messages 10000\nlog_dest stderr\nlog_type error\n")
    conf.chmod(0o644)
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port, tmp
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("mosquitto did not start")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=2000)
    p.add_argument("--libs", default="aiomqtt,gmqtt,paho",
                   help="comma list of aiomqtt, gmqtt, paho, raw, mqttkit (the relay's own); add +uvloop to run one on uvloop (if installed)")
    p.add_argument("--idle", type=float, default=3.0)
    p.add_argument("--busy", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0, help="give up on a library after this many seconds")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.child:
        lib = a.child.removesuffix("+uvloop")
        if a.child.endswith("+uvloop"):  # the same library on uvloop's event loop (libuv, in C)
            import uvloop

            uvloop.install()
        row = asyncio.run(run_lib(lib, a.port, a.clients, a.idle, a.busy))
        row["lib"] = a.child
        print(json.dumps(row), flush=True)
        return 0
    proc, port, tmp = start_mosquitto()
    rows = []
    try:
        for lib in a.libs.split(","):
            try:
                out = subprocess.run([sys.executable, __file__, "--child", lib, "--port", str(port),
                                      "--clients", str(a.clients), "--idle", str(a.idle), "--busy", str(a.busy)],
                                     capture_output=True, text=True, timeout=a.timeout)
            except subprocess.TimeoutExpired as exc:
                err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
                print(f"{lib}: did not finish within {a.timeout:g} s; got as far as: "
                      f"{(err.strip().splitlines() or ['connecting'])[-1]}", file=sys.stderr, flush=True)
                continue
            if out.returncode != 0:
                print(f"{lib}: failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            if not a.json:
                print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
