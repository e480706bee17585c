"""``blink latency``: concurrent bot matches under network impairment, measured and summarised.

How this works
--------------
The arguments are checked first (every bad value -- a negative or too large delay, an unknown
unit, a loss outside [0, 1), more than two values, an unknown order -- is one line on stderr and
exit status 2); then ``client.tools.latency.run_blocking`` does the measurement while a progress bar is
drawn on stderr (only when stderr is a terminal, so piped output and ``--json`` stay clean); then
a table, or with ``--json`` exactly one JSON object, goes to stdout. ``--plot`` draws a PNG with
matplotlib, imported only then. An unreachable broker, a missing relay or a refused match is one
line and exit status 1; Ctrl-C stops the bots and the local relay in order and ends with status
130 and no report (a partial measurement is not a result). Never imports pyglet.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any, NoReturn

from client.cli import args as argtypes
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from protocol.topics import Topics

ORDERS = ("arrival", "fair")


def _one_line_error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    if message.endswith("expected one argument"):
        message += " (a value that starts with '-' needs '=', e.g. --delay=-5ms)"
    print(f"blink latency: {message}", file=sys.stderr)
    raise SystemExit(2)


def _order(text: str) -> str:
    if text not in ORDERS:
        raise argparse.ArgumentTypeError(f"unknown order {text!r}: use arrival or fair")
    return text


def _game(text: str) -> str:
    if text not in GAME_NAMES:
        raise argparse.ArgumentTypeError(f"unknown game {text!r}: one of {', '.join(GAME_NAMES)}")
    return text


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser(
        "latency", help="measure latency and fairness with concurrent bot matches",
        description="Run concurrent two-bot matches for a while, with network impairment per seat, and report "
                    "round trips, confirmation times, races and wins. Times: 100ms, 0.1s or 100 (= ms); "
                    "two comma-separated values give seat 0 and seat 1 their own (e.g. --delay 0ms,100ms).")
    argtypes.add_tls_trust(p)
    p.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start both here)")
    p.add_argument("--game", type=_game, default="blink", help="game to play (default blink)")
    p.add_argument("--matches", type=argtypes.whole(1, 500), default=4, help="concurrent matches (default 4)")
    p.add_argument("--duration", type=argtypes.seconds(0.5, 86_400), default=10.0, help="seconds to measure (default 10)")
    p.add_argument("--delay", help="added one-way delay, each direction, per seat (e.g. 0ms,100ms)")
    p.add_argument("--jitter", help="+- uniform jitter on the delay, per seat")
    p.add_argument("--loss", help="fraction of messages dropped each way, per seat (e.g. 0.01 or 1%%)")
    p.add_argument("--reorder", help="fraction of messages held back so later ones overtake them, per seat")
    p.add_argument("--order", type=_order, default="arrival", help="relay ordering: arrival (default) or fair")
    p.add_argument("--fair-cap-ms", type=argtypes.number(0, 10_000, "ms"), default=None,
                   help="local relay, fair order: longest hold in ms, 0 to 10000")
    p.add_argument("--reaction", type=argtypes.seconds(0, 10), default=0.35, help="bots' median reaction time in s (default 0.35)")
    p.add_argument("--seed", type=int, help="seed for the local relay, the bots and the impairment")
    p.add_argument("--settings", type=argtypes.settings, default={},
                   help="game settings as JSON, over the harness's defaults (blink: best of 1, 0.5 s countdown)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", type=argtypes.out_file, metavar="PATH", help="write a PNG with latency CDFs and win rates (needs matplotlib)")
    p.error = types.MethodType(_one_line_error, p)  # type: ignore[method-assign]


class _Bar:
    """A one-line progress bar on stderr, redrawn in place; silent when stderr is not a terminal."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.drawn = False

    def __call__(self, elapsed: float, total: float, stats: dict[str, int]) -> None:
        if not self.live:
            return
        frac = min(1.0, elapsed / total) if total > 0 else 1.0
        width = 30
        fill = int(frac * width)
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {min(elapsed, total):5.1f}/{total:.0f} s  "
                          f"games {stats.get('games', 0)}  plays {stats.get('plays', 0)} ")
        self.stream.flush()
        self.drawn = True

    def done(self) -> None:
        if self.live and self.drawn:
            self.stream.write("\r" + " " * 78 + "\r")
            self.stream.flush()


def run(args: argparse.Namespace, topics: Topics) -> int:
    from protocol.rules import game_for
    from client.tools.latency import (BadArgument, LatencyConfig, LatencyError, format_table, have_matplotlib, plot,
                                run_blocking, seat_impairments)

    def fail(msg: str, status: int) -> int:
        print(f"blink latency: {msg}", file=sys.stderr)
        return status

    try:
        impairments = seat_impairments(args.delay, args.jitter, args.loss, args.reorder)
    except BadArgument as exc:
        return fail(str(exc), 2)
    if args.fair_cap_ms is not None and not 0 <= args.fair_cap_ms <= 10_000:
        return fail("--fair-cap-ms must be from 0 to 10000", 2)
    if args.fair_cap_ms is not None and args.server:
        return fail("--fair-cap-ms applies to the local relay only (set it on `blink serve` instead)", 2)
    if args.plot:  # the path itself was checked when the arguments were read (argtypes.out_file)
        if not have_matplotlib():
            return fail("--plot needs matplotlib: pip install 'blink-race[bench]' (or pip install matplotlib)", 1)
    settings = {**game_for(args.game).quick_settings, **args.settings}
    if "order" in settings:
        return fail("--settings: set the ordering with --order, not in the settings", 2)
    try:
        game_for(args.game).check_settings(settings, 2)
    except (ValueError, TypeError) as exc:
        return fail(f"--settings: {exc}", 2)
    # A delayed message still waiting when its connection closes is never sent; that is fine here.
    warnings.filterwarnings("ignore", message=r"coroutine 'Connection\._(deliver_async|publish)' was never awaited",
                            category=RuntimeWarning)
    cfg = LatencyConfig(server=args.server, game=args.game, matches=args.matches, duration_s=args.duration,
                        impairments=impairments, order=args.order, reaction_s=args.reaction, seed=args.seed,
                        fair_cap_ms=args.fair_cap_ms, settings=settings)
    bar = _Bar()
    try:
        result = run_blocking(cfg, topics, bar)
    except LatencyError as exc:
        bar.done()
        return fail(str(exc), 1)
    bar.done()
    if result.stopped_early:
        # Fewer seconds and plays than asked for are not the measurement asked for: no table, no
        # JSON object a script could take for a finished run.
        return fail(f"interrupted after {result.duration_s:.1f} s of {cfg.duration_s:g} s; no report", 130)
    summary = result.summary()
    if args.plot:
        try:
            plot(result, summary, args.plot)
        except Exception as exc:  # noqa: BLE001 - one line, after the numbers are safe
            print(json.dumps(summary) if args.json else format_table(summary))
            return fail(f"could not write the plot {args.plot}: {exc}", 1)
    if args.json:
        print(json.dumps(summary))
    else:
        print(format_table(summary))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
