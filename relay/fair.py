"""Fair ordering: a race for a pile is won by the player who reacted faster, not by the faster network.

How this works
--------------
Each play names the ``seq`` of the state its player was looking at and carries the player's
reaction time ``R`` (from their client receiving that seq to sending the play, both on the
client's own clock, so clock offset cancels). The relay knows when it published that seq,
``pub(seq)``, on its own clock. So the play's *virtual send time*

    V = pub(seq) + R

is when it would have been sent had the network taken no time at all. Two plays that race for
the same pile top (same pile, same top card as of the state each player saw) are judged in order
of V, the smaller first; equal V is broken by a seeded coin that is written to the log.

Holding. A play from p arriving at A can only be beaten by a rival q whose play has a smaller V;
such a play arrives at V_q + rtt_q at the latest, so the relay holds p's play until
``V_p + rtt_q + margin`` for every rival q that could still make one -- and confirms at once when
that time has passed, when every rival has already played for this pile top, or when no rival
holds a card that matches it. It never holds longer than ``fair_cap_ns`` after arrival.

Measuring, not trusting. ``rtt_q`` is the relay's own measurement, the last 8 round trips, taken
two ways. A play is one: the relay published the seq it names at ``pub(seq)`` and the play arrived
at A, its player's reaction R in between, so ``A - pub(seq) - R`` is the way down and back
(``submit``, once the play's own claim is bounded). A player with no play in the last 0.5 s is
probed (``Probe`` -> ``ProbeReply``; ``probe_wanted``) -- before the first play, between games, while
it waits. A play's sample rests on its claimed R, and trusts it no more than a probe trusts its
reply: a longer claim shortens the sample, which loosens only the player's own bound and shortens
the holds its rivals get (its own loss); a shorter one lengthens it, as a reply held back would, and
the cap bounds what that makes rivals wait. A hold waits for the
rival's *highest* recent one: a play slowed by jitter must still make it (waiting for the lowest
gave a race to the later reaction whenever jitter slowed the faster one by more than the margin).
A player's own claim is bounded with its *lowest* (the most it can have reacted). A claimed
reaction time is clamped: never below ``fair_floor_ns`` (no person reacts faster), and never above what the
relay's own timestamps allow (``A - pub(seq) - rtt_p``: the play cannot have been sent before
the player received the state). A client that lies gains nothing beyond the floor.

Which plays race is the game's business, not the scheduler's: the core computes each play's race
key with the game's ``RaceRule`` (BLINK: the pile and the top card its player saw) and tells the
scheduler, on every call, whether a seat could still send a play for a key (``Table.could_race``).

A pure scheduler: it knows nothing of the core. The core ``submit``s plays, asks ``next_batch`` for
the plays now due (in the order to judge them, with what the log says about their ordering) and
judges them itself, asks again until nothing is due, and asks ``deadline`` when to call next (a
hold ending, or the next probe). Time comes in as ``now_ns``; the coin is a ``SeededChance``.

Auditable. Each released play comes with its decision (``Release.note``, written into its log
line): what its hold was planned from, the rivals considered, the cap, when and why it was judged
(``Why``), its batch's rivals and coin. The formulas live in ``protocol/fairlog.py``
(``used_reaction``, ``planned_release``), which ``blink verify`` uses to recompute every decision.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from protocol import messages as m
from protocol.chance import SeededChance, derive
from protocol.fairlog import planned_release, used_reaction
from protocol.rules.base import RaceKey
from relay.model import Decode, Encode

PROBE_INTERVAL_NS = 500_000_000
RTT_SAMPLES = 8
MARGIN_NS = 3_000_000  # scheduling jitter allowance on top of a rival's measured round trip
UNKNOWN_RTT_NS = 50_000_000  # assumed for a player not measured yet (the cap still bounds the hold)


@dataclass(frozen=True)
class Table:
    """What the scheduler needs to know about one match, as it is at the moment of a call."""

    code: str
    clients: tuple[str, ...]  # by seat
    #: Could ``seat`` still send a play for race ``key``? (the game's race rule on the current state)
    could_race: Callable[[int, RaceKey], bool]
    coin_seed: int  # the match's seed: tie-break coins are drawn from a chance derived from it
    seq: int = 0  # the match's latest seq: the state a submitted play's hold was planned against


#: Why a held play was judged when it was (its decision line's ``why``).
Why = Literal["hold_over", "rivals_played", "no_rival", "ahead"]


@dataclass
class Held:
    seat: int
    client: str
    act: m.Act
    action: object  # the game's action, as its rules decoded it
    arrival_ns: int
    virtual_ns: int
    reaction_ns: int
    claimed_ns: int | None
    key: RaceKey  # the race it is in: e.g. (pile, top card the player saw)
    release_ns: int
    # What the hold was planned from (its decision line): the publication time of the seq seen, the
    # player's own round trip as measured then, the rivals that could race (seat, round trip used,
    # measured or assumed), the match's seq then, and whether the cap cut the hold short.
    published_ns: int = 0
    rtt_ns: int | None = None
    considered: tuple[tuple[int, int, bool], ...] = ()
    state_seq: int = 0
    capped: bool = False

    def to_record(self, enc: Encode) -> list[object]:
        """The held play as plain data, its act, action and race key through ``enc`` (in this order)."""
        return [self.seat, self.client, enc(self.act), enc(self.action), self.arrival_ns, self.virtual_ns,
                self.reaction_ns, self.claimed_ns, enc(self.key), self.release_ns, self.published_ns, self.rtt_ns,
                [list(c) for c in self.considered], self.state_seq, self.capped]

    @classmethod
    def from_record(cls, v: Sequence[Any], dec: Decode) -> Held:
        """The held play ``to_record`` wrote (a record of ten items has no decision's inputs: their defaults)."""
        return cls(seat=v[0], client=v[1], act=dec(v[2]), action=dec(v[3]), arrival_ns=v[4], virtual_ns=v[5],
                   reaction_ns=v[6], claimed_ns=v[7], key=dec(v[8]), release_ns=v[9],
                   **({} if len(v) < 15 else {"published_ns": v[10], "rtt_ns": v[11],
                                              "considered": tuple((s, r, k) for s, r, k in v[12]),
                                              "state_seq": v[13], "capped": v[14]}))


@dataclass(frozen=True)
class Release:
    """A held play that is due: judge it now. ``note`` goes into its log record."""

    play: Held
    hold_ns: int
    note: dict[str, object]


class FairOrder:
    def __init__(self, cap_ns: int, floor_ns: int, probe_interval_ns: int = PROBE_INTERVAL_NS) -> None:
        self.cap_ns = cap_ns
        self.floor_ns = floor_ns
        self.probe_interval_ns = probe_interval_ns
        self.rtt: dict[str, deque[int]] = {}
        self.sampled: dict[str, int] = {}  # client -> when its latest round trip was taken (relay time)
        self.last_probe_ns: int | None = None  # when the players were last probed
        self.published: dict[str, dict[int, int]] = {}  # match -> seq -> relay time it was published
        self.held: dict[str, list[Held]] = {}
        self.coins: dict[str, SeededChance] = {}

    # -- measurements ------------------------------------------------------------------------

    def note_published(self, code: str, seq: int, now_ns: int, every: bool = True) -> None:
        """When ``seq`` of match ``code`` went out. ``every=False`` (a match in arrival order, whose
        plays are never timed from it): only the latest is kept, for the relay's latest time."""
        book = self.published.get(code)  # (not setdefault: it would build an empty map per event)
        if book is None:
            book = self.published[code] = {}
        elif not every:
            book.clear()
        book[seq] = now_ns
        if len(book) > 4096:
            for k in sorted(book)[:2048]:
                del book[k]

    def on_probe_reply(self, client: str, sent_ns: int, now_ns: int) -> None:
        self._sample(client, now_ns - sent_ns, now_ns)

    def _sample(self, client: str, rtt_ns: int, now_ns: int) -> None:
        if not 0 <= rtt_ns <= 10_000_000_000:
            return  # not a probe of ours, a forged reply, a claim no network allows: ignore
        self.rtt.setdefault(client, deque(maxlen=RTT_SAMPLES)).append(rtt_ns)
        self.sampled[client] = now_ns

    def forget(self, client: str) -> None:
        """A client gone: its round trips with it."""
        self.rtt.pop(client, None)
        self.sampled.pop(client, None)

    def probe_wanted(self, client: str, now_ns: int) -> bool:
        """Probe this player now? Only if idle: no round trip (a play, a reply) within the interval."""
        last = self.sampled.get(client)
        return last is None or now_ns - last >= self.probe_interval_ns

    def rtt_of(self, client: str) -> int | None:
        """The lowest recent round trip: the fastest this player's own play can have come."""
        samples = self.rtt.get(client)
        return min(samples) if samples else None

    def rtt_slow_of(self, client: str) -> int | None:
        """The highest recent round trip: how long a rival's faster play may still take to come. The
        lowest would end a hold while a rival's play slowed by a little jitter (the network, a busy
        machine) is still on its way, and give that race to the later reaction."""
        samples = self.rtt.get(client)
        return max(samples) if samples else None

    def probe_due(self, now_ns: int) -> bool:
        """Is it time to probe every player of a fair match? If so, the probe counts as sent now:
        the caller sends ``Probe(sent_ns=now_ns)`` to them all."""
        if self.last_probe_ns is not None and now_ns - self.last_probe_ns < self.probe_interval_ns:
            return False
        self.last_probe_ns = now_ns
        return True

    def next_probe_ns(self) -> int:
        return 0 if self.last_probe_ns is None else self.last_probe_ns + self.probe_interval_ns

    # -- ordering ----------------------------------------------------------------------------

    def submit(self, table: Table, seat: int, act: m.Act, action: object, key: RaceKey, now_ns: int) -> None:
        """Hold a play for race ``key`` until no rival's play can beat it (see ``next_batch``)."""
        client = table.clients[seat]
        book = self.published.get(table.code)
        known = book.get(act.seq) if book is not None else None
        pub = now_ns if known is None else known
        rtt_p = self.rtt_of(client)
        claimed = act.reaction_ns
        reaction = used_reaction(claimed, self.floor_ns, now_ns, pub, rtt_p)
        virtual = pub + reaction
        considered: list[tuple[int, int, bool]] = []
        for other_seat, other in enumerate(table.clients):
            if other_seat == seat or not self._could_race(table, other_seat, key):
                continue
            rtt_q = self.rtt_slow_of(other)
            considered.append((other_seat, rtt_q if rtt_q is not None else UNKNOWN_RTT_NS, rtt_q is not None))
        release, capped = planned_release(now_ns, virtual, [r for _, r, _ in considered], MARGIN_NS, self.cap_ns)
        held = Held(seat, client, act, action, now_ns, virtual, reaction, claimed, key, release,
                    pub, rtt_p, tuple(considered), table.seq, capped)
        self.held.setdefault(table.code, []).append(held)
        if known is not None and claimed is not None:  # the play was a round trip too (after its own bound)
            self._sample(client, now_ns - known - claimed, now_ns)

    def holding(self, code: str) -> bool:
        return bool(self.held.get(code))

    def _could_race(self, table: Table, seat: int, key: RaceKey) -> bool:
        """Could ``seat`` still send a play for this race that beats one already held?"""
        if any(h.seat == seat and h.key == key for h in self.held.get(table.code, [])):
            return False  # it already has: both plays are here, nothing to wait for
        return table.could_race(seat, key)

    def deadline(self, code: str, probing: bool) -> int | None:
        """When to call again for this match: the first hold to end, or (``probing``: a fair match
        being played) the next probe."""
        held = self.held.get(code)
        times = [h.release_ns for h in held] if held else []
        if probing:
            times.append(self.next_probe_ns())
        return min(times) if times else None

    def next_batch(self, table: Table, now_ns: int) -> list[Release]:
        """The plays due now, in the order to judge them (empty: nothing is due). Judge them all,
        then ask again: judging changes what rivals could still play."""
        held = self.held.get(table.code)
        if not held:
            return []
        # A play is due when its hold has expired or every rival has already played for its race.
        why: dict[int, Why] = {}
        for h in held:
            if h.release_ns <= now_ns:
                why[id(h)] = "hold_over"
            elif not self._waiting_for_rival(table, h):
                played = {x.seat for x in held if x.key == h.key}
                why[id(h)] = "rivals_played" if all(s in played for s, _, _ in h.considered) else "no_rival"
        if not why:
            return []
        limit = max(h.virtual_ns for h in held if id(h) in why)
        batch = [h for h in held if h.virtual_ns <= limit]
        coins = {id(h): self._coin(table, h, batch) for h in batch}
        batch.sort(key=lambda h: (h.virtual_ns, coins[id(h)]))
        for h in batch:
            held.remove(h)
        return [Release(h, now_ns - h.arrival_ns, self._decision(h, batch, coins[id(h)], why.get(id(h), "ahead"), now_ns))
                for h in batch]

    def _decision(self, h: Held, batch: list[Held], coin: int, why: Why, now_ns: int) -> dict[str, object]:
        """The decision line's fields: everything ``protocol/fairlog.py`` needs to recompute it."""
        return {"order": "fair", "seat": h.seat, "seen_seq": h.act.seq, "state_seq": h.state_seq,
                "race_key": list(h.key), "arrival_ns": h.arrival_ns, "published_ns": h.published_ns,
                "rtt_ns": h.rtt_ns, "reaction_claimed_ns": h.claimed_ns, "floor_ns": self.floor_ns,
                "reaction_used_ns": h.reaction_ns, "virtual_ns": h.virtual_ns,
                "considered": [{"seat": s, "rtt_ns": r, "measured": known} for s, r, known in h.considered],
                "margin_ns": MARGIN_NS, "cap_ns": self.cap_ns, "release_ns": h.release_ns, "capped": h.capped,
                "released_ns": now_ns, "why": why,
                "rivals": [x.seat for x in batch if x is not h and x.key == h.key], "coin": coin}

    def _waiting_for_rival(self, table: Table, h: Held) -> bool:
        for seat in range(len(table.clients)):
            if seat != h.seat and self._could_race(table, seat, h.key):
                return True
        return False

    def _coin(self, table: Table, h: Held, batch: list[Held]) -> int:
        ties = [x for x in batch if x.virtual_ns == h.virtual_ns]
        if len(ties) < 2:
            return 0
        chance = self.coins.get(table.code)
        if chance is None:
            chance = self.coins[table.code] = SeededChance(derive(table.coin_seed, "coin"))
        return chance.randbelow(1 << 30)

    def drop_match(self, code: str) -> None:
        self.held.pop(code, None)
        self.published.pop(code, None)
        self.coins.pop(code, None)

    # -- its record (a relay snapshot's) -------------------------------------------------------

    def to_record(self, enc: Encode) -> dict[str, object]:
        """The scheduler as plain data, the held plays' values through ``enc``."""
        return {
            "cap_ns": self.cap_ns, "floor_ns": self.floor_ns, "probe_interval_ns": self.probe_interval_ns,
            "rtt": {c: [q.maxlen, list(q)] for c, q in self.rtt.items()},
            "sampled": dict(self.sampled),
            "last_probe_ns": self.last_probe_ns,
            "published": {code: [[s, t] for s, t in book.items()] for code, book in self.published.items()},
            "held": {code: [h.to_record(enc) for h in hs] for code, hs in self.held.items()},
            "coins": {code: c.to_record() for code, c in self.coins.items()},
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any], dec: Decode) -> FairOrder:
        """The scheduler ``to_record`` wrote."""
        f = cls(r["cap_ns"], r["floor_ns"], r["probe_interval_ns"])
        f.rtt = {c: deque(q, maxlen=n) for c, (n, q) in r["rtt"].items()}
        f.sampled = dict(r.get("sampled", {}))  # (a record without it: every player probed once more)
        f.last_probe_ns = r["last_probe_ns"]
        f.published = {code: {s: t for s, t in book} for code, book in r["published"].items()}
        f.held = {code: [Held.from_record(h, dec) for h in hs] for code, hs in r["held"].items()}
        f.coins = {code: SeededChance.from_record(c) for code, c in r["coins"].items()}
        return f
