"""The ``blink`` command: serve, bot, match (and play, latency).

How this works
--------------
Each sub-command parses and checks its arguments, then runs one asyncio coroutine. The headless
commands never import pyglet (a server has no display); only ``play`` does, lazily. Every failure a
user can cause -- a bad URL, a taken port, an unreachable broker, a bad setting -- ends with one
readable line on stderr and exit status 2 (bad input on the command line, found before anything
starts) or 1 (a failure at run time), never a traceback (the convention is in ``client/args.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from typing import Any, Sequence

from protocol.rules import GAME_NAMES
from client import args as argtypes
from protocol.topics import DEFAULT_PREFIX, Topics


class UserError(Exception):
    """A problem at run time the user can fix; printed as one line, exit status 1."""

    status = argtypes.FAILED


class UsageError(UserError):
    """Bad input on the command line (options that do not go together, a number of players the
    game does not allow): one line, exit status 2, before anything starts."""

    status = argtypes.USAGE


#: Commands defined in this file: ``blink serve`` (a restart after a crash) need not import the
#: other commands' modules just to build their parsers (measured: about 0.2-0.3 s of its start-up).
OWN_COMMANDS = ("serve", "lan", "bot", "match", "watch", "broker-config")


def command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (after the global options), or None if unsure."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--prefix":
            i += 2
        elif word.startswith("--prefix=") or word in ("-v", "--verbose"):
            i += 1
        else:
            return None if word.startswith("-") else word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given one of ``OWN_COMMANDS``, the other modules' commands are left out."""
    p = argtypes.OneLineParser(prog="blink", description="Race BLINK and play dice games over MQTT.")
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"topic prefix (default {DEFAULT_PREFIX})")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("serve", help="run the relay (with an embedded MQTT broker unless --broker is given)")
    s.add_argument("--host", help="embedded broker address (default 127.0.0.1; with --lan 0.0.0.0)")
    s.add_argument("--port", type=argtypes.whole(1, 65535), default=1883, help="embedded broker port (default 1883)")
    s.add_argument("--broker", type=_urls, help="use this MQTT 3.1.1 broker instead, e.g. mqtt://127.0.0.1:1883 "
                   "(with --cluster/--shards: the nodes of a clustered broker, comma-separated, tried in turn)")
    s.add_argument("--order", choices=("arrival", "fair"), default="arrival", help="how simultaneous plays are ordered")
    s.add_argument("--fair-cap-ms", type=float, default=150.0, help="fair order: longest hold of a play (ms)")
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
    s.add_argument("--shards", metavar="LIST", help="serve exactly these shards (e.g. 0,1): with --cluster they are "
                   "pinned to this relay (the others share the rest); without, each is journalled in DIR/shard-N of "
                   "--data and the other relays on the broker serve the rest")

    ln = sub.add_parser("lan", help="list blink hosts on the local network (multicast DNS)")
    ln.add_argument("--json", action="store_true", help="print a JSON list of hosts")
    ln.add_argument("--timeout", type=argtypes.seconds(0.1, 60), default=2.0, help="listen this long (default 2 s)")
    ln.add_argument("--interface", action="append", metavar="IF",
                    help="look only on this interface (name or IPv4 address; repeatable)")

    b = sub.add_parser("bot", help="one bot player")
    b.add_argument("--server", type=argtypes.url, required=True, help="MQTT broker the relay uses, e.g. mqtt://127.0.0.1:1883")
    b.add_argument("--match", metavar="CODE", help="join this match (default: quick match)")
    b.add_argument("--create", action="store_true", help="create a match and print its code")
    b.add_argument("--game", choices=GAME_NAMES, default="blink")
    b.add_argument("--players", type=argtypes.whole(0, 10_000), default=2,
                   help="seats when creating a match (as many as the game allows)")
    b.add_argument("--settings", type=argtypes.settings, default={}, help="game settings as JSON when creating")
    b.add_argument("--name", default="bot")
    b.add_argument("--reaction", type=argtypes.seconds(0, 3600), default=0.35, help="median reaction time in seconds")
    b.add_argument("--seed", type=int)
    b.add_argument("--rejoin", nargs="?", const="", metavar="FILE",
                   help="take back the seat saved by the last `blink bot` run (or the one saved in FILE)")

    mt = sub.add_parser("match", help="a whole match between bots")
    mt.add_argument("--game", choices=GAME_NAMES, default="blink")
    mt.add_argument("--bots", type=argtypes.whole(0, 10_000), default=2,
                    help="number of bot players (as many as the game allows: BLINK 2, the dice games 2 or more)")
    mt.add_argument("--server", type=argtypes.url, help="MQTT broker with a running relay (default: start both here)")
    mt.add_argument("--seed", type=int, help="seed for the relay (when started here) and the bots")
    mt.add_argument("--settings", type=argtypes.settings, default={}, help="game settings as JSON")
    mt.add_argument("--reaction", type=argtypes.seconds(0, 3600), default=0.35, help="bots' median reaction time in seconds")
    mt.add_argument("--timeout", type=argtypes.seconds(0, 3600), default=900.0, help="give up after this many seconds")
    mt.add_argument("--json", action="store_true", help="print one JSON object")
    mt.add_argument("--log", type=argtypes.out_file, metavar="PATH", help="write every public event as JSON Lines")
    mt.add_argument("--order", choices=("arrival", "fair"), default="arrival", help="relay ordering (local relay)")
    mt.add_argument("--data", metavar="DIR", help="the local relay's journal directory (default: a private "
                    "temporary one, removed afterwards)")

    w = sub.add_parser("watch", help="spectate a running match by code (prints its public events)")
    w.add_argument("code", help="the match code")
    w.add_argument("--server", type=argtypes.url, required=True, help="MQTT broker the relay uses")
    w.add_argument("--json", action="store_true", help="print each event as a JSON line (the --log format)")

    bc = sub.add_parser("broker-config", help="write a Mosquitto config (conf, ACL, relay password) to DIR")
    bc.add_argument("dir", metavar="DIR", help="directory for mosquitto.conf, mosquitto.acl and passwd")
    bc.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    bc.add_argument("--port", type=argtypes.whole(1, 65535), default=1883, help="listen port (default 1883)")
    bc.add_argument("--max-payload", type=argtypes.whole(1024, 65536), default=8192, help="largest message (bytes)")

    if command in OWN_COMMANDS:
        return p
    from client import cluster_cli, latency_cli, load, play_cli, replay_cli, verify_cli  # no pyglet at import time: it is only loaded when `play` runs

    play_cli.add_parser(sub)
    latency_cli.add_parser(sub)
    load.add_parser(sub)
    verify_cli.add_parser(sub)
    replay_cli.add_parser(sub)
    cluster_cli.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(command_of(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    from mqttkit.logsetup import log_to_stderr

    log_to_stderr(logging.INFO if args.verbose else logging.WARNING)  # not basicConfig: see mqttkit/logsetup.py
    if not args.verbose:
        # ("mqtt" is paho's, under aiomqtt: "failed to receive on socket" for a connection our
        # code already reports and heals)
        for name in ("amqtt", "transitions", "blink.relay", "zeroconf", "mqtt"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        if args.command == "play":
            # The window says "reconnecting…" itself; a lost local relay is one line at the end.
            logging.getLogger("blink.net").setLevel(logging.CRITICAL)
    if args.command is None:
        parser.print_help()
        return argtypes.USAGE
    problem = None
    if args.command == "match":
        problem = argtypes.seats_problem(args.game, args.bots, "--bots")
    elif args.command == "bot" and args.create:
        problem = argtypes.seats_problem(args.game, args.players, "--players")
    if problem is not None:
        print(f"blink {args.command}: {problem}", file=sys.stderr)
        return argtypes.USAGE
    topics = Topics(prefix=args.prefix)
    try:
        if args.command == "serve":
            return asyncio.run(_serve(args, topics))
        if args.command == "bot":
            return asyncio.run(_bot(args, topics))
        if args.command == "match":
            return asyncio.run(_match(args, topics))
        if args.command == "watch":
            return asyncio.run(_watch(args, topics))
        if args.command == "lan":
            return _lan(args)
        if args.command == "broker-config":
            return _broker_config(args, topics)
        if args.command == "play":
            from client import play_cli

            return play_cli.run(args, topics)
        if args.command == "latency":
            from client import latency_cli

            return latency_cli.run(args, topics)
        if args.command == "load":
            from client import load

            return load.run(args, topics)
        if args.command == "verify":
            from client import verify_cli

            return verify_cli.run(args)
        if args.command == "replay":
            from client import replay_cli

            return replay_cli.run(args)
        if args.command == "cluster":
            from client import cluster_cli

            return cluster_cli.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `blink watch ... | head`): nothing to report
        return 0
    except UserError as exc:
        print(f"blink {args.command}: {exc}", file=sys.stderr)
        return exc.status
    parser.error(f"unknown command {args.command}")



def _stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets (where the loop can take signal handlers), so a relay
    stops in order and says so on its status topic."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    return stop

LOGIN_HINT = ("(the relay's: mqtt://relay:SECRET@HOST:PORT as `blink broker-config` prints it, or --password-file "
              "DIR/relay-password for a `blink cluster up` cluster)")


def _friendly(exc: BaseException) -> UserError:
    from mqttkit import PortInUse

    if isinstance(exc, PortInUse):
        return UserError(str(exc))
    if isinstance(exc, (ConnectionError, OSError)):
        return UserError(f"network problem: {exc}")
    from mqttkit.connection import ConnectRefused, MqttError  # the relay's own connection

    if isinstance(exc, ConnectRefused) and exc.rc in (4, 5):
        return UserError(f"the MQTT broker refused the login ({exc}): check the user and password in the URL "
                         + LOGIN_HINT)
    if isinstance(exc, MqttError):
        return UserError(f"cannot reach the MQTT broker: {exc}")
    try:
        import aiomqtt

        rc: Any = exc.rc if isinstance(exc, aiomqtt.MqttCodeError) else None
        if isinstance(exc, aiomqtt.MqttCodeError) and int(getattr(rc, "value", rc) or 0) in (4, 5, 134, 135):
            return UserError(f"the MQTT broker refused the login ({exc}): check the user and password in the URL "
                             + LOGIN_HINT)
        if isinstance(exc, aiomqtt.MqttError):
            return UserError(f"cannot reach the MQTT broker: {exc}")
    except ImportError:
        pass
    return UserError(f"{type(exc).__name__}: {exc}")


def _with_password(urls: str, user: str, password: str) -> str:
    """Comma-separated URLs with ``user:password@`` added to each that has no password (a user name
    already in a URL is kept)."""
    out = []
    for url in urls.split(","):
        url = url.strip()
        scheme, rest = url.split("://", 1) if "://" in url else ("", url)
        userinfo, at, hostport = rest.rpartition("@")
        if at and ":" in userinfo:
            out.append(url)  # it has its own password
            continue
        name = userinfo if at else user
        out.append(f"{scheme + '://' if scheme else ''}{name}:{password}@{hostport}")
    return ",".join(out)


def _apply_password_file(args: argparse.Namespace) -> None:
    """``--password-file``: the relay's credentials into its --broker and --cluster URLs (in memory only)."""
    if not args.password_file:
        return
    if not args.broker:
        raise UsageError("--password-file is for a broker given with --broker (the embedded broker makes its own "
                         "relay secret)")
    from client.cluster_cli import ClusterError, read_password
    from mqttkit import RELAY_USER

    try:
        password = read_password(args.password_file)
    except ClusterError as exc:
        raise UserError(str(exc)) from exc
    args.broker = _with_password(args.broker, RELAY_USER, password)
    if args.cluster:
        args.cluster = _with_password(args.cluster, RELAY_USER, password)


async def _say_resynced(relay: Any) -> None:
    """After a recovery: one line once every match's snapshot and views have been republished
    (requests are served meanwhile; scripts such as bench/restart_bench.py time it)."""
    await relay.resynced.wait()
    print(f"blink relay: every match resynced ({relay.resync_matches} still open) {relay.resync_s:.2f} s "
          "after coming online", flush=True)


async def _serve(args: argparse.Namespace, topics: Topics) -> int:
    _apply_password_file(args)
    if args.cluster or args.shards or args.shards_total or args.lease_ttl is not None:
        return await _serve_cluster(args, topics)
    args.relay_id = args.relay_id or "relay-0"
    if args.broker and "," in args.broker:
        raise UsageError("several --broker URLs are for relays of a cluster (--cluster or --shards); give one")
    from relay.local import JournalError, LocalServer, RelayConfig, default_data_dir

    config = RelayConfig(relay_id=args.relay_id, order=args.order, fair_cap_ns=int(args.fair_cap_ms * 1e6))
    if args.no_journal and args.data:
        raise UserError("--no-journal and --data exclude each other")
    data_dir = None if args.no_journal else (args.data or default_data_dir())
    host, port = args.host or ("0.0.0.0" if args.lan else "127.0.0.1"), args.port
    lan: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
    if args.interface and not args.lan:
        raise UsageError("--interface only goes with --lan")
    if args.lan and args.broker:
        raise UsageError("--lan hosts its own broker on this machine: leave out --broker")
    if args.lan and _loopback(host):
        raise UsageError(f"--host {host} is loopback: nobody else could reach it (leave out --host)")
    if args.lan:  # all interfaces, the next free port, advertised over multicast DNS (client/lan.py)
        from client import lan as lanmod

        try:
            port = lanmod.lan_port(host, port, args.interface, _warn)
        except lanmod.LanError as err:
            raise UserError(str(err)) from err
        lan = lanmod.lan_hosting(port, args.relay_id, host, args.interface, topics, _say, _warn)
    server = LocalServer(args.broker, args.seed, config, args.log, host=host,
                         port=None if args.broker else port, topics=topics,
                         max_payload=args.max_payload, data_dir=data_dir, durable=args.sync == "full")
    stop = _stop_on_signals()
    try:
        async with server, lan:
            where = f"embedded broker on {server.address.url}" if server.broker else f"broker {server.address.url}"
            print(f"blink relay '{args.relay_id}' ({args.order} order) running with {where}; Ctrl-C stops it.",
                  flush=True)
            # After the "running" line (scripts wait for it): where the journal is, what was recovered.
            assert server.relay is not None
            print(f"blink relay data (journal): {data_dir or 'none (--no-journal): matches live in memory only'}",
                  flush=True)
            resynced: asyncio.Task[None] | None = None
            if server.relay.recovered:
                print(f"blink relay: {server.relay.recovered}", flush=True)
                resynced = asyncio.create_task(_say_resynced(server.relay))
            relay_task = server._task
            assert relay_task is not None
            waiter = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({waiter, relay_task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if resynced is not None:
                resynced.cancel()
            if relay_task in done and not stop.is_set():
                exc = relay_task.exception()
                raise _friendly(exc) if exc else UserError("the relay stopped")
    except UserError:
        raise
    except JournalError as exc:
        raise UserError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - turned into one readable line
        raise _friendly(exc) from exc
    print("blink relay stopped.", flush=True)
    return 0


DEFAULT_SHARDS_TOTAL = 8


def _urls(text: str) -> str:
    """One broker URL, or several comma-separated (each checked)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"an empty URL in {text!r}")
    for p in parts:
        argtypes.url(p)
    return ",".join(parts)


async def _serve_cluster(args: argparse.Namespace, topics: Topics) -> int:
    """``blink serve --broker URL --cluster NATS_URL`` (or ``--shards LIST``): one of several relays."""
    from relay import local

    return await _run_cluster(args, topics, local)


async def _run_cluster(args: argparse.Namespace, topics: Topics, local: Any) -> int:
    if not args.broker:
        raise UsageError("--cluster and --shards serve a shared broker: give it with --broker MQTT_URL")
    if args.lan or args.interface or args.host:
        raise UsageError("--lan, --interface and --host are for the embedded broker, not for --cluster/--shards")
    if args.no_journal:
        raise UsageError("a relay of several keeps its shards in a journal (another relay takes them over from "
                         "it): leave out --no-journal")
    if args.seed is not None:
        raise UsageError("--seed is for a single relay: each shard draws its own seed when it is first served")
    if args.lease_ttl is not None and not args.cluster:
        raise UsageError("--lease-ttl is for leases in a cluster: it needs --cluster")
    total = args.shards_total or DEFAULT_SHARDS_TOTAL
    owned: list[str] | None = None
    if args.shards:
        owned = [x.strip() for x in args.shards.split(",") if x.strip()]
        bad = [x for x in owned if not (x.isdigit() and int(x) < total and str(int(x)) == x)]
        if bad or not owned:
            raise UsageError(f"--shards must list shard numbers from 0 to {total - 1} (--shards-total {total}), "
                             f"not {args.shards!r}")
        if len(set(owned)) != len(owned):
            raise UsageError(f"--shards names a shard twice: {args.shards!r}")
    elif not args.cluster:
        raise UsageError("--shards-total needs --cluster NATS_URL (or --shards LIST)")
    data_dir = args.data or (None if args.cluster else str(local.default_data_dir() / "shards"))
    if args.relay_id is None:
        args.relay_id = f"relay-{os.urandom(4).hex()}" if args.cluster else "relay-0"
    if not all(c.isalnum() or c in "-_" for c in args.relay_id) or not args.relay_id:
        raise UsageError(f"--relay-id must be letters, digits, '-' or '_', not {args.relay_id!r}")
    config = local.RelayConfig(relay_id=args.relay_id, order=args.order, fair_cap_ns=int(args.fair_cap_ms * 1e6))
    stop = _stop_on_signals()
    try:
        server = await local.cluster_server(args.broker, cluster_url=args.cluster, shards=owned, shards_total=total,
                                            data_dir=data_dir, topics=topics, config=config, log_path=args.log,
                                            max_payload=args.max_payload, durable=args.sync == "full",
                                            lease_ttl_s=args.lease_ttl, say=lambda line: _say(f"blink {line}"))
        async with server:
            how = f"cluster {local.public_nats(args.cluster)}" if args.cluster else f"shards {','.join(owned or [])}"
            print(f"blink relay '{args.relay_id}' ({args.order} order) running on broker "
                  f"{local.public_url(args.broker)}, {how} of {total}; Ctrl-C stops it.", flush=True)
            relay_task = server.task
            assert relay_task is not None
            waiter = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({waiter, relay_task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if relay_task in done and not stop.is_set():
                exc = relay_task.exception()
                if isinstance(exc, local.JournalError):
                    raise UserError(str(exc))
                raise _friendly(exc) if exc else UserError("the relay stopped")
    except UserError:
        raise
    except local.JournalError as exc:
        raise UserError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - turned into one readable line
        raise _friendly(exc) from exc
    print("blink relay stopped.", flush=True)
    return 0


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _say(line: str) -> None:
    print(line, flush=True)


def _warn(line: str) -> None:
    print(f"blink serve: {line}", file=sys.stderr, flush=True)


def _lan(args: argparse.Namespace) -> int:
    from client.lan import LanError, browse, table

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


async def _bot(args: argparse.Namespace, topics: Topics) -> int:
    from mqttkit import parse_url
    from client.bots import Bot
    from client.player import Player, RequestError

    from client import seats

    saved = None
    if args.rejoin is not None:
        try:
            saved = seats.load(args.rejoin or None, "bot")
        except seats.SeatFileError as exc:
            raise UserError(str(exc)) from None
    try:
        async with Player(parse_url(args.server), saved.name if saved else args.name, topics) as player:
            if saved is not None:
                code = await player.rejoin(saved.match, saved.token)
            elif args.match:
                code = await player.join(args.match.upper())
            elif args.create:
                code = await player.create(args.game, args.settings, seats=args.players)
            else:
                code = await player.quick(args.game, args.settings)
            print(f"{player.model.name} in match {code} (seat {player.model.seat})", flush=True)
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
            ms = player.model.match_state
            winner = ms.get("winner")
            names = ms.get("players", [])
            print(f"match over: winner {names[winner] if isinstance(winner, int) and winner < len(names) else 'none'}",
                  flush=True)
    except RequestError as exc:
        raise UserError(f"the relay refused: {exc}") from exc
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _friendly(exc) from exc
    return 0


async def _match(args: argparse.Namespace, topics: Topics) -> int:
    from relay.local import LocalServer, RelayConfig
    from client.matchrun import run_match, write_log
    from client.player import RequestError
    from protocol.rules import game_for

    game = game_for(args.game)
    try:
        game.check_settings(args.settings, args.bots)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"bad --settings: {exc}") from exc
    config = RelayConfig(order=args.order)
    try:
        from relay.local import JournalError, temporary_data_dir

        local_data = args.data or (temporary_data_dir() if not args.server else None)
        async with LocalServer(None, args.seed, config, topics=topics, relay=True, data_dir=local_data,
                               remove_data_dir=not args.data) if not args.server \
                else _Nothing(args.server) as server:
            result = await run_match(server.address, args.game, args.bots, args.settings, args.seed,
                                     args.reaction, args.timeout, topics)
    except RequestError as exc:
        raise UserError(f"the relay refused: {exc}") from exc
    except UserError:
        raise
    except JournalError as exc:
        raise UserError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001
        raise _friendly(exc) from exc
    if args.log:
        try:
            write_log(args.log, result.events)
        except OSError as exc:  # checked at the start; the folder may have gone since
            raise UserError(f"could not write --log {args.log}: {exc.strerror or exc}") from exc
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['game']} match {summary['match']}: {', '.join(summary['players'])}")
        for g in summary["games"]:
            print(f"  game {g['game'] + 1}: {'winner ' + str(g['winner']) if g['winner'] is not None else g['reason']}")
        print(f"winner: {summary['winner']}   accepted plays: {summary['accepted']}   "
              f"rejected: {summary['rejected'] or 0}   {summary['duration_s']} s")
    return 0


RELAY_STATUS_WAIT_S = 1.5  # retained status messages arrive at once; this is only the "none" case
WATCH_ANSWER_S = 5.0  # the relay answers a Resync at once; this is only a relay that does not answer
GAP_WAIT_S = 1.0  # an event missing this long is asked for again (Resync from it) ...
GAP_GIVE_UP_S = 3.0  # ... and after this long it is skipped, with a note on stderr


async def _relay_online(address: Any, topics: Topics) -> bool:
    """Is any relay online on this broker? Each relay keeps a retained ``RelayStatus`` on
    ``relay/<id>/status`` (its last will turns it offline), so a subscription answers at once."""
    import aiomqtt

    from client.net import new_client_id
    from protocol import messages as m
    from protocol.codec import DecodeError, decode

    async with aiomqtt.Client(address.host, address.port, identifier=new_client_id("wq"),
                              username=address.username, password=address.password) as client:
        await client.subscribe(topics.relay_status("+"), qos=0)
        try:
            async with asyncio.timeout(RELAY_STATUS_WAIT_S):
                async for message in client.messages:
                    try:
                        msg = decode(bytes(message.payload)) if isinstance(message.payload, (bytes, bytearray)) else None
                    except DecodeError:
                        continue
                    if isinstance(msg, m.RelayStatus) and msg.online:
                        return True
        except TimeoutError:
            pass
    return False


async def _watch(args: argparse.Namespace, topics: Topics) -> int:
    """Spectate a match from its beginning: ask the relay for its past events (``Resync`` with
    ``from_seq`` 1), then follow the live ones, printing each seq once and in order; end with the
    match's result."""
    import time

    from mqttkit import parse_url
    from client.player import Player
    from protocol import messages as m

    code = args.code.strip().upper()
    address = parse_url(args.server)
    try:
        if not await _relay_online(address, topics):
            raise UserError(f"no relay is online on {address.url} (start one with `blink serve --broker {address.url}`)")
        async with Player(address, "spectator", topics, ping_interval_s=0) as player:
            events: dict[int, m.Event] = {}
            latest: list[m.Snapshot] = []
            refused: list[m.RequestRejected] = []
            own = player.conn.on_message

            def tap(msg: Any, now_ns: int) -> None:  # sees every message, the re-sent past ones too
                if isinstance(msg, m.Event) and msg.match == code:
                    events.setdefault(msg.seq, msg)
                elif isinstance(msg, m.Snapshot) and msg.match == code:
                    latest.append(msg)
                elif isinstance(msg, m.RequestRejected):
                    refused.append(msg)
                own(msg, now_ns)

            player.conn.on_message = tap
            player.model.spectate(code)
            await player.conn.watch(code)  # subscribed before asking: no live event falls between
            await player.conn.request(m.Resync(code, from_seq=1))
            asked = time.monotonic()
            while not events and not refused:
                if time.monotonic() - asked > WATCH_ANSWER_S:
                    raise UserError(f"no answer from the relay about match {code} within {WATCH_ANSWER_S:g} s")
                await player.wait_change(0.25)
            if refused and not events:
                if refused[-1].code == "no_such_match":
                    raise UserError(f"no match {code} on this relay (a match ends when its players leave)")
                raise UserError(f"the relay refused: {refused[-1].code}: {refused[-1].detail}")
            # The past comes in one burst; give seq 1 a moment to arrive if a live event came first.
            while 1 not in events and time.monotonic() - asked < GAP_WAIT_S:
                await player.wait_change(0.1)
            first = 1 if 1 in events else min(events)
            if first > 1:
                print(f"blink watch: the relay no longer keeps events before seq {first}", file=sys.stderr)
            header = latest[-1] if latest else None
            game = header.game_name if header else events[first].data.get("game_name", "")
            players = f": {', '.join(header.players)}" if header and header.players else ""
            print(f"watching {game} match {code}{players}", file=sys.stderr, flush=True)
            return await _follow(args, player, code, events, latest, first)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _friendly(exc) from exc


def _broker_config(args: argparse.Namespace, topics: Topics) -> int:
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


async def _follow(args: argparse.Namespace, player: Any, code: str, events: dict[int, Any], latest: list[Any],
                  first: int) -> int:
    import time

    from client.matchrun import event_line
    from protocol import messages as m

    nxt, waiting_since = first, None
    while True:
        while nxt in events:
            ev = events.pop(nxt)
            nxt += 1
            waiting_since = None
            line = event_line(ev)
            if args.json:
                print(json.dumps(line), flush=True)
            else:
                rest = {k: v for k, v in line.items() if k not in ("seq", "ts", "type", "game", "match")}
                print(f"{ev.seq:6d}  game {ev.game}  {ev.type:18s} {json.dumps(rest)}", flush=True)
            known = max([*events, *(s.seq for s in latest[-1:])], default=0)
            if ev.type == "match_over" and known <= ev.seq:  # the end, not an earlier match before a rematch
                players = list(latest[-1].players) if latest else list(player.model.players)
                _print_result(args, ev.data, players)
                return 0
        if player.model.lost:
            raise UserError(f"lost the connection to the broker: {player.model.lost}")
        if events:  # a later event is here but not this one: ask again, then skip it
            now = time.monotonic()
            if waiting_since is None:
                waiting_since = now
            elif now - waiting_since > GAP_GIVE_UP_S:
                skip_to = min(events)
                print(f"blink watch: events {nxt} to {skip_to - 1} were lost", file=sys.stderr, flush=True)
                nxt, waiting_since = skip_to, None
                continue
            elif now - waiting_since > GAP_WAIT_S:
                await player.conn.request(m.Resync(code, from_seq=nxt))
        await player.wait_change(0.5)


def _print_result(args: argparse.Namespace, over: dict[str, Any], players: list[str]) -> None:
    """The match's result, one line: to stdout, or with --json to stderr (stdout stays the log)."""
    winners = [str(w) for w in over.get("winners") or ([over["winner"]] if over.get("winner") is not None else [])]
    wins = over.get("wins") or []
    score = ", ".join(f"{name} {w}" for name, w in zip(players, wins))
    who = ("winner " + winners[0]) if len(winners) == 1 else ("winners " + " and ".join(winners)) if winners else "no winner"
    line = f"match over: {who} ({over.get('reason', '?')}); games won: {score or '-'}"
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


class _Nothing:
    """Stands in for LocalServer when the user brings a server."""

    def __init__(self, url: str) -> None:
        from mqttkit import parse_url

        self.address = parse_url(url)

    async def __aenter__(self) -> _Nothing:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())
