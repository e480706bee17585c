"""``blink ratings --server URL``: a relay's leaderboard, per game.

How this works
--------------
First a retained ``RelayStatus`` says whether any relay is online (``client/cli/preflight.py``).
Then the command asks the relay for each game's leaderboard (``Ratings``; the one ``--game``, or
every game) and prints what it answers (``RatingBoard``): rank, name, the key's fingerprint, the
rating (OpenSkill's ``mu - 3 sigma``) and matches rated. A request unanswered is asked again each
second; a relay that does not know the request (an older blink, which rates nobody) is one line and
exit status 1. ``--json`` prints one list of rows, each naming its game.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UserError, friendly
from protocol.rules import GAME_NAMES

if TYPE_CHECKING:
    from protocol import messages as m
    from protocol.topics import Topics

ANSWER_S = 5.0  # the relay answers at once; this is only a relay that does not answer


def register(sub: argtypes.Subcommands) -> None:
    r = sub.add_parser("ratings", help="a relay's leaderboard: rated players by game")
    argtypes.add_tls_trust(r)
    r.add_argument("--server", type=argtypes.url, required=True, help="MQTT broker the relay uses")
    r.add_argument("--game", choices=GAME_NAMES, help="this game only (default: every game)")
    r.add_argument("--json", action="store_true", help="print the rows as one JSON list, each with its game")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from protocol.rules import canonical

    games = [canonical(args.game)] if args.game else list(dict.fromkeys(canonical(g) for g in GAME_NAMES))
    boards = asyncio.run(_ask(args, topics, games))
    if args.json:
        rows = [{"game": b.game, "rank": i + 1, **row} for b in boards for i, row in enumerate(b.rows)]
        print(json.dumps(rows))
        return 0
    for b in boards:
        if not b.rows and not args.game:
            continue
        print(f"{b.game}: {b.players} rated player{'s' if b.players != 1 else ''}"
              + (f" (the best {len(b.rows)})" if len(b.rows) < b.players else ""))
        if b.rows:
            width = max(4, *(len(str(row["name"])) for row in b.rows))
            print(f"  {'#':>3}  {'name':<{width}}  {'key':<8}  {'rating':>7}  {'matches':>7}")
            for i, row in enumerate(b.rows):
                rating = row["rating"]
                shown = f"{rating:>7.2f}" if isinstance(rating, (int, float)) else f"{rating!s:>7}"
                print(f"  {i + 1:>3}  {str(row['name']):<{width}}  {str(row['key']):<8}  {shown}  "
                      f"{row['matches']!s:>7}")
    if not any(b.rows for b in boards) and not args.game:
        print("nobody is rated on this relay yet")
    return 0


async def _ask(args: argparse.Namespace, topics: Topics, games: list[str]) -> list[m.RatingBoard]:
    import time

    from mqttkit import parse_url
    from client.cli.preflight import require_relay
    from client.player import Player
    from protocol import messages as m

    address = parse_url(args.server, argtypes.trust(args))
    await require_relay(address, topics)
    boards: dict[str, m.RatingBoard] = {}
    refused: list[m.RequestRejected] = []
    try:
        async with Player(address, "ratings", topics, ping_interval_s=0) as player:
            own = player.conn.on_message

            def tap(msg: object, now_ns: int) -> None:
                if isinstance(msg, m.RatingBoard):
                    boards.setdefault(msg.game, msg)
                elif isinstance(msg, m.RequestRejected):
                    refused.append(msg)
                own(msg, now_ns)

            player.conn.on_message = tap
            deadline = time.monotonic() + ANSWER_S
            while len(boards) < len(games):
                if any(r.code == "unknown_type" for r in refused):
                    raise UserError(f"the relay at {address.url} keeps no ratings (it runs an older blink)")
                if time.monotonic() > deadline:
                    raise UserError(f"no leaderboard from the relay at {address.url} within {ANSWER_S:g} s")
                for game in games:
                    if game not in boards:
                        await player.conn.request(m.Ratings(game=game, limit=m.RATING_ROWS))
                end = time.monotonic() + 1.0
                while len(boards) < len(games) and time.monotonic() < end and not refused:
                    await player.wait_change(0.1)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise friendly(exc) from exc
    return [boards[g] for g in games]
