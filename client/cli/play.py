"""``blink play``: the game window (pyglet), against a bot, a friend or anyone on a server.

How this works
--------------
``register`` adds the options; it imports nothing heavy, because ``blink --help`` (and a command
word the parser is unsure of) builds the whole parser, headless commands included. ``run`` checks the
arguments, then imports pyglet and the window package (``client/window``) and runs the app on a
fresh asyncio event loop. With no arguments the window opens on the menu with a local embedded
broker + relay already starting (in a child process of their own, ``relay/hosting/localproc.py``, so the
window's frames never delay the relay; it dies with this process), so a bot game works on a fresh machine; ``--bot``/``--host``/
``--match``/``--quick``/``--autoplay`` skip the menu and start that game at once.

With ``--server`` the server is checked first (``client/cli/preflight.py``): an unreachable
broker, a broker with no relay, or a ``--match``/``--watch`` code the relay does not know is one
line on stderr and exit status 1, before any window opens.

Exit status: 0 after a normal quit, 1 when the server is not there (above), the window could not
open, the game could not start or the local relay's process died (the reason is printed as one
line), 130 after Ctrl-C, 2 for bad arguments -- paths included: ``--screenshot`` and
``--frame-stats`` must name a writable file in an existing folder, checked before the window opens.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.topics import Topics
    from client.window import AppMode


def _level_arg(text: str) -> float:
    from client.window import parse_level  # no pyglet in there

    try:
        return parse_level(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _default_name() -> str:
    """The user's login name as far as it makes a name at the table, else "you"."""
    try:
        return argtypes.player_name(os.environ.get("USER", ""))
    except argparse.ArgumentTypeError:
        return "you"


def register(sub: argtypes.Subcommands) -> None:
    from protocol.rules import GAME_NAMES

    p = sub.add_parser("play", help="open the game window (race a bot, a friend, or anyone on a server)",
                       description="Open the BLINK window. With no options: a menu, with a local relay and a "
                                   "bot opponent ready on this machine.")
    argtypes.add_tls_trust(p)
    p.add_argument("--server", type=argtypes.url, metavar="URL",
                   help="MQTT broker of a running relay, e.g. mqtt://192.168.1.5:1883 (default: start one here)")
    p.add_argument("--name", type=argtypes.player_name, default=_default_name(),
                   help=f"your name at the table, at most {argtypes.NAME_CHARS} characters (default: your user "
                        "name, %(default)s)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--match", metavar="CODE", help="join the match with this code")
    mode.add_argument("--host", action="store_true", help="create a match and show its code for a friend")
    mode.add_argument("--quick", action="store_true", help="quick match: the first free opponent on the server")
    mode.add_argument("--rejoin", nargs="?", const="", metavar="FILE",
                      help="take back your seat after a crash or a lost connection (the seat the last "
                           "`blink play` on a server saved, or the one saved in FILE)")
    p.add_argument("--bot", type=_level_arg, metavar="LEVEL",
                   help="play a bot at once: easy, normal, hard, expert or its reaction time in seconds")
    p.add_argument("--game", choices=GAME_NAMES, default="blink", help=argtypes.GAME_HELP)
    p.add_argument("--players", type=argtypes.whole(0, 10_000), default=2, metavar="N",
                   help="seats in a match you create (BLINK: 2; Takeaway 2-6, Sequence 2-4, Roll Your Own 2-8; "
                        "bots fill the others; default 2)")
    mode.add_argument("--watch", metavar="CODE", help="spectate a running match by code (read-only; needs --server)")
    p.add_argument("--settings", type=argtypes.settings, default={},
                   help="game settings as JSON when creating a match (`blink settings GAME` lists them; default: "
                        "none, the game's own)")
    p.add_argument("--autoplay", action="store_true", help="a bot plays for you (demos, tests)")
    p.add_argument("--screenshot", type=argtypes.out_file, metavar="PATH", help="save a PNG of the window when quitting (see --quit-after)")
    p.add_argument("--quit-after", type=argtypes.seconds(0, 86400), metavar="SECONDS", help="close the window after this many seconds")
    p.add_argument("--frame-stats", type=argtypes.out_file, metavar="PATH", help="write frame-time and input-delay statistics (JSON)")
    p.add_argument("--width", type=argtypes.whole(320, 8192, 'pixels'), default=1100, help="window width in pixels (default 1100)")
    p.add_argument("--height", type=argtypes.whole(320, 8192, 'pixels'), default=720, help="window height in pixels (default 720)")
    p.add_argument("--mute", action="store_true", help="no sound")
    p.add_argument("--identity", metavar="FILE",
                   help="your key for ratings, made there on first use (default: one per --name, in the data "
                        "directory's identities/)")
    p.add_argument("--seed", type=int, help="seed for the local relay and the bots")
    p.add_argument("--no-record", action="store_true",
                   help="do not record the matches (by default each is kept in the data directory's replays/ folder)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    import asyncio

    from protocol.rules import game_for

    game = game_for(args.game)
    problem = argtypes.seats_problem(args.game, args.players, "--players")
    if problem is not None:
        print(f"blink play: {problem}", file=sys.stderr)
        return argtypes.USAGE
    try:
        game.check_new_match(args.settings, args.players)
    except (ValueError, TypeError) as exc:
        print(f"blink play: bad --settings: {exc}", file=sys.stderr)
        return 2
    rejoin = None
    if args.rejoin is not None:
        from client import seats

        try:
            rejoin = seats.load(args.rejoin or None, "play")
        except seats.SeatFileError as exc:
            print(f"blink play: {exc}", file=sys.stderr)
            return 2
        args.server = args.server or rejoin.server
        args.match, args.name = rejoin.match, rejoin.name
    mode: AppMode
    if args.watch:
        mode = "watch"
    elif args.match:
        mode = "join"
    elif args.host:
        mode = "host"
    elif args.quick:
        mode = "quick"
    elif args.bot is not None or args.autoplay:
        mode = "bot"
    else:
        mode = "menu"
    if mode == "watch" and not args.server:
        print("blink play: --watch needs --server (the relay the match runs on)", file=sys.stderr)
        return 2
    if mode in ("join", "quick") and not args.server and not args.autoplay:
        # A fresh local relay has no one else on it: say so rather than wait for ever.
        print("blink play: --match/--quick need --server (a relay other players use); "
              "--host starts a local match and shows its code", file=sys.stderr)
        return 2

    if args.server:
        # A wrong URL, a broker with no relay or an unknown code is one line now, not a window whose
        # menu finds out only after a choice.
        from client.cli.preflight import check_server

        code = args.watch or (args.match if mode == "join" else None)
        try:
            asyncio.run(check_server(args.server, topics, code, argtypes.trust(args)))
        except KeyboardInterrupt:
            return 130

    from client.identity import Identity, PlayerKeyError, identity_path, load_identity

    identity: Identity | None
    try:
        identity = load_identity(args.identity or identity_path(args.name))
    except PlayerKeyError as exc:
        if args.identity:
            print(f"blink play: {exc}", file=sys.stderr)
            return 2
        print(f"blink play: playing unrated: {exc}", file=sys.stderr)  # the key is for ratings only
        identity = None

    from client.replays import replays_dir
    from client.window import BOT_LEVELS, SessionConfig

    try:
        import pyglet  # only here: the headless commands never load it

        pyglet.options["debug_gl"] = False
        from client.window import App, AppConfig  # opens the display (pyglet's shadow window)
    except Exception as exc:  # noqa: BLE001 - one readable line
        print(f"blink play: cannot open a window ({type(exc).__name__}: {exc}); is DISPLAY set? "
              "Without a screen, run it under xvfb-run.", file=sys.stderr)
        return 1

    session = SessionConfig(server_url=args.server, name=args.name, topics=topics, game=args.game,
                            settings=args.settings, autoplay=args.autoplay and mode != "watch", seed=args.seed,
                            players=args.players, lan=not args.server, relay_process=True,
                            rejoin=rejoin, trust=argtypes.trust(args), identity=identity, bot_identities=True,
                            record_dir=None if args.no_record else str(replays_dir()))
    config = AppConfig(mode=mode, code=args.watch or args.match, bot_reaction_s=args.bot if args.bot is not None else BOT_LEVELS["normal"],
                       width=args.width, height=args.height, screenshot=args.screenshot,
                       quit_after=args.quit_after, frame_stats=args.frame_stats,
                       mute=args.mute, session=session)
    app = App(config)
    try:
        code = asyncio.run(app.run())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one readable line, not a traceback
        name = type(exc).__name__
        if "Display" in name or "NoSuchConfig" in name or "Context" in name or "window" in str(exc).lower():
            print(f"blink play: cannot open a window ({name}: {exc}); is DISPLAY set? "
                  "Without a screen, run it under xvfb-run.", file=sys.stderr)
        else:
            print(f"blink play: {name}: {exc}", file=sys.stderr)
        return 1
    lost = getattr(app.session, "server_lost", None)
    if lost:
        print(f"blink play: {lost}; the game cannot go on", file=sys.stderr)
    return code
