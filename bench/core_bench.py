"""Micro-benchmark of the relay's judging core: no broker, no clock but ours.

What it measures
----------------
- ``RelayCore.handle`` for one BLINK play, with every ``Publish`` it returns encoded to bytes the
  way the shell does (``protocol.codec.encode``): median and p99 in microseconds, over many plays
  chosen by the real rules engine across many live matches (arrival order); then the same loop
  again timed in the thread's CPU time (its median: steadier than wall time on a busy machine).
- Memory per live BLINK match with ``--matches`` matches running (tracemalloc: the core's growth
  from empty, divided by the live matches), twice: after 5 plays each (the figure docs/performance.md gives first)
  and after ``MID_GAME_PLAYS`` (40) plays each, about half a game (a match's memory grows with its
  age: recent states, remembered answers, past events, up to their caps).
- A cProfile top-15 of the same play loop (``--profile``).
- A baseline measured in the same run: ``msgpack.packb`` of a small map (a ``Ping``'s wire map),
  so the ratio (play / baseline) can be compared across machines. (Not ``encode(Ping)``: the
  codec is part of what is measured, so it would not measure only the machine.)
- ``--against REV``: the same measurements of git revision ``REV``'s core (``git archive`` of this
  checkout's history into a temporary directory), alternating runs of both, each in its own
  process, and the speed-up; the machine is shared, so compare runs made back to back.
- ``--same-as REV``: that an optimisation changed nothing: both cores are driven through one seeded
  sequence (plays, bad plays, duplicates, resyncs, timers) and every output is hashed -- published
  bytes, topics, retain flags and log records; exit 1 if the digests differ.

    .venv/bin/python bench/core_bench.py [--plays 20000] [--matches 1000] [--profile] [--json]
    .venv/bin/python bench/core_bench.py --against HEAD~3 [--rounds 3] [--plays 20000] [--matches 1000]
    .venv/bin/python bench/core_bench.py --same-as HEAD~3 [--plays 20000]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path
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
#: Plays per match for the second memory figure: about half of a game of the standard deck (a match
#: keeps its recent states, answers and past events, so memory grows with its age up to their caps).
MID_GAME_PLAYS = 40


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
        # (positional: ``--against`` runs this script on other revisions' cores, and the field's
        # name is the protocol version's)
        self._handle(T.req(b), m.JoinMatch(b, code))
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


def timed_plays(bench: Bench, plays: int, profile: cProfile.Profile | None = None,
                cpu: list[float] | None = None) -> list[float]:
    """Wall microseconds per play; with ``cpu``, the thread's CPU microseconds per play are added to
    it as well (a preempted play's wall time counts time the machine gave to others: on a shared,
    busy machine the CPU time is the steadier figure; reading that clock adds about 1 us a play)."""
    times: list[float] = []
    pc = time.perf_counter_ns
    tt = time.thread_time_ns
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
        c0 = tt() if cpu is not None else 0
        t0 = pc()
        out = bench.core.handle(topic, payload, bench.now)
        for o in out:
            if isinstance(o, Publish):
                encode(o.msg) if not isinstance(o.msg, bytes) else o.msg
        t1 = pc()
        if cpu is not None:
            cpu.append((tt() - c0) / 1000)
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


def memory_per_match(matches: int, plays_each: int = 5) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    bench = Bench(seed=11)
    for i in range(matches):
        bench.new_match(i)
    bench.advance(4 * S)  # past the countdown: every match is racing
    timed_plays(bench, plays_each * matches)  # plays each: histories, answers, past events
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    live = sum(1 for x in bench.core.matches.values() if x.status in ("playing", "between"))
    return (after - before) / max(1, live)


def output_digest(plays: int, seed: int = 5) -> tuple[int, str]:
    """Drive a core through a seeded sequence -- plays chosen by the rules engine, bad plays (a card
    not held, a bad pile, a stale seq), duplicates, spectators' resyncs from seq 1, timers -- and
    hash every output: each ``Publish`` as topic, encoded bytes and retain flag, each ``LogRecord``
    as JSON. Two revisions whose cores behave the same give the same digest (``--same-as``)."""
    digest = hashlib.sha256()
    outputs = 0

    def feed(out: list[Any]) -> None:
        nonlocal outputs
        for o in out:
            outputs += 1
            if isinstance(o, Publish):
                digest.update(o.topic.encode())
                digest.update(o.msg if isinstance(o.msg, bytes) else encode(o.msg))
                digest.update(b"R" if o.retain else b"-")
            else:
                digest.update(json.dumps(o.record, default=repr).encode())

    bench = Bench(seed=seed)
    for i in range(40):
        bench.new_match(i)
    feed(bench.core.tick(bench.now))
    bench.advance(4 * S)
    chance = bench.chance
    i = done = 0
    while done < plays:
        code = bench.codes[i % len(bench.codes)]
        i += 1
        match = bench.core.matches.get(code)
        r = chance.randbelow(100)
        if match is not None and r < 3:  # a spectator asks for the match from its beginning
            feed(bench.core.handle(T.req(f"w{i % 7}"), encode(m.Resync(code, from_seq=1)), bench.now))
            bench.now += 1000
        nxt = bench.next_play(code)
        if nxt is None:
            if i % len(bench.codes) == 0:
                bench.now += S
                feed(bench.core.tick(bench.now))
                bench.renew()
            continue
        topic, payload = nxt
        if r < 10 and match is not None:  # a bad play first: a card not held, a bad pile or card, a stale seq
            card: Any = ["9-red-star", "1-red-star", 5][r % 3]
            bad = m.Act(id=bench.ids + 100_000, seq=max(0, match.seq - 3),
                        action={"t": "PlayCard", "v": 1, "card": card, "pile": r % 3})
            feed(bench.core.handle(topic, encode(bad), bench.now))
            bench.now += 1000
        feed(bench.core.handle(topic, payload, bench.now))
        done += 1
        if r > 95:
            feed(bench.core.handle(topic, payload, bench.now))  # the same action again: a duplicate
        bench.now += 1_000_000
        if done % 97 == 0:
            bench.now += 300_000_000
            feed(bench.core.tick(bench.now))
    return outputs, digest.hexdigest()


def _archive(rev: str) -> tempfile.TemporaryDirectory[str] | None:
    """A temporary directory holding git revision ``rev`` of this checkout (None: no such revision)."""
    here = Path(__file__).resolve().parent.parent
    tmp = tempfile.TemporaryDirectory(prefix="core_bench_")
    archive = subprocess.run(["git", "-C", str(here), "archive", "--format=tar", rev], capture_output=True, timeout=120)
    if archive.returncode != 0:
        print(f"core_bench: no revision {rev!r}: {archive.stderr.decode().strip()}", file=sys.stderr)
        tmp.cleanup()
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp.name, filter="data")
    return tmp


def same_as(args: argparse.Namespace) -> int:
    """Run ``output_digest`` here and under ``--same-as REV``; exit 0 if the outputs are the same."""
    here = Path(__file__).resolve().parent.parent
    tmp = _archive(args.same_as)
    if tmp is None:
        return 2
    with tmp:
        digests = {}
        for name, root in (("this", here), (args.same_as, Path(tmp.name))):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--digest", str(args.plays)]
            done = subprocess.run(cmd, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                                  capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                print(f"core_bench: the digest run under {name} failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
                return 2
            digests[name] = done.stdout.strip().splitlines()[-1]
            print(f"{name:>12}: {digests[name]}")
    same = len(set(digests.values())) == 1
    print("the same outputs, byte for byte" if same else "the outputs DIFFER")
    return 0 if same else 1


def _run(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``--json`` run of this script against the code under ``root``, in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--json", "--plays", str(args.plays),
           "--matches", str(args.matches), "--match-pool", str(args.match_pool)]
    env = dict(os.environ, PYTHONPATH=str(root))  # ahead of the editable install: that tree's protocol/relay
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"core_bench under {root} failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(args: argparse.Namespace) -> int:
    """This checkout against ``--against REV``, each run in its own process, alternating (the one
    that goes first swaps every round), so both meet the same machine; medians of the rounds."""
    here = Path(__file__).resolve().parent.parent
    archived = _archive(args.against)
    if archived is None:
        return 2
    with archived as tmp:
        sides: dict[str, list[dict[str, Any]]] = {"this": [], args.against: []}
        roots = {"this": here, args.against: Path(tmp)}
        for r in range(args.rounds):
            order = ["this", args.against] if r % 2 == 0 else [args.against, "this"]
            for name in order:
                sides[name].append(_run(roots[name], args))
                res = sides[name][-1]
                print(f"round {r + 1} {name:>12}: wall p50 {res['play_us']['p50']} us, cpu p50 "
                      f"{res['play_cpu_us']['p50']} us, {res['memory_per_match_kb']} kB/match, "
                      f"{res['memory_per_match_kb_later']} kB after {res['later_plays_each']} plays each",
                      file=sys.stderr)

    def med(name: str, *path: str) -> float:
        vals = []
        for res in sides[name]:
            v: Any = res
            for k in path:
                v = v[k]
            vals.append(float(v))
        return statistics.median(vals)

    summary = {name: {"wall_p50_us": med(name, "play_us", "p50"), "cpu_p50_us": med(name, "play_cpu_us", "p50"),
                      "memory_per_match_kb": med(name, "memory_per_match_kb"),
                      "memory_per_match_kb_later": med(name, "memory_per_match_kb_later"), "runs": sides[name]}
               for name in sides}
    old, new = summary[args.against], summary["this"]
    summary["speedup_wall_p50"] = round(old["wall_p50_us"] / new["wall_p50_us"], 2)
    summary["speedup_cpu_p50"] = round(old["cpu_p50_us"] / new["cpu_p50_us"], 2)
    if args.json:
        print(json.dumps(summary))
    else:
        for name in ("this", args.against):
            s = summary[name]
            print(f"{name:>12}: handle+encode one BLINK play p50 {s['wall_p50_us']:.1f} us wall, "
                  f"{s['cpu_p50_us']:.1f} us thread CPU; {s['memory_per_match_kb']:.1f} kB per live match "
                  f"at {args.matches} after 5 plays each, {s['memory_per_match_kb_later']:.1f} kB after "
                  f"{MID_GAME_PLAYS} (medians of {args.rounds} runs)")
        print(f"speed-up against {args.against}: {summary['speedup_wall_p50']}x wall, "
              f"{summary['speedup_cpu_p50']}x CPU")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plays", type=int, default=20000)
    ap.add_argument("--match-pool", type=int, default=200, help="live matches the plays are spread over")
    ap.add_argument("--matches", type=int, default=1000, help="live matches for the memory figure")
    ap.add_argument("--profile", action="store_true", help="print a cProfile top-15 of the play loop")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--against", metavar="REV",
                    help="also measure the core of git revision REV (this checkout's history), alternating "
                         "runs of both in separate processes, and report the ratios")
    ap.add_argument("--rounds", type=int, default=3, help="with --against: runs of each side")
    ap.add_argument("--same-as", metavar="REV",
                    help="check that this checkout's core gives the same outputs, byte for byte, as revision "
                         "REV's over a seeded sequence of --plays plays (with bad plays, duplicates, resyncs, "
                         "timers); exit 1 if not")
    ap.add_argument("--digest", type=int, metavar="PLAYS", help=argparse.SUPPRESS)  # one side of --same-as
    args = ap.parse_args(argv)
    if args.digest is not None:
        outputs, digest = output_digest(args.digest)
        print(f"{args.digest} plays, {outputs} outputs, sha256 {digest}")
        return 0
    if args.plays < 1 or args.matches < 1 or args.match_pool < 1 or args.rounds < 1:
        print("core_bench: --plays, --matches, --match-pool and --rounds must be positive", file=sys.stderr)
        return 2
    if args.same_as:
        return same_as(args)
    if args.against:
        return compare(args)

    base = baseline_us()
    bench = Bench()
    for i in range(args.match_pool):
        bench.new_match(i)
    bench.advance(4 * S)
    timed_plays(bench, min(2000, args.plays))  # warm up
    times = sorted(timed_plays(bench, args.plays))
    p50 = statistics.median(times)
    p99 = times[int(0.99 * (len(times) - 1))]
    cpu: list[float] = []
    timed_plays(bench, args.plays, cpu=cpu)  # the same loop again, in the thread's CPU time
    cpu_p50 = statistics.median(cpu)
    mem = memory_per_match(args.matches)
    mem_later = memory_per_match(args.matches, MID_GAME_PLAYS)
    result = {"plays": len(times), "play_us": {"p50": round(p50, 1), "p99": round(p99, 1)},
              "play_cpu_us": {"p50": round(cpu_p50, 1)},
              "baseline_packb_ping_us": round(base, 2), "ratio_p50": round(p50 / base, 1),
              "memory_per_match_kb": round(mem / 1024, 1), "matches": args.matches,
              "memory_per_match_kb_later": round(mem_later / 1024, 1), "later_plays_each": MID_GAME_PLAYS}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"handle+encode one BLINK play: p50 {p50:.1f} us, p99 {p99:.1f} us over {len(times)} plays "
              f"({args.match_pool} matches); thread CPU p50 {cpu_p50:.1f} us")
        print(f"baseline: msgpack.packb(Ping's map) {base:.2f} us -> play/baseline {p50 / base:.1f}x")
        print(f"memory: {mem / 1024:.1f} kB per live BLINK match at {args.matches} matches "
              f"(5 plays each); {mem_later / 1024:.1f} kB after {MID_GAME_PLAYS} plays each")
    if args.profile:
        prof = cProfile.Profile()
        timed_plays(bench, min(5000, args.plays), prof)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
