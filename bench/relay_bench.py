"""Relay benchmarks, each reported as a ratio against a baseline measured in the same run.

How this works
--------------
For each broker (``--brokers``: ``mosquitto`` started here on a free port, and/or ``amqtt``, the
embedded broker of ``blink serve``) the script starts, as separate processes:

- the relay: ``blink serve --broker URL`` for Mosquitto, or for amqtt the broker and relay in one
  process, as deployed (``LocalServer``, what ``blink serve --port P`` runs; this script's
  ``--amqtt-stack`` prints the relay's login so the echo client gets the relay's rights under the
  embedded broker's ACL);
- a bare MQTT echo: a gmqtt client (the fastest Python MQTT client) that republishes every
  ``bench/echo/req/<id>`` message to ``bench/echo/rep/<id>``.

The load is generated in this process with gmqtt clients too (two per BLINK match, speaking the
real protocol: create/join, acts, views, rematches), so both paths have the same hops
(client -> broker -> relay or echo -> broker -> client) and the same client library; the
difference is what the relay does.

1. latency: one play in flight at a time, play -> verdict (``ActionAccepted``/``Rejected``)
   against one echo round trip in flight at a time; p50, p99 and their ratios.
2. throughput: ``--tp-matches`` matches each keeping one play in flight (closed loop, no
   reaction time): ordered actions answered per second, against the echo with the same number of
   messages in flight; the ratio.
3. capacity (on the brokers of ``--capacity-on``): human-pace matches (each bot waits a log-normal
   reaction time around 0.35 s before it plays, as ``client/bots.py`` does), stepped up until the
   p99 of play -> verdict exceeds 10 ms in two steps in a row (one can be noise), or the steps or
   the time budget run out; reports the largest number of concurrent matches held under 10 ms, and
   for every step the relay's CPU (share of one core) and this load generator's event-loop lag (if
   that grows, the generator, not the relay, is the limit). The event-loop lag of an idle process,
   measured first, is this machine's noise floor: on a busy shared machine it alone can reach
   several milliseconds at p99.

``--nodelay`` turns on TCP_NODELAY where it is off by default: in Mosquitto (``set_tcp_nodelay
true``) and on every paho socket of the process it starts (the relay's own connection sets it
itself; paho, under aiomqtt, does not, so the process is started through a small wrapper that sets
it). Without it, several small messages written back to back
can wait for a delayed ACK (about 40 ms on Linux): compare the two runs.

    .venv/bin/python bench/relay_bench.py                 # everything, about 3 minutes
    .venv/bin/python bench/relay_bench.py --quick --json  # a fast smoke run, one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol import messages as m  # noqa: E402
from protocol.codec import DecodeError, decode_all, encode  # noqa: E402
from protocol.rules import blink  # noqa: E402
from protocol.rules.base import Accepted  # noqa: E402
from protocol.topics import Topics  # noqa: E402
from bench.benchkit import wait_port  # noqa: E402
from mqttkit import free_port, parse_url  # noqa: E402
from client.tools import latency  # noqa: E402

MQTT311 = 4
TOPICS = Topics()
RULES = blink.GAME
FAST = {"best_of": 1, "countdown_s": 0.0, "stalemate_pause_s": 0.0, "pick_time_s": 0.5}
HUMAN = {"best_of": 1, "countdown_s": 0.5, "stalemate_pause_s": 0.3}
ECHO_PAYLOAD = encode(m.Act(id=1, seq=123, action={"t": "PlayCard", "v": 1, "card": "4-yellow-star", "pile": 0},
                            reaction_ns=350_000_000))


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


class Stack:
    """A broker, a relay and an echo client, as child processes; stopped in reverse order."""

    def __init__(self, broker: str, nodelay: bool, relay_root: Path | None = None,
                 relay_profile: Path | None = None, journal: str = "full") -> None:
        self.broker = broker
        self.nodelay = nodelay
        self.relay_root = relay_root  # run the relay from another checkout (a before/after comparison)
        self.relay_profile = relay_profile  # run the relay under cProfile, writing its stats here
        self.journal = journal  # Mosquitto: the relay's journal (full: fsync per step, as `blink serve`)
        self.port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tmp: Path | None = None
        self.relay_pid = 0
        self.broker_pid = 0
        self.echo_pid = 0
        self.login = ""  # the relay's login URL on the embedded broker (the echo clients use it)

    def start(self) -> None:
        if self.broker == "mosquitto":
            binary = shutil.which("mosquitto") or next(
                (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if Path(p).exists()), None)
            if binary is None:
                raise RuntimeError("mosquitto is not installed")
            # Started as root, Mosquitto drops to its own user: its files must be readable to it.
            self.tmp = Path(tempfile.mkdtemp(prefix="blink-bench-"))
            self.tmp.chmod(0o755)
            conf = self.tmp / "mosquitto.conf"
            conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                            f"max_queued_messages 10000\nlog_dest stderr\nlog_type error\n"
                            + ("set_tcp_nodelay true\n" if self.nodelay else ""))
            conf.chmod(0o644)
            proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            self.broker_pid = proc.pid
            wait_port(self.port)
            entry = [sys.executable, str(Path(__file__).resolve()), "--nodelay-wrapper"] if self.nodelay \
                else [sys.executable, "-m", "client.cli"]
            if self.relay_root is not None or self.relay_profile is not None:
                # The relay sets TCP_NODELAY itself: no wrapper needed. With cwd
                # at the other checkout, ``-m client.cli`` imports that checkout's packages.
                entry = [sys.executable,
                         *(["-m", "cProfile", "-o", str(self.relay_profile)] if self.relay_profile else []),
                         "-m", "client.cli"]
            # A journal of its own (as `blink serve` journals by default), never the user's.
            journal = {"full": ["--data", str(self.tmp / "data")],
                       "normal": ["--data", str(self.tmp / "data"), "--sync", "normal"],
                       "off": ["--no-journal"]}[self.journal]
            cmd = [*entry, "serve", "--broker", f"mqtt://127.0.0.1:{self.port}", *journal]
        else:
            # Broker and relay in one process, as `blink serve` deploys them; it prints the relay's
            # login so the echo client can have the relay's rights on the embedded broker's ACL.
            cmd = [sys.executable, str(Path(__file__).resolve()), *(["--nodelay-wrapper"] if self.nodelay else []),
                   "--amqtt-stack", str(self.port)]
        relay = subprocess.Popen(cmd, cwd=self.relay_root or ROOT, stdout=subprocess.PIPE if self.broker == "amqtt" else subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        self.procs.append(relay)
        self.relay_pid = relay.pid
        login = ""
        if self.broker == "amqtt":
            self.broker_pid = relay.pid
            assert relay.stdout is not None
            login = relay.stdout.readline().decode().strip()
            if not login.startswith("mqtt://"):
                raise RuntimeError("the amqtt stack did not start")
            self.login = login
        wait_port(self.port)
        asyncio.run(wait_relay(self.port))
        echo = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--echo-server", str(self.port), login],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.procs.append(echo)
        self.echo_pid = echo.pid
        assert echo.stdout is not None
        if echo.stdout.readline().strip() != b"ready":
            raise RuntimeError("the echo client did not start")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT if proc.pid == self.relay_pid else signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------- gmqtt


def new_id(prefix: str = "b") -> str:
    return f"{prefix}{os.urandom(6).hex()}"


async def connect(port: int, client_id: str, on_message: Any, username: str | None = None,
                  password: str | None = None) -> Any:
    import gmqtt

    client = gmqtt.Client(client_id, clean_session=True)
    if username:
        client.set_auth_credentials(username, password)
    client.on_message = on_message
    subscribed: dict[int, asyncio.Future[None]] = {}

    def on_subscribe(c: Any, mid: int, qos: Any, props: Any) -> None:
        fut = subscribed.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    client.on_subscribe = on_subscribe
    client._bench_subscribed = subscribed  # type: ignore[attr-defined]
    await client.connect("127.0.0.1", port, keepalive=60, version=MQTT311)
    return client


async def subscribe(client: Any, topic: str) -> None:
    mid = client.subscribe(topic, qos=0)
    fut = asyncio.get_running_loop().create_future()
    client._bench_subscribed[mid] = fut
    try:
        await asyncio.wait_for(fut, timeout=5)
    except asyncio.TimeoutError:
        pass  # gmqtt may have acknowledged before we registered; the first messages will tell


async def wait_relay(port: int) -> None:
    """Until the relay answers a ping (it is subscribed and running)."""
    got = asyncio.Event()

    def on_message(c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
        got.set()
        return 0

    cid = new_id("w")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            client = await connect(port, cid, on_message)
            break
        except OSError:
            await asyncio.sleep(0.2)
    else:
        raise RuntimeError("cannot connect to the broker")
    await subscribe(client, TOPICS.client(cid))
    try:
        while not got.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError("the relay does not answer")
            client.publish(TOPICS.req(cid), encode(m.Ping(t0=time.time_ns())), qos=0)
            try:
                await asyncio.wait_for(got.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass
    finally:
        await client.disconnect()


# ---------------------------------------------------------------------------------- echo


def echo_auth(login: str) -> tuple[str | None, str | None]:
    """The echo topics are outside blink's ACL: on the embedded broker every echo client logs in
    with the relay's login (the echo path then skips the per-client ACL check the relay path pays)."""
    auth = parse_url(login) if login else None
    return (auth.username, auth.password) if auth else (None, None)


async def echo_server(port: int, login: str = "") -> None:
    def on_message(c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
        c.publish("bench/echo/rep/" + topic.rsplit("/", 1)[1], payload, qos=0)
        return 0

    client = await connect(port, new_id("echo"), on_message, *echo_auth(login))
    await subscribe(client, "bench/echo/req/+")
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await client.disconnect()


async def echo_latency(port: int, n: int, login: str = "") -> list[int]:
    waiter: list[asyncio.Future[int]] = []

    def on_message(c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
        if waiter and not waiter[0].done():
            waiter[0].set_result(time.perf_counter_ns())
        return 0

    cid = new_id("e")
    client = await connect(port, cid, on_message, *echo_auth(login))
    await subscribe(client, f"bench/echo/rep/{cid}")
    out: list[int] = []
    loop = asyncio.get_running_loop()
    for i in range(n + 20):
        fut: asyncio.Future[int] = loop.create_future()
        waiter[:] = [fut]
        t0 = time.perf_counter_ns()
        client.publish(f"bench/echo/req/{cid}", ECHO_PAYLOAD, qos=0)
        try:
            t1 = await asyncio.wait_for(fut, timeout=2)
        except asyncio.TimeoutError:
            continue
        if i >= 20:  # warm-up
            out.append(t1 - t0)
        await asyncio.sleep(0.002)  # like the relay driver, leave the system idle between round trips
    await client.disconnect()
    return out


async def echo_throughput(port: int, window: int, seconds: float, login: str = "") -> float:
    count = [0]
    running = [True]
    cid = new_id("t")

    def on_message(c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
        count[0] += 1
        if running[0]:
            c.publish(f"bench/echo/req/{cid}", payload, qos=0)
        return 0

    client = await connect(port, cid, on_message, *echo_auth(login))
    await subscribe(client, f"bench/echo/rep/{cid}")
    for _ in range(window):
        client.publish(f"bench/echo/req/{cid}", ECHO_PAYLOAD, qos=0)
    await asyncio.sleep(1.0)  # warm-up
    start_count, start = count[0], time.perf_counter()
    await asyncio.sleep(seconds)
    rate = (count[0] - start_count) / (time.perf_counter() - start)
    running[0] = False
    await asyncio.sleep(0.3)
    await client.disconnect()
    return rate


# ---------------------------------------------------------------------------------- relay drivers


class Recorder:
    def __init__(self) -> None:
        self.confirm: list[int] = []
        self.answered = 0
        self.accepted = 0
        self.lost = 0

    def reset(self) -> None:
        self.confirm, self.answered, self.accepted, self.lost = [], 0, 0, 0


class SeatClient:
    """One player, in gmqtt, speaking the relay's protocol directly (no prediction layer)."""

    def __init__(self, driver: MatchDriver) -> None:
        self.driver = driver
        self.cid = new_id()
        self.client: Any = None
        self.match: str | None = None
        self.seat = 0
        self.view_seq = -1
        self.view_game = -1
        self.view_wire: dict[str, Any] | None = None
        self.status = ""
        self._state: Any = None
        self.answers: dict[int, asyncio.Future[tuple[int, Any]]] = {}
        self.joined: asyncio.Future[str] | None = None
        self.next_id = 1
        self.rematched = -1
        # The relay sends less: after a game's whole view, the public events (and a private update
        # after some) move it on; they are applied with the engine's own code, as clients do.
        self.ahead: dict[int, m.Event] = {}
        self.private: dict[int, m.PrivateUpdate] = {}
        self.resynced = 0.0

    async def open(self, port: int) -> None:
        self.joined = asyncio.get_running_loop().create_future()
        self.client = await connect(port, self.cid, self.on_message)
        await subscribe(self.client, TOPICS.client(self.cid))

    def on_message(self, c: Any, topic: str, payload: bytes, qos: int, props: Any) -> int:
        now = time.perf_counter_ns()
        try:
            msgs = decode_all(payload)
        except DecodeError:
            return 0
        for msg in msgs:
            self.on_one(msg, now)
        return 0

    def on_one(self, msg: Any, now: int) -> None:
        if isinstance(msg, m.ActionAccepted | m.ActionRejected):
            fut = self.answers.pop(msg.id, None)
            if fut is not None and not fut.done():
                fut.set_result((now, msg))
        elif isinstance(msg, m.Event):
            if msg.seq > self.view_seq:
                self.ahead[msg.seq] = msg
                self.catch_up()
        elif isinstance(msg, m.PrivateUpdate):
            if msg.game_index == self.view_game:
                if msg.seq <= self.view_seq:
                    self._state = RULES.apply_private(self.state(), self.seat, msg.delta)  # type: ignore[misc]
                else:
                    self.private[msg.seq] = msg
                    self.catch_up()
        elif isinstance(msg, m.ViewUpdated):
            # >=: the view a game's end brings has the seq its events already brought us to.
            if msg.seq >= self.view_seq or msg.game_index != self.view_game:
                self.view_seq, self.view_game, self.view_wire = msg.seq, msg.game_index, msg.state
                self.status = str(msg.match_state.get("status", ""))
                self._state = None
                self.private = {k: u for k, u in self.private.items() if k > msg.seq and u.game_index == msg.game_index}
                self.catch_up()
                self.driver.bump()
        elif isinstance(msg, m.MatchJoined):
            self.match, self.seat = msg.match, msg.seat
            self.client.subscribe(TOPICS.ev(msg.match), qos=0)
            if self.joined is not None and not self.joined.done():
                self.joined.set_result(msg.match)
        elif isinstance(msg, m.RequestRejected):
            if self.joined is not None and not self.joined.done():
                self.joined.set_exception(RuntimeError(f"{msg.code}: {msg.detail}"))
        elif isinstance(msg, m.Probe):
            self.request(m.ProbeReply(msg.sent_ns))

    def state(self) -> Any:
        if self._state is None and self.view_wire is not None:
            self._state = RULES.from_wire(self.view_wire)
        return self._state

    def catch_up(self) -> None:
        """Apply the events (and private updates) that follow the view, in seq order."""
        moved = False
        while (ev := self.ahead.pop(self.view_seq + 1, None)) is not None:
            if ev.game_index != self.view_game or self.state() is None:
                self.ahead[ev.seq] = ev  # a new game: its whole view comes first
                break
            view = RULES.apply_event(self._state, self.seat, RULES.decode_event(ev))  # type: ignore[misc]
            update = self.private.pop(ev.seq, None)
            if update is not None:
                view = RULES.apply_private(view, self.seat, update.delta)  # type: ignore[misc]
            self._state, self.view_seq = view, ev.seq
            moved = True
        for seq in [k for k in self.ahead if k <= self.view_seq]:
            del self.ahead[seq]
        if self.ahead and self.match and time.monotonic() - self.resynced > 0.5:
            # A gap (events sent before the subscription to them took effect): the whole view again.
            self.resynced = time.monotonic()
            self.request(m.Resync(self.match))
        if moved:
            self.driver.bump()

    def request(self, msg: Any) -> None:
        self.client.publish(TOPICS.req(self.cid), encode(msg), qos=0)

    def act(self, action: Any) -> tuple[int, asyncio.Future[tuple[int, Any]]]:
        assert self.match is not None
        aid = self.next_id
        self.next_id += 1
        fut: asyncio.Future[tuple[int, Any]] = asyncio.get_running_loop().create_future()
        self.answers[aid] = fut
        payload = encode(m.Act(id=aid, seq=self.view_seq, action=RULES.action_to_wire(action)))
        t0 = time.perf_counter_ns()
        self.client.publish(TOPICS.act(self.match, self.cid), payload, qos=0)
        return t0, fut

    def rematch_if_over(self) -> None:
        if self.status == "over" and self.rematched != self.view_game and self.match:
            self.rematched = self.view_game
            self.request(m.Rematch(self.match))

    async def close(self) -> None:
        if self.client is None:
            return
        try:
            self.request(m.Leave())
            await asyncio.wait_for(self.client.disconnect(), timeout=3)
        except Exception:  # noqa: BLE001 - closing
            pass


class MatchDriver:
    """Two seats of one BLINK match."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seats = [SeatClient(self), SeatClient(self)]
        self.version = 0
        self._changed = asyncio.Event()

    def bump(self) -> None:
        self.version += 1
        self._changed.set()

    async def wait_change(self, since: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.version == since:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=left)
            except asyncio.TimeoutError:
                return

    async def wait_views(self, seq: int, seats: list[SeatClient], timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while any(s.view_seq < seq for s in seats) and time.monotonic() < deadline:
            await self.wait_change(self.version, deadline - time.monotonic())

    async def open(self, port: int, settings: dict[str, Any]) -> None:
        a, b = self.seats
        await asyncio.gather(a.open(port), b.open(port))
        a.request(m.CreateMatch(name="bench0", game="blink", settings=settings, seats=2))
        assert a.joined is not None and b.joined is not None
        code = await asyncio.wait_for(a.joined, timeout=10)
        b.request(m.JoinMatch(name="bench1", match=code))
        await asyncio.wait_for(b.joined, timeout=10)
        deadline = time.monotonic() + 10
        while not all(s.status == "playing" for s in self.seats) and time.monotonic() < deadline:
            await self.wait_change(self.version, 0.5)
        await self.even_up()

    async def even_up(self, timeout: float = 10.0) -> None:
        """Until both seats hold the same seq: the events sent before a seat's subscription to them
        took effect are missed (the relay sends less: no whole view after each), so the seat that
        is behind asks for its whole view again."""
        deadline = time.monotonic() + timeout
        while self.seats[0].view_seq != self.seats[1].view_seq and time.monotonic() < deadline:
            await self.wait_change(self.version, 0.3)
            a, b = self.seats
            if a.view_seq != b.view_seq and a.match:
                behind = a if a.view_seq < b.view_seq else b
                behind.request(m.Resync(a.match))

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.seats))

    async def run_sequential(self, stop: asyncio.Event, rec: Recorder) -> None:
        """One play in flight at a time, from whichever seat can play (no reaction time)."""
        a, b = self.seats
        while not stop.is_set():
            v = self.version
            if a.view_seq != b.view_seq:
                await self.wait_change(v, 0.2)
                if self.version == v and a.view_seq != b.view_seq:
                    await self.even_up(2.0)
                continue
            for s in self.seats:
                s.rematch_if_over()
            if a.status != "playing":
                await self.wait_change(v, 0.2)
                continue
            plays: list[tuple[SeatClient, Any]] = []
            picks: list[tuple[SeatClient, Any]] = []
            for s in self.seats:
                st = s.state()
                if st is None:
                    continue
                for act in blink.legal_actions(st, s.seat):
                    (plays if isinstance(act, blink.PlayCard) else picks).append((s, act))
            if not plays:
                if picks:
                    done: set[int] = set()
                    for s, act in picks:
                        if s.seat not in done and isinstance(act, blink.PickCard):
                            done.add(s.seat)
                            s.act(act)
                await self.wait_change(v, 0.2)
                continue
            s, act = self.rng.choice(plays)
            t0, fut = s.act(act)
            try:
                t1, answer = await asyncio.wait_for(fut, timeout=2)
            except asyncio.TimeoutError:
                rec.lost += 1
                continue
            rec.confirm.append(t1 - t0)
            rec.answered += 1
            if isinstance(answer, m.ActionAccepted):
                rec.accepted += 1
                await self.wait_views(answer.seq, self.seats)

    async def run_human(self, stop: asyncio.Event, rec: Recorder, reaction_s: float) -> None:
        await asyncio.gather(*(self._human_seat(s, stop, rec, reaction_s) for s in self.seats))

    async def _human_seat(self, s: SeatClient, stop: asyncio.Event, rec: Recorder, reaction_s: float) -> None:
        while not stop.is_set():
            v = self.version
            s.rematch_if_over()
            st = s.state() if s.status == "playing" else None
            acts = [] if st is None else blink.legal_actions(st, s.seat)
            acts = [x for x in acts if isinstance(x, blink.PlayCard | blink.PickCard)]
            if not acts:
                await self.wait_change(v, 0.5)
                continue
            act = self.rng.choice(acts)
            await asyncio.sleep(reaction_s * math.exp(self.rng.gauss(0.0, 0.25)))
            now_state = s.state() if s.status == "playing" else None
            if now_state is None or not isinstance(blink.apply(now_state, s.seat, act), Accepted):
                continue  # the table changed while "reacting": look again, as a person would
            t0, fut = s.act(act)
            try:
                t1, answer = await asyncio.wait_for(fut, timeout=3)
            except asyncio.TimeoutError:
                rec.lost += 1
                continue
            if isinstance(act, blink.PlayCard):
                rec.confirm.append(t1 - t0)
            rec.answered += 1
            if isinstance(answer, m.ActionAccepted):
                rec.accepted += 1
                await self.wait_views(answer.seq, [s])


async def open_matches(port: int, n: int, settings: dict[str, Any], rng: random.Random) -> list[MatchDriver]:
    drivers = [MatchDriver(random.Random(rng.random())) for _ in range(n)]
    for i in range(0, n, 16):  # a few at a time: a burst of connections can stall a broker
        await asyncio.gather(*(d.open(port, settings) for d in drivers[i:i + 16]))
    return drivers


async def relay_latency(port: int, n: int, rng: random.Random) -> Recorder:
    (driver,) = await open_matches(port, 1, FAST, rng)
    rec = Recorder()
    stop = asyncio.Event()
    task = asyncio.create_task(driver.run_sequential(stop, rec))
    while len(rec.confirm) < 20:  # warm-up
        await asyncio.sleep(0.05)
        if task.done():
            break
    rec.reset()
    while len(rec.confirm) < n and not task.done():
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait({task}, timeout=3)
    await driver.close()
    return rec


async def relay_throughput(port: int, matches: int, seconds: float, rng: random.Random) -> tuple[float, Recorder]:
    drivers = await open_matches(port, matches, FAST, rng)
    rec = Recorder()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(d.run_sequential(stop, rec)) for d in drivers]
    await asyncio.sleep(1.0)
    rec.reset()
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    rate = rec.answered / (time.perf_counter() - start)
    stop.set()
    await asyncio.wait(tasks, timeout=3)
    await asyncio.gather(*(d.close() for d in drivers))
    return rate, rec


async def loop_lag(stop: asyncio.Event, out: list[int]) -> None:
    while not stop.is_set():
        t = time.perf_counter_ns()
        await asyncio.sleep(0.01)
        out.append(max(0, time.perf_counter_ns() - t - 10_000_000))


async def capacity(stack: Stack, steps: list[int], seconds: float, reaction_s: float, budget_s: float,
                   limit_ms: float, rng: random.Random) -> dict[str, Any]:
    drivers: list[MatchDriver] = []
    rec = Recorder()
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    held = failures = 0
    try:
        for n in steps:
            if time.monotonic() - started > budget_s:
                log(f"  capacity: time budget of {budget_s:g} s used up")
                break
            new = await open_matches(stack.port, n - len(drivers), HUMAN, rng)
            drivers += new
            tasks += [asyncio.create_task(d.run_human(stop, rec, reaction_s)) for d in new]
            await asyncio.sleep(2.0)  # the new matches count down and settle
            rec.reset()
            lag: list[int] = []
            lag_stop = asyncio.Event()
            lag_task = asyncio.create_task(loop_lag(lag_stop, lag))
            cpu0 = cpu_seconds(stack.relay_pid), cpu_seconds(stack.broker_pid), time.process_time()
            t0 = time.perf_counter()
            await asyncio.sleep(seconds)
            elapsed = time.perf_counter() - t0
            cpu1 = cpu_seconds(stack.relay_pid), cpu_seconds(stack.broker_pid), time.process_time()
            lag_stop.set()
            await lag_task
            p = latency.percentiles_ms(rec.confirm)
            step: dict[str, Any] = {"matches": n, "confirm_ms": p, "actions_per_s": round(rec.answered / elapsed, 1),
                    "lost": rec.lost,
                    "relay_cpu": round((cpu1[0] - cpu0[0]) / elapsed, 3),
                    "generator_cpu": round((cpu1[2] - cpu0[2]) / elapsed, 3),
                    "generator_loop_lag_ms": latency.percentiles_ms(lag)}
            if stack.broker == "mosquitto":
                step["broker_cpu"] = round((cpu1[1] - cpu0[1]) / elapsed, 3)
            results.append(step)
            log(f"  capacity: {n:4} matches  p50 {p['p50']} ms  p99 {p['p99']} ms  n {p['n']}  "
                f"{step['actions_per_s']} actions/s  relay cpu {step['relay_cpu']:.0%}  "
                f"generator cpu {step['generator_cpu']:.0%}  loop lag p99 {step['generator_loop_lag_ms']['p99']} ms")
            if p["p99"] is not None and p["p99"] <= limit_ms:
                held, failures = n, 0
            else:
                failures += 1
                if failures >= 2:  # one step over the limit can be noise; two in a row is the limit
                    break
    finally:
        stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=3)
        await asyncio.gather(*(d.close() for d in drivers), return_exceptions=True)
    return {"limit_ms": limit_ms, "reaction_s": reaction_s, "max_matches_under_limit": held,
            "capped": bool(results) and held == results[-1]["matches"], "steps": results}


async def idle_lag(seconds: float) -> dict[str, Any]:
    """This machine's noise floor: the event-loop lag of an idle process."""
    out: list[int] = []
    stop = asyncio.Event()
    task = asyncio.create_task(loop_lag(stop, out))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return latency.percentiles_ms(out)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 2)


async def bench_broker(stack: Stack, args: argparse.Namespace, rng: random.Random, do_capacity: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"broker": stack.broker, "nodelay": stack.nodelay}
    log(f"[{stack.broker}] latency: {args.n} sequential plays, {args.n} echo round trips")
    relay_rec = await relay_latency(stack.port, args.n, rng)
    echo = await echo_latency(stack.port, args.n, stack.login)
    r, e = latency.percentiles_ms(relay_rec.confirm), latency.percentiles_ms(echo)
    out["latency"] = {"relay_ms": r, "echo_ms": e, "ratio_p50": ratio(r["p50"], e["p50"]),
                      "ratio_p99": ratio(r["p99"], e["p99"])}
    log(f"  relay p50 {r['p50']} p99 {r['p99']} ms   echo p50 {e['p50']} p99 {e['p99']} ms   "
        f"ratio p50 {out['latency']['ratio_p50']} p99 {out['latency']['ratio_p99']}")
    log(f"[{stack.broker}] throughput: {args.tp_matches} matches in closed loop vs echo with "
        f"{args.tp_matches} in flight, {args.tp_seconds:g} s each")
    # CPU of every process taking part, per relay action and per echo round trip: where a unit of
    # work goes (the relay, the broker, the echo client, this driver), and so what rate two cores
    # could give each path at best.
    def cpu_now() -> dict[str, float]:
        return {"relay": cpu_seconds(stack.relay_pid), "broker": cpu_seconds(stack.broker_pid),
                "echo_client": cpu_seconds(stack.echo_pid), "driver": time.process_time(), "wall": time.perf_counter()}

    def cpu_per_unit(c0: dict[str, float], c1: dict[str, float], units: float, who: list[str]) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for k in who:
            used = c1[k] - c0[k]
            out[k + "_us"] = None if units <= 0 or math.isnan(used) else round(used / units * 1e6, 1)
        return out

    # Only the processes each path runs through (on amqtt the broker is the relay's own process).
    embedded = stack.broker_pid == stack.relay_pid
    c0 = cpu_now()
    relay_rate, tp_rec = await relay_throughput(stack.port, args.tp_matches, args.tp_seconds, rng)
    c1 = cpu_now()
    relay_cpu = (c1["relay"] - c0["relay"]) / (c1["wall"] - c0["wall"])
    gen_cpu = (c1["driver"] - c0["driver"]) / (c1["wall"] - c0["wall"])
    relay_units = relay_rate * (c1["wall"] - c0["wall"])  # the rate is measured after a warm-up: an estimate
    e0 = cpu_now()
    echo_rate = await echo_throughput(stack.port, args.tp_matches, args.tp_seconds, stack.login)
    e1 = cpu_now()
    echo_units = echo_rate * (e1["wall"] - e0["wall"])
    relay_per = cpu_per_unit(c0, c1, relay_units, ["relay", "driver"] if embedded else ["relay", "broker", "driver"])
    echo_per = cpu_per_unit(e0, e1, echo_units, ["broker", "echo_client", "driver"])
    out["throughput"] = {"relay_actions_per_s": round(relay_rate, 1), "echo_round_trips_per_s": round(echo_rate, 1),
                         "ratio": ratio(relay_rate, echo_rate), "in_flight": args.tp_matches,
                         "relay_accepted_share": round(tp_rec.accepted / tp_rec.answered, 3) if tp_rec.answered else None,
                         "relay_cpu": round(relay_cpu, 3), "generator_cpu": round(gen_cpu, 3),
                         "cpu_per_action": relay_per, "cpu_per_echo_round_trip": echo_per}
    relay_us = relay_per.get("relay_us")
    if relay_us:
        # The relay is one thread of Python (its journal writer aside): a core of its own is its ceiling.
        out["throughput"]["relay_ceiling_actions_per_s"] = round(1e6 / relay_us)
        out["throughput"]["relay_ceiling_ratio"] = ratio(1e6 / relay_us, echo_rate)
    log(f"  relay {relay_rate:.0f} actions/s (relay cpu {relay_cpu:.0%}, generator cpu {gen_cpu:.0%})   echo {echo_rate:.0f} round trips/s   "
        f"ratio {out['throughput']['ratio']}")
    log(f"  CPU us per relay action {relay_per}; per echo round trip {echo_per}")
    if do_capacity:
        log(f"[{stack.broker}] capacity: human-pace matches until p99 > {args.limit_ms:g} ms")
        out["capacity"] = await capacity(stack, args.steps, args.step_seconds, args.reaction, args.capacity_budget,
                                         args.limit_ms, rng)
    return out


def table(report: dict[str, Any]) -> str:
    lag = report["idle_loop_lag_ms"]
    lines = [f"relay benchmarks, {report['date']}, {report['cpus']} CPUs, nodelay {'on' if report['nodelay'] else 'off'}; "
             f"noise floor (idle event-loop lag) p50 {lag['p50']} / p99 {lag['p99']} ms, "
             f"load average {report['load_average'][0]:.2f}",
             "", f"{'broker':10} {'relay p50/p99 ms':18} {'echo p50/p99 ms':18} {'ratio p50':>9} {'ratio p99':>9}"]
    for b in report["brokers"]:
        lat = b["latency"]
        lines.append(f"{b['broker']:10} {lat['relay_ms']['p50']}/{lat['relay_ms']['p99']:<12} "
                     f"{lat['echo_ms']['p50']}/{lat['echo_ms']['p99']:<12} {lat['ratio_p50']!s:>9} {lat['ratio_p99']!s:>9}")
    lines += ["", f"{'broker':10} {'relay actions/s':>16} {'echo round trips/s':>19} {'ratio':>7} {'in flight':>10} "
                  f"{'relay cpu':>10}"]
    for b in report["brokers"]:
        tp = b["throughput"]
        lines.append(f"{b['broker']:10} {tp['relay_actions_per_s']:>16} {tp['echo_round_trips_per_s']:>19} "
                     f"{tp['ratio']!s:>7} {tp['in_flight']:>10} {tp['relay_cpu']:>10.0%}")
    lines += ["", "CPU µs per relay action / per echo round trip (and the relay's ceiling: one core of its own)"]
    for b in report["brokers"]:
        tp = b["throughput"]
        lines.append(f"{b['broker']:10} action {tp['cpu_per_action']}  echo {tp['cpu_per_echo_round_trip']}  "
                     f"ceiling {tp.get('relay_ceiling_actions_per_s')} actions/s = {tp.get('relay_ceiling_ratio')} of the echo")
    for b in report["brokers"]:
        cap = b.get("capacity")
        if not cap:
            continue
        lines += ["", f"capacity on {b['broker']}: {cap['max_matches_under_limit']} concurrent human-pace matches "
                  f"with p99 play -> verdict <= {cap['limit_ms']:g} ms"
                  + (" (the steps or the time budget ran out first)" if cap["capped"] else "")]
        lines.append(f"  {'matches':>8} {'p50 ms':>8} {'p99 ms':>8} {'actions/s':>10} {'relay cpu':>10} "
                     f"{'gen cpu':>8} {'gen lag p99':>12}")
        for s in cap["steps"]:
            lines.append(f"  {s['matches']:>8} {s['confirm_ms']['p50']!s:>8} {s['confirm_ms']['p99']!s:>8} "
                         f"{s['actions_per_s']:>10} {s['relay_cpu']:>10.0%} {s['generator_cpu']:>8.0%} "
                         f"{s['generator_loop_lag_ms']['p99']!s:>12}")
    return "\n".join(lines)


async def amqtt_stack(port: int) -> None:
    """The embedded broker and a relay in this process (what `blink serve --port` runs); prints the
    relay's login (with this start's secret) for the echo client, then runs until SIGINT/SIGTERM."""
    from relay.hosting import LocalServer

    async with LocalServer(None, port=port) as server:
        assert server.broker is not None
        print(server.broker.relay_address.login_url, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


def nodelay_wrapper(argv: list[str]) -> int:
    """Run ``blink`` with TCP_NODELAY on every paho (aiomqtt) socket."""
    import paho.mqtt.client as paho

    original = paho.Client._create_socket_connection

    def create(self: Any) -> Any:
        sock = original(self)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    paho.Client._create_socket_connection = create  # type: ignore[method-assign]
    if argv[:1] == ["--amqtt-stack"]:
        asyncio.run(amqtt_stack(int(argv[1])))
        return 0
    from client.cli import main as blink_main

    return blink_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--nodelay-wrapper"]:
        return nodelay_wrapper(argv[1:])
    if argv[:1] == ["--amqtt-stack"]:
        asyncio.run(amqtt_stack(int(argv[1])))
        return 0
    if argv[:1] == ["--echo-server"]:
        logging.getLogger("gmqtt").setLevel(logging.CRITICAL)
        asyncio.run(echo_server(int(argv[1]), argv[2] if len(argv) > 2 else ""))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default="mosquitto,amqtt", help="mosquitto and/or amqtt (default both)")
    p.add_argument("--capacity-on", default="mosquitto", help="brokers to run the capacity test on ('' for none)")
    p.add_argument("--nodelay", action="store_true", help="TCP_NODELAY in Mosquitto and on the relay's socket")
    p.add_argument("--n", type=int, default=500, help="sequential round trips per latency test (default 500)")
    p.add_argument("--tp-matches", type=int, default=32, help="matches (= plays in flight) for throughput")
    p.add_argument("--tp-seconds", type=float, default=6.0)
    p.add_argument("--steps", default="1,2,5,10,20,40,80,160,320", help="capacity: matches per step")
    p.add_argument("--step-seconds", type=float, default=6.0, help="capacity: seconds measured per step")
    p.add_argument("--capacity-budget", type=float, default=120.0, help="capacity: stop stepping after this long")
    p.add_argument("--limit-ms", type=float, default=10.0, help="capacity: the p99 to stay under")
    p.add_argument("--reaction", type=float, default=0.35, help="capacity: bots' median reaction in s")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--relay-root", type=Path, help="Mosquitto: start the relay from this checkout (e.g. an "
                   "exported older commit) to compare it with this one")
    p.add_argument("--relay-profile", type=Path, help="Mosquitto: run the relay under cProfile and write its "
                   "stats to this file when it stops")
    p.add_argument("--journal", choices=("full", "normal", "off"), default="full",
                   help="Mosquitto: the relay's journal, in a directory of its own: full (fsync every step, "
                   "`blink serve`'s default), normal (`--sync normal`) or off (`--no-journal`)")
    args = p.parse_args(argv)
    args.steps = [int(x) for x in args.steps.split(",") if x.strip()]
    if args.quick:
        args.n, args.tp_seconds, args.step_seconds, args.capacity_budget = 100, 2.0, 2.0, 20.0
        args.steps = args.steps[:3]
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    capacity_on = {b.strip() for b in args.capacity_on.split(",") if b.strip()}
    if not brokers or any(b not in ("mosquitto", "amqtt") for b in brokers):
        print("relay_bench: --brokers takes mosquitto and/or amqtt", file=sys.stderr)
        return 2
    logging.getLogger("gmqtt").setLevel(logging.CRITICAL)
    rng = random.Random(args.seed)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "nodelay": args.nodelay,
                              "command": "bench/relay_bench.py " + " ".join(argv), "brokers": []}
    report["idle_loop_lag_ms"] = asyncio.run(idle_lag(1.0 if args.quick else 3.0))
    report["load_average"] = list(os.getloadavg())
    log(f"noise floor: idle event-loop lag p50 {report['idle_loop_lag_ms']['p50']} ms, "
        f"p99 {report['idle_loop_lag_ms']['p99']} ms; load average {report['load_average'][0]:.2f}")
    for broker in brokers:
        stack = Stack(broker, args.nodelay, args.relay_root.resolve() if args.relay_root else None,
                      args.relay_profile.resolve() if args.relay_profile else None, args.journal)
        try:
            stack.start()
            report["brokers"].append(asyncio.run(bench_broker(stack, args, rng, broker in capacity_on)))
        except RuntimeError as exc:
            print(f"relay_bench: {broker}: {exc}", file=sys.stderr)
            return 1
        finally:
            stack.stop()
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
