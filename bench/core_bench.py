"""Micro-benchmark of the relay's judging core (issue 10, target 4): no broker, no clock but ours.

What it measures
----------------
- ``RelayCore.handle`` for one BLINK play, with every ``Publish`` it returns encoded to bytes the
  way the shell does (``protocol.codec.encode``): median and p99 in microseconds, over many plays
  chosen by the real rules engine across many live matches (arrival order).
- Memory per live BLINK match with ``--matches`` matches running (tracemalloc: the core's growth
  from empty, divided by the number of matches; each match has had a few plays).
- A cProfile top-15 of the same play loop (``--profile``).
- A baseline measured in the same run: ``msgpack.packb`` of a small map (a ``Ping``'s wire map),
  so the ratio (play / baseline) can be compared across machines. (Until 2026-12-01 the baseline
  was ``encode(Ping)``; the codec got faster, so it no longer measured only the machine.)

    .venv/bin/python bench/core_bench.py [--plays 20000] [--matches 1000] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import statistics
import sys
import time
import tracemalloc
from typing import Any

import msgpack

from protocol import messages as m
from protocol.chance import SeededChance
from protocol.codec import encode
from protocol.rules import blink
from protocol.topics import Topics
from relay.core import Publish, RelayConfig, RelayCore

T = Topics()
S = 1_000_000_000


class Bench:
    def __init__(self, seed: int = 7) -> None:
        self.core = RelayCore(T, RelayConfig(order="arrival", act_rate=1e9, act_burst=10**9,
                                             req_rate=1e9, req_burst=10**9,
                                             max_open_per_client=10**6, max_waiting=10**6,
                                             max_matches=10**6),
                              seed=seed)
        self.now = 1
        self.chance = SeededChance(seed)
        self.codes: list[str] = []
        self.ids = 0

    def _handle(self, topic: str, msg: Any) -> list[Any]:
        return self.core.handle(topic, encode(msg), self.now)

    def new_match(self, i: int) -> str:
        a, b = f"a{i}", f"b{i}"
        out = self._handle(T.req(a), m.CreateMatch(name=a, settings={"best_of": 9}))
        code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
        self._handle(T.req(b), m.JoinMatch(name=b, code=code))
        self.codes.append(code)
        return code

    def renew(self) -> None:
        """Replace the matches that are over by new ones, so the pool stays live."""
        for k, code in enumerate(self.codes):
            match = self.core.matches.get(code)
            if match is None or match.status == "over":
                self.codes[k] = self.new_match(len(self.codes) + self.ids + k)
                self.codes.pop()

    def advance(self, dt_ns: int) -> None:
        self.now += dt_ns
        self.core.tick(self.now)

    def next_play(self, code: str) -> tuple[str, bytes] | None:
        """A legal play in match ``code`` (from the true state), as the topic and payload to send."""
        match = self.core.matches.get(code)
        if match is None or match.status != "playing" or match.state.phase != "running":
            return None
        for seat in (0, 1):
            acts = [a for a in blink.legal_actions(match.state, seat) if isinstance(a, blink.PlayCard)]
            if acts:
                act = acts[self.chance.randbelow(len(acts))]
                self.ids += 1
                payload = encode(m.Act(id=self.ids, seq=match.seq, action=blink.action_to_wire(act)))
                return T.act(code, match.players[seat].client), payload
        return None


def timed_plays(bench: Bench, plays: int, profile: cProfile.Profile | None = None) -> list[float]:
    times: list[float] = []
    pc = time.perf_counter_ns
    i = 0
    idle = 0
    while len(times) < plays:
        code = bench.codes[i % len(bench.codes)]
        i += 1
        nxt = bench.next_play(code)
        if nxt is None:
            idle += 1
            if idle >= len(bench.codes):
                bench.advance(S)  # stalemates, countdowns, between games: let the timers run
                idle = 0
                bench.renew()
            continue
        idle = 0
        topic, payload = nxt
        if profile is not None:
            profile.enable()
        t0 = pc()
        out = bench.core.handle(topic, payload, bench.now)
        for o in out:
            if isinstance(o, Publish):
                encode(o.msg) if not isinstance(o.msg, bytes) else o.msg
        t1 = pc()
        if profile is not None:
            profile.disable()
        times.append((t1 - t0) / 1000)
        bench.now += 1_000_000
    return times


def baseline_us(n: int = 20000) -> float:
    wire = {"t": "Ping", "v": 1, "t0": 123456789}
    pc = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t0 = pc()
        msgpack.packb(wire, use_bin_type=True)
        samples.append((pc() - t0) / 1000)
    return statistics.median(samples)


def memory_per_match(matches: int) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    bench = Bench(seed=11)
    for i in range(matches):
        bench.new_match(i)
    bench.advance(4 * S)  # past the countdown: every match is racing
    timed_plays(bench, 5 * matches)  # a few plays each: histories, answers, past events
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    live = sum(1 for x in bench.core.matches.values() if x.status in ("playing", "between"))
    return (after - before) / max(1, live)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plays", type=int, default=20000)
    ap.add_argument("--match-pool", type=int, default=200, help="live matches the plays are spread over")
    ap.add_argument("--matches", type=int, default=1000, help="live matches for the memory figure")
    ap.add_argument("--profile", action="store_true", help="print a cProfile top-15 of the play loop")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.plays < 1 or args.matches < 1 or args.match_pool < 1:
        print("core_bench: --plays, --matches and --match-pool must be positive", file=sys.stderr)
        return 2

    base = baseline_us()
    bench = Bench()
    for i in range(args.match_pool):
        bench.new_match(i)
    bench.advance(4 * S)
    timed_plays(bench, min(2000, args.plays))  # warm up
    times = sorted(timed_plays(bench, args.plays))
    p50 = statistics.median(times)
    p99 = times[int(0.99 * (len(times) - 1))]
    mem = memory_per_match(args.matches)
    result = {"plays": len(times), "play_us": {"p50": round(p50, 1), "p99": round(p99, 1)},
              "baseline_packb_ping_us": round(base, 2), "ratio_p50": round(p50 / base, 1),
              "memory_per_match_kb": round(mem / 1024, 1), "matches": args.matches}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"handle+encode one BLINK play: p50 {p50:.1f} us, p99 {p99:.1f} us over {len(times)} plays "
              f"({args.match_pool} matches)")
        print(f"baseline: msgpack.packb(Ping's map) {base:.2f} us -> play/baseline {p50 / base:.1f}x")
        print(f"memory: {mem / 1024:.1f} kB per live BLINK match at {args.matches} matches")
    if args.profile:
        prof = cProfile.Profile()
        timed_plays(bench, min(5000, args.plays), prof)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
