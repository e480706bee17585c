"""The fairness experiment: does the player with the slower network lose races, in arrival and in
fair order, and what does fair order cost in confirmation time?

How this works
--------------
Two bots with the *same* reaction-time distribution (log-normal, median ``--reaction``) play
many concurrent BLINK matches against a local relay (embedded broker, in this process) through
the ``blink latency`` harness (``client.tools.latency``); seat 1 gets ``--delay`` more one-way delay in
each direction (default 100 ms). The same experiment runs twice in one go, first in ``arrival``
order, then in ``fair`` order, and reports for each:

- races (two plays made against the same pile top, see ``client/tools/latency.py``): the slow seat's
  share won, with the count and a 95% Wilson confidence interval -- fair would be 50%;
- games: the slow seat's share of the decided games, with count and 95% Wilson interval;
- confirmation time (play -> verdict) p50 and p99 per seat, and the relay's hold in fair order;
  the cost of fair order is the difference in confirmation time between the two runs, and the fast
  seat's pace (plays a second while it held a playable card) in each; ``--json`` adds each seat's
  play time in parts (``parts_ms``).

By default the deck is smaller than the standard one (counts 1-3: 36 cards) so that many more
games finish in the same time; ``--deck standard`` plays with the full 60 cards. Races do not
depend on the deck size.

    .venv/bin/python bench/fairness.py                       # 8 matches x 60 s per mode, a table
    .venv/bin/python bench/fairness.py --duration 120 --json # longer, one JSON object on stdout
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.tools import latency  # noqa: E402

SMALL_DECK = {"colours": ["red", "yellow", "green", "blue"], "shapes": ["star", "triangle", "moon"],
              "counts": [1, 2, 3]}


def share(won: int, n: int) -> dict[str, Any]:
    lo, hi = latency.wilson(won, n)
    return {"won": won, "n": n, "share": round(won / n, 4) if n else None,
            "ci95": [round(lo, 4), round(hi, 4)] if lo is not None and hi is not None else None}


def mode_report(result: latency.LatencyResult, slow: int) -> dict[str, Any]:
    s = result.summary()
    fast = 1 - slow
    n_races = s["race_count"]
    decided = s["wins"]["0"] + s["wins"]["1"]
    return {
        "order": s["order"],
        "duration_s": s["duration_s"],
        "races": share(s["races"][str(slow)]["won"], n_races),
        "races_void": s["races_void"],
        "games": share(s["wins"][str(slow)], decided),
        "games_finished": s["games"],
        "ties": s["ties"],
        "plays": s["plays"],
        "accepted": s["accepted"],
        "rejected": s["rejected"],
        "confirm_ms": s["confirm_ms"],
        "confirm_ms_fast": latency.percentiles_ms(result.confirm_ns(fast)),
        "confirm_ms_slow": latency.percentiles_ms(result.confirm_ns(slow)),
        "rtt_ms_fast": s["rtt_ms_by_seat"][str(fast)],
        "rtt_ms_slow": s["rtt_ms_by_seat"][str(slow)],
        "hold_ms": s["hold_ms"],
        "pace_fast": s["plays_per_playable_s"][str(fast)],  # plays a second while it held a playable card
        "parts_ms": s["parts_ms"],
        "parts_confirm_ms": s["parts_confirm_ms"],
    }


def pct(d: dict[str, Any]) -> str:
    if d["share"] is None:
        return "     -  (n=0)"
    lo, hi = d["ci95"]
    return f"{d['share']:6.1%} [{lo:5.1%}-{hi:5.1%}] {d['won']:>4}/{d['n']:<4}"


def ms(p: dict[str, Any], key: str) -> str:
    return "-" if p.get(key) is None else f"{p[key]:.1f}"


def table(report: dict[str, Any]) -> str:
    c = report["config"]
    slow = c["slow_seat"]
    lines = [
        f"Fairness: two bots, median reaction {c['reaction_s']:g} s (same distribution); seat {slow} has "
        f"+{c['extra_delay_ms']:g} ms each way; {c['matches']} matches x {c['duration_s']:g} s per mode; "
        f"deck {c['deck']}",
        "",
        f"{'order':8} {'slow seat: races won [95% CI]  won/n':40} {'slow seat: games won [95% CI]  won/n':40}",
    ]
    for mode in ("arrival", "fair"):
        r = report.get(mode)
        if r is None:
            continue
        lines.append(f"{mode:8} {pct(r['races']):40} {pct(r['games']):40}")
    lines += ["", f"{'order':8} {'confirm ms p50/p99: fast seat':30} {'slow seat':18} {'all':18} {'hold p50/p99':14}"]
    for mode in ("arrival", "fair"):
        r = report.get(mode)
        if r is None:
            continue
        hold = f"{ms(r['hold_ms'], 'p50')}/{ms(r['hold_ms'], 'p99')}" if mode == "fair" else "-"
        lines.append(f"{mode:8} {ms(r['confirm_ms_fast'], 'p50') + '/' + ms(r['confirm_ms_fast'], 'p99'):30} "
                     f"{ms(r['confirm_ms_slow'], 'p50') + '/' + ms(r['confirm_ms_slow'], 'p99'):18} "
                     f"{ms(r['confirm_ms'], 'p50') + '/' + ms(r['confirm_ms'], 'p99'):18} {hold:14}")
    cost = report.get("fair_cost_ms")
    if cost:
        lines += ["", "fair order costs (confirmation, fair minus arrival): "
                  + ", ".join(f"{k.replace('_', ' ')} {v:+.1f} ms" for k, v in cost.items() if v is not None)]
    paces = {mode: report[mode]["pace_fast"] for mode in ("arrival", "fair") if mode in report}
    if paces:
        lines.append("fast seat's plays a second while it held a playable card: "
                     + ", ".join(f"{mode} {'-' if v is None else f'{v:.2f}'}" for mode, v in paces.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, default=8, help="concurrent matches per mode (default 8)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds per mode (default 60)")
    p.add_argument("--delay", default="0ms,100ms", help="one-way delay per seat (default 0ms,100ms)")
    p.add_argument("--reaction", type=float, default=0.35, help="both bots' median reaction in s (default 0.35)")
    p.add_argument("--fair-cap-ms", type=float, default=None, help="the relay's longest hold in fair order")
    p.add_argument("--deck", choices=("small", "standard"), default="small")
    p.add_argument("--modes", default="arrival,fair", help="which orders to run (default arrival,fair)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)
    try:
        imps = latency.seat_impairments(delay=args.delay)
    except latency.BadArgument as exc:
        print(f"fairness: {exc}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("arrival", "fair") for m in modes):
        print("fairness: --modes takes arrival and/or fair", file=sys.stderr)
        return 2
    slow = 1 if imps[1].delay_s >= imps[0].delay_s else 0
    settings: dict[str, Any] = dict(latency.FAST_BLINK)
    if args.deck == "small":
        settings["deck"] = SMALL_DECK
    warnings.filterwarnings("ignore", message=r"coroutine 'Connection\._(deliver_async|publish)' was never awaited",
                            category=RuntimeWarning)
    report: dict[str, Any] = {"config": {
        "matches": args.matches, "duration_s": args.duration, "reaction_s": args.reaction, "slow_seat": slow,
        "extra_delay_ms": round(abs(imps[1].delay_s - imps[0].delay_s) * 1e3, 3),
        "delay_ms": {"0": imps[0].delay_s * 1e3, "1": imps[1].delay_s * 1e3}, "deck": args.deck,
        "fair_cap_ms": args.fair_cap_ms, "seed": args.seed, "date": time.strftime("%Y-%m-%d"),
    }}
    for mode in modes:
        cfg = latency.LatencyConfig(matches=args.matches, duration_s=args.duration, impairments=imps, order=mode,
                                    reaction_s=args.reaction, seed=args.seed, fair_cap_ms=args.fair_cap_ms,
                                    settings=settings)
        if not args.json:
            print(f"running {mode} order for {args.duration:g} s ...", file=sys.stderr, flush=True)
        try:
            result = latency.run_blocking(cfg)
        except latency.LatencyError as exc:
            print(f"fairness: {mode} order: {exc}", file=sys.stderr)
            return 1
        report[mode] = mode_report(result, slow)
    if "arrival" in report and "fair" in report:
        a, f = report["arrival"], report["fair"]

        def diff(key: str, q: str) -> float | None:
            x, y = f[key].get(q), a[key].get(q)
            return None if x is None or y is None else round(x - y, 3)

        report["fair_cost_ms"] = {"fast_p50": diff("confirm_ms_fast", "p50"), "fast_p99": diff("confirm_ms_fast", "p99"),
                                  "slow_p50": diff("confirm_ms_slow", "p50"), "slow_p99": diff("confirm_ms_slow", "p99"),
                                  "all_p50": diff("confirm_ms", "p50"), "all_p99": diff("confirm_ms", "p99")}
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
