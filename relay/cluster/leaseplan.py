"""Which shards a relay should hold, renew, release or take: the lease logic of ``relay.cluster.leases`` as
pure functions of what the bucket shows and the time (an argument), tested without NATS.

How this works
--------------
Each tick the lease shell reads the bucket into a ``View`` (the owner of each present shard key, the
live members, their pinned shards and when each registered) and calls ``decide`` with what this
relay holds; the ``Plan`` says which shards to stop serving, renew, release and acquire.

- **Keep or lose.** A held shard is lost (stop serving at once) when the bucket no longer names this
  relay as its owner, or when its last successful renewal was *sent* ``ttl * GIVE_UP_AT`` ago -- well
  before the entry can expire on the server and another relay can take it. A renewal is due
  ``renew_after(ttl)`` after the last one was sent.
- **Balance.** Shards pinned by a live member are its alone; the others are shared by the unpinned
  members, each aiming at ceil(shards/members): a relay below that takes free shards (in an order
  hashed from its id, ``preference``, so two relays starting together prefer different shards), one
  above it, or above the floor while some member is below the floor, releases one shard per tick; it
  does not take back a shard it released or lost for ``cooldown_s(ttl)``, so another relay gets it.
- **Leftovers.** An entry naming this relay for a shard it does not hold (``leftovers``: its deletion
  failed, or a renewal queued while the cluster stalled was stored after the relay had given the
  shard up) keeps every other relay off the shard until it expires, up to a ttl after the stall.
  Only its owner can tell it is a leftover, so the owner treats it as free: it takes it back (a new
  tenure, written only if the entry is still exactly that one) or, not wanting it, deletes it.
- **Dead members.** ``without_dead`` frees the shards of relays found dead (the shell's liveness
  probes): each is taken only if its entry still holds the dead relay's revision.
- **Pins.** ``pin_conflict`` refuses a relay whose pins another live relay, registered earlier,
  already holds.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from relay import RelayError


class LeaseError(RelayError):
    """Leases cannot be used as configured; one line for a person."""


RENEW_EVERY_S = 1.0  # renew this long after the last successful renewal was sent ...
RENEW_AT = 1 / 3  # ... or after this fraction of the ttl, if that is sooner (a ttl under 3 s)
GIVE_UP_AT = 1 / 2  # of the ttl: no successful renewal for that long -> stop serving
COOLDOWN_TTLS = 2.0
COOLDOWN_MAX_S = 8.0  # whatever the ttl, a lost shard is not shunned for longer (others may be gone too)


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A shard this relay holds: its tenure's fence, the newest revision, when the last renewal was sent."""

    fence: int
    revision: int
    renewed_at: float


@dataclass(frozen=True, slots=True)
class Owner:
    relay: str
    revision: int


@dataclass(frozen=True, slots=True)
class View:
    """What the bucket says now: the owner of each present shard key; live members and their pins."""

    owners: Mapping[str, Owner] = field(default_factory=dict)
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)
    since: Mapping[str, int] = field(default_factory=dict)  # member -> revision it registered at


@dataclass(slots=True)
class Plan:
    lose: list[str] = field(default_factory=list)  # stop serving now: the lease is gone or too late
    renew: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    acquire: list[str] = field(default_factory=list)  # some may be this relay's own leftovers (``leftovers``)
    clear: list[str] = field(default_factory=list)  # leftovers it does not take back: delete them for the others


def renew_after(ttl: float) -> float:
    """How long after the last successful renewal was sent the next one is due."""
    return min(RENEW_EVERY_S, ttl * RENEW_AT)


def cooldown_s(ttl: float) -> float:
    """How long a relay leaves a shard it released or lost to the others."""
    return min(COOLDOWN_MAX_S, ttl * COOLDOWN_TTLS)


def preference(me: str, shard: str) -> int:
    """Rendezvous hashing: each relay ranks the shards differently, so simultaneous starts collide less."""
    return int.from_bytes(hashlib.blake2b(f"{me}/{shard}".encode(), digest_size=8).digest(), "big")


def leftovers(me: str, held: Mapping[str, HeldLease], view: View) -> dict[str, Owner]:
    """The entries naming this relay for shards it does not hold: given up or released while their
    deletion failed, or renewed by a write that landed late (the cluster stalled, the relay gave the
    shard up, then the queued renewal was stored). Nobody else may take such an entry before it
    expires -- its owner is alive -- so this relay takes it back or deletes it."""
    return {s: o for s, o in view.owners.items() if o.relay == me and s not in held}


def decide(now: float, me: str, shards: Sequence[str], pinned: frozenset[str], held: Mapping[str, HeldLease],
           view: View, ttl: float, cooldown: Mapping[str, float] | None = None) -> Plan:
    """What to do this tick. ``held`` is what this relay holds; ``view`` what the bucket showed at the
    start of the tick (after this relay's previous actions); ``cooldown``: shard -> time until which this
    relay does not take it back. This relay's ``leftovers`` count as free for it (once cooled down);
    those it does not take are in ``clear``."""
    plan = Plan()
    cooldown = cooldown or {}
    own = leftovers(me, held, view)
    view = View({s: o for s, o in view.owners.items() if s not in own}, view.members, view.since)
    keep: dict[str, HeldLease] = {}
    for shard, h in held.items():
        owner = view.owners.get(shard)
        if now - h.renewed_at >= ttl * GIVE_UP_AT or owner is None or owner.relay != me:
            plan.lose.append(shard)
        else:
            keep[shard] = h
            if now - h.renewed_at >= renew_after(ttl):
                plan.renew.append(shard)
    members = dict(view.members)
    members[me] = pinned
    others_pins = set().union(*(p for m, p in members.items() if m != me)) if len(members) > 1 else set()
    if pinned:
        for shard in sorted(pinned, key=lambda s: preference(me, s)):
            if shard not in keep and shard not in view.owners:
                plan.acquire.append(shard)
        plan.clear = _unclaimed(own, plan, cooldown, now)
        return plan
    shared = [s for s in shards if s not in others_pins]
    sharers = sorted(m for m, p in members.items() if not p)
    for shard in sorted(keep, key=lambda s: preference(me, s)):
        if shard in others_pins:  # a live relay is forced onto it: hand it over
            plan.release.append(shard)
    mine = [s for s in keep if s in shared]
    hi = math.ceil(len(shared) / len(sharers)) if shared else 0
    lo = len(shared) // len(sharers) if shared else 0
    counts = {m: 0 for m in sharers}
    for shard, owner in view.owners.items():
        if owner.relay in counts and shard in shared:
            counts[owner.relay] += 1
    counts[me] = len(mine)
    if len(mine) < hi:
        free = [s for s in shared if s not in view.owners and s not in keep and s not in plan.lose
                and cooldown.get(s, -math.inf) <= now]  # not one it is losing now: it cools down first
        free.sort(key=lambda s: preference(me, s))
        plan.acquire.extend(free[:hi - len(mine)])
    elif not plan.release and (len(mine) > hi or (len(mine) > lo and any(c < lo for m, c in counts.items() if m != me))):
        plan.release.append(min(mine, key=lambda s: preference(me, s)))
    plan.clear = _unclaimed(own, plan, cooldown, now)
    return plan


def _unclaimed(own: Mapping[str, Owner], plan: Plan, cooldown: Mapping[str, float], now: float) -> list[str]:
    """The leftovers this relay does not take back, once cooled down (before that, the deletion queued
    when it stopped serving the shard may still be on its way)."""
    return sorted(s for s in own if s not in plan.acquire and cooldown.get(s, -math.inf) <= now)


def without_dead(view: View, dead: Iterable[str]) -> tuple[View, dict[str, Owner]]:
    """The view with the dead members gone and their shards free, and those shards' entries (each is
    taken only if it still holds that revision)."""
    gone = set(dead)
    if not gone:
        return view, {}
    taken = {s: o for s, o in view.owners.items() if o.relay in gone}
    owners = {s: o for s, o in view.owners.items() if s not in taken}
    members = {m: p for m, p in view.members.items() if m not in gone}
    since = {m: v for m, v in view.since.items() if m not in gone}
    return View(owners, members, since), taken


def pin_conflict(me: str, pinned: frozenset[str], view: View, my_since: int | None) -> str | None:
    """Why this relay may not run with these pins (another live relay, registered earlier, pins one of
    them), or None. Two relays starting together: the later registration is the one refused."""
    for other, pins in sorted(view.members.items()):
        if other == me or not (pins & pinned):
            continue
        theirs = view.since.get(other, 0)
        if my_since is None or theirs < my_since:
            both = ", ".join(sorted(pins & pinned, key=_shard_key))
            return f"shard{'s' if len(pins & pinned) > 1 else ''} {both} already pinned by relay {other}"
    return None


def _shard_key(s: str) -> tuple[int, str]:
    return (int(s), s) if s.isdigit() else (1 << 30, s)


def parse_shards(text: str, count: int) -> frozenset[str]:
    """``--shards 0,1`` -> {"0", "1"}, each checked against the shard count."""
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) >= count:
            raise LeaseError(f"--shards: {part!r} is not a shard (shards are 0..{count - 1})")
        out.add(str(int(part)))
    if not out:
        raise LeaseError("--shards: no shard given")
    return frozenset(out)
