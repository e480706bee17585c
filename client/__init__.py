"""The player's side of blink: the window, bots, the load generator and the ``blink`` commands.

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
    ├── ReplayError (ValueError)        a log that cannot be replayed (client.window.viewmodels.replay)
    ├── BadArgument (ValueError)        a latency run's value that cannot be used (client.tools.latency)
    ├── LatencyError (RuntimeError)     a latency run that could not be done (client.tools.latency)
    ├── LoadError (RuntimeError)        a load run that cannot go on (client.tools.load_config)
    └── ClusterLaunchError        a local NATS cluster cannot be started or stopped (client.tools.nats_cluster)
"""

from __future__ import annotations

__all__ = ["ClientError"]


class ClientError(Exception):
    """The root of every exception of ``client``: catch it to catch any of them."""
