"""``blink lan``: list the blink hosts on the local network (multicast DNS), as a table or JSON.

How this works
--------------
``client.lan.browse`` listens for ``--timeout`` seconds on the chosen interfaces; what it found is
printed (``--json``: one JSON list on stdout). Finding nothing is not a failure (exit status 0);
a machine without multicast, or an ``--interface`` that names nothing usable, is one line and 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UserError

if TYPE_CHECKING:
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    ln = sub.add_parser("lan", help="list blink hosts on the local network (multicast DNS)")
    ln.add_argument("--json", action="store_true", help="print a JSON list of hosts")
    ln.add_argument("--timeout", type=argtypes.seconds(0.1, 60), default=2.0, help="listen this long (default 2 s)")
    ln.add_argument("--interface", action="append", metavar="IF",
                    help="look only on this interface (name or IPv4 address; repeatable)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from client.lan import browse, table
    from mqttkit.lan import LanError

    try:
        hosts = browse(args.timeout, args.interface)
    except LanError as exc:
        raise UserError(str(exc)) from exc
    if args.json:
        print(json.dumps([h.to_dict() for h in hosts]), flush=True)
    if not hosts:
        print("no blink hosts found on the local network", file=sys.stderr if args.json else sys.stdout)
    elif not args.json:
        print(table(hosts), flush=True)
    return 0
