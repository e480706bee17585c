"""``blink verify LOG``: check a recorded match against its revealed seeds and the rules.

How this works
--------------
A thin shell around the pure ``protocol.verify``: read the file, parse it, verify it, print one
line. Exit status 0 and a summary (matches, games, events checked) for a true log; 1 and the first
false line (its line number, seq, type and what is wrong) otherwise; 2 and one line on stderr for a
file that cannot be read or is not an event log at all. Never a traceback, never a window.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.topics import Topics


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser(
        "verify", help="check a match's event log against its revealed seeds and the rules",
        description="Re-derive every shuffle and roll of a match from the seeds its log reveals, check each seed "
                    "against the commitment published before its game, and check every event against the rules. "
                    "Accepts the log of `blink match --log`, `blink watch --json` or `blink serve --log`. "
                    "Exit status: 0 true, 1 false (the first false line is named), 2 not a readable event log.")
    p.add_argument("log", metavar="LOG", help="the event log (JSON Lines)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    from protocol.verify import NotALog, parse_log, verify

    from client.cli.failures import read_lines

    path = args.log
    lines = read_lines(path)
    if isinstance(lines, str):
        print(f"blink verify: cannot read {path}: {lines}", file=sys.stderr)
        return 2
    try:
        records = parse_log(lines)
    except NotALog as exc:
        print(f"blink verify: {path}: {exc}", file=sys.stderr)
        return 2
    try:
        report = verify(records)
    except RecursionError:  # absurdly nested JSON values; nothing else in verify raises
        print(f"blink verify: {path}: a record is nested too deeply to check", file=sys.stderr)
        return 2
    print(f"{path}: {report.summary()}")
    return 0 if report.ok else 1
