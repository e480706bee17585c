"""``blink verify LOG``: check a recorded match against its revealed seeds and the rules.

How this works
--------------
A thin shell around the pure ``protocol.verify``: read the file, parse it, verify it, print one
line. Exit status 0 and a summary (matches, games, events checked) for a true log; 1 and the first
false line (its line number, seq, type and what is wrong) otherwise; 2 and one line on stderr for a
file that cannot be read or is not an event log at all. Never a traceback, never a window.

A relay's log of matches played in fair order carries every decision (``protocol/fairlog.py``):
each is recomputed as part of the check. ``--order arrival`` then re-judges every race those
decisions hold as arrival order would have, and lists the races whose winner would flip (``--json``:
one JSON list of ``{match, seq, pile, fair_winner, arrival_winner}``); a log with no decision to
re-judge is exit status 2, a false one 1 (its first false line, no re-judging).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes

if TYPE_CHECKING:
    from protocol.topics import Topics
    from protocol.verify import Record


def register(sub: argtypes.Subcommands) -> None:
    p = sub.add_parser(
        "verify", help="check a match's event log against its revealed seeds and the rules",
        description="Re-derive every shuffle and roll of a match from the seeds its log reveals, check each seed "
                    "against the commitment published before its game, check every event against the rules and, in "
                    "a relay's log of fair-order matches, recompute every fair-order decision. "
                    "Accepts the log of `blink match --log`, `blink watch --json` or `blink serve --log`. "
                    "Exit status: 0 true, 1 false (the first false line is named), 2 not a readable event log.")
    p.add_argument("log", metavar="LOG", help="the event log (JSON Lines)")
    p.add_argument("--order", choices=("arrival",), default=None,
                   help="re-judge a fair-order relay log's races in arrival order: list the races whose winner "
                        "would flip")
    p.add_argument("--json", action="store_true", help="with --order: print the flips as one JSON list")


def run(args: argparse.Namespace, topics: Topics) -> int:
    import json

    from protocol.fairlog import arrival_flips
    from protocol.rules import game_for
    from protocol.verify import NotALog, parse_log, verify

    from client.cli.failures import read_lines

    path = args.log
    lines = read_lines(path)
    if isinstance(lines, str):
        print(f"blink verify: cannot read {path}: {lines}", file=sys.stderr)
        return 2
    if args.json and args.order is None:
        print("blink verify: --json goes with --order arrival (the check itself prints one line)", file=sys.stderr)
        return 2
    decisions: list[Record] = []
    try:
        records = parse_log(lines, decisions)
    except NotALog as exc:
        print(f"blink verify: {path}: {exc}", file=sys.stderr)
        return 2
    if args.order is not None and not decisions:
        print(f"blink verify: {path}: no fair-order decisions to re-judge (a relay's log, blink serve --log, of "
              f"matches played in fair order has them)", file=sys.stderr)
        return 2
    try:
        report = verify(records, relay_lines=decisions)
    except RecursionError:  # absurdly nested JSON values; nothing else in verify raises
        print(f"blink verify: {path}: a record is nested too deeply to check", file=sys.stderr)
        return 2
    if args.order is None or not report.ok:
        print(f"{path}: {report.summary()}", file=sys.stdout if args.order is None else sys.stderr)
        return 0 if report.ok else 1
    events = [r for r in records if "__bad__" not in r.data and "__cut__" not in r.data]
    races, flips = arrival_flips(events, decisions, lambda name: game_for(name).stale_code)
    if args.json:
        print(json.dumps(flips))
        return 0
    for f in flips:
        print(f"match {f['match']} seq {f['seq']} pile {f['pile']}: fair order gave it to {f['fair_winner']}, "
              f"arrival order would give it to {f['arrival_winner']}")
    print(f"{path}: {races} race{'s' if races != 1 else ''} re-judged in arrival order, {len(flips)} would flip")
    return 0
