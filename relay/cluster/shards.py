"""Which shard handles what: pure routing for several relays on one broker.

How this works
--------------
With ``total`` shards (named ``"0"`` .. ``str(total - 1)``) every match lives in exactly one shard,
and the shard is a level of every match topic, so a match's actions reach only its shard's owner
(relays subscribe to the action topics of the shards they own). Lobby requests all arrive on
``{prefix}/lobby/req/{client}``: NATS's MQTT has no shared subscriptions, so *every* relay
receives every request and each decides here, from the topic and the payload alone, which shard
handles it. Every relay computes the same answer, so exactly one owner handles each request:

- a match code names its shard: codes are 5 letters of ``CODE_ALPHABET`` read as a base-32
  number, and a code belongs to shard ``number % total`` (the judge makes and reads codes,
  ``relay/judge/codes.py``: the core draws codes of its own shard when ``total > 1``). Join, Resync, Rematch, Rejoin and a Leave that names
  its match go to the code's shard; a code that is not 5 alphabet letters hashes to a shard,
  whose core then answers ``no_such_match`` -- still exactly once;
- a quick match goes to the shard of its game and settings (normalised by the game's own
  ``check_settings``), so every player asking for the same thing is paired in one place;
- a leaderboard (``Ratings``) goes where the game's quick matches with its own settings play: each
  shard rates the matches it runs, and that one rates most of a game's;
- create, a challenge, pings, and anything undecodable or unknown go to the client's *home* shard (a hash of
  the client id), whose core answers (a pong, a match, a rejection with its reason);
- a ``Leave`` without a match (the client's MQTT last will) and a ``ProbeReply`` say nothing
  about their match: ``KNOWN`` means "every owned shard whose core knows this client" (the relay
  looks; the shard's journal records what its core was given, so replay stays exact).

Hashes are BLAKE2b (Python's ``hash`` is salted per process: relays would disagree). With
``total == 1`` everything is shard ``"0"``, and the core draws its codes from the whole code space.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Final

from protocol import messages as m
from protocol.codec import DecodeError, decode
from protocol.rules import canonical, game_for
from relay.judge import code_number

MAX_SHARDS: Final = 1024  # each shard still has ~32,000 codes (relay/judge/codes.py), plenty for the waiting and running matches
KNOWN: Final = "*"  # route: every owned shard whose core knows the client


def shard_names(total: int) -> list[str]:
    check_total(total)
    return [str(i) for i in range(total)]


def check_total(total: int) -> int:
    if isinstance(total, bool) or not isinstance(total, int) or not 1 <= total <= MAX_SHARDS:
        raise ValueError(f"the shard count must be a whole number from 1 to {MAX_SHARDS}, not {total!r}")
    return total


def _hash_shard(kind: str, text: str, total: int) -> str:
    digest = hashlib.blake2b(f"{kind}:{text}".encode("utf-8", "replace"), digest_size=8).digest()
    return str(int.from_bytes(digest, "big") % total)


def shard_of_code(code: str, total: int) -> str:
    if total == 1:
        return "0"
    code = code.upper()
    n = code_number(code)
    return str(n % total) if n is not None else _hash_shard("code", code[:64], total)


def home_shard(client: str, total: int) -> str:
    """Where a client's own requests go (create, ping): spread evenly, the same on every relay."""
    return "0" if total == 1 else _hash_shard("client", client, total)


def quick_key(game: str, settings: Mapping[str, object]) -> str:
    """What a quick match pairs on, normalised the way the core compares: the game's canonical name
    and its checked settings (the ``order`` and ``grace_s`` the core takes out first, kept as given)."""
    rest = dict(settings)
    order = rest.pop("order", None)
    grace = rest.pop("grace_s", None)
    name = canonical(game) if isinstance(game, str) else repr(game)
    try:
        rest = game_for(name).check_settings(rest, 2)
    except Exception:  # noqa: BLE001 - a bad request: its shard rejects it, routing just needs a key
        pass
    return json.dumps([name, rest, order, grace], sort_keys=True, default=repr)


def shard_of_quick(game: str, settings: Mapping[str, object], total: int) -> str:
    return "0" if total == 1 else _hash_shard("quick", quick_key(game, settings), total)


def route_request(client: str, payload: bytes, total: int) -> str:
    """The shard that handles the lobby request ``payload`` from ``client`` (or ``KNOWN``)."""
    if total == 1:
        return "0"
    try:
        msg = decode(payload)
    except DecodeError:
        return home_shard(client, total)
    return route_message(client, msg, total)


def route_message(client: str, msg: object, total: int) -> str:
    """The shard that handles the decoded lobby request ``msg`` from ``client`` (or ``KNOWN``)."""
    if isinstance(msg, (m.JoinMatch, m.Resync, m.Rematch, m.Rejoin)):
        return shard_of_code(msg.match, total)
    if isinstance(msg, m.Leave):
        return shard_of_code(msg.match, total) if msg.match else KNOWN
    if isinstance(msg, m.ProbeReply):
        return KNOWN
    if isinstance(msg, m.QuickMatch):
        return shard_of_quick(msg.game, msg.settings, total)
    if isinstance(msg, m.Ratings):  # a shard rates its own matches: ask where a game's quick matches play
        return shard_of_quick(msg.game, {}, total)
    return home_shard(client, total)  # CreateMatch, Ping, and anything the core will refuse


def shard_of_act_topic(topic: str, prefix: str) -> str | None:
    """The shard level of ``{prefix}/m/{shard}/{match}/act/{client}``, or None."""
    head = f"{prefix}/m/"
    if not topic.startswith(head):
        return None
    shard, _, rest = topic[len(head):].partition("/")
    return shard if shard and rest else None


__all__ = ["KNOWN", "MAX_SHARDS", "check_total", "home_shard", "quick_key", "route_message", "route_request",
           "shard_names", "shard_of_act_topic", "shard_of_code", "shard_of_quick"]
