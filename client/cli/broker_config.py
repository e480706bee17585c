"""``blink broker-config DIR``: write a Mosquitto configuration (conf, ACL, the relay's password).

How this works
--------------
``relay.hosting.write_mosquitto_config`` writes the files; the relay's login URL (which holds its
password) goes to stdout, alone, so a script can take it, and how to run Mosquitto to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UsageError, UserError

if TYPE_CHECKING:
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    bc = sub.add_parser("broker-config", help="write a Mosquitto config (conf, ACL, relay password) to DIR")
    bc.add_argument("dir", metavar="DIR", help="directory for mosquitto.conf, mosquitto.acl and passwd")
    bc.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    bc.add_argument("--port", type=argtypes.whole(1, 65535), default=1883, help="listen port (default 1883)")
    bc.add_argument("--max-payload", type=argtypes.whole(1024, 65536), default=8192, help="largest message in bytes (default 8192)")
    bc.add_argument("--tls-cert", metavar="FILE", help="also a TLS listener (mqtts://) with this certificate (PEM; "
                    "with --tls-key)")
    bc.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    bc.add_argument("--tls-port", type=argtypes.whole(1, 65535), metavar="P", help="the TLS listener's port (default 8883)")
    bc.add_argument("--tls-host", metavar="H", help="the TLS listener's address (default: --host's); e.g. --host "
                    "127.0.0.1 --tls-host 0.0.0.0: only TLS faces the network")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from mqttkit import DEFAULT_TLS_PORT, TLSProblem, check_tls_pair
    from relay.hosting import broker_user, share_a_port, write_mosquitto_config

    try:
        pair = check_tls_pair(args.tls_cert, args.tls_key)
    except TLSProblem as exc:
        raise UsageError(str(exc)) from exc
    if pair is None and args.tls_port is not None:
        raise UsageError("--tls-port goes with --tls-cert and --tls-key")
    if pair is None and args.tls_host is not None:
        raise UsageError("--tls-host goes with --tls-cert and --tls-key")
    tls_port = args.tls_port or DEFAULT_TLS_PORT
    tls_host = args.tls_host or args.host
    if pair is not None and tls_port == args.port and share_a_port(args.host, tls_host):
        raise UsageError(f"--tls-port {tls_port} is the plain listener's --port too: give them different ports")
    try:
        login = write_mosquitto_config(args.dir, args.host, args.port, topics.prefix, args.max_payload,
                                       tls=None if pair is None else (*pair, tls_port), tls_host=tls_host)
    except OSError as exc:
        raise UserError(f"cannot write {args.dir}: {exc}") from exc
    user = broker_user(Path(args.dir), () if pair is None else pair)
    runs_as = "" if user is None else (  # root: Mosquitto drops to the conf's user before it reads its files
        f"\nstarted by root, Mosquitto runs as user {user.pw_name} (the conf's `user` line)"
        + ("" if user.pw_uid else ": its own user cannot read these files where they are (in a folder it can "
           "reach, such as /etc/mosquitto, it would give up root)"))
    print(f"wrote mosquitto.conf, mosquitto.acl and passwd to {args.dir}\n"
          f"run:  mosquitto -c {args.dir}/mosquitto.conf\n"
          f"then: blink serve --broker URL   with the URL below (it holds the relay's password: keep it secret)"
          + ("" if pair is None else f"\nplayers over TLS: --server mqtts://HOST:{tls_port} (HOST as in the certificate)")
          + runs_as, file=sys.stderr)
    print(login.login_url, flush=True)
    return 0
