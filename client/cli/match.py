"""``blink match``: a whole match between bots, on a relay started here or on a given broker.

How this works
--------------
Without ``--server`` a ``relay.hosting.local.LocalServer`` (embedded broker + relay, journal in a private
temporary directory unless ``--data`` names one) runs for the match; ``client.matchrun.run_match``
plays it with bots and returns its events and summary, printed as lines or one JSON object
(``--log`` writes every public event as JSON Lines). A number of bots the game does not allow or
bad settings are refused before anything starts (exit status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UsageError, UserError, friendly, refusal
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from mqttkit import TLSTrust
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    mt = sub.add_parser("match", help="a whole match between bots")
    mt.add_argument("--game", choices=GAME_NAMES, default="blink", help=argtypes.GAME_HELP)
    mt.add_argument("--bots", type=argtypes.whole(0, 10_000), default=2,
                    help="number of bot players (as many as the game allows: BLINK 2, the dice games 2 or more; "
                         "default 2)")
    argtypes.add_tls_trust(mt)
    mt.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start both here)")
    mt.add_argument("--seed", type=int, help="seed for the relay (when started here) and the bots")
    mt.add_argument("--settings", type=argtypes.settings, default={},
                    help="game settings as JSON (`blink settings GAME` lists them; default: none, the game's own)")
    mt.add_argument("--reaction", type=argtypes.seconds(0, 3600), default=0.35,
                    help="bots' median reaction time in seconds (default 0.35)")
    mt.add_argument("--timeout", type=argtypes.seconds(1, 86_400), default=900.0,
                    help="give up after this many seconds, 1 to 86400 (default 900)")
    mt.add_argument("--json", action="store_true", help="print one JSON object")
    mt.add_argument("--log", type=argtypes.out_file, metavar="PATH", help="write every public event as JSON Lines")
    mt.add_argument("--order", choices=("arrival", "fair"), default="arrival",
                    help="how the relay started here orders simultaneous plays (default arrival)")
    mt.add_argument("--data", metavar="DIR", help="the local relay's journal directory (default: a private "
                    "temporary one, removed afterwards)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    problem = argtypes.seats_problem(args.game, args.bots, "--bots")
    if problem is not None:
        raise UsageError(problem)
    return asyncio.run(_match(args, topics))


async def _match(args: argparse.Namespace, topics: Topics) -> int:
    import shutil

    from relay import RelayConfig
    from relay.hosting import LocalServer, temporary_data_dir
    from relay.storage import JournalError
    from client.matchrun import MatchTimeout, run_match, write_log
    from client.player import RequestError
    from protocol.rules import game_for

    game = game_for(args.game)
    try:
        game.check_new_match(args.settings, args.bots)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"bad --settings: {exc}") from exc
    config = RelayConfig(order=args.order)
    where = "this machine"
    if args.server:  # no relay there: one line now, not a request resent for its whole wait
        from client.cli.preflight import require_relay
        from mqttkit import parse_url

        address = parse_url(args.server, argtypes.trust(args))
        where = address.url
        await require_relay(address, topics)
    local_data = args.data or (temporary_data_dir() if not args.server else None)
    try:
        async with LocalServer(None, args.seed, config, topics=topics, relay=True, data_dir=local_data,
                               remove_data_dir=not args.data) if not args.server \
                else _Nothing(args.server, argtypes.trust(args)) as server:
            result = await run_match(server.address, args.game, args.bots, args.settings, args.seed,
                                     args.reaction, args.timeout, topics)
    except RequestError as exc:
        raise refusal(exc, where) from exc
    except MatchTimeout as exc:
        raise UserError(f"{exc} (--timeout {args.timeout:g}; give it longer)") from exc
    except UserError:
        raise
    except JournalError as exc:
        raise UserError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001
        raise friendly(exc) from exc
    finally:
        if local_data is not None and not args.data:  # LocalServer removes it, unless it failed to start
            shutil.rmtree(local_data, ignore_errors=True)
    if args.log:
        try:
            write_log(args.log, result.events)
        except OSError as exc:  # checked at the start; the folder may have gone since
            raise UserError(f"could not write --log {args.log}: {exc.strerror or exc}") from exc
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{result.game} match {result.code}: {', '.join(result.players)}")
        games = summary["games"]
        for g in games if isinstance(games, list) else []:
            index, won = g.get("game"), g.get("winner")
            print(f"  game {index + 1 if isinstance(index, int) else '?'}: "
                  f"{'winner ' + str(won) if won is not None else g.get('reason')}")
        print(f"winner: {summary['winner']}   accepted plays: {summary['accepted']}   "
              f"rejected: {summary['rejected'] or 0}   {summary['duration_s']} s")
    return 0


class _Nothing:
    """Stands in for LocalServer when the user brings a server."""

    def __init__(self, url: str, trust: TLSTrust) -> None:
        from mqttkit import parse_url

        self.address = parse_url(url, trust)

    async def __aenter__(self) -> _Nothing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
