"""``blink watch CODE``: spectate a running match, printing its public events in order.

How this works
--------------
First a retained ``RelayStatus`` says whether any relay is online (an answer at once, or none:
``client/cli/preflight.py``).
Then, subscribed to the match's events, the spectator asks for the past ones (``Resync`` from
seq 1) and prints each seq once and in order, past and live alike; a missing seq is asked for
again after ``GAP_WAIT_S`` and skipped, with a note on stderr, after ``GAP_GIVE_UP_S``. The
match's result ends it (stdout, or with ``--json`` stderr, since stdout is then the log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from client.cli import args as argtypes
from client.cli.failures import UserError, friendly

if TYPE_CHECKING:
    from protocol import messages as m
    from protocol.match import MatchOver
    from protocol.topics import Topics
    from client.player import Player


def register(sub: argtypes.Subcommands) -> None:
    w = sub.add_parser("watch", help="spectate a running match by code (prints its public events)")
    w.add_argument("code", help="the match code")
    argtypes.add_tls_trust(w)
    w.add_argument("--server", type=argtypes.url, required=True, help="MQTT broker the relay uses")
    w.add_argument("--json", action="store_true", help="print each event as a JSON line (the --log format)")


def run(args: argparse.Namespace, topics: Topics) -> int:
    return asyncio.run(_watch(args, topics))


WATCH_ANSWER_S = 5.0  # the relay answers a Resync at once; this is only a relay that does not answer
GAP_WAIT_S = 1.0  # an event missing this long is asked for again (Resync from it) ...
GAP_GIVE_UP_S = 3.0  # ... and after this long it is skipped, with a note on stderr


async def _watch(args: argparse.Namespace, topics: Topics) -> int:
    """Spectate a match from its beginning: ask the relay for its past events (``Resync`` with
    ``from_seq`` 1), then follow the live ones, printing each seq once and in order; end with the
    match's result."""
    import time

    from mqttkit import parse_url
    from client.cli.preflight import require_relay
    from client.player import Player
    from protocol import messages as m
    from protocol.match import MATCH_EVENTS, MatchCreated

    code = args.code.strip().upper()
    address = parse_url(args.server, argtypes.trust(args))
    await require_relay(address, topics)
    try:
        async with Player(address, "spectator", topics, ping_interval_s=0) as player:
            events: dict[int, m.Event] = {}
            latest: list[m.Snapshot] = []
            refused: list[m.RequestRejected] = []
            own = player.conn.on_message

            def tap(msg: object, now_ns: int) -> None:  # sees every message, the re-sent past ones too
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
            created = MATCH_EVENTS.read(events[first])
            game = header.game if header else created.game_name if isinstance(created, MatchCreated) else ""
            players = f": {', '.join(header.players)}" if header and header.players else ""
            print(f"watching {game} match {code}{players}", file=sys.stderr, flush=True)
            return await _follow(args, player, code, events, latest, first)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise friendly(exc) from exc


async def _follow(args: argparse.Namespace, player: Player, code: str, events: dict[int, m.Event], latest: list[m.Snapshot],
                  first: int) -> int:
    import time

    from client.matchrun import event_line
    from protocol import messages as m
    from protocol.match import MATCH_EVENTS, MatchOver

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
                print(f"{ev.seq:6d}  game {ev.game_index}  {ev.type:18s} {json.dumps(rest)}", flush=True)
            known = max([*events, *(s.seq for s in latest[-1:])], default=0)
            over = MATCH_EVENTS.read(ev)
            if isinstance(over, MatchOver) and known <= ev.seq:  # the end, not an earlier match before a rematch
                players = list(latest[-1].players) if latest else list(player.model.players)
                _print_result(args, over, players)
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


def _print_result(args: argparse.Namespace, over: MatchOver, players: list[str]) -> None:
    """The match's result, one line: to stdout, or with --json to stderr (stdout stays the log)."""

    def name(seat: int) -> str:
        return players[seat] if 0 <= seat < len(players) else str(seat)

    winners = ([name(w) for w in over.winners] if over.winners
               else [name(over.winner)] if over.winner is not None else [])
    score = ", ".join(f"{player} {w}" for player, w in zip(players, over.wins))
    who = ("winner " + winners[0]) if len(winners) == 1 else ("winners " + " and ".join(winners)) if winners else "no winner"
    line = f"match over: {who} ({over.reason}); games won: {score or '-'}"
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)
