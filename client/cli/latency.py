"""``blink latency``: concurrent bot matches under network impairment, measured and summarised.

How this works
--------------
The arguments are checked first (every bad value -- a negative or too large delay, an unknown
unit, a loss outside [0, 1), more than two values, an unknown order, a ``--sweep`` value that is
not a delay, ``--games 0``, ``--sweep`` together with ``--delay`` -- is one line on stderr and exit
status 2); then ``client.tools.latency.run_blocking`` does the measurement while a progress bar is
drawn on stderr (only when stderr is a terminal, so piped output and ``--json`` stay clean); then
a table, or with ``--json`` exactly one JSON object, goes to stdout. ``--plot`` draws a PNG with
matplotlib, imported only then. An unreachable broker, a missing relay or a refused match is one
line and exit status 1; Ctrl-C stops the bots and the local relay in order and ends with status
130 and no report (a partial measurement is not a result). Never imports pyglet.

``--sweep 0,50,...`` makes a fairness curve: one run per value and order (``--order both`` is
arrival then fair at each value), seat 1 that much slower each way than seat 0, each run on a
fresh local relay (or new matches on the same ``--server``) so no run inherits another's games.
``--games N`` ends a run once N games have finished, ``--duration`` staying its cap.

The impairment per seat is a delay, jitter drawn from a distribution (``--jitter-dist``: uniform,
normal or pareto), loss, reordering and a rate limit (``--rate``), from seeded generators. ``--log
PATH`` (the local relay, one run) writes the relay's event log -- fair order's decisions included --
after a header line holding that profile and the seed (``--seed``, or one drawn and written there);
``--replay-impairment LOG`` runs again under the profile and seed of LOG's header. Each run's
figures -- the slow seat's share of races and of games with Wilson intervals, the fast seat's
confirmation time and what it adds against arrival order at the same value -- come from the same
summary a single run reports (``client.tools.latency.step_figures``). ``--json`` keeps a single
run's keys; with several runs each run's are under ``runs`` (``client.tools.latency.json_report``);
and ``sweep`` has one entry per run. A sweep
is reported only when all its runs are done, so Ctrl-C at any step is 130 with no report.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import warnings
from typing import TYPE_CHECKING, NoReturn, TextIO

from client.cli import args as argtypes
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from protocol.topics import Topics

ORDERS = ("arrival", "fair", "both")


def _one_line_error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    if message.endswith("expected one argument"):
        message += " (a value that starts with '-' needs '=', e.g. --delay=-5ms)"
    print(f"blink latency: {message}", file=sys.stderr)
    raise SystemExit(2)


def _order(text: str) -> str:
    if text not in ORDERS:
        raise argparse.ArgumentTypeError(f"unknown order {text!r}: use arrival, fair or both")
    return text


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser(
        "latency", help="measure latency and fairness with concurrent bot matches",
        description="Run concurrent two-bot matches for a while, with network impairment per seat, and report "
                    "round trips, confirmation times, races and wins. Times: 100ms, 0.1s or 100 (= ms); "
                    "two comma-separated values give seat 0 and seat 1 their own (e.g. --delay 0ms,100ms).")
    argtypes.add_tls_trust(p)
    p.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start both here)")
    p.add_argument("--game", choices=GAME_NAMES, default="blink", help=argtypes.GAME_HELP)
    p.add_argument("--matches", type=argtypes.whole(1, 500), default=4, help="concurrent matches (default 4)")
    p.add_argument("--duration", type=argtypes.seconds(0.5, 86_400), default=None,
                   help="seconds to measure (default 10); with --games the longest a step may take (default 3600)")
    p.add_argument("--games", type=argtypes.whole(1, 1_000_000), default=None,
                   help="play until this many games have finished (at each step of a sweep)")
    p.add_argument("--sweep", metavar="MS,MS,...",
                   help="a fairness curve: one run per value, seat 1 that much slower each way (e.g. 0,50,100,150,200)")
    p.add_argument("--delay", help="added one-way delay, each direction, per seat (e.g. 0ms,100ms)")
    p.add_argument("--jitter", help="jitter on the delay, per seat (drawn as --jitter-dist says)")
    p.add_argument("--jitter-dist", metavar="DIST",
                   help="how jitter is drawn, per seat: uniform (+- the jitter, default), normal (its standard "
                        "deviation) or pareto (an extra delay of that mean, with a heavy tail)")
    p.add_argument("--rate", metavar="N", help="at most N messages a second each way, per seat (0: no limit)")
    p.add_argument("--loss", help="fraction of messages dropped each way, per seat (e.g. 0.01 or 1%%)")
    p.add_argument("--reorder", help="fraction of messages held back so later ones overtake them, per seat")
    p.add_argument("--order", type=_order, default="arrival",
                   help="relay ordering: arrival (default), fair, or both (one run in each)")
    p.add_argument("--fair-cap-ms", type=argtypes.number(0, 10_000, "ms"), default=None,
                   help="local relay, fair order: longest hold in ms, 0 to 10000")
    p.add_argument("--reaction", type=argtypes.seconds(0, 10), default=0.35, help="bots' median reaction time in s (default 0.35)")
    p.add_argument("--seed", type=int, help="seed for the local relay, the bots and the impairment")
    p.add_argument("--settings", type=argtypes.settings, default={},
                   help="game settings as JSON, over the harness's defaults (blink: best of 1, 0.5 s countdown)")
    p.add_argument("--log", type=argtypes.out_file, metavar="PATH",
                   help="local relay, one run: write its event log to PATH after a header with the impairment "
                        "per seat and the seed (blink verify checks it; --replay-impairment reads it)")
    p.add_argument("--replay-impairment", metavar="LOG",
                   help="run with the impairment per seat and the seed in LOG's header (a --log of an earlier run)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", type=argtypes.out_file, metavar="PATH",
                   help="write a PNG: latency CDFs and win rates, or with --sweep or --order both the fairness "
                        "curves (needs matplotlib)")
    p.error = types.MethodType(_one_line_error, p)  # type: ignore[method-assign]


class _Bar:
    """A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.drawn = False

        self.label = ""  # which step of a sweep is running

    def __call__(self, elapsed: float, total: float, stats: dict[str, int]) -> None:
        if not self.live:
            return
        games, target = stats.get("games", 0), stats.get("games_target")
        frac = min(1.0, elapsed / total) if total > 0 else 1.0
        if target:  # whichever ends the run first: the games or the cap
            frac = max(frac, min(1.0, games / target))
        width = 30
        fill = int(frac * width)
        shown = f"games {games}/{target}" if target else f"games {games}"
        clock = f"{elapsed:5.1f} s" if target else f"{min(elapsed, total):5.1f}/{total:.0f} s"
        self.stream.write(f"\r{self.label}[{'#' * fill}{'.' * (width - fill)}] {clock}  "
                          f"{shown}  plays {stats.get('plays', 0)} ")
        self.stream.flush()
        self.drawn = True

    def done(self) -> None:
        if self.live and self.drawn:
            self.stream.write("\r" + " " * 78 + "\r")
            self.stream.flush()


def run(args: argparse.Namespace, topics: Topics) -> int:
    from protocol.rules import game_for
    from client.tools import latency

    def fail(msg: str, status: int) -> int:
        print(f"blink latency: {msg}", file=sys.stderr)
        return status

    if args.sweep is not None and args.delay is not None:
        return fail("--sweep sets seat 1's delay at each step: give --sweep or --delay, not both", 2)
    given = [f"--{n.replace('_', '-')}" for n in ("delay", "jitter", "jitter_dist", "loss", "reorder", "rate", "sweep")
             if getattr(args, n) is not None]
    if args.replay_impairment is not None and given:
        return fail(f"--replay-impairment takes the impairment from the log: not with {', '.join(given)}", 2)
    if args.log is not None and (args.sweep is not None or args.order == "both" or args.server):
        return fail("--log writes the local relay's log of one run: not with --sweep, --order both or --server", 2)
    seed = args.seed
    try:
        if args.replay_impairment is not None:
            from client.cli.failures import read_lines

            lines = read_lines(args.replay_impairment)
            if isinstance(lines, str):
                return fail(f"cannot read {args.replay_impairment}: {lines}", 2)
            impairments, logged_seed = latency.read_profile(lines, args.replay_impairment)
            seed = logged_seed if args.seed is None else args.seed
        else:
            impairments = latency.seat_impairments(args.delay, args.jitter, args.loss, args.reorder, args.jitter_dist,
                                                   args.rate)
        delays = latency.parse_sweep(args.sweep) if args.sweep is not None else None
    except latency.BadArgument as exc:
        return fail(str(exc), 2)
    if args.log is not None and seed is None:
        import secrets

        seed = secrets.randbelow(2**31)  # a profile replays the same draws only with its seed: the header keeps one
    if args.fair_cap_ms is not None and not 0 <= args.fair_cap_ms <= 10_000:
        return fail("--fair-cap-ms must be from 0 to 10000", 2)
    if args.fair_cap_ms is not None and args.server:
        return fail("--fair-cap-ms applies to the local relay only (set it on `blink serve` instead)", 2)
    if args.plot:  # the path itself was checked when the arguments were read (argtypes.out_file)
        if not latency.have_matplotlib():
            return fail("--plot needs matplotlib, which is not installed: pip install matplotlib (or, in blink's "
                        "source folder, pip install '.[bench]')", 1)
    settings = {**game_for(args.game).quick_settings, **args.settings}
    if "order" in settings:
        return fail("--settings: set the ordering with --order, not in the settings", 2)
    try:
        game_for(args.game).check_new_match(settings, 2)
    except (ValueError, TypeError) as exc:
        return fail(f"--settings: {exc}", 2)
    if args.server:  # no relay there: one line now, not a match request resent for its whole wait
        import asyncio

        from client.cli.failures import UserError
        from client.cli.preflight import require_relay
        from mqttkit import parse_url

        try:
            asyncio.run(require_relay(parse_url(args.server, argtypes.trust(args)), topics))
        except UserError as exc:
            return fail(str(exc), exc.status)
    # A delayed message still waiting when its connection closes is never sent; that is fine here.
    warnings.filterwarnings("ignore", message=r"coroutine 'Connection\._(deliver_async|publish)' was never awaited",
                            category=RuntimeWarning)
    duration = args.duration if args.duration is not None else (10.0 if args.games is None else latency.GAMES_CAP_S)
    orders = latency.ORDERS if args.order == "both" else (args.order,)
    # Without --sweep, each order runs once with the --delay given (its difference, the slower seat).
    runs = ([(st.impairments(impairments), st.order) for st in latency.sweep_plan(delays, orders)]
            if delays is not None
            else [(impairments, o) for o in orders])
    bar = _Bar()
    results: list[latency.LatencyResult] = []
    for n, (imps, order) in enumerate(runs, 1):
        cfg = latency.LatencyConfig(server=args.server, game=args.game, matches=args.matches, duration_s=duration,
                                    impairments=imps, order=order, reaction_s=args.reaction, seed=seed,
                                    fair_cap_ms=args.fair_cap_ms, settings=settings, games=args.games,
                                    log_path=args.log, trust=argtypes.trust(args))
        if len(runs) > 1:
            bar.label = f"+{abs(imps[1].delay_s - imps[0].delay_s) * 1e3:g} ms {order} ({n}/{len(runs)}) "
        try:
            result = latency.run_blocking(cfg, topics, bar)
        except latency.LatencyError as exc:
            bar.done()
            return fail(str(exc), 1)
        bar.done()
        if result.stopped_early:
            # Fewer seconds, plays or steps than asked for are not the measurement asked for: no
            # table, no JSON object a script could take for a finished run.
            done = (f"{result.games()[0]} of {cfg.games} games" if cfg.games is not None
                    else f"{result.duration_s:.1f} s of {cfg.duration_s:g} s")
            where = f" at run {n} of {len(runs)}" if len(runs) > 1 else ""
            return fail(f"interrupted after {done}{where}; no report", 130)
        results.append(result)
    summaries = [r.summary() for r in results]
    figures = latency.add_fast_cost([latency.step_figures(s, latency.slow_seat(r.config.impairments))
                                     for s, r in zip(summaries, results)])
    for r, f in zip(results, figures):
        if args.games is not None and f["games"] < args.games:
            print(f"blink latency: warning: +{f['delay_ms']:g} ms {f['order']}: {f['games']} of {args.games} games "
                  f"finished within {r.config.duration_s:g} s", file=sys.stderr)
    curves = len(results) > 1 or delays is not None
    report = latency.json_report(summaries, figures)
    text = latency.format_sweep(figures) if curves else latency.format_table(summaries[-1])
    if args.plot:
        try:
            if curves:
                latency.plot_sweep(figures, args.plot)
            else:
                latency.plot(results[-1], summaries[-1], args.plot)
        except Exception as exc:  # noqa: BLE001 - one line, after the numbers are safe
            print(json.dumps(report) if args.json else text)
            return fail(f"could not write the plot {args.plot}: {exc}", 1)
    if args.json:
        print(json.dumps(report))
    else:
        print(text)
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
