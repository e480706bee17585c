"""``blink broker-config DIR``: write a Mosquitto configuration (conf, ACL, the relay's password).

How this works
--------------
``relay.local.write_mosquitto_config`` writes the files; the relay's login URL (which holds its
password) goes to stdout, alone, so a script can take it, and how to run Mosquitto to stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UserError

if TYPE_CHECKING:
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    bc = sub.add_parser("broker-config", help="write a Mosquitto config (conf, ACL, relay password) to DIR")
    bc.add_argument("dir", metavar="DIR", help="directory for mosquitto.conf, mosquitto.acl and passwd")
    bc.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    bc.add_argument("--port", type=argtypes.whole(1, 65535), default=1883, help="listen port (default 1883)")
    bc.add_argument("--max-payload", type=argtypes.whole(1024, 65536), default=8192, help="largest message (bytes)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from relay.local import write_mosquitto_config

    try:
        login = write_mosquitto_config(args.dir, args.host, args.port, topics.prefix, args.max_payload)
    except OSError as exc:
        raise UserError(f"cannot write {args.dir}: {exc}") from exc
    print(f"wrote mosquitto.conf, mosquitto.acl and passwd to {args.dir}\n"
          f"run:  mosquitto -c {args.dir}/mosquitto.conf\n"
          f"then: blink serve --broker URL   with the URL below (it holds the relay's password: keep it secret)",
          file=sys.stderr)
    print(login.login_url, flush=True)
    return 0
