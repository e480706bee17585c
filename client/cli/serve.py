"""``blink serve``: run the relay, with a broker of its own (an installed Mosquitto in a process of
its own, else the embedded one with the relay inside it; ``--embedded``: always the embedded one)
unless ``--broker`` is given.

How this works
--------------
``register`` adds the options; ``run`` hands them, as ``relay.hosting.ServeOptions``, to
``relay.hosting.serve_relay``, which sets up and runs everything (the server's side lives in ``relay/``).
What that raises as ``ServeError`` keeps its exit status; any other failure becomes one line
(``failures.friendly``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UserError, friendly

if TYPE_CHECKING:
    from protocol.topics import Topics


def _urls(text: str) -> str:
    """One broker URL, or several comma-separated (each checked)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"an empty URL in {text!r}")
    for p in parts:
        argtypes.url(p)
    return ",".join(parts)


def _web(text: str) -> str:
    """``--web [HOST:]PORT``, checked as the relay reads it."""
    from relay.hosting import web_address

    try:
        return web_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(sub: argtypes.Subcommands) -> None:
    s = sub.add_parser("serve", help="run the relay (with a broker of its own -- an installed Mosquitto, else the embedded one -- unless --broker is given)")
    s.add_argument("--host", help="address of its own broker (default 127.0.0.1; with --lan 0.0.0.0)")
    s.add_argument("--port", type=argtypes.whole(1, 65535), default=1883, help="port of its own broker (default 1883)")
    argtypes.add_tls_trust(s)
    s.add_argument("--broker", type=_urls, help="use this MQTT 3.1.1 broker instead, e.g. mqtt://127.0.0.1:1883 "
                   "(with --cluster/--shards: the nodes of a clustered broker, comma-separated, tried in turn)")
    s.add_argument("--embedded", action="store_true", help="run the embedded broker, with the relay inside it "
                   "(one process), even when Mosquitto is installed (without --broker, an installed Mosquitto is "
                   "run in a process of its own by default)")
    s.add_argument("--order", choices=("arrival", "fair"), default="arrival", help="how simultaneous plays are ordered: in order of arrival, or fairly (each play held up to --fair-cap-ms for a slower player's) (default arrival)")
    s.add_argument("--fair-cap-ms", type=argtypes.number(0, 10_000, "ms"), default=400.0,
                   help="fair order: longest hold of a play in ms, 0 to 10000 (default 400)")
    s.add_argument("--seed", type=int, help="seed for shuffles, dice and match codes (default: random)")
    s.add_argument("--log", type=argtypes.out_file, metavar="PATH", help="append the relay's event log (JSON Lines) to PATH")
    s.add_argument("--relay-id", help="this relay's name (status topic; default relay-0, with --cluster a "
                   "random one: every relay of a cluster needs its own)")
    s.add_argument("--max-payload", type=argtypes.whole(1024, 65536), default=8192,
                   help="largest message in bytes the embedded broker passes on and the relay reads (default 8192)")
    s.add_argument("--data", metavar="DIR", help="journal every input here and recover from it on start "
                   "(default: the per-user data directory, e.g. ~/.local/share/blink)")
    s.add_argument("--no-journal", action="store_true", help="keep matches in memory only (lost if the relay "
                   "stops); for throwaway relays and measurements")
    s.add_argument("--sync", choices=("full", "normal"), default="full", help="journal durability: full (fsync "
                   "every batch; survives a power cut) or normal (survives a crash of the relay) (default full)")
    s.add_argument("--lan", action="store_true", help="host for the local network: all interfaces, the next free "
                   "port if --port is taken, advertised over multicast DNS (found by `blink lan`)")
    s.add_argument("--interface", action="append", metavar="IF", help="with --lan: advertise only on this "
                   "interface (name or IPv4 address; repeatable)")
    s.add_argument("--cluster", metavar="NATS_URL", help="join the relays of this NATS cluster (with --broker): "
                   "shards are leased in its JetStream and journalled there, e.g. nats://127.0.0.1:4222")
    s.add_argument("--shards-total", type=argtypes.whole(1, 1024), default=None, metavar="N",
                   help="how many shards the matches are spread over (every relay of a broker the same; default 8)")
    s.add_argument("--lease-ttl", type=argtypes.seconds(1, 600), metavar="S", help="with --cluster: a dead relay's "
                   "shards are free this long after its last lease renewal, unless seen dead sooner (default: the leases' own, "
                   "12 s; renewed every second, given up after half of it without a renewal)")
    s.add_argument("--password-file", metavar="FILE", help="the relay's password, read from FILE (as `blink cluster "
                   "up` writes it: DIR/relay-password) and used, as user relay, for every --broker and --cluster URL "
                   "that has none -- so it is not on the command line for every local user's `ps` to see")
    s.add_argument("--tls-cert", metavar="FILE", help="also serve TLS (mqtts://) on its own broker (Mosquitto or embedded) with this "
                   "certificate (PEM; with --tls-key)")
    s.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    s.add_argument("--tls-port", type=argtypes.whole(1, 65535), metavar="P", help="the TLS listener's port "
                   "(default 8883)")
    s.add_argument("--tls-host", metavar="H", help="the TLS listener's address (default: --host's); e.g. --host "
                   "127.0.0.1 --tls-host 0.0.0.0: only TLS faces the network")
    s.add_argument("--seal", action="store_true", help="seal every message, for a broker that keeps nobody apart "
                   "(a public one): private messages sealed for their player, plays and the relay's messages "
                   "authenticated; players connect with the URL it prints (with ?pin=)")
    s.add_argument("--web", type=_web, metavar="[HOST:]PORT", help="also serve a page for spectators on "
                   "http://HOST:PORT/ (HOST default 127.0.0.1: this machine only; 0.0.0.0 for every interface): "
                   "the live and recent matches, each drawn live, from the public stream only")
    s.add_argument("--shards", metavar="LIST", help="serve exactly these shards (e.g. 0,1): with --cluster they are "
                   "pinned to this relay (the others share the rest); without, each is journalled in DIR/shard-N of "
                   "--data and the other relays on the broker serve the rest")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace, topics: Topics) -> int:
    import dataclasses

    from relay.hosting import ServeError, ServeOptions, serve_relay

    options = ServeOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeOptions)})
    try:
        # uvloop where it is installed (a dependency wherever it builds): the embedded broker spends
        # much of its time in the loop's own machinery -- callbacks and a task per connection --
        # and uvloop's is in C.
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(serve_relay(options, topics))
    except ServeError as exc:
        raise UserError(str(exc), exc.status) from exc
    except Exception as exc:  # noqa: BLE001 - turned into one readable line
        raise friendly(exc) from exc
