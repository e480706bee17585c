"""``blink cluster up`` / ``blink cluster down``: a local NATS cluster (MQTT + JetStream) for relays.

How this works
--------------
The launcher is ``client/tools/nats_cluster.py``: ``up`` starts the nodes and prints the cluster's URLs
as one JSON object once it is usable (the relay's password stays in ``DIR/relay-password``, never
printed); ``down`` stops what ``up`` recorded in ``DIR``. Bad input is one line and exit status 2;
a cluster that cannot start or be found is one line and 1.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
import types
from typing import TYPE_CHECKING, NoReturn

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.topics import Topics

def _one_line_error(self: argparse.ArgumentParser, message: str) -> NoReturn:
    print(f"{self.prog}: {message}", file=sys.stderr)
    raise SystemExit(argtypes.USAGE)


MAX_NODES = 16  # a local cluster for tests and trials


def register(sub: argtypes.Subcommands) -> None:
    from client.tools import nats_cluster  # standard library only: cheap

    p = sub.add_parser("cluster", help="start or stop a local NATS cluster (MQTT + JetStream) for relays",
                       description="Start N nats-server processes (MQTT and JetStream on, routed together) in the "
                                   "background, or stop them. Configuration: deploy/nats/.")
    actions = p.add_subparsers(dest="cluster_action", metavar="ACTION")
    up = actions.add_parser("up", help="start a cluster and print its URLs as JSON")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--dir", required=True, help="directory for configs, logs, JetStream state and pids")
    up.add_argument("--base-port", type=int, default=None,
                    help="node i uses ports P+4i..P+4i+3 (NATS, MQTT, route, monitoring); default: free ports")
    up.add_argument("--json", action="store_true", help="print only the JSON object (the default output too)")
    up.add_argument("--auth", action=argparse.BooleanOptionalAction, default=True,
                    help="require the relay's password (written to DIR/relay-password, mode 600; give it to "
                         "`blink serve --password-file`) and confine anonymous MQTT clients to what players need "
                         "(default on; --no-auth: anyone may do anything, for experiments)")
    up.add_argument("--tls-cert", metavar="FILE", help="the nodes' MQTT listeners speak TLS (mqtts://) with this "
                    "certificate (PEM; with --tls-key)")
    up.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    up.add_argument("--nats-server", metavar="PATH",
                    help="the nats-server program to run (default: the one installed beside this Python -- the "
                         "cluster extra's -- else the one on PATH)")
    up.add_argument("--ready-timeout", type=argtypes.seconds(0.1, 3600), default=nats_cluster.READY_S,
                    help=argparse.SUPPRESS)
    down = actions.add_parser("down", help="stop the cluster recorded in DIR")
    down.add_argument("--dir", required=True, help="the directory given to `up`")
    for parser in (p, up, down):
        parser.error = types.MethodType(_one_line_error, parser)  # type: ignore[method-assign]


def run(args: argparse.Namespace, topics: Topics) -> int:
    from client.tools import nats_cluster

    action = getattr(args, "cluster_action", None)
    try:
        if action == "up":
            if not 1 <= args.nodes <= MAX_NODES:  # each node is a process and ports of its own
                print(f"blink cluster up: --nodes must be at least 1 and at most {MAX_NODES}, not {args.nodes}",
                      file=sys.stderr)
                return argtypes.USAGE
            if args.base_port is not None and not 1 <= args.base_port <= 65535:
                print(f"blink cluster up: --base-port must be 1..65535, not {args.base_port}", file=sys.stderr)
                return argtypes.USAGE
            from mqttkit import TLSProblem, check_tls_pair

            try:
                tls = check_tls_pair(args.tls_cert, args.tls_key)
            except TLSProblem as exc:
                print(f"blink cluster up: {exc}", file=sys.stderr)
                return argtypes.USAGE
            cluster = nats_cluster.start_cluster(args.nodes, args.dir, args.base_port, ready_s=args.ready_timeout,
                                                 auth=args.auth, tls=tls, nats_server=args.nats_server)
            print(json.dumps(cluster.summary()), flush=True)
            return 0
        if action == "down":
            running, recorded = nats_cluster.stop_cluster(args.dir)
            if not recorded:
                print(f"blink cluster down: no cluster in {args.dir} (no {nats_cluster.STATE} there)", file=sys.stderr)
                return argtypes.FAILED
            print(f"stopped {running} nats-server process{'es' if running != 1 else ''}" if running
                  else "no server was running (already stopped)")
            return 0
        print("blink cluster: give an action: up or down (see blink cluster --help)", file=sys.stderr)
        return argtypes.USAGE
    except nats_cluster.ClusterLaunchError as exc:
        print(f"blink cluster {action}: {exc}", file=sys.stderr)
        return argtypes.FAILED
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            print(f"blink cluster {action}: no space left on the device", file=sys.stderr)
        else:
            print(f"blink cluster {action}: {exc.strerror or exc}", file=sys.stderr)
        return argtypes.FAILED
