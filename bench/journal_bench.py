"""The journal's cost, each figure against a baseline measured in the same run.

How this works
--------------
1. appends: the same loop (build a batch of ~100-byte ``Msg`` entries, hand it over) runs once
   with no journal (the batch goes to a counter) and once per durability mode of ``SqliteJournal``
   (``full``: fsync per batch; ``normal``: survives a relay crash, fsynced at checkpoints), for
   batch sizes 1, 10 and 100. Reported: entries/s, batches/s and the ratio to the baseline.
2. core: the inputs of real BLINK matches (``--matches`` concurrent matches with greedy players,
   one batch per 50 ms turn, as the shell would group an event-loop turn) are recorded once, then
   fed into a fresh ``RelayCore`` with and without journalling each batch before handling it.
   Reported: inputs/s and the ratio, i.e. what the journal costs the relay at that concurrency, and
   the process's CPU per input (steadier than wall time on a shared machine, but blind to fsync waits);
   ``*_overlap``: the batch's durable write runs in a thread while the core handles the same batch
   (the shell would hold the turn's outputs until the write is done), so fsync and judging overlap.
3. restart: opening a journal of ``--restart-entries`` entries (the checksum check of the tail)
   and reading them all back, in seconds.
4. snapshot: a core with ``--snapshot-matches`` live BLINK matches in play, serialised and read
   back in the snapshot format (``relay/storage/snapshot.py``) against the first format (a bare pickle of
   the core) as the baseline: CPU seconds (best of 5, interleaved), bytes, and the ratios; and
   replay's CPU per journal entry (what the entries after the newest snapshot cost a restart).

Everything runs in one process on a temporary directory (``--dir`` to choose the disk).

    .venv/bin/python bench/journal_bench.py            # about 30 s on an idle 2-core machine
    .venv/bin/python bench/journal_bench.py --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from protocol import messages as m  # noqa: E402
from protocol.codec import encode  # noqa: E402
from protocol.rules import blink  # noqa: E402
from protocol.topics import Topics  # noqa: E402
from relay.storage import snapshot  # noqa: E402
from relay.core import RelayCore  # noqa: E402
from relay.storage import Entry, Msg, SqliteJournal, Tick, feed  # noqa: E402

T = Topics()
NS = 1_000_000_000


def timed(run_batch: Callable[[int], object], seconds: float, max_batches: int) -> tuple[int, float]:
    """Run batches until ``seconds`` have passed (or ``max_batches``); return (batches, elapsed)."""
    start = time.perf_counter()
    n = 0
    while n < max_batches:
        run_batch(n)
        n += 1
        if (n & 7) == 0 and time.perf_counter() - start >= seconds:
            break
    return n, time.perf_counter() - start


def bench_appends(workdir: Path, seconds: float) -> list[dict[str, Any]]:
    payloads = [bytes([i % 251]) * 70 for i in range(1000)]  # + a ~30-byte topic: ~100 bytes an entry
    topic = "blink/v1/m/0/ABCDE/act/client-7"
    rows = []
    for size in (1, 10, 100):
        def make(n: int) -> list[Entry]:
            base = n * size
            return [Msg(topic, payloads[(base + i) % 1000], base + i) for i in range(size)]

        sink: list[int] = []
        n, el = timed(lambda k: sink.append(len(make(k))), seconds / 3, 10**9)
        base_eps = n * size / el
        row: dict[str, Any] = {"batch": size, "baseline_entries_s": round(base_eps)}
        for mode in ("full", "normal"):
            path = workdir / f"appends-{size}-{mode}.db"
            j = SqliteJournal(path, durable=(mode == "full"))
            n, el = timed(lambda k: j.append(make(k)), seconds, 10**9)
            assert j.last_position() == n * size
            j.close()
            row[f"{mode}_entries_s"] = round(n * size / el)
            row[f"{mode}_batches_s"] = round(n / el)
            row[f"{mode}_ratio"] = round(n * size / el / base_eps, 4)
        rows.append(row)
    return rows


def record_matches(matches: int, turns: int) -> list[list[Entry]]:
    """The inputs of ``matches`` concurrent BLINK matches between greedy players, one batch per turn."""
    core = RelayCore(T, seed=7)
    now = 0
    batches: list[list[Entry]] = []

    def send(batch: list[Entry], entry: Entry) -> None:
        batch.append(entry)
        feed(core, [entry])

    setup: list[Entry] = []
    codes = []
    for i in range(matches):
        send(setup, Msg(T.req(f"a{i}"), encode(m.CreateMatch(name=f"a{i}")), now))
        code = core.client_match[f"a{i}"]
        send(setup, Msg(T.req(f"b{i}"), encode(m.JoinMatch(name=f"b{i}", match=code)), now))
        codes.append(code)
    batches.append(setup)
    ids: dict[str, int] = {}
    for _ in range(turns):
        now += NS // 20
        batch: list[Entry] = []
        send(batch, Tick(now))
        for i, code in enumerate(codes):
            match = core.matches.get(code)
            if match is None or match.status != "playing":
                continue
            for seat, client in enumerate((f"a{i}", f"b{i}")):
                acts = blink.legal_actions(match.state, seat)
                if acts:
                    ids[client] = ids.get(client, 0) + 1
                    act = m.Act(id=ids[client], seq=match.seq, action=blink.action_to_wire(acts[0]))
                    send(batch, Msg(T.act(code, client), encode(act), now))
        batches.append(batch)
    return batches


def bench_core(workdir: Path, matches: int, turns: int, repeats: int) -> dict[str, Any]:
    batches = record_matches(matches, turns)
    inputs = sum(len(b) for b in batches)

    def run(journal: SqliteJournal | None, overlap: bool = False) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process) to judge every recorded batch."""
        core = RelayCore(T, seed=7)
        cpu = time.process_time()
        start = time.perf_counter()
        if overlap:
            # The durable write of a turn runs in a thread (sqlite3 releases the GIL) while the core
            # handles the same turn; its outputs would be published only once the write is done.
            with ThreadPoolExecutor(1) as pool:
                for batch in batches:
                    done = pool.submit(journal.append, batch) if journal is not None else None
                    feed(core, batch)
                    if done is not None:
                        done.result()
        else:
            for batch in batches:
                if journal is not None:
                    journal.append(batch)  # journal the turn, then handle it
                feed(core, batch)
        return time.perf_counter() - start, time.process_time() - cpu

    result: dict[str, Any] = {"matches": matches, "turns": len(batches), "inputs": inputs,
                              "mean_batch": round(inputs / len(batches), 1)}
    modes = ("baseline", "full", "normal", "full_overlap", "normal_overlap")
    best = dict.fromkeys(modes, float("inf"))
    best_cpu = dict.fromkeys(modes, float("inf"))
    for k in range(repeats):  # interleaved, best of each: a shared machine's noise hits all alike
        for mode in modes:
            j = None if mode == "baseline" else SqliteJournal(workdir / f"core-{mode}-{k}.db",
                                                              durable=mode.startswith("full"))
            wall, cpu = run(j, overlap=mode.endswith("overlap"))
            best[mode], best_cpu[mode] = min(best[mode], wall), min(best_cpu[mode], cpu)
            if j is not None:
                j.close()
    result["baseline_inputs_s"] = round(inputs / best["baseline"])
    result["baseline_cpu_us_per_input"] = round(best_cpu["baseline"] / inputs * 1e6, 1)
    for mode in modes[1:]:
        result[f"{mode}_inputs_s"] = round(inputs / best[mode])
        result[f"{mode}_ratio"] = round(best["baseline"] / best[mode], 3)
        # CPU is steadier than wall time on a shared machine; it leaves out the wait for fsync
        result[f"{mode}_cpu_us_per_input"] = round(best_cpu[mode] / inputs * 1e6, 1)
        result[f"{mode}_cpu_ratio"] = round(best_cpu["baseline"] / best_cpu[mode], 3)
    return result


def bench_restart(workdir: Path, entries: int) -> dict[str, Any]:
    path = workdir / "restart.db"
    j = SqliteJournal(path, durable=False)
    payload = bytes(70)
    for k in range(0, entries, 1000):
        j.append([Msg("blink/v1/m/0/ABCDE/act/client-7", payload, k + i) for i in range(1000)])
    j.close()
    start = time.perf_counter()
    j = SqliteJournal(path)
    opened = time.perf_counter() - start
    count = sum(1 for _ in j.read())
    read = time.perf_counter() - start - opened
    j.close()
    assert count == entries
    return {"entries": entries, "open_s": round(opened, 3), "read_s": round(read, 3)}


def bench_snapshot(matches: int, turns: int) -> dict[str, Any]:
    import gc
    import pickle

    batches = record_matches(matches, turns)
    core = RelayCore(T, seed=7)
    for batch in batches[:-20]:
        feed(core, batch)
    tail = [e for batch in batches[-20:] for e in batch]
    v1 = pickle.dumps(core, pickle.HIGHEST_PROTOCOL)
    v2 = snapshot.dump(core)
    best: dict[str, float] = {}

    def cpu(name: str, fn: Callable[[], object]) -> None:
        start = time.process_time()
        fn()
        best[name] = min(best.get(name, float("inf")), time.process_time() - start)

    gc.disable()  # as recovery runs
    try:
        for _ in range(5):
            cpu("v1_dump", lambda: pickle.dumps(core, pickle.HIGHEST_PROTOCOL))
            cpu("v2_dump", lambda: snapshot.dump(core))
            cpu("v1_load", lambda: pickle.loads(v1))
            cpu("v2_load", lambda: snapshot.load(v2))
        for _ in range(3):
            fresh = snapshot.load(v2)
            cpu("replay", lambda: feed(fresh, tail))
    finally:
        gc.enable()
    live = sum(1 for x in core.matches.values() if x.status != "over")
    return {"matches": live, "v1_bytes": len(v1), "v2_bytes": len(v2),
            **{k + "_cpu_s": round(v, 4) for k, v in best.items() if k != "replay"},
            "load_ratio": round(best["v1_load"] / best["v2_load"], 3),
            "dump_ratio": round(best["v1_dump"] / best["v2_dump"], 3),
            "replay_entries": len(tail), "replay_cpu_us_per_entry": round(best["replay"] / len(tail) * 1e6, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=1.0, help="per append measurement (default 1)")
    ap.add_argument("--matches", type=int, default=50, help="concurrent matches in the core measurement")
    ap.add_argument("--turns", type=int, default=120, help="50 ms turns in the core measurement")
    ap.add_argument("--repeats", type=int, default=2, help="core runs per mode, interleaved; the best counts")
    ap.add_argument("--restart-entries", type=int, default=50_000)
    ap.add_argument("--snapshot-matches", type=int, default=1000, help="live matches in the snapshot measurement")
    ap.add_argument("--only-snapshot", action="store_true", help="run only the snapshot measurement")
    ap.add_argument("--dir", type=Path, default=None, help="where the journals go (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir))
    try:
        snap = bench_snapshot(args.snapshot_matches, 80)
        if args.only_snapshot:
            print(json.dumps({"snapshot": snap}) if args.json else _snapshot_lines(snap))
            return 0
        appends = bench_appends(workdir, args.seconds)
        core = bench_core(workdir, args.matches, args.turns, args.repeats)
        restart = bench_restart(workdir, args.restart_entries)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {"appends": appends, "core": core, "restart": restart, "snapshot": snap}
    if args.json:
        print(json.dumps(report))
        return 0
    print("appends (~100-byte entries; ratio = entries/s against the same loop with no journal)")
    print(f"{'batch':>5} {'baseline e/s':>13} | {'full e/s':>9} {'b/s':>7} {'ratio':>7} | "
          f"{'normal e/s':>10} {'b/s':>7} {'ratio':>7}")
    for r in appends:
        print(f"{r['batch']:>5} {r['baseline_entries_s']:>13,} | {r['full_entries_s']:>9,} {r['full_batches_s']:>7,} "
              f"{r['full_ratio']:>7.4f} | {r['normal_entries_s']:>10,} {r['normal_batches_s']:>7,} "
              f"{r['normal_ratio']:>7.4f}")
    c = core
    print(f"\ncore: {c['matches']} BLINK matches, {c['turns']} turns, {c['inputs']} inputs "
          f"({c['mean_batch']} per batch)")
    print(f"  {'no journal':<15} {c['baseline_inputs_s']:>7,} inputs/s              "
          f"{c['baseline_cpu_us_per_input']:>7} us CPU/input")
    for mode in ("full", "normal", "full_overlap", "normal_overlap"):
        print(f"  {mode:<15} {c[mode + '_inputs_s']:>7,} inputs/s  ratio {c[mode + '_ratio']:<6} "
              f"{c[mode + '_cpu_us_per_input']:>7} us CPU/input  ratio {c[mode + '_cpu_ratio']}")
    print("  (overlap: the turn's durable write runs in a thread while the core handles the turn)")
    r = restart
    print(f"\nrestart: open (tail verified) {r['open_s']} s, read back {r['read_s']} s for {r['entries']:,} entries")
    print("\n" + _snapshot_lines(snap))
    return 0


def _snapshot_lines(s: dict[str, Any]) -> str:
    return (f"snapshot of {s['matches']} live BLINK matches (CPU s, best of 5; baseline: a bare pickle)\n"
            f"  bare pickle  {s['v1_bytes']:>10,} bytes  dump {s['v1_dump_cpu_s']:.3f}  load {s['v1_load_cpu_s']:.3f}\n"
            f"  format {snapshot.VERSION}     {s['v2_bytes']:>10,} bytes  dump {s['v2_dump_cpu_s']:.3f}  "
            f"load {s['v2_load_cpu_s']:.3f}  (load x{s['load_ratio']} faster, dump x{s['dump_ratio']})\n"
            f"  replay: {s['replay_cpu_us_per_entry']} us CPU per entry ({s['replay_entries']} entries)")


if __name__ == "__main__":
    raise SystemExit(main())
