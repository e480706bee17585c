"""One flooding client against a relay while human-pace matches run: do the others notice?

How this works
--------------
``bench/fuzz.py``'s ``Stack`` starts the relay: ``blink serve`` (embedded broker) or Mosquitto (the
shipped ACL) with ``blink serve --broker``. Legitimate players come from ``blink load`` (``--matches``
BLINK matches of two gmqtt players at human pace, each play timed from send to verdict), run twice
for ``--seconds`` + a little: once alone (the baseline), once while one client floods.

The flooder is a bare MQTT connection (``RawMqtt``) with one client id, as the shipped ACL allows:
it creates a match that a helper id joins (so its actions meet a match being played), then for
``--seconds`` publishes, alternately, an ``Act`` on its match's action topic and a ``CreateMatch``
on its request topic, as fast as its socket drains. A probe client pings the relay every 100 ms
throughout; the Ping sent at the instant the flood ends measures the flood's backlog: its answer
comes when the relay has worked through everything that was queued before it.

Reported (one JSON object, and a line to paste into bench/RESULTS.md): the legitimate plays' p99
play->verdict without and with the flood and their ratio (target <= 1.2), the relay's RSS growth
during the flood (target <= 20 MB), the backlog's clearing time after the flood's end (target <= 1 s),
and what the flood sent and what the relay logged about it.

Run:  .venv/bin/python bench/flood.py --broker embedded
      .venv/bin/python bench/flood.py --broker mosquitto
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fuzz import RawMqtt, Stack, rss_kb  # noqa: E402
from protocol import messages as m  # noqa: E402
from protocol.codec import decode, encode  # noqa: E402
from protocol.rules import blink  # noqa: E402
from protocol.topics import Topics  # noqa: E402

T = Topics()
LEAD_S = 4.0  # the load's set-up and first moves before the flood starts
BACKLOG_WAIT_S = 90.0  # longer than this is reported as no answer (null)


async def run_load(stack: Stack, matches: int, seconds: float, seed: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "client.cli", "load", "--server", stack.client_url, "--relay-pid", str(stack.pid),
        "--matches", str(matches), "--duration", str(seconds), "--seed", str(seed), "--json", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"blink load failed ({proc.returncode}): {err.decode()[-400:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


class Prober:
    """Pings every ``interval`` s from its own client id; remembers (sent, rtt) of each."""

    def __init__(self, stack: Stack, interval: float = 0.1) -> None:
        self.stack = stack
        self.interval = interval
        self.id = f"flprobe{random.getrandbits(64):016x}"
        self.sent: dict[int, float] = {}
        self.rtt: dict[int, float] = {}
        self.conn = RawMqtt(self.id, self._on)
        self._n = 0

    def _on(self, topic: str, payload: bytes) -> None:
        try:
            msg = decode(payload)
        except Exception:  # noqa: BLE001
            return
        if isinstance(msg, m.Pong) and msg.t0 in self.sent:
            self.rtt[msg.t0] = time.monotonic() - self.sent[msg.t0]

    async def start(self) -> None:
        await self.conn.connect(self.stack.host, self.stack.port)
        await self.conn.subscribe(T.client(self.id))

    async def ping(self) -> int:
        self._n += 1
        self.sent[self._n] = time.monotonic()
        self.conn.publish(T.req(self.id), encode(m.Ping(t0=self._n)))
        await self.conn.drain()
        return self._n

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.ping()
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    async def wait_for(self, n: int, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while n not in self.rtt and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.rtt.get(n)


async def flood(stack: Stack, seconds: float, seed: int) -> dict[str, Any]:
    """One client at full speed for ``seconds``: actions in its own live match, and creates."""
    r = random.Random(seed)
    me, helper = f"flood{r.getrandbits(64):016x}", f"floodhelp{r.getrandbits(64):016x}"
    joined: dict[str, str] = {}

    def on(topic: str, payload: bytes) -> None:
        try:
            msg = decode(payload)
        except Exception:  # noqa: BLE001
            return
        if isinstance(msg, m.MatchJoined):
            joined[topic] = msg.match

    c, h = RawMqtt(me, on), RawMqtt(helper)
    await c.connect(stack.host, stack.port)
    await h.connect(stack.host, stack.port)
    await c.subscribe(T.client(me))
    c.publish(T.req(me), encode(m.CreateMatch(name="flood")))
    await c.drain()
    deadline = time.monotonic() + 30
    while T.client(me) not in joined and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    code = joined.get(T.client(me), "ZZZZZ")
    h.publish(T.req(helper), encode(m.JoinMatch(name="helper", code=code)))
    await h.drain()
    await asyncio.sleep(0.5)
    cards = [str(x) for x in blink.standard_deck()]
    acts = [encode(m.Act(id=i, seq=r.randrange(1, 50), action=blink.action_to_wire(
        blink.PlayCard(r.choice(cards), r.randrange(2))), reaction_ns=200_000_000)) for i in range(1, 4097)]
    create = encode(m.CreateMatch(name="flood"))
    act_topic, req_topic = T.act(code, me), T.req(me)
    sent = Counter[str]()
    t0 = time.monotonic()
    end = t0 + seconds
    i = 0
    while time.monotonic() < end:
        for _ in range(32):
            c.publish(act_topic, acts[i % len(acts)])
            c.publish(req_topic, create)
            i += 1
        sent["act"] += 32
        sent["create"] += 32
        await c.drain()
    elapsed = time.monotonic() - t0
    await c.close()
    await h.close()
    return {"code": code, "sent": dict(sent), "seconds": round(elapsed, 2),
            "per_s": round(sum(sent.values()) / elapsed)}


async def bench(stack: Stack, matches: int, seconds: float, seed: int) -> dict[str, Any]:
    baseline = await run_load(stack, matches, seconds + LEAD_S, seed)
    rss_before = rss_kb(stack.pid)
    prober = Prober(stack)
    await prober.start()
    stop_probe = asyncio.Event()
    probing = asyncio.create_task(prober.run(stop_probe))
    rss: list[int] = []
    stop_rss = asyncio.Event()

    async def sample() -> None:
        while not stop_rss.is_set():
            v = rss_kb(stack.pid)
            if v is not None:
                rss.append(v)
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    load = asyncio.create_task(run_load(stack, matches, seconds + LEAD_S, seed + 1))
    await asyncio.sleep(LEAD_S)
    flooded = await flood(stack, seconds, seed)
    print(f"flood over: {flooded}", file=sys.stderr, flush=True)
    marker = await prober.ping()  # sent the instant the flood ends
    backlog_s = await prober.wait_for(marker, BACKLOG_WAIT_S)
    during = await load
    stop_probe.set()
    await probing
    stop_rss.set()
    await sampler
    await prober.conn.close()
    records = stack.records()
    codes = Counter(x.get("code") for x in records if x.get("kind") == "bad_input")
    base99, flood99 = baseline["verdict_ms"]["p99"], during["verdict_ms"]["p99"]
    growth = (max(rss) - rss_before) / 1024 if rss and rss_before else None
    rtts = sorted(v * 1000 for v in prober.rtt.values())
    return {
        "broker": stack.broker, "matches": matches, "seconds": seconds,
        "baseline": {"verdict_ms": baseline["verdict_ms"], "unanswered": baseline["unanswered"],
                     "actions": baseline["actions"], "load_avg_1m": baseline["load_avg_1m"]},
        "flooded": {"verdict_ms": during["verdict_ms"], "unanswered": during["unanswered"],
                    "actions": during["actions"], "load_avg_1m": during["load_avg_1m"],
                    "request_rejected": during["request_rejected"], "setup_failed": during["setup_failed"]},
        "p99_ratio": round(flood99 / base99, 2) if base99 else None,
        "flood": flooded,
        "backlog_clear_s": None if backlog_s is None else round(backlog_s, 3),
        "probe_rtt_ms": {"n": len(rtts), "p50": round(rtts[len(rtts) // 2], 1) if rtts else None,
                         "p99": round(rtts[int(len(rtts) * 0.99)], 1) if rtts else None,
                         "max": round(rtts[-1], 1) if rtts else None,
                         "unanswered": len(prober.sent) - len(prober.rtt)},
        "relay_rss_mb": {"before": round(rss_before / 1024, 1) if rss_before else None,
                         "max": round(max(rss) / 1024, 1) if rss else None, "growth": round(growth, 1) if growth else growth},
        "relay_logged": {k: codes[k] for k in ("rate_limited", "too_many_matches", "relay_full", "internal_error")},
        "relay_alive": stack.alive(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description="one flooding client vs human-pace matches")
    p.add_argument("--broker", choices=("embedded", "mosquitto"), default="embedded")
    p.add_argument("--matches", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    stack = Stack(args.broker, seed=args.seed)
    stack.start()
    try:
        result = asyncio.run(bench(stack, args.matches, args.seconds, args.seed))
    finally:
        stack.stop()
        shutil.rmtree(stack.dir, ignore_errors=True)
    result["command"] = " ".join([".venv/bin/python bench/flood.py", *sys.argv[1:]])
    result["targets_met"] = {
        "p99_ratio<=1.2": result["p99_ratio"] is not None and result["p99_ratio"] <= 1.2,
        "rss_growth<=20MB": result["relay_rss_mb"]["growth"] is not None and result["relay_rss_mb"]["growth"] <= 20,
        "backlog<=1s": result["backlog_clear_s"] is not None and result["backlog_clear_s"] <= 1.0,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
