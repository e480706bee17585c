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

Measuring, not trusting. ``rtt_q`` is the relay's own measurement: it probes every player
(``Probe`` -> ``ProbeReply``) and keeps the lowest recent round trip. A claimed reaction time is
clamped: never below ``fair_floor_ns`` (no person reacts faster), and never above what the
relay's own timestamps allow (``A - pub(seq) - rtt_p``: the play cannot have been sent before
the player received the state). A client that lies gains nothing beyond the floor.

Pure: time comes in as ``now_ns``; the coin is a ``SeededChance``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol import messages as m
from protocol.chance import SeededChance, derive
from protocol.rules import blink

if TYPE_CHECKING:
    from relay.core import Match, Out, RelayCore

PROBE_INTERVAL_NS = 500_000_000
RTT_SAMPLES = 8
MARGIN_NS = 3_000_000  # scheduling jitter allowance on top of a rival's measured round trip
UNKNOWN_RTT_NS = 50_000_000  # assumed for a player not measured yet (the cap still bounds the hold)


@dataclass
class Held:
    seat: int
    client: str
    act: m.Act
    action: Any
    arrival_ns: int
    virtual_ns: int
    reaction_ns: int
    claimed_ns: int | None
    key: tuple[int, str]  # (pile, top card the player saw)
    release_ns: int


class FairOrder:
    def __init__(self, core: RelayCore) -> None:
        self.core = core
        self.rtt: dict[str, deque[int]] = {}
        self.last_probe_ns: int | None = None
        self.published: dict[str, dict[int, int]] = {}  # match -> seq -> relay time it was published
        self.held: dict[str, list[Held]] = {}
        self.coins: dict[str, SeededChance] = {}

    # -- measurements ------------------------------------------------------------------------

    def note_published(self, match: Match, seq: int, now_ns: int) -> None:
        book = self.published.setdefault(match.code, {})
        book[seq] = now_ns
        if len(book) > 4096:
            for k in sorted(book)[:2048]:
                del book[k]

    def on_probe_reply(self, client: str, sent_ns: int, now_ns: int) -> None:
        if not 0 <= now_ns - sent_ns <= 10_000_000_000:
            return  # not a probe of ours (or a forged one): ignore
        self.rtt.setdefault(client, deque(maxlen=RTT_SAMPLES)).append(now_ns - sent_ns)

    def rtt_of(self, client: str) -> int | None:
        samples = self.rtt.get(client)
        return min(samples) if samples else None

    def probes(self, now_ns: int, out: list[Out]) -> None:
        from relay.core import Publish

        if self.last_probe_ns is not None and now_ns - self.last_probe_ns < PROBE_INTERVAL_NS:
            return
        self.last_probe_ns = now_ns
        for match in self.core.matches.values():
            if match.order == "fair" and match.status in ("playing", "between"):
                for s in match.players:
                    out.append(Publish(self.core.topics.client(s.client), m.Probe(sent_ns=now_ns)))

    # -- ordering ----------------------------------------------------------------------------

    def wants(self, match: Match, seat: int, action: Any) -> bool:
        return match.order == "fair" and match.game == "blink" and isinstance(action, blink.PlayCard)

    def submit(self, match: Match, seat: int, client: str, act: m.Act, action: blink.PlayCard, now_ns: int,
               out: list[Out]) -> None:
        cfg = self.core.config
        seen = self.core._state_at(match, act.seq)
        pile = action.pile if action.pile in (0, 1) else 0
        top = seen.top(pile) if seen is not None and pile in (0, 1) else None
        key = (pile, str(top))
        pub = self.published.get(match.code, {}).get(act.seq, now_ns)
        rtt_p = self.rtt_of(client)
        # The most the reaction can have been, by the relay's own clock.
        bound = max(0, now_ns - pub - (rtt_p or 0))
        claimed = act.reaction_ns
        reaction = bound if claimed is None else min(max(claimed, cfg.fair_floor_ns), bound)
        virtual = pub + reaction
        release = now_ns
        for other_seat, other in enumerate(match.players):
            if other_seat == seat or not self._could_race(match, other_seat, key):
                continue
            rtt_q = self.rtt_of(other.client)
            release = max(release, virtual + (rtt_q if rtt_q is not None else UNKNOWN_RTT_NS) + MARGIN_NS)
        release = min(release, now_ns + cfg.fair_cap_ns)
        held = Held(seat, client, act, action, now_ns, virtual, reaction, claimed, key, release)
        self.held.setdefault(match.code, []).append(held)
        self._release(match, now_ns, out)

    def _could_race(self, match: Match, seat: int, key: tuple[int, str]) -> bool:
        """Could ``seat`` still send a play for this pile top that beats one already held?"""
        if any(h.seat == seat and h.key == key for h in self.held.get(match.code, [])):
            return False  # it already has: both plays are here, nothing to wait for
        state = match.state
        if state is None or state.phase != "running":
            return False
        pile = key[0]
        top = state.top(pile)
        if str(top) != key[1]:
            return True  # the pile moved on; a rival's play against the old top may still be coming
        return any(c is not None and blink.cards_match(c, top) for c in state.hands[seat])

    def deadline(self, match: Match) -> int | None:
        held = self.held.get(match.code)
        return min(h.release_ns for h in held) if held else None

    def tick(self, match: Match, now_ns: int, out: list[Out]) -> None:
        if match.order == "fair":
            self.probes(now_ns, out)
        self._release(match, now_ns, out)

    def _release(self, match: Match, now_ns: int, out: list[Out]) -> None:
        held = self.held.get(match.code)
        while held:
            # A play is due when its hold has expired or every rival has already played for its pile top.
            due = [h for h in held if h.release_ns <= now_ns or not self._waiting_for_rival(match, h)]
            if not due:
                return
            limit = max(h.virtual_ns for h in due)
            batch = [h for h in held if h.virtual_ns <= limit]
            coins = {id(h): self._coin(match, h, batch) for h in batch}
            batch.sort(key=lambda h: (h.virtual_ns, coins[id(h)]))
            for h in batch:
                held.remove(h)
            for h in batch:
                note = {"order": "fair", "reaction_claimed_ns": h.claimed_ns, "reaction_used_ns": h.reaction_ns,
                        "virtual_ns": h.virtual_ns, "race_key": [h.key[0], h.key[1]],
                        "rivals": [x.seat for x in batch if x is not h and x.key == h.key], "coin": coins[id(h)]}
                self.core.judge(match, h.seat, h.client, h.act, h.action, now_ns, out,
                                hold_ns=now_ns - h.arrival_ns, note=note)

    def _waiting_for_rival(self, match: Match, h: Held) -> bool:
        for seat in range(len(match.players)):
            if seat != h.seat and self._could_race(match, seat, h.key):
                return True
        return False

    def _coin(self, match: Match, h: Held, batch: list[Held]) -> int:
        ties = [x for x in batch if x.virtual_ns == h.virtual_ns]
        if len(ties) < 2:
            return 0
        chance = self.coins.get(match.code)
        if chance is None:
            chance = self.coins[match.code] = SeededChance(derive(match.seed, "coin"))
        return chance.randbelow(1 << 30)

    def drop_match(self, code: str) -> None:
        self.held.pop(code, None)
        self.published.pop(code, None)
        self.coins.pop(code, None)
