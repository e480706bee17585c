"""One flooding client against a relay while human-pace matches run: do the others notice?

How this works
--------------
``bench/fuzz.py``'s ``Stack`` starts the relay: ``blink serve`` (embedded broker) or Mosquitto (the
shipped ACL) with ``blink serve --broker``. Legitimate players come from ``blink load`` (``--matches``
BLINK matches of two players, one mqttkit connection each, at human pace, each play timed from send
to verdict), run twice for ``--seconds`` + a little: once alone (the baseline), once while one client floods.

The flooder is a bare MQTT connection (``RawMqtt``) with one client id, as the shipped ACL allows,
publishing for ``--seconds`` as fast as its socket drains, in one phase per ``--flood`` kind:
``act`` -- ``Act``s on the action topic of a match it created and a second client id joined (so they meet
a match being played) -- and ``create`` -- ``CreateMatch`` on its request topic. A probe client
pings the relay every 100 ms throughout each phase; the Ping sent at the instant the flood ends
measures the flood's backlog: its answer comes when the relay has worked through everything that
was queued before it.

Reported (one JSON object), per flood kind: the legitimate plays' p99 play->verdict with the flood
and its ratio to the baseline's p99 measured first in the same run (target <= 1.2), the relay's RSS
growth during the phase (target <= 20 MB), the backlog's clearing time after the flood's end
(target <= 1 s), what the flooder managed to send and what it was told (``rate_limited``...), and,
for the run, what the relay logged about it. The baseline runs the same probe (its ``probe_rtt_ms``
is the one to compare a flood phase's with). The relay journals into a private data directory.
Each phase also reports ``cpu_pct``: the CPU (% of one core) of the relay, of Mosquitto, of this
process (the flooder and the probe) and of ``blink load`` (the players), to tell what a flood
costs where on a machine of few cores.

``--control`` adds a phase ``none``: the flooder connects and sets up exactly as for ``act`` and then
sends nothing; its ``p99_ratio`` against the same round's baseline is the spread of the ratio
itself on this machine (an A/A comparison), to read the floods' ratios against.

``--rounds N`` repeats the baseline and the floods N times, the baseline first in odd rounds and
last in even ones (the floods reversed too), each round's ratios against its own baseline: on a
shared machine whose load drifts, one baseline measured first says little. ``--cpu-only`` runs no
players: only the flooder, each kind for ``--seconds`` after as long idle, and reports the CPU of
each process -- what the flood alone costs the relay (and Mosquitto), per message sent.

Run:  .venv/bin/python bench/flood.py --broker embedded
      .venv/bin/python bench/flood.py --broker mosquitto
      (--flood act|create|both, --matches 10, --seconds 20 are the defaults;
       --rounds 2 for two rounds in alternating order; --cpu-only for the flood's cost alone)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
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
from protocol.codec import decode_all, encode  # noqa: E402
from protocol.rules import blink  # noqa: E402
from protocol.topics import Topics  # noqa: E402

T = Topics()
LEAD_S = 4.0  # the load's set-up and first moves before the flood starts
BACKLOG_WAIT_S = 90.0  # longer than this is reported as no answer (null)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | None) -> float | None:
    """A process's CPU time so far (user + system), from /proc."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class CpuMeter:
    """CPU % of a core over a stretch of time: the relay, Mosquitto (if any), this process (the
    flooder and the probe) and the children waited for meanwhile (``blink load``)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.mosquitto = stack.mosquitto.pid if stack.mosquitto is not None else None
        self.t0 = time.monotonic()
        self.relay0 = cpu_s(stack.pid)
        self.mosq0 = cpu_s(self.mosquitto)
        self.own0 = time.process_time()
        self.kids0 = _children_cpu()

    def pct(self) -> dict[str, float | None]:
        wall = time.monotonic() - self.t0

        def pct(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or wall <= 0 else round((b - a) / wall * 100, 1)

        return {"relay": pct(self.relay0, cpu_s(self.stack.pid)),
                "mosquitto": pct(self.mosq0, cpu_s(self.mosquitto)),
                "bench_flooder_probe": pct(self.own0, time.process_time()),
                "load_generator": pct(self.kids0, _children_cpu())}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


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
            msgs = decode_all(payload)
        except Exception:  # noqa: BLE001
            return
        for msg in msgs:
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


async def flood(stack: Stack, kind: str, seconds: float, seed: int) -> dict[str, Any]:
    """One client at full speed for ``seconds``: ``act`` -- actions in its own live match (a
    second client id joins the match it creates, so the actions meet a match being played), or
    ``create`` -- ``CreateMatch`` requests."""
    r = random.Random(seed)
    me, helper = f"flood{r.getrandbits(64):016x}", f"floodhelp{r.getrandbits(64):016x}"
    joined: dict[str, str] = {}
    told = Counter[str]()

    def on(topic: str, payload: bytes) -> None:
        try:
            msgs = decode_all(payload)
        except Exception:  # noqa: BLE001
            return
        for msg in msgs:
            if isinstance(msg, m.MatchJoined):
                joined[topic] = msg.match
            elif isinstance(msg, (m.RequestRejected, m.ActionRejected)):
                told[msg.code] += 1

    c = RawMqtt(me, on)
    await c.connect(stack.host, stack.port)
    await c.subscribe(T.client(me))
    if kind in ("act", "none"):
        h = RawMqtt(helper)
        await h.connect(stack.host, stack.port)
        c.publish(T.req(me), encode(m.CreateMatch(name="flood")))
        await c.drain()
        deadline = time.monotonic() + 30
        while T.client(me) not in joined and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        code = joined.get(T.client(me), "ZZZZZ")
        h.publish(T.req(helper), encode(m.JoinMatch(name="helper", match=code)))
        await h.drain()
        await asyncio.sleep(0.5)
        cards = [str(x) for x in blink.standard_deck()]
        payloads = [encode(m.Act(id=i, seq=r.randrange(1, 50), action=blink.action_to_wire(
            blink.PlayCard(r.choice(cards), r.randrange(2))), reaction_ns=200_000_000)) for i in range(1, 4097)]
        topic = T.act(code, me)
    else:
        h = None
        code = ""
        payloads = [encode(m.CreateMatch(name="flood"))]
        topic = T.req(me)
    sent = 0
    t0 = time.monotonic()
    end = t0 + seconds
    i = 0
    if kind == "none":  # the control: the same set-up and phase, nothing sent
        await asyncio.sleep(seconds)
    while kind != "none" and time.monotonic() < end:
        for _ in range(64):
            c.publish(topic, payloads[i % len(payloads)])
            i += 1
        sent += 64
        # Waits while the socket is full: a broker that reads this client slowly holds it back
        # here (then the flood stops on time, with what it wrote still on its way).
        try:
            await asyncio.wait_for(c.drain(), max(0.001, end - time.monotonic()))
        except asyncio.TimeoutError:
            break
    elapsed = time.monotonic() - t0
    await c.close()
    if h is not None:
        await h.close()
    return {"kind": kind, "code": code, "sent": sent, "seconds": round(elapsed, 2), "per_s": round(sent / elapsed),
            "told": dict(told)}


async def phase(stack: Stack, kind: str | None, matches: int, seconds: float, seed: int,
                flood_seed: int = 0) -> dict[str, Any]:
    """Human-pace matches for ``seconds`` + a lead, with one client flooding (``kind``) meanwhile
    (None: the baseline, nobody floods; the probe pings all the same)."""
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
    meter = CpuMeter(stack)
    load = asyncio.create_task(run_load(stack, matches, seconds + LEAD_S, seed))
    await asyncio.sleep(LEAD_S)
    if kind is None:
        flooded: dict[str, Any] = {}
        await asyncio.sleep(seconds)
    else:
        flooded = await flood(stack, kind, seconds, flood_seed)
        print(f"{kind} flood over: {flooded}", file=sys.stderr, flush=True)
    marker = await prober.ping()  # sent the instant the flood ends
    backlog_s = await prober.wait_for(marker, BACKLOG_WAIT_S)
    during = await load
    cpu = meter.pct()
    stop_probe.set()
    await probing
    stop_rss.set()
    await sampler
    await prober.conn.close()
    growth = (max(rss) - rss_before) / 1024 if rss and rss_before else None
    rtts = sorted(v * 1000 for v in prober.rtt.values())
    return {
        "verdict_ms": during["verdict_ms"], "unanswered": during["unanswered"], "actions": during["actions"],
        "load_avg_1m": during["load_avg_1m"], "relay_cpu_pct": during.get("relay_cpu_pct"),
        "cpu_pct": cpu,
        "request_rejected": during["request_rejected"],
        "setup_failed": during["setup_failed"],
        "flood": flooded,
        "backlog_clear_s": None if backlog_s is None else round(backlog_s, 3),
        "probe_rtt_ms": {"n": len(rtts), "p50": round(rtts[len(rtts) // 2], 1) if rtts else None,
                         "p99": round(rtts[int(len(rtts) * 0.99)], 1) if rtts else None,
                         "max": round(rtts[-1], 1) if rtts else None,
                         "unanswered": len(prober.sent) - len(prober.rtt)},
        "relay_rss_mb": {"before": round(rss_before / 1024, 1) if rss_before else None,
                         "max": round(max(rss) / 1024, 1) if rss else None,
                         "growth": None if growth is None else round(growth, 1)},
    }


async def bench(stack: Stack, matches: int, seconds: float, seed: int, kinds: list[str],
                rounds: int = 1) -> dict[str, Any]:
    """``rounds`` rounds of a baseline and one phase per flood kind; a round's ratios are against
    its own baseline. Odd rounds run the baseline first, even rounds last (the floods in reverse
    order too), so that a machine whose load drifts during a run favours neither side."""
    out: dict[str, Any] = {}
    for r in range(rounds):
        order: list[str | None] = [None, *kinds]
        if r % 2:
            order.reverse()
        got = await one_round(stack, matches, seconds, seed + 10 * r, order)
        got["order"] = ["baseline" if k is None else k for k in order]
        if rounds == 1:
            out = got
        else:
            out.setdefault("rounds", []).append(got)
    if rounds > 1:
        out["p99_ratios"] = {k: [x["floods"][k]["p99_ratio"] for x in out["rounds"]] for k in kinds}
    records = stack.records()
    codes = Counter(x.get("code") for x in records if x.get("kind") == "bad_input")
    out.update({
        "broker": stack.broker, "matches": matches, "seconds": seconds,
        "relay_logged": {k: codes[k] for k in ("rate_limited", "too_many_matches", "relay_full", "internal_error")},
        "relay_alive": stack.alive(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    })
    return out


async def one_round(stack: Stack, matches: int, seconds: float, seed: int, order: list[str | None]) -> dict[str, Any]:
    results: dict[str | None, dict[str, Any]] = {}
    for n, kind in enumerate(order):
        # The same players' seed in every phase of a round (the same reaction times and choices):
        # the phases differ by the flood, not by what the players do.
        results[kind] = await phase(stack, kind, matches, seconds, seed, flood_seed=seed + 1 + n)
    baseline = results[None]
    base99 = baseline["verdict_ms"]["p99"]
    phases: dict[str, Any] = {}
    for kind in (k for k in order if k is not None):
        got = results[kind]
        flood99 = got["verdict_ms"]["p99"]
        got["p99_ratio"] = round(flood99 / base99, 2) if base99 and flood99 is not None else None
        got["targets_met"] = {
            "p99_ratio<=1.2": got["p99_ratio"] is not None and got["p99_ratio"] <= 1.2,
            "rss_growth<=20MB": got["relay_rss_mb"]["growth"] is not None and got["relay_rss_mb"]["growth"] <= 20,
            "backlog<=1s": got["backlog_clear_s"] is not None and got["backlog_clear_s"] <= 1.0,
        }
        phases[kind] = got
    return {
        "baseline": {k: baseline[k] for k in ("verdict_ms", "unanswered", "actions", "load_avg_1m", "relay_cpu_pct",
                                              "cpu_pct", "probe_rtt_ms", "relay_rss_mb")},
        "floods": phases,
    }


async def cpu_only(stack: Stack, seconds: float, seed: int, kinds: list[str]) -> dict[str, Any]:
    """No players: the CPU the relay (and Mosquitto) spend on nothing but one flooder, each kind
    for ``seconds``, after as long idle (what a flood alone costs, without the noise of a load)."""
    await asyncio.sleep(1.0)
    meter = CpuMeter(stack)
    await asyncio.sleep(seconds)
    out: dict[str, Any] = {"idle": meter.pct()}
    for n, kind in enumerate(kinds):
        meter = CpuMeter(stack)
        flooded = await flood(stack, kind, seconds, seed + 1 + n)
        out[kind] = {"cpu_pct": meter.pct(), "flood": flooded}
        await asyncio.sleep(2.0)
    out.update({"broker": stack.broker, "seconds": seconds, "relay_alive": stack.alive(),
                "load_avg_1m": round(os.getloadavg()[0], 2)})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description="one flooding client vs human-pace matches")
    p.add_argument("--broker", choices=("embedded", "mosquitto"), default="embedded")
    p.add_argument("--matches", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--flood", choices=("act", "create", "both", "none"), default="both",
                   help="what the flooder sends: actions, create requests, or one phase of each (default); "
                   "none: only the control phase")
    p.add_argument("--control", action="store_true",
                   help="add a control phase ('none'): the flooder sets up as for 'act' and sends nothing; its "
                   "p99_ratio is the spread of the measurement itself (what a ratio means on this machine)")
    p.add_argument("--rounds", type=int, default=1,
                   help="repeat baseline + floods this many times, baseline first in odd rounds, last in even ones")
    p.add_argument("--journal", choices=("full", "normal", "off"), default="full",
                   help="the relay's journal: full (fsync every step, `blink serve`'s default), normal "
                   "(`--sync normal`: no fsync) or off (`--no-journal`) -- on a disk whose fsync has a long "
                   "tail, the tail lands in whichever phase it falls in; the other two leave the flood alone")
    p.add_argument("--cpu-only", action="store_true",
                   help="no players: measure the CPU one flooder alone costs the relay (and Mosquitto)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    kinds = ["act", "create"] if args.flood == "both" else [args.flood]
    if args.control and "none" not in kinds:
        kinds.append("none")
    serve_args = {"full": (), "normal": ("--sync", "normal"), "off": ("--no-journal",)}[args.journal]
    stack = Stack(args.broker, seed=args.seed, serve_args=serve_args)
    # The relay journals into its own directory (as `blink serve` would into the user's), so a
    # relay already running on this machine is not in the way.
    os.environ["XDG_DATA_HOME"] = str(stack.dir)
    stack.start()
    try:
        if args.cpu_only:
            result = asyncio.run(cpu_only(stack, args.seconds, args.seed, kinds))
        else:
            result = asyncio.run(bench(stack, args.matches, args.seconds, args.seed, kinds, args.rounds))
    finally:
        stack.stop()
        shutil.rmtree(stack.dir, ignore_errors=True)
    result["journal"] = args.journal
    result["command"] = " ".join([".venv/bin/python bench/flood.py", *sys.argv[1:]])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
