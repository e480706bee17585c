"""``blink load``: many simulated players against one relay, and a report of what the relay did.

How this works
--------------
``register`` adds the options (importing nothing of the generator); ``run`` checks them (bad input
is exit status 2, before anything starts), runs ``client.tools.load.run_load`` until
``--duration`` is over or SIGINT/SIGTERM stops it, with a progress line on stderr, and prints the
report (``--json``: one JSON object). A run that cannot go on is one line and exit status 1; an
interrupted run still reports, with status 130.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn

from client.cli import args as argtypes
from client.tools import load_config
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser("load", help="load generator: many simulated players against one relay",
                       description="Drive many two-player matches of simulated players against a relay and report "
                                   "actions/s, play -> verdict times, unanswered plays, this generator's own "
                                   "event-loop lag and the relay's CPU and memory.")
    p.add_argument("--matches", type=argtypes.whole(1, load_config.MAX_MATCHES), required=True,
                   help=f"concurrent matches, two players each (1-{load_config.MAX_MATCHES})")
    p.add_argument("--game", choices=GAME_NAMES, default="blink", help=argtypes.GAME_HELP)
    p.add_argument("--pace", choices=("human", "max"), default="human",
                   help="human: a log-normal reaction time before each move (default); max: as fast as allowed")
    p.add_argument("--reaction", type=argtypes.seconds(0.0, 10.0), default=0.35,
                   help="median reaction time at human pace, seconds (default 0.35)")
    p.add_argument("--duration", type=argtypes.seconds(1.0, 86_400.0), default=30.0,
                   help="seconds to measure once every match is set up (default 30)")
    argtypes.add_tls_trust(p)
    p.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start blink serve here)")
    p.add_argument("--relay-pid", type=argtypes.whole(1, 2**31), help="with --server: the relay's pid, for its CPU and memory")
    p.add_argument("--ping", type=argtypes.seconds(0.0, 60.0), default=1.0,
                   help="a player with no verdict in this long is pinged, seconds (default 1; its plays' verdicts "
                        "are its round trips, as the client's; 0: never)")
    p.add_argument("--seed", type=int, help="seed for the players (and the relay started here)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--grace", type=argtypes.seconds(0.0, 600.0), default=load_config.GRACE_S,
                   help=f"seconds verdicts may still arrive after the run (default {load_config.GRACE_S:g})")
    p.add_argument("--timeout", type=argtypes.seconds(1.0, 600.0), default=load_config.REQUEST_TIMEOUT_S,
                   help=f"seconds to wait for a connect or a match set-up (default {load_config.REQUEST_TIMEOUT_S:g})")

    def one_line_error(message: str) -> NoReturn:  # argparse prints usage too; bad input is one line here
        print(f"blink load: {message}", file=sys.stderr)
        sys.exit(2)

    p.error = one_line_error  # type: ignore[method-assign]


def run(args: argparse.Namespace, topics: Topics) -> int:
    import asyncio
    import json
    import signal
    import time

    from client.tools import load

    cfg = load_config.LoadConfig(matches=args.matches, game=args.game, pace=args.pace, duration_s=args.duration,
                                 server=args.server, seed=args.seed, relay_pid=args.relay_pid, reaction_s=args.reaction,
                                 ping_s=args.ping, grace_s=args.grace, timeout_s=args.timeout, topics=topics,
                                 trust=argtypes.trust(args))
    if args.relay_pid is not None and not args.server:
        print("blink load: --relay-pid goes with --server (a relay started here is measured anyway)", file=sys.stderr)
        return 2
    try:  # bad input is status 2 and found before anything starts; LoadError later is a run-time failure (1)
        load_config.check_config(cfg)
    except load_config.LoadError as exc:
        print(f"blink load: {exc}", file=sys.stderr)
        return 2
    if args.server:  # the same words as every command's for a broker with no relay
        from client.cli.failures import UserError
        from client.cli.preflight import require_relay
        from mqttkit import parse_url

        try:
            asyncio.run(require_relay(parse_url(args.server, argtypes.trust(args)), topics))
        except UserError as exc:
            print(f"blink load: {exc}", file=sys.stderr)
            return exc.status
    tty = sys.stderr.isatty()
    last = [0.0]

    def progress(line: str) -> None:
        now = time.monotonic()
        if tty:
            sys.stderr.write("\r\x1b[K" + line[:160])
            sys.stderr.flush()
        elif now - last[0] >= 5.0:
            last[0] = now
            print(f"blink load: {line}", file=sys.stderr, flush=True)

    async def main() -> load.LoadReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_cancellations)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        return await load.run_load(cfg, progress, stop)

    try:
        result = asyncio.run(main())
    except load_config.LoadError as exc:
        _clear(tty)
        print(f"blink load: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # an unknown game and the like
        _clear(tty)
        print(f"blink load: {exc}", file=sys.stderr)
        return 2
    _clear(tty)
    if args.json:
        print(json.dumps(result))
    else:
        print(load.format_table(result))
    if result["interrupted"]:
        return 130
    return 0 if result["matches_running"] else 1


def _quiet_cancellations(loop: AbstractEventLoop, context: dict[str, object]) -> None:
    """A set-up task cancelled by Ctrl-C may be asked for its exception as the run shuts down; that
    is no error of the run and must not print a traceback. Anything else goes to the default."""
    from asyncio import CancelledError

    if isinstance(context.get("exception"), CancelledError):
        return
    loop.default_exception_handler(context)


def _clear(tty: bool) -> None:
    if tty:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
