"""The ``blink`` command: one parser, one module per sub-command.

How this works
--------------
``COMMANDS`` names each sub-command's module in this package. Every such module has
``register(sub)``, which adds its parser and options, and ``run(args, topics) -> int``, which
checks what argparse cannot and runs the command. A module's top level imports only what
registering needs (argparse, the argument types, the game names): the work -- the relay, the
network, the window, the tools -- is imported inside ``run``, so importing this package is cheap,
the headless commands never import pyglet, and a restart of ``blink serve`` does not pay for the
other commands. When the command word is known before parsing (``command_of``), only its module
is registered; ``blink --help`` and an unsure word build the whole parser.

Every failure a user can cause ends with one readable line on stderr and exit status 2 (bad input
on the command line, found before anything starts) or 1 (a failure at run time), never a
traceback (the convention is in ``client/cli/args.py``; the errors in ``client/cli/failures.py``).

Others use ``main`` (the ``blink`` script), ``build_parser``, ``command_of`` and ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Protocol, Sequence, cast

from client.cli import args as argtypes
from client.cli.failures import UserError
from protocol.topics import DEFAULT_PREFIX, Topics

__all__ = ["COMMANDS", "build_parser", "command_of", "main"]

#: Each command word and its module in this package, in the order ``blink --help`` lists them.
COMMANDS: dict[str, str] = {
    "serve": "serve", "lan": "lan", "bot": "bot", "match": "match", "watch": "watch",
    "broker-config": "broker_config", "play": "play", "latency": "latency", "load": "load",
    "verify": "verify", "replay": "replay", "settings": "settings", "ratings": "ratings", "cluster": "cluster",
}


class Command(Protocol):
    """What a sub-command module offers."""

    def register(self, sub: argtypes.Subcommands) -> None: ...

    def run(self, args: argparse.Namespace, topics: Topics) -> int: ...


def command_module(command: str) -> Command:
    return cast(Command, importlib.import_module(f"client.cli.{COMMANDS[command]}"))


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


def version() -> str:
    """The installed distribution's version (pyproject.toml's), or "unknown" when run from a tree
    that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("blink-race")
    except PackageNotFoundError:
        return "unknown"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given one of ``COMMANDS``, only that command's options are registered."""
    p = argtypes.OneLineParser(prog="blink", description="Race BLINK and play dice games over MQTT.")
    p.add_argument("--prefix", type=argtypes.topic_prefix, default=DEFAULT_PREFIX,
                   help=f"topic prefix, the same as the relay's (default {DEFAULT_PREFIX})")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    p.add_argument("--version", action="version", version=f"blink {version()}", help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for word in ([command] if command in COMMANDS else COMMANDS):
        command_module(word).register(sub)
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
        # aiomqtt sets its "mqtt" logger to WARNING when it is first imported, after this: a filter stays.
        logging.getLogger("mqtt").addFilter(lambda record: record.levelno >= logging.CRITICAL)
        if args.command == "play":
            # The window says "reconnecting…" itself; a lost local relay is one line at the end.
            logging.getLogger("blink.net").setLevel(logging.CRITICAL)
    if args.command is None:
        parser.print_help()
        return argtypes.USAGE
    if args.command not in COMMANDS:
        parser.error(f"unknown command {args.command}")
    if getattr(args, "ca", None) is not None or getattr(args, "insecure", False):
        from mqttkit import TLSProblem, check_trust

        if args.ca is not None and args.insecure:
            print(f"blink {args.command}: --ca and --insecure exclude each other (--insecure checks no certificate, "
                  "against any CA)", file=sys.stderr)
            return argtypes.USAGE
        try:
            check_trust(argtypes.trust(args))
        except TLSProblem as exc:
            print(f"blink {args.command}: --ca: {exc}", file=sys.stderr)
            return argtypes.USAGE
        if args.insecure and argtypes.speaks_tls(args):
            print(f"blink {args.command}: warning: --insecure: the broker's certificate and host name are not "
                  "checked; anyone on the path can read and change this connection", file=sys.stderr)
    topics = Topics(prefix=args.prefix)
    try:
        return command_module(args.command).run(args, topics)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `blink watch ... | head`): nothing to report
        return 0
    except UserError as exc:
        print(f"blink {args.command}: {exc}", file=sys.stderr)
        return exc.status
