"""``blink settings [GAME]``: every setting of a game -- what a value must be, and its default.

How this works
--------------
The game objects of ``protocol.rules`` are the only table. The keys and defaults are the game's
``default_settings()`` and those of every match (``MATCH_SETTINGS``: ``grace_s``); what a value must
be (its type and range: "an integer from 1 to 10", "one of hex19, hex37, ...") is what
``Game.check_new_match`` -- the relay's own check of a new match's settings -- says when offered a
value no setting takes, so the listing cannot drift from what the relay accepts. Without GAME every game is listed.
Prints to stdout, exit status 0; never imports the network or the window.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.rules.base import Game
    from protocol.topics import Topics

#: A value no setting of any game takes, so every check refuses it and says what it wants instead.
_PROBE = "\x00"


def register(sub: argtypes.Subcommands) -> None:
    from protocol.rules import GAME_NAMES

    p = sub.add_parser("settings", help="list a game's settings (for --settings): type, range and default",
                       description="List every setting of a game, as `--settings '{\"KEY\": VALUE}'` of "
                                   "`blink play`, `blink match`, `blink bot` and `blink load` takes them.")
    p.add_argument("game", metavar="GAME", nargs="?", choices=GAME_NAMES,
                   help=f"the game: {', '.join(GAME_NAMES)} (default: every game)")


def wants(game: Game[object, object], key: str) -> str:
    """What a value of ``key`` must be, in the game's own words."""
    try:
        game.check_new_match({key: _PROBE}, game.min_players)
    except (ValueError, TypeError) as exc:
        text = str(exc)
    else:  # a setting that takes any text: the check has nothing to refuse
        return "any text"
    text = text.removeprefix(f"{key} ").removeprefix("must be ").removeprefix("must ")
    probe = f", not {_PROBE!r}"  # "one of a, b, not '\x00'": the probe itself is no help
    return text.removesuffix(probe)


def describe(name: str) -> list[str]:
    from protocol.rules import game_for
    from protocol.rules.base import MATCH_SETTINGS

    game = game_for(name)
    seats = (f"{game.min_players} players" if game.min_players == game.max_players
             else f"{game.min_players} to {game.max_players} players")
    defaults = {**game.default_settings(), **MATCH_SETTINGS}  # the game's, then those of every match
    rows = [(key, wants(game, key), json.dumps(value, separators=(",", ":"))) for key, value in defaults.items()]
    width = max(len(key) for key, _, _ in rows)
    lines = [f"{game.title} ({name}, {seats}): --settings '{{\"KEY\": VALUE, ...}}'"]
    for key, what, default in rows:
        lines.append(f"  {key:<{width}}  {what}; default {default}")
    return lines


def run(args: argparse.Namespace, topics: Topics) -> int:
    from protocol.rules import GAME_NAMES

    names = [args.game] if args.game else list(GAME_NAMES)
    print("\n\n".join("\n".join(describe(name)) for name in names))
    return 0
