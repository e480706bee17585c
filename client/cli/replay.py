"""``blink replay LOG``: watch a recorded match again in the game window.

How this works
--------------
Read the log, build the replay (``client/window/viewmodels/replay.py``: ``verify`` first, then
the spectator's state at every event) and only then open the window, in replay mode: the game's
own scene shows the match as a spectator saw it, under a control bar (play, pause, speed, step,
scrub). A file that cannot be read or is no event log at all, or a ``--match`` the log does not
hold, is bad input (exit status 2, as in ``blink verify``); a log that is not a true log --
truncated, reordered, tampered -- is refused with its first bad line, in one line on stderr, exit
status 1, and no window. ``--at N`` starts paused at event N
(1-based, as the bar counts; past the match's last event it is an option out of range, status 2),
``--speed`` sets 1, 2 or 4; ``--screenshot``/``--quit-after`` work as in ``blink play``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.topics import Topics
    from client.window.viewmodels import Replay


def _speed(text: str) -> float:
    try:
        v = float(text.lower().removesuffix("x").removesuffix("×"))
    except ValueError:
        v = 0.0
    if v not in (1.0, 2.0, 4.0):
        raise argparse.ArgumentTypeError(f"speed is 1, 2 or 4, not {text!r}")
    return v


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser("replay", help="watch a recorded match again (play, pause, speed, step, scrub)",
                       description="Open the window on a recorded match: the log of `blink match --log`, "
                                   "`blink watch --json`, `blink serve --log`, or a file of the Replays list. "
                                   "The log is verified first; a false one is refused (exit 1) with its first bad line.")
    p.add_argument("log", metavar="LOG", help="the event log (JSON Lines)")
    p.add_argument("--match", metavar="CODE", help="which match of the log (default: the first)")
    p.add_argument("--at", type=argtypes.whole(1, 10**9, "events"), metavar="N",
                   help="start paused at event N (1 = the first)")
    p.add_argument("--speed", type=_speed, default=1.0, help="playback speed: 1, 2 or 4 (default 1)")
    p.add_argument("--screenshot", type=argtypes.out_file, metavar="PATH", help="save a PNG of the window when quitting (see --quit-after)")
    p.add_argument("--quit-after", type=argtypes.seconds(0, 86400), metavar="SECONDS",
                   help="close the window after this many seconds")
    p.add_argument("--width", type=argtypes.whole(320, 8192, 'pixels'), default=1100, help="window width in pixels (default 1100)")
    p.add_argument("--height", type=argtypes.whole(320, 8192, 'pixels'), default=720, help="window height in pixels (default 720)")
    p.add_argument("--mute", action="store_true", help="no sound")


def load(path: str) -> Replay:
    """The replay of ``path``; raises ``ReplayError``/``OSError`` with a readable message."""
    from client.window.viewmodels import load_replay

    with open(path, encoding="utf-8") as f:
        return load_replay(f.read().splitlines())


def run(args: argparse.Namespace, topics: Topics) -> int:
    import asyncio

    from client.window.viewmodels import ReplayError, load_replay

    from client.cli.failures import read_lines

    path = args.log
    lines = read_lines(path)
    if isinstance(lines, str):  # the file named on the command line: bad input, as in `blink verify`
        print(f"blink replay: cannot read {path}: {lines}", file=sys.stderr)
        return argtypes.USAGE
    from protocol.verify import NotALog, parse_log

    try:  # not an event log at all, or no such --match in it: bad input, as in `blink verify`
        records = parse_log(lines)
    except NotALog as exc:
        print(f"blink replay: {path}: {exc}", file=sys.stderr)
        return argtypes.USAGE
    except RecursionError:
        print(f"blink replay: {path}: a record is nested too deeply to read", file=sys.stderr)
        return argtypes.USAGE
    codes = list(dict.fromkeys(code for r in records if isinstance(code := r.data.get("match"), str)))
    if args.match is not None and args.match.upper() not in (c.upper() for c in codes):
        print(f"blink replay: --match {args.match}: no such match in {path} (it has {', '.join(codes)})",
              file=sys.stderr)
        return argtypes.USAGE
    try:
        replay = load_replay(lines, args.match)
    except ReplayError as exc:
        print(f"blink replay: {path}: {exc}", file=sys.stderr)
        return 1
    except RecursionError:
        print(f"blink replay: {path}: a record is nested too deeply to read", file=sys.stderr)
        return 1
    at = None
    if args.at is not None:
        if args.at > len(replay):
            # an option out of range, though only the log says what the range is
            print(f"blink replay: --at {args.at}: the match has {len(replay)} events", file=sys.stderr)
            return argtypes.USAGE
        at = args.at - 1
    try:
        import pyglet

        pyglet.options["debug_gl"] = False
        from client.window import App, AppConfig, SessionConfig
    except Exception as exc:  # noqa: BLE001 - one readable line
        print(f"blink replay: cannot open a window ({type(exc).__name__}: {exc}); is DISPLAY set? "
              "Without a screen, run it under xvfb-run.", file=sys.stderr)
        return 1
    config = AppConfig(mode="replay", width=args.width, height=args.height, screenshot=args.screenshot,
                       quit_after=args.quit_after, mute=args.mute,
                       session=SessionConfig(game=replay.game_name), replay=replay, replay_at=at,
                       replay_speed=args.speed)
    app = App(config)
    try:
        return asyncio.run(app.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one readable line, not a traceback
        print(f"blink replay: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
