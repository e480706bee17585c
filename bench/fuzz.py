"""Fuzz a live relay during bot matches: hostile payloads of many kinds, on a real broker.

How this works
--------------
``Stack`` starts what is attacked: ``blink serve`` with its embedded broker on a free port, or
Mosquitto (the shipped ACL, ``deploy/mosquitto.acl``) on a free port with ``blink serve --broker``
on it -- each a child process, the relay writing its event log (``--log``). Bot matches
(``blink match --server``) run back to back for as long as the fuzzing lasts, so payloads always
meet a match being played.

The fuzzer speaks MQTT 3.1.1 itself (``RawMqtt``: QoS 0, a few dozen lines), so nothing in a
client library tidies what it sends. It opens ``--connections`` connections, each with its own
client id (the shipped ACL lets a client write only topics ending in its own id), two of which
create and join a match of their own so that actions can aim at a live match they sit in. Then it
sends ``--payloads`` payloads, round robin over the kinds of ``KINDS`` and over the connections,
as fast as the relay judges them: every ``window`` payloads a probe's Ping must come back before
more are sent (a fuzz, not a flood -- ``bench/flood.py`` is the flood), so the bots' requests never
wait behind a long backlog.

Afterwards: is the relay process alive, and does it answer a Ping from a fresh client? How many
``internal_error`` records are in its log (must be 0)? Did every bot match finish, and is each
match's public log valid (``tests/logcheck.py``: gap-free seq, every play matched its pile, the
winner put down all 30 cards)? How far did the relay's RSS grow? One JSON object is printed;
exit status 0 only if all of that holds.

Run:  .venv/bin/python bench/fuzz.py --broker embedded --payloads 100000
      .venv/bin/python bench/fuzz.py --broker mosquitto --payloads 100000
(``tests/test_fuzz.py`` runs a few thousand on both brokers and asserts behaviour only.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import msgpack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol import messages as m  # noqa: E402
from protocol.codec import decode_all, encode  # noqa: E402
from protocol.topics import Topics  # noqa: E402
from bench.benchkit import find_mosquitto  # noqa: E402
from mqttkit import free_port  # noqa: E402

T = Topics()
SERVE_START_S = 30.0


# ------------------------------------------------------------------------------------------ MQTT


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _utf8(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(b)) + b


class RawMqtt:
    """A bare MQTT 3.1.1 client: QoS 0 publishes and subscriptions, nothing checked on the way out."""

    def __init__(self, client_id: str, on_message: Callable[[str, bytes], None] | None = None) -> None:
        self.client_id = client_id
        self.on_message = on_message
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._pid = 0
        self.closed = asyncio.Event()

    async def connect(self, host: str, port: int, username: str | None = None, password: str | None = None) -> None:
        self.reader, self.writer = await asyncio.open_connection(host, port)
        flags = 0x02 | (0x80 if username is not None else 0) | (0x40 if password is not None else 0)
        var = _utf8("MQTT") + bytes([4, flags]) + struct.pack("!H", 0)  # keep-alive off
        body = var + _utf8(self.client_id)
        if username is not None:
            body += _utf8(username)
        if password is not None:
            body += _utf8(password)
        self.writer.write(b"\x10" + _varint(len(body)) + body)
        head = await asyncio.wait_for(self.reader.readexactly(4), 10)
        if head[0] != 0x20 or head[3] != 0:
            raise ConnectionError(f"{self.client_id}: CONNACK {head.hex()}")
        self._task = asyncio.create_task(self._read())

    def publish(self, topic: str | bytes, payload: bytes) -> None:
        assert self.writer is not None
        body = _utf8(topic) + payload
        self.writer.write(b"\x30" + _varint(len(body)) + body)

    async def subscribe(self, topic: str) -> None:
        assert self.writer is not None
        self._pid = self._pid % 65535 + 1
        body = struct.pack("!H", self._pid) + _utf8(topic) + b"\x00"
        self.writer.write(b"\x82" + _varint(len(body)) + body)
        await self.writer.drain()

    async def drain(self) -> None:
        assert self.writer is not None
        await self.writer.drain()

    async def _read(self) -> None:
        assert self.reader is not None
        try:
            while True:
                first = (await self.reader.readexactly(1))[0]
                n, shift = 0, 0
                while True:
                    b = (await self.reader.readexactly(1))[0]
                    n |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                data = await self.reader.readexactly(n)
                if first >> 4 == 3 and self.on_message is not None:
                    tlen = struct.unpack("!H", data[:2])[0]
                    topic = data[2:2 + tlen].decode(errors="replace")
                    start = 2 + tlen + (2 if first & 0x06 else 0)
                    self.on_message(topic, data[start:])
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.closed.set()

    async def close(self) -> None:
        if self.writer is not None:
            try:
                self.writer.write(b"\xe0\x00")
                self.writer.close()
            except (ConnectionError, OSError, RuntimeError):
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


# ----------------------------------------------------------------------------------------- stack


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


class Stack:
    """A relay to attack: ``blink serve --embedded`` (``broker="embedded"``), plain ``blink serve``
    with the broker it chooses itself (``"serve"``: an installed Mosquitto, else the embedded one),
    or ``blink serve --broker`` on a given broker URL, or on a Mosquitto started here with the
    shipped ACL (``"mosquitto"``)."""

    def __init__(self, broker: str = "embedded", broker_url: str | None = None, seed: int = 1,
                 workdir: Path | None = None, serve_args: tuple[str, ...] = ()) -> None:
        self.broker = broker
        self.serve_args = serve_args  # more `blink serve` options (e.g. the journal's)
        self.broker_url = broker_url
        self.seed = seed
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="blink-fuzz-"))
        self.log = self.dir / "relay.jsonl"
        self.port = 0
        self.mosquitto: subprocess.Popen[bytes] | None = None
        self.relay: subprocess.Popen[bytes] | None = None
        self._mosq_dir: Path | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def client_url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.relay is not None
        return self.relay.pid

    def alive(self) -> bool:
        return self.relay is not None and self.relay.poll() is None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "client.cli", "serve", "--seed", str(self.seed), "--log", str(self.log),
               *self.serve_args]
        relay_url = self.broker_url
        if self.broker == "mosquitto" and relay_url is None:
            relay_url = self._start_mosquitto()
        if relay_url is not None:
            from mqttkit import parse_url

            self.port = parse_url(relay_url).port
            cmd += ["--broker", relay_url]
        else:
            self.port = free_port()
            cmd += ["--port", str(self.port), *(["--embedded"] if self.broker == "embedded" else [])]
        self.relay = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=open(self.dir / "relay.err", "wb"), start_new_session=True,
                                      preexec_fn=_die_with_parent)
        assert self.relay.stdout is not None
        deadline = time.monotonic() + SERVE_START_S
        line = b""
        while time.monotonic() < deadline and b"running" not in line:
            line = self.relay.stdout.readline()
            if not line and self.relay.poll() is not None:
                break
        if b"running" not in line:
            self.stop()
            err = (self.dir / "relay.err").read_text(errors="replace").strip().splitlines()
            raise RuntimeError(f"blink serve did not start: {err[-1] if err else 'no output'}")

    def _start_mosquitto(self) -> str:
        binary = find_mosquitto()
        if binary is None:
            raise RuntimeError("mosquitto is not installed")
        port = free_port()
        tmp = Path(tempfile.mkdtemp(prefix="blink-fuzz-mosq-"))
        tmp.chmod(0o755)  # started as root, Mosquitto drops to its own user
        from relay.hosting import write_mosquitto_config

        # As `blink broker-config` writes it: the shipped ACL, a relay password, the size limits.
        login = write_mosquitto_config(tmp, "127.0.0.1", port)
        conf = tmp / "mosquitto.conf"
        self._mosq_dir = tmp
        self.mosquitto = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        import socket

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return login.login_url
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start")

    def stop(self) -> None:
        for proc, sig in ((self.relay, signal.SIGINT), (self.mosquitto, signal.SIGTERM)):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.relay is not None and self.relay.stdout is not None:
            self.relay.stdout.close()
        if self._mosq_dir is not None:
            shutil.rmtree(self._mosq_dir, ignore_errors=True)

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out


# ------------------------------------------------------------------------------------- payloads


def _rand_bytes(r: random.Random, n: int) -> bytes:
    return r.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _nested(depth: int) -> bytes:
    """msgpack bytes of lists and maps nested ``depth`` deep (msgpack's own packer refuses > 512)."""
    return b"".join(b"\x91" if i % 2 else b"\x81\xa1x" for i in range(depth)) + b"\x01"


def _map_with(fields: dict[str, Any], key: str, raw: bytes) -> bytes:
    """A msgpack map of ``fields`` plus ``key`` whose value is the ready-packed ``raw``."""
    body = b"".join(_pack(k) + _pack(v) for k, v in fields.items()) + _pack(key) + raw
    return bytes([0x80 | (len(fields) + 1)]) + body


HOSTILE_SETTINGS: list[tuple[str, dict[str, Any], int]] = [
    ("blink", {"deck": {"colours": [f"c{'abcdefghij'[i % 10]}{'abcdefghij'[i // 10 % 10]}x" for i in range(100)],
                        "shapes": [f"s{'abcdefghij'[i % 10]}{'abcdefghij'[i // 10 % 10]}x" for i in range(100)],
                        "counts": list(range(1, 99))}}, 2),
    ("blink", {"deck": {"colours": "a" * 3000, "shapes": ["s"], "counts": [1]}}, 2),
    ("blink", {"hand_size": 2**62, "best_of": -1}, 2),
    ("blink", {"countdown_s": float("inf"), "pick_time_s": float("nan")}, 2),
    ("takeaway", {"layout": "custom", "cells": [[q, r] for q in range(-20, 20) for r in range(-10, 10)]}, 2),
    ("takeaway", {"layout": "random", "size": 2**40}, 6),
    ("ryo", {"tile_pool": [999] * 21, "max_face": 20, "rolls_per_round": 99, "rounds_per_game": 99}, 8),
    ("ryo", {"tile_pool": [2**63 - 1] * 10}, 2),
    ("sequence", {"board": [[2] * 12] * 12, "max_turns": 100_000, "sequence_length": 12}, 4),
    ("sequence", {"board": [[12] * 12] * 200}, 2),
    ("blink", {"order": {"x": [1] * 1000}}, 2),
    ("nosuchgame", {}, 2),
    ("blink", {}, 2**31),
]


class Fuzzer:
    """The payload kinds, each ``(rng, ctx) -> (topic, payload)`` for a connection's client id."""

    def __init__(self, seed: int, live_code: str = "", codes: list[str] | None = None) -> None:
        self.r = random.Random(seed)
        self.live_code = live_code  # a match this fuzzer's first two connections sit in
        self.codes = codes if codes is not None else []  # match codes seen on public topics

    def code(self) -> str:
        r = self.r
        choices = [self.live_code] * 3 + self.codes[-20:] + ["ZZZZZ", "A" * 64, "x"]
        return r.choice([c for c in choices if c])

    def make(self, kind: str, me: str) -> tuple[str, bytes]:
        r = self.r
        req, act = T.req(me), T.act(self.code(), me)
        if kind == "random_bytes":
            return r.choice((req, act)), _rand_bytes(r, r.randrange(0, 300))
        if kind == "wrong_types":
            bad: list[Any] = [
                {"t": "CreateMatch", "v": 1, "name": r.randrange(10**6), "seats": "two"},
                {"t": "JoinMatch", "v": 1, "name": None, "code": [1, 2]},
                {"t": "Act", "v": 1, "id": "1", "seq": 1.5, "action": "PlayCard"},
                {"t": "Act", "v": 1, "id": True, "seq": 0, "action": {"t": "PlayCard", "v": 1, "card": 7, "pile": "0"}},
                {"t": "Ping", "v": 1, "t0": b"\x00" * 8},
                {"t": "Resync", "v": 1, "match": {"a": 1}},
                {"t": "QuickMatch", "v": 1, "name": "q", "settings": [1, 2, 3]},
                {"t": 5, "v": "1"},
                [1, 2, 3],
                "a string",
            ]
            return r.choice((req, act)), _pack(r.choice(bad))
        if kind == "huge_ints":
            big = r.choice((2**63 - 1, -(2**63), 2**64 - 1, -1, 0))
            msg: dict[str, Any] = r.choice([
                {"t": "Act", "v": 1, "id": big, "seq": big, "action": {"t": "PlayCard", "v": 1, "card": "1-red-star",
                                                                       "pile": big}, "reaction_ns": big},
                {"t": "Ping", "v": 1, "t0": big},
                {"t": "ProbeReply", "v": 1, "sent_ns": big},
                {"t": "CreateMatch", "v": 1, "name": "h", "seats": big, "bots": big},
                {"t": "Act", "v": big, "id": 1, "seq": 1, "action": {}},
            ])
            return (act if msg["t"] == "Act" else req), _pack(msg)
        if kind == "deep_nesting":
            deep = _nested(r.choice((50, 500, 3000)))
            if r.random() < 0.5:
                return act, _map_with({"t": "Act", "v": 1, "id": 1, "seq": 1}, "action", deep)
            return req, _map_with({"t": "CreateMatch", "v": 1, "name": "n"}, "settings",
                                  b"\x81" + _pack("deck") + deep)
        if kind == "unknown_types":
            odd = r.choice([{"t": "Nope", "v": 1}, {"t": "Pong", "v": 1, "t0": 1, "t1": 2, "t2": 3},
                            {"t": "Event", "v": 1, "match": "X", "seq": 1, "ts": 1, "game": 0, "type": "match_over",
                             "data": {"winner": "EVIL"}},
                            {"t": "Act", "v": 2, "id": 1, "seq": 1, "action": {}},
                            {"t": "Act", "v": 1, "id": 1, "seq": 1, "action": {"t": "Reveal", "v": 1}},
                            {"t": "Act", "v": 1, "id": 1, "seq": 1, "action": {"t": "ToyTake", "v": 1, "n": 1}},
                            {"t": "CreateMatch", "v": 1, "name": "u", "extra": 1}])
            return r.choice((req, act)), _pack(odd)
        if kind == "oversized":
            # Mostly just over the caps (the relay's 8 KiB, the decoder's 64 KiB); now and then a
            # megabyte, which a broker without a cap carries in full.
            n = 1024 * 1024 if r.random() < 0.02 else r.choice((9 * 1024, 20 * 1024, 70 * 1024))
            blob = r.choice([encode(m.CreateMatch(name="o" * n)),
                             encode(m.Act(id=1, seq=1, action={"t": "PlayCard", "v": 1, "card": "c" * n, "pile": 0})),
                             _rand_bytes(r, n)])
            return r.choice((req, act)), blob
        if kind == "live_match":  # well-formed actions in a live match, with wrong seqs and ids
            seq = r.choice((-1, 0, 1, 10**9, r.randrange(200)))
            card = r.choice(("1-red-star", "5-blue-moon", "3-green-triangle", "9-red-star", "1-red"))
            action = r.choice([{"t": "PlayCard", "v": 1, "card": card, "pile": r.choice((0, 1, 2, -1, 99))},
                               {"t": "DrawCard", "v": 1}, {"t": "PickCard", "v": 1, "card": card}])
            return T.act(self.live_code or self.code(), me), _pack(
                {"t": "Act", "v": 1, "id": r.choice((0, 1, r.randrange(10**6))), "seq": seq, "action": action,
                 "reaction_ns": r.choice((None, 0, -5, 10**12))})
        if kind == "bad_topics":
            topic = r.choice([T.act("A" * 80, me), T.act("bad code", me), T.act(self.code(), me) + "/extra",
                              T.req(me) + "/x", "blink/v1/m/0//act/", "blink/v1/relay/relay-0/status",
                              T.ev(self.code()), T.snap(self.code()), "blink/v1/lobby/matches", T.client(me),
                              T.act(self.code(), "é" * 30)])
            return topic, encode(m.Ping(t0=1))
        if kind == "hostile_settings":
            game, settings, seats = r.choice(HOSTILE_SETTINGS)
            try:
                payload = encode(m.CreateMatch(name="s" * r.randrange(0, 300), game=game, settings=settings,
                                               seats=seats))
            except (ValueError, OverflowError):
                payload = _pack({"t": "CreateMatch", "v": 1, "name": "s", "game": game, "seats": 2})
            return req, payload
        if kind == "create_flood":
            request: Any = r.choice([m.CreateMatch(name=f"f{r.randrange(100)}"),
                                     m.QuickMatch(name="q", settings={"hand_size": r.randrange(1, 11)}),
                                     m.JoinMatch(name="j", match=self.code()), m.Leave(match=self.code()),
                                     m.Rematch(match=self.code()), m.Resync(match=self.code())])
            return req, encode(request)
        if kind == "truncated":
            whole = encode(m.Act(id=r.randrange(100), seq=1, action={"t": "PlayCard", "v": 1, "card": "1-red-star",
                                                                    "pile": 0}))
            return act, whole[:r.randrange(1, len(whole))]
        if kind == "empty":
            return r.choice((req, act)), b""
        raise ValueError(kind)


KINDS = ("random_bytes", "wrong_types", "huge_ints", "deep_nesting", "unknown_types", "oversized", "live_match",
         "bad_topics", "hostile_settings", "create_flood", "truncated", "empty")


# ---------------------------------------------------------------------------------------- a run


async def bot_matches(stack: Stack, stop: asyncio.Event, seed: int, settings: dict[str, Any], reaction: float,
                      timeout: float, results: list[dict[str, Any]]) -> None:
    """Bot matches back to back until ``stop`` (the one under way is always played out)."""
    n = 0
    while True:
        n += 1
        log = stack.dir / f"match{n}.jsonl"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "client.cli", "match", "--server", stack.client_url, "--bots", "2",
            "--seed", str(seed + n), "--reaction", str(reaction), "--settings", json.dumps(settings),
            "--timeout", str(timeout), "--json", "--log", str(log), cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent)
        out, err = await proc.communicate()
        result: dict[str, Any] = {"status": proc.returncode, "log": str(log), "stderr": err.decode()[-500:]}
        if proc.returncode == 0:
            result["summary"] = json.loads(out.decode().strip().splitlines()[-1])
            try:
                from tests.logcheck import check_blink_log, read

                events = read(log)
                result["check"] = check_blink_log(events, result["summary"]["players"])
                result["valid"] = True
            except (AssertionError, KeyError, ValueError) as exc:
                result["valid"] = False
                result["problem"] = f"{type(exc).__name__}: {exc}"
        results.append(result)
        if stop.is_set():
            return


async def ping_relay(stack: Stack, timeout: float) -> float | None:
    """A fresh client's Ping: seconds until the Pong (None: no answer within ``timeout``)."""
    got = asyncio.Event()
    me = f"probe{random.getrandbits(64):016x}"

    def on_message(topic: str, payload: bytes) -> None:
        try:
            if any(isinstance(x, m.Pong) for x in decode_all(payload)):
                got.set()
        except Exception:  # noqa: BLE001
            pass

    c = RawMqtt(me, on_message)
    await c.connect(stack.host, stack.port)
    try:
        await c.subscribe(T.client(me))
        t0 = time.monotonic()
        c.publish(T.req(me), encode(m.Ping(t0=time.time_ns())))
        await c.drain()
        try:
            await asyncio.wait_for(got.wait(), timeout)
        except asyncio.TimeoutError:
            return None
        return time.monotonic() - t0
    finally:
        await c.close()


async def fuzz(stack: Stack, payloads: int, seed: int = 1, connections: int = 40, kinds: tuple[str, ...] = KINDS,
               match_settings: dict[str, Any] | None = None, reaction: float = 0.05,
               match_timeout: float = 300.0, window: int = 400) -> dict[str, Any]:
    """Fuzz ``stack`` (started) with ``payloads`` payloads during bot matches; the figures and verdicts."""
    rng = random.Random(seed)
    stop = asyncio.Event()
    matches: list[dict[str, Any]] = []
    rss: list[int] = []
    rss0 = rss_kb(stack.pid)

    async def sample() -> None:
        while not stop.is_set():
            v = rss_kb(stack.pid)
            if v is not None:
                rss.append(v)
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    bots = asyncio.create_task(bot_matches(stack, stop, seed, match_settings or {}, reaction, match_timeout, matches))
    fz = Fuzzer(seed)
    joined: dict[str, str] = {}

    def watcher(topic: str, payload: bytes) -> None:
        parts = topic.split("/")
        if len(parts) == 6 and parts[5] == "ev" and parts[4] not in fz.codes:
            fz.codes.append(parts[4])
            del fz.codes[:-50]
        try:
            msgs = decode_all(payload)
        except Exception:  # noqa: BLE001
            return
        for msg in msgs:
            if isinstance(msg, m.MatchJoined):
                joined[topic] = msg.match

    ids = [f"fz{i}x{rng.getrandbits(64):016x}" for i in range(connections)]
    conns = [RawMqtt(i, watcher if n < 3 else None) for n, i in enumerate(ids)]
    for c in conns:
        await c.connect(stack.host, stack.port)
    await conns[0].subscribe(T.client(ids[0]))
    await conns[1].subscribe(T.client(ids[1]))
    await conns[2].subscribe("blink/v1/m/+/+/ev")
    # Two fuzzers sit in a live match of their own: the live-match kind aims at it.
    conns[0].publish(T.req(ids[0]), encode(m.CreateMatch(name="fuzz0")))
    await conns[0].drain()
    deadline = time.monotonic() + 30
    while T.client(ids[0]) not in joined and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    fz.live_code = joined.get(T.client(ids[0]), "")
    if fz.live_code:
        conns[1].publish(T.req(ids[1]), encode(m.JoinMatch(name="fuzz1", match=fz.live_code)))
        await conns[1].drain()

    # Paced, not a flood (bench/flood.py is the flood): every ``window`` payloads a probe's Ping must
    # come back before more are sent, so the relay's backlog stays short and the bots' requests are
    # never stuck behind a minute of garbage. The relay judges every payload all the same.
    pongs: asyncio.Queue[int] = asyncio.Queue()
    probe_id = f"fzprobe{rng.getrandbits(64):016x}"

    def on_probe(topic: str, payload: bytes) -> None:
        try:
            msgs = decode_all(payload)
        except Exception:  # noqa: BLE001
            return
        for msg in msgs:
            if isinstance(msg, m.Pong):
                pongs.put_nowait(msg.t0)

    probe = RawMqtt(probe_id, on_probe)
    await probe.connect(stack.host, stack.port)
    await probe.subscribe(T.client(probe_id))
    stalls = 0

    async def settle(n: int) -> None:
        nonlocal stalls
        probe.publish(T.req(probe_id), encode(m.Ping(t0=n)))
        await probe.drain()
        try:
            while await asyncio.wait_for(pongs.get(), 60) != n:
                pass
        except asyncio.TimeoutError:
            stalls += 1

    sent: Counter[str] = Counter()
    reconnects = 0
    t0 = time.monotonic()
    for i in range(payloads):
        if i and i % window == 0:
            await settle(i)
        kind = kinds[i % len(kinds)]
        c = conns[i % len(conns)]
        topic, payload = fz.make(kind, c.client_id)
        sent[kind] += 1
        try:
            c.publish(topic, payload)
            if i % 16 == len(conns) % 16 or len(payload) > 64 * 1024:
                await c.drain()
        except (ConnectionError, OSError):
            pass
        if c.closed.is_set():  # the broker dropped this connection (e.g. a payload over its cap): reconnect
            await c.close()
            n = conns.index(c)
            conns[n] = RawMqtt(c.client_id, c.on_message)
            await conns[n].connect(stack.host, stack.port)
            reconnects += 1
            if n < 2:  # the live match's players: they watch their private topic again
                await conns[n].subscribe(T.client(c.client_id))
    for c in conns:
        try:
            await c.drain()
        except (ConnectionError, OSError):
            pass
    await settle(payloads)
    await probe.close()
    send_s = time.monotonic() - t0
    # The relay works through what is queued: how long until a fresh client's Ping is answered?
    backlog_s = await ping_relay(stack, 120.0)
    stop.set()
    await bots
    stop.set()
    await sampler
    for c in conns:
        await c.close()
    after = await ping_relay(stack, 30.0)
    records = stack.records()
    codes = Counter(r.get("code") for r in records if r.get("kind") == "bad_input")
    result = {
        "broker": stack.broker, "payloads": payloads, "kinds": dict(sent), "connections": connections,
        "send_s": round(send_s, 2), "judged_per_s": round(payloads / send_s) if send_s else None,
        "window": window, "probe_stalls": stalls, "reconnects": reconnects,
        "first_pong_after_s": None if backlog_s is None else round(backlog_s, 3),
        "relay_alive": stack.alive() and after is not None,
        "internal_errors": codes.get("internal_error", 0),
        "bad_input_codes": dict(codes.most_common()),
        "log_records": len(records),
        "matches": [{k: v for k, v in x.items() if k != "stderr" or x["status"]} for x in matches],
        "matches_valid": bool(matches) and all(x.get("valid") for x in matches),
        "rss_kb": {"start": rss0, "max": max(rss) if rss else None, "end": rss[-1] if rss else None},
    }
    result["ok"] = bool(result["relay_alive"] and result["internal_errors"] == 0 and result["matches_valid"])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    p.add_argument("--broker", choices=("embedded", "mosquitto"), default="embedded")
    p.add_argument("--payloads", type=int, default=100_000)
    p.add_argument("--connections", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reaction", type=float, default=0.05, help="the bots' median reaction (s)")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated payload kinds (default: all)")
    args = p.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        p.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    stack = Stack(args.broker, seed=args.seed)
    stack.start()
    try:
        result = asyncio.run(fuzz(stack, args.payloads, args.seed, args.connections, kinds, reaction=args.reaction))
    finally:
        stack.stop()
    result["command"] = " ".join(["bench/fuzz.py", *sys.argv[1:]])
    if result["ok"]:
        shutil.rmtree(stack.dir, ignore_errors=True)
    else:
        result["kept"] = str(stack.dir)  # the relay's log and the matches' logs, to look at
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
