"""The player's side of blink: the client model and its connection, bots, the window, the tools and the
``blink`` commands.

How this works
--------------
The floor is the player's side, no window in it: ``model.py``, the client's pure core (the relay's
messages in, what the player sees out, its own moves predicted by ``predictor.py``); ``net.py``,
its MQTT connection (``netthread.py`` runs it on a thread of its own for the window); ``player.py``,
one seat (a model fed by a connection); ``bots.py``; ``matchrun.py``, whole matches of bots;
``replays.py``, the recorder and the list of recorded matches; ``lan.py``, finding hosts on the LAN;
and their plain helpers (``matchstate``, ``results``, ``seats``, ``sealing``). Three rooms stand on
it, each with a face: ``client.window`` (the pyglet window, its ``viewmodels`` and ``scenes``),
``client.tools`` (the latency harness, the load generator, the local NATS cluster) and
``client.cli`` (the ``blink`` command, which opens the others). The floor never imports a room,
and code outside a room imports its face (tests/test_layering.py checks both).

This face names what others use of the floor and loads each module when a name is first asked
for, so importing any part of the client costs no more than that part.

Errors
------
Every exception this package raises derives from ``ClientError``; each also keeps the builtin
class it has always been, so code that catches that still catches it::

    ClientError
    ├── UserError                 a problem the user can fix: one line, exit status 1 (client.cli.failures)
    │   └── UsageError            bad input on the command line: one line, exit status 2
    ├── RequestError (RuntimeError)     the relay rejected a request: ``code`` and detail (client.player)
    ├── MatchTimeout              a match did not end in the time given (client.matchrun)
    ├── SealProblem (ConnectionError)   a sealed connection cannot start (client.sealing)
    ├── SeatFileError (ValueError)      a seat file that cannot be used (client.seats)
    ├── PlayerKeyError (ValueError)     a player's identity file that cannot be used (client.identity)
    ├── ReplayError (ValueError)        a log that cannot be replayed (client.window.viewmodels.replay)
    ├── BadArgument (ValueError)        a latency run's value that cannot be used (client.tools.latency)
    ├── LatencyError (RuntimeError)     a latency run that could not be done (client.tools.latency)
    ├── LoadError (RuntimeError)        a load run that cannot go on (client.tools.load_config)
    └── ClusterLaunchError        a local NATS cluster cannot be started or stopped (client.tools.nats_cluster)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.bots import Bot as Bot, RandomChance as RandomChance
    from client.matchrun import MatchResult as MatchResult, event_line as event_line, run_match as run_match
    from client.model import ClientModel as ClientModel
    from client.net import Connection as Connection, new_client_id as new_client_id
    from client.player import Player as Player, RequestError as RequestError
    from client.replays import list_replays as list_replays

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {
    "Bot": "bots", "ClientModel": "model", "Connection": "net", "MatchResult": "matchrun",
    "Player": "player", "RandomChance": "bots", "RequestError": "player", "event_line": "matchrun",
    "list_replays": "replays", "new_client_id": "net", "run_match": "matchrun",
}

__all__ = [
    "Bot", "ClientError", "ClientModel", "Connection", "MatchResult", "Player", "RandomChance",
    "RequestError", "event_line", "list_replays", "new_client_id", "run_match",
]


class ClientError(Exception):
    """The root of every exception of ``client``: catch it to catch any of them."""


if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
