"""``blink bot``: one bot player -- quick match, a match by code, or a new one -- until its match ends.

How this works
--------------
The bot is a ``client.player.Player`` (the window's network client and model) driven by
``client.bots.Bot``. A seat it takes is saved (``client/seats.py``) so ``--rejoin`` can take it back
after a crash. A number of players the game does not allow, settings the relay would refuse, or a
seat file to rejoin that cannot be read is refused before anything starts (exit status 2). No relay
on the broker is one line at once (``client/cli/preflight.py``), not a join resent until its wait
ends; that, a refusal by the relay or a lost broker is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UsageError, UserError, friendly, refusal
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from client.identity import Identity
    from client.player import Player
    from client.seats import SavedSeat
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    b = sub.add_parser("bot", help="one bot player")
    argtypes.add_tls_trust(b)
    b.add_argument("--server", type=argtypes.url, required=True, help="MQTT broker the relay uses, e.g. mqtt://127.0.0.1:1883")
    b.add_argument("--match", metavar="CODE", help="join this match (default: quick match)")
    b.add_argument("--create", action="store_true", help="create a match and print its code")
    b.add_argument("--game", choices=GAME_NAMES, default="blink", help=argtypes.GAME_HELP)
    b.add_argument("--players", type=argtypes.whole(0, 10_000), default=2,
                   help="seats when creating a match (as many as the game allows; default 2)")
    b.add_argument("--settings", type=argtypes.settings, default={}, help="game settings as JSON for a new or quick match (`blink settings GAME` lists them; "
                   "default: none, the game's own)")
    b.add_argument("--name", type=argtypes.player_name, default="bot",
                   help=f"the bot's name at the table, at most {argtypes.NAME_CHARS} characters (default bot)")
    b.add_argument("--reaction", type=argtypes.seconds(0, 3600), default=0.35, help="median reaction time in seconds (default 0.35)")
    b.add_argument("--seed", type=int, help="seed for the bot's choices and reaction times (default: random)")
    b.add_argument("--identity", metavar="FILE",
                   help="the bot's key for ratings, made there on first use (default: one per --reaction, in the "
                        "data directory's identities/)")
    b.add_argument("--rejoin", nargs="?", const="", metavar="FILE",
                   help="take back the seat saved by the last `blink bot` run (or the one saved in FILE)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from client import seats

    if args.create:
        problem = argtypes.seats_problem(args.game, args.players, "--players")
        if problem is not None:
            raise UsageError(problem)
    if args.create or not (args.match or args.rejoin is not None):  # settings go with a new or quick match
        from protocol.rules import game_for

        game = game_for(args.game)
        try:
            game.check_new_match(args.settings, args.players if args.create else game.min_players)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"bad --settings: {exc}") from exc
    saved = None
    if args.rejoin is not None:  # a seat file that is not there is bad input, as in `blink play --rejoin`
        try:
            saved = seats.load(args.rejoin or None, "bot")
        except seats.SeatFileError as exc:
            raise UsageError(str(exc)) from None
    from client.identity import Identity, PlayerKeyError, bot_identity_path, load_identity

    identity: Identity | None
    try:
        identity = load_identity(args.identity or bot_identity_path(args.reaction))
    except PlayerKeyError as exc:
        if args.identity:
            raise UsageError(str(exc)) from None
        print(f"blink bot: playing unrated: {exc}", file=sys.stderr, flush=True)  # the key is for ratings only
        identity = None
    return asyncio.run(_bot(args, topics, saved, identity))


async def _bot(args: argparse.Namespace, topics: Topics, saved: SavedSeat | None, identity: Identity | None) -> int:
    from mqttkit import parse_url
    from client.bots import Bot
    from client.matchstate import MatchState
    from client.cli.preflight import require_relay
    from client.player import Player, RequestError

    from client import seats

    address = parse_url(args.server, argtypes.trust(args))
    await require_relay(address, topics)  # none: one line now, not a join resent for its whole wait
    try:
        async with Player(address, saved.name if saved else args.name, topics, identity=identity) as player:
            if saved is not None:
                code = await player.rejoin(saved.match, saved.token)
            elif args.match:
                code = await player.join(args.match.upper())
            elif args.create:
                code = await player.create(args.game, args.settings, seats=args.players)
            else:
                code = await player.quick(args.game, args.settings)
            seat, names = player.model.seat, player.model.players
            # (the name the relay seated it under: another's, or a rated player's, is changed)
            print(f"{names[seat] if seat is not None and seat < len(names) else player.model.name} in match {code} "
                  f"(seat {seat})", flush=True)
            if player.model.token and player.model.seat is not None:
                try:
                    path = seats.save(seats.SavedSeat(args.server, code, player.model.seat, player.model.name,
                                                      player.model.token), "bot")
                    print(f"seat saved in {path} (blink bot --rejoin takes it back)", flush=True)
                except OSError as exc:
                    print(f"blink bot: cannot save the seat token: {exc}", file=sys.stderr, flush=True)
            await Bot(player, reaction_s=args.reaction, seed=args.seed).run()
            if player.model.connection == "lost":
                raise UserError(f"lost the connection to the broker: {player.model.lost}")
            ms = MatchState.read(player.model.match_state)
            names, winner = ms.players, ms.winner
            print(f"match over: winner {names[winner] if winner is not None and winner < len(names) else 'none'}",
                  flush=True)
            await _rating_line(player)
    except RequestError as exc:
        raise refusal(exc, address.url) from exc
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise friendly(exc) from exc
    return 0


async def _rating_line(player: Player) -> None:
    """Say the bot's rating change: it comes in the step that ends the match, soon after its end."""
    import time

    deadline = time.monotonic() + 1.0
    while player.model.rating is None and time.monotonic() < deadline and player.identity is not None:
        await player.wait_change(0.1)
    r = player.model.rating
    if r is not None:
        print(f"rating ({r.game}): {r.before:.2f} -> {r.after:.2f} ({r.after - r.before:+.2f}), "
              f"{r.matches} rated match{'es' if r.matches != 1 else ''}", flush=True)
