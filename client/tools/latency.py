"""The latency harness behind ``blink latency`` (and ``bench/fairness.py``): concurrent bot matches
under network impairment, measured from the clients' own timestamps.

How this works
--------------
``run_latency(config)`` connects to a broker with a relay (``--server``) or starts a
``LocalServer`` (embedded amqtt broker + relay, ``RelayConfig(order=...)``) in this process. It
starts one silent *spectator* that subscribes to every match's public events before any match
exists (so its log of each match is complete from seq 1), then ``matches`` *slots*: two
``Player``s (seat 0 creates the match, seat 1 joins it by code), each with its own ``Impairment``
in its networking shell, each driven by a ``Bot``. When the spectator sees a slot's
``match_over`` both players ask for a ``Rematch`` at once, so new games keep starting (best of 1,
a short countdown) until ``duration_s`` is up. Then the bots are stopped (a stop event, then a
bounded cancel), in-flight verdicts are given a grace period, everything is read out and only then
are the connections closed.

What is recorded, per player, without changing the client code:

- every clock-sync sample (``RecordingClock`` replaces the model's ``ClockFilter``: it keeps the
  usual best-of-window filter *and* every sample), so ``rtt_ms`` covers all samples, not the best:
  one per play answered once sent (its verdict's stamps, ``protocol/clock.py``) and one per ping,
  which the players send only while idle;
- every play sent (``Player.act`` is replaced by an identical function that also writes a
  ``PlayRecord``: action id, the ``seq`` the play was made against, pile, card, send time and
  the claimed reaction time);
- every verdict, from the relay's ``ActionAccepted`` / ``ActionRejected`` as the player's
  connection hands it over (so also the answers to plays whose game ended meanwhile, which the
  prediction layer no longer tracks): receive time, code, and the fair-order ``hold_ns``.
  ``confirm`` is ``answered_ns - sent_ns`` -- the same quantity as ``Verdict.confirm_ns``: from
  the moment the play was made (before any added delay) to the moment its verdict was handed to
  the client (after any added delay).

Races
-----
A *race* is two plays from different players made against the same pile top. Concretely, from
the spectator's complete public event log of a match, every pile has a list of *top changes*
(``card_revealed``, ``card_played``, ``card_flipped``, ``card_picked`` with that ``pile``).
A play made against seq ``s`` on pile ``p`` saw the top set by the last change of ``p`` at or
before ``s`` -- its *top version*. Plays are grouped by (match, pile, top version); a group that
holds plays from two seats is one race. Its winner is the seat whose ``card_played`` is the next
change of that pile after the top version -- the play that landed on that top; every other seat
in the group lost it (whether its play was then rejected as ``pile_changed`` or, matching the new
top too, accepted after it). A group whose next change is not a play of a seat in the group (a
stalemate flip, the game ending elsewhere, a play made against an older top) decides nothing and
is counted as ``races_void``. So for two seats, seat 0's ``won`` always equals seat 1's ``lost``.

Sweeps
------
A fairness curve is many ordinary runs: ``sweep_plan`` lists (delay, order) steps, arrival order
first at each delay, and ``SweepStep.impairments`` gives seat 1 the step's delay and seat 0 none
(only the delay is swept). With ``LatencyConfig.games`` a run ends once that many games have
finished (``game_result`` in the spectator's log), ``duration_s`` being its cap, so every step's
shares rest on a known number of games rather than on how fast the machine was. ``step_figures``
reads a run's ``summary()``: the slow seat's share of races and of decided games (a tie decides
nothing) with Wilson intervals, and the confirmation times per seat; ``add_fast_cost`` then sets
each step's ``fast_added_ms`` against arrival order at the same delay -- the price fair order
makes the fast seat pay -- which needs an arrival step, so a fair-only sweep leaves it None.

The report
----------
``json_report`` is what ``--json`` prints: one run's ``summary()`` keys at the top level, with
``sweep`` (its step figures, one entry). With several runs (``--order both``, ``--sweep``) no one
run is the report: the top level keeps what every run shares (game, server, matches, reaction,
seed), ``runs`` holds each run's whole ``summary()`` in the order run (each with its ``order`` and
``impairment``), and ``sweep`` the step figures, one per run in the same order. Each shape is a
typed map (``Summary``, ``StepFigures``, ``Report``, ``RunsReport``): printed as JSON as it is,
and read back key by key by the table printers and the plots.

Everything here except ``run_latency`` and its helpers is pure and unit-tested.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import re
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Mapping, NotRequired, Required, Sequence, TypedDict

from mqttkit import TLSTrust
from protocol import messages as m
from protocol.clock import ClockFilter, Sample
from protocol.events import logged_event
from protocol.match import MATCH_EVENTS, GameResult, MatchOver
from protocol.rules import blink, game_for
from protocol.rules.base import Rejected
from protocol.topics import Topics
from client import ClientError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mqttkit import BrokerAddress
    from relay.hosting import LocalServer
    from client.player import Player

SEATS = 2
#: Many short games (one game per match, then a rematch): each game's ``quick_settings``.
FAST_BLINK: dict[str, object] = dict(blink.GAME.quick_settings)
MAX_IMPAIRMENT_S = 10.0
PING_INTERVAL_S = 0.5
#: A play's time in parts, in order: to the relay, held for fair order, judged (journal and publish
#: included), back to the player, and until the player's confirmed view shows it.
PARTS = ("uplink", "held", "judging", "downlink", "drawing")


class BadArgument(ClientError, ValueError):
    """A command-line value that cannot be used; the message is one readable line."""


class LatencyError(ClientError, RuntimeError):
    """The run could not be done (unreachable broker, no relay, a refused match); one line."""


# ---------------------------------------------------------------------------- argument parsing

_NUMBER = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-zµ%]*)\s*$")
_TIME_UNITS = {"": 1e-3, "ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6}


def parse_seconds(text: str, what: str = "delay") -> float:
    """``"100ms"``, ``"0.1s"``, ``"100"`` (a plain number is milliseconds) -> seconds, in [0, 10]."""
    mt = _NUMBER.match(text)
    if not mt:
        raise BadArgument(f"--{what}: not a time: {text.strip()!r} (use e.g. 100ms or 0.1s)")
    value, unit = float(mt.group(1)), mt.group(2).lower()
    if unit not in _TIME_UNITS:
        raise BadArgument(f"--{what}: unknown unit {mt.group(2)!r} in {text.strip()!r} (use ms or s)")
    seconds = value * _TIME_UNITS[unit]
    if not math.isfinite(seconds) or seconds < 0:
        raise BadArgument(f"--{what}: must not be negative: {text.strip()!r}")
    if seconds > MAX_IMPAIRMENT_S:
        raise BadArgument(f"--{what}: at most {MAX_IMPAIRMENT_S:g} s, not {text.strip()!r}")
    return seconds


def parse_fraction(text: str, what: str = "loss") -> float:
    """``"0.05"`` or ``"5%"`` -> 0.05, in [0, 1)."""
    mt = _NUMBER.match(text)
    if not mt or mt.group(2) not in ("", "%"):
        raise BadArgument(f"--{what}: not a fraction: {text.strip()!r} (use e.g. 0.05 or 5%)")
    value = float(mt.group(1)) / (100.0 if mt.group(2) == "%" else 1.0)
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise BadArgument(f"--{what}: must be from 0 up to (not including) 1, not {text.strip()!r}")
    return value


def parse_seat_list(text: str | None, what: str, parse: Callable[[str, str], float]) -> list[float]:
    """A comma list with one value per seat (``"0ms,100ms"``); one value applies to both seats."""
    if text is None:
        return [0.0] * SEATS
    parts = text.split(",")
    if len(parts) > SEATS:
        raise BadArgument(f"--{what}: at most {SEATS} values (one per seat), got {len(parts)}: {text.strip()!r}")
    if any(not p.strip() for p in parts):
        raise BadArgument(f"--{what}: empty value in {text.strip()!r}")
    values = [parse(p, what) for p in parts]
    return values * SEATS if len(values) == 1 else values


def parse_delay_list(text: str | None, what: str = "delay") -> list[float]:
    return parse_seat_list(text, what, parse_seconds)


def parse_fraction_list(text: str | None, what: str = "loss") -> list[float]:
    return parse_seat_list(text, what, parse_fraction)


#: How jitter is drawn: uniform in [-j, +j]; normal with standard deviation j; pareto an extra delay
#: with mean j and a heavy tail (tail index 2: mostly small, now and then several times j).
JITTER_DISTS = ("uniform", "normal", "pareto")
PARETO_ALPHA = 2.0
MAX_RATE = 100_000.0


@dataclass(frozen=True)
class SeatImpairment:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    reorder: float = 0.0
    dist: str = "uniform"  # how the jitter is drawn (``JITTER_DISTS``)
    rate: float = 0.0  # messages a second each way at most (0: no limit); a message waits its turn

    def to_json(self) -> ImpairmentFigures:
        return {"delay_ms": round(self.delay_s * 1e3, 3), "jitter_ms": round(self.jitter_s * 1e3, 3),
                "loss": self.loss, "reorder": self.reorder, "jitter_dist": self.dist, "rate_per_s": self.rate}

    @classmethod
    def from_json(cls, d: object, where: str) -> SeatImpairment:
        """The impairment ``to_json`` wrote (a log's header); ``BadArgument`` naming ``where`` if not."""
        try:
            if not isinstance(d, dict):
                raise TypeError(f"{type(d).__name__}, not a map")
            imp = cls(_float(d["delay_ms"]) / 1e3, _float(d["jitter_ms"]) / 1e3, _float(d["loss"]), _float(d["reorder"]),
                      str(d.get("jitter_dist", "uniform")), _float(d.get("rate_per_s", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadArgument(f"{where}: not an impairment ({type(exc).__name__}: {exc})") from None
        if (not all(math.isfinite(v) and v >= 0 for v in (imp.delay_s, imp.jitter_s, imp.rate))
                or imp.delay_s > MAX_IMPAIRMENT_S or imp.jitter_s > MAX_IMPAIRMENT_S or imp.rate > MAX_RATE
                or not (0 <= imp.loss < 1 and 0 <= imp.reorder < 1) or imp.dist not in JITTER_DISTS):
            raise BadArgument(f"{where}: an impairment out of range: {d}")
        return imp

    def describe(self) -> str:
        rate = f", at most {self.rate:g} messages/s" if self.rate else ""
        return (f"delay {self.delay_s * 1e3:g} ms, jitter {self.jitter_s * 1e3:g} ms ({self.dist}), "
                f"loss {self.loss * 100:g}%, reorder {self.reorder * 100:g}%{rate}")


def _float(value: object) -> float:
    """A JSON value as ``float()`` reads it (a number, or a number's text); TypeError for anything else."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def parse_rate(text: str, what: str = "rate") -> float:
    """``"50"`` or ``"50/s"`` -> at most 50 messages a second (0: no limit)."""
    mt = _NUMBER.match(text)
    if not mt or mt.group(2) not in ("", "/s"):
        raise BadArgument(f"--{what}: not a rate: {text.strip()!r} (messages a second, e.g. 50)")
    value = float(mt.group(1))
    if not math.isfinite(value) or not 0 <= value <= MAX_RATE:
        raise BadArgument(f"--{what}: messages a second from 0 (no limit) to {MAX_RATE:g}, not {text.strip()!r}")
    return value


def parse_dist(text: str, what: str = "jitter-dist") -> str:
    value = text.strip().lower()
    if value not in JITTER_DISTS:
        raise BadArgument(f"--{what}: {text.strip()!r} is not one of {', '.join(JITTER_DISTS)}")
    return value


def seat_impairments(delay: str | None = None, jitter: str | None = None, loss: str | None = None,
                     reorder: str | None = None, dist: str | None = None, rate: str | None = None) -> list[SeatImpairment]:
    d = parse_delay_list(delay, "delay")
    j = parse_delay_list(jitter, "jitter")
    lo = parse_fraction_list(loss, "loss")
    r = parse_fraction_list(reorder, "reorder")
    ds = ["uniform"] * SEATS if dist is None else [str(x) for x in parse_seat_list(dist, "jitter-dist", parse_dist)]  # type: ignore[arg-type]
    rt = [0.0] * SEATS if rate is None else parse_seat_list(rate, "rate", parse_rate)
    return [SeatImpairment(d[i], j[i], lo[i], r[i], ds[i], rt[i]) for i in range(SEATS)]


class ProfileImpairment:
    """One seat's impairment as ``client.net.Connection`` applies it (``plan``), with the jitter drawn
    from the seat's distribution and a rate limit per direction (a message leaves no sooner than
    ``1/rate`` after the one before it that way), from a seeded generator: a replay of the profile
    draws the same sequence."""

    def __init__(self, imp: SeatImpairment, seed: int | None) -> None:
        import random

        self.imp = imp
        self._rng = random.Random(seed)
        self._free = {"up": 0.0, "down": 0.0}  # when each direction may send its next message

    @property
    def active(self) -> bool:
        i = self.imp
        return bool(i.delay_s or i.jitter_s or i.loss or i.reorder or i.rate)

    def jitter(self) -> float:
        j, rng = self.imp.jitter_s, self._rng
        if not j:
            return 0.0
        if self.imp.dist == "normal":
            return rng.gauss(0.0, j)
        if self.imp.dist == "pareto":  # mean (alpha/(alpha-1) - 1) * scale = j for alpha 2
            return j * (PARETO_ALPHA - 1) * (rng.paretovariate(PARETO_ALPHA) - 1)
        return rng.uniform(-j, j)

    def plan(self, direction: str = "up") -> float | None:
        imp = self.imp
        if imp.loss and self._rng.random() < imp.loss:
            return None
        d = max(0.0, imp.delay_s + self.jitter())
        if imp.reorder and self._rng.random() < imp.reorder:
            d += imp.delay_s + imp.jitter_s + 0.005
        if imp.rate:
            now = time.monotonic()
            leave = max(now, self._free.get(direction, 0.0))
            self._free[direction] = leave + 1.0 / imp.rate
            d += leave - now
        return d


# ---------------------------------------------------------------------------- the log's header

#: The first line of ``blink latency --log``: the impairment profile the run was measured under.
HEADER_KIND = "impairment"


def header(cfg: LatencyConfig) -> dict[str, object]:
    return {"kind": HEADER_KIND, "ts": time.time_ns(), "game": cfg.game, "order": cfg.order, "seed": cfg.seed,
            "matches": cfg.matches, "reaction_s": cfg.reaction_s,
            "seats": {str(i): imp.to_json() for i, imp in enumerate(cfg.impairments)}}


def write_header(cfg: LatencyConfig) -> None:
    """Start ``cfg.log_path`` afresh with the run's header (the local relay appends its log to it)."""
    import json

    if cfg.log_path is None:
        return
    with open(cfg.log_path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header(cfg)) + "\n")


def read_profile(lines: Iterable[str], where: str) -> tuple[list[SeatImpairment], int | None]:
    """The impairment per seat and the seed from a log's header (``BadArgument``, one line, if it
    has none: only ``blink latency --log`` writes one)."""
    import json

    for text in lines:
        if not text.strip():
            continue
        try:
            first = json.loads(text)
        except ValueError:
            first = None
        if not isinstance(first, dict) or first.get("kind") != HEADER_KIND:
            break
        seats = first.get("seats")
        seed = first.get("seed")
        if not isinstance(seats, dict) or set(seats) != {str(i) for i in range(SEATS)}:
            raise BadArgument(f"{where}: its header names no impairment for seats 0 and 1")
        if seed is not None and type(seed) is not int:
            raise BadArgument(f"{where}: its header's seed {seed!r} is not a whole number")
        return [SeatImpairment.from_json(seats[str(i)], f"{where}: seat {i}") for i in range(SEATS)], seed
    raise BadArgument(f"{where}: no impairment header on its first line (blink latency --log writes one)")


# ---------------------------------------------------------------------------- the report's shapes
# What ``summary()``, ``step_figures`` and ``json_report`` return and the printers and plots read:
# plain maps (``--json`` prints them as they are), each key typed. A seat's figures are keyed by the
# seat's number as text ("0", "1"), as JSON keys are.


class Percentiles(TypedDict):
    """A distribution in milliseconds, nearest rank (``percentiles_ms``); all None without values."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    mean: float | None
    n: int


class Quantiles(TypedDict):
    """The median and the 99th percentile of a distribution, in milliseconds."""

    p50: float | None
    p99: float | None


class PartFigures(TypedDict):
    """One part of a play's time (``PARTS``) over a seat's plays, in milliseconds."""

    p50: float | None
    p99: float | None
    mean: float | None


class ConfirmFigures(TypedDict):
    """The play -> verdict time of the plays a seat's parts are measured over, in milliseconds."""

    p50: float | None
    p99: float | None
    mean: float | None
    n: int


class ImpairmentFigures(TypedDict):
    """A seat's impairment as the report and a log's header write it (``SeatImpairment.to_json``)."""

    delay_ms: float
    jitter_ms: float
    loss: float
    reorder: float
    jitter_dist: str
    rate_per_s: float


class SeatRaces(TypedDict):
    won: int
    lost: int


class Summary(TypedDict):
    """One run's figures (``LatencyResult.summary()``): what ``format_table`` and ``plot`` show and
    ``step_figures`` reads."""

    game: str
    order: Order
    server: str  # "local", or the broker's URL
    matches: int
    duration_s: float
    reaction_s: float
    seed: int | None
    impairment: dict[str, ImpairmentFigures]
    rtt_ms: Percentiles
    confirm_ms: Percentiles
    rtt_ms_by_seat: dict[str, Percentiles]
    confirm_ms_by_seat: dict[str, Percentiles]
    hold_ms: Percentiles
    parts_ms: dict[str, dict[str, PartFigures]]  # seat -> part -> figures
    parts_confirm_ms: dict[str, ConfirmFigures]
    playable_s: dict[str, float]
    plays_per_playable_s: dict[str, float | None]
    clock_offset_ms: dict[str, float | None]
    plays: int
    verdicts: int
    unanswered: int
    accepted: int
    rejected: dict[str, int]  # rejection code -> plays
    races: dict[str, SeatRaces]
    race_count: int
    races_void: int
    race_share: dict[str, float | None]
    games: int
    wins: dict[str, int]
    ties: int
    log_gaps: int
    stopped_early: NotRequired[bool]  # only when the run was interrupted


class StepFigures(TypedDict):
    """One step of a sweep (``step_figures``, ``add_fast_cost``): what ``format_sweep`` and the
    fairness curves show."""

    delay_ms: float  # how much slower the slow seat is, each way
    order: Order
    slow_seat: int
    races: int
    races_won: int
    races_share: float | None
    races_ci95: list[float] | None
    races_void: int
    games: int
    games_decided: int
    games_won: int
    games_share: float | None
    games_ci95: list[float] | None
    ties: int
    duration_s: float
    fast_confirm_ms: Quantiles
    slow_confirm_ms: Quantiles
    fast_plays_per_s: float | None
    fast_pace: float | None
    fast_pace_change: float | None
    fast_parts_ms: dict[str, PartFigures] | None
    slow_parts_ms: dict[str, PartFigures] | None
    hold_ms: Quantiles
    fast_added_ms: Quantiles


class Report(Summary):
    """``--json`` of a single run: its summary, and its step of the sweep."""

    sweep: list[StepFigures]


class SharedFigures(TypedDict, total=False):
    """What every run of one command has alike (``SHARED_KEYS``), kept at the top of ``RunsReport``."""

    game: str
    server: str
    matches: int
    reaction_s: float
    seed: int | None


class RunsReport(SharedFigures):
    """``--json`` of several runs (``--order both``, ``--sweep``): each run's summary, in the order
    run, and the sweep's steps."""

    runs: Required[list[Summary]]
    sweep: Required[list[StepFigures]]


# ---------------------------------------------------------------------------- statistics (pure)


def percentiles_ms(values_ns: Iterable[int | float]) -> Percentiles:
    """p50/p90/p99/max/n in milliseconds, nearest-rank (so p50 <= p90 <= p99 <= max always)."""
    xs = sorted(values_ns)
    n = len(xs)
    if not n:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None, "n": 0}

    def rank(q: float) -> float:
        return round(xs[min(n - 1, max(0, math.ceil(q / 100.0 * n) - 1))] / 1e6, 3)

    return {"p50": rank(50), "p90": rank(90), "p99": rank(99), "max": round(xs[-1] / 1e6, 3),
            "mean": round(sum(xs) / n / 1e6, 3), "n": n}


def _split(plays: Iterable[PlayRecord], seat: int) -> list[tuple[dict[str, int], int]]:
    """A seat's plays that had every stamp: (parts, confirmation) in ns."""
    split = [(p.parts_ns(), p.confirm_ns) for p in plays if p.seat == seat]
    return [(parts, c) for parts, c in split if parts is not None and c is not None]


def parts_ms(plays: Iterable[PlayRecord], seat: int) -> dict[str, PartFigures]:
    """A seat's plays' time in parts (``PARTS``, nothing else): p50, p99 and mean of each, in ms. The
    means of the parts but drawing add up to the same plays' confirmation mean (``parts_confirm_ms``:
    the offset cancels); drawing comes after it."""
    whole = _split(plays, seat)
    out: dict[str, PartFigures] = {}
    for name in PARTS:
        q = percentiles_ms([parts[name] for parts, _ in whole])
        out[name] = {"p50": q["p50"], "p99": q["p99"], "mean": q["mean"]}
    return out


def parts_confirm_ms(plays: Iterable[PlayRecord], seat: int) -> ConfirmFigures:
    """The play -> verdict time of the plays ``parts_ms`` splits (p50, p99, mean in ms; ``n`` plays)."""
    whole = _split(plays, seat)
    q = percentiles_ms([c for _, c in whole])
    return {"p50": q["p50"], "p99": q["p99"], "mean": q["mean"], "n": len(whole)}


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float] | tuple[None, None]:
    """95% Wilson score interval of a proportion (None, None when there are no trials)."""
    if trials <= 0:
        return (None, None)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


# ---------------------------------------------------------------------------- races (pure)


@dataclass
class PlayRecord:
    """One action a player sent, and what became of it."""

    match: str
    seat: int
    id: int
    seq: int  # the seq of the state the play was made against
    kind: str  # the action's type name, e.g. "PlayCard"
    pile: int | None
    card: str | None
    sent_ns: int
    reaction_ns: int | None = None
    answered_ns: int | None = None
    ok: bool | None = None
    code: str | None = None
    hold_ns: int | None = None
    # The stamps the verdict carried (relay wall clock) and the player's clock offset (relay minus
    # client) when it came; ``drawn_ns``: when the player's confirmed view first showed the play.
    recv_ns: int | None = None
    relay_sent_ns: int | None = None
    offset_ns: int | None = None
    accepted_seq: int | None = None
    drawn_ns: int | None = None

    @property
    def confirm_ns(self) -> int | None:
        return None if self.answered_ns is None else self.answered_ns - self.sent_ns

    def parts_ns(self) -> dict[str, int] | None:
        """The play's time in parts (see ``PARTS``), or None without the stamps they need. The
        first four add up to ``confirm_ns`` exactly (the clock offset cancels); drawing follows it."""
        if (self.answered_ns is None or not self.recv_ns or not self.relay_sent_ns or self.offset_ns is None
                or self.hold_ns is None):
            return None
        off = self.offset_ns
        drawn = self.drawn_ns if self.drawn_ns is not None else self.answered_ns
        return {"uplink": self.recv_ns - (self.sent_ns + off), "held": self.hold_ns,
                "judging": self.relay_sent_ns - self.recv_ns - self.hold_ns,
                "downlink": self.answered_ns + off - self.relay_sent_ns, "drawing": max(0, drawn - self.answered_ns)}


@dataclass
class RaceCount:
    won: dict[int, int] = field(default_factory=lambda: {s: 0 for s in range(SEATS)})
    lost: dict[int, int] = field(default_factory=lambda: {s: 0 for s in range(SEATS)})
    races: int = 0
    void: int = 0

    def to_json(self) -> dict[str, SeatRaces]:
        return {str(s): {"won": self.won.get(s, 0), "lost": self.lost.get(s, 0)} for s in range(SEATS)}


def _pile_change(ev: m.Event | Mapping[str, object]) -> tuple[str, int, int, blink.CardPlayed | None] | None:
    """(match, seq, pile, the play) of an event that puts a card on a pile (the play: None for a
    card revealed, flipped or picked); None for any other event."""
    if isinstance(ev, m.Event):
        code, seq, what = ev.match, ev.seq, blink.EVENTS.read(ev)
    else:
        line_code, line_seq, what = ev.get("match"), ev.get("seq"), blink.EVENTS.read(logged_event(ev))
        if not isinstance(line_code, str) or type(line_seq) is not int:
            return None
        code, seq = line_code, line_seq
    match what:
        case blink.CardPlayed(pile=pile):
            return code, seq, pile, what
        case blink.CardRevealed(pile=pile) | blink.CardFlipped(pile=pile) | blink.CardPicked(pile=pile):
            return code, seq, pile, None
    return None


def count_races(events: Iterable[m.Event | Mapping[str, object]], plays: Iterable[PlayRecord]) -> RaceCount:
    """Races won and lost per seat (see the module header). ``events`` are public events, as
    ``protocol.messages.Event`` or as the lines of a log (``match``, ``seq``, ``type`` and the event's map)."""
    changes: dict[tuple[str, int], list[tuple[int, blink.CardPlayed | None]]] = {}
    for ev in events:
        change = _pile_change(ev)
        if change is not None:
            code, seq, pile, play = change
            changes.setdefault((code, pile), []).append((seq, play))
    seqs: dict[tuple[str, int], list[int]] = {}
    for key, lst in changes.items():
        lst.sort(key=lambda c: c[0])
        seqs[key] = [c[0] for c in lst]
    groups: dict[tuple[str, int, int], set[int]] = {}
    for p in plays:
        if p.kind != "PlayCard" or p.pile is None:
            continue
        key = (p.match, p.pile)
        if key not in seqs:
            continue
        i = bisect.bisect_right(seqs[key], p.seq) - 1
        if i < 0:
            continue  # made before the pile had a top (cannot happen with a sound client)
        groups.setdefault((p.match, p.pile, i), set()).add(p.seat)
    count = RaceCount()
    for (match, pile, i), seats in groups.items():
        if len(seats) < 2:
            continue
        after = changes[(match, pile)][i + 1] if i + 1 < len(changes[(match, pile)]) else None
        winner = after[1].player if after is not None and after[1] is not None else None
        if winner not in seats:
            count.void += 1
            continue
        count.races += 1
        count.won[winner] = count.won.get(winner, 0) + 1
        for s in seats - {winner}:
            count.lost[s] = count.lost.get(s, 0) + 1
    return count


# ---------------------------------------------------------------------------- sweeps (pure)

Order = Literal["arrival", "fair"]
ORDERS: tuple[Order, ...] = ("arrival", "fair")
#: With ``games`` and no duration given, each step stops at this many seconds at the latest.
GAMES_CAP_S = 3600.0


def parse_sweep(text: str) -> list[float]:
    """``"0,50,100"`` -> the latency differences in seconds, each a time as ``--delay`` takes it (a plain
    number is milliseconds); at least one value, none twice, in the order given."""
    parts = text.split(",")
    if any(not p.strip() for p in parts):
        raise BadArgument(f"--sweep: empty value in {text.strip()!r}")
    values = [parse_seconds(p, "sweep") for p in parts]
    if len(set(values)) != len(values):
        raise BadArgument(f"--sweep: a delay is given twice in {text.strip()!r}")
    return values


@dataclass(frozen=True)
class SweepStep:
    """One measurement of a sweep: seat 1 is ``delay_s`` slower each way than seat 0, in ``order``."""

    delay_s: float
    order: Order

    def impairments(self, base: Sequence[SeatImpairment]) -> list[SeatImpairment]:
        # Only the delay is swept; jitter, loss and reordering stay what each seat was given.
        return [replace(base[0], delay_s=0.0), replace(base[1], delay_s=self.delay_s)]


def sweep_plan(delays_s: Sequence[float], orders: Sequence[Order]) -> list[SweepStep]:
    """Every delay in every order; at one delay arrival order runs first, so the fast seat's added
    confirmation time in fair order can be reported against it."""
    ranked = sorted(set(orders), key=ORDERS.index)
    return [SweepStep(d, o) for d in delays_s for o in ranked]


#: The keys of ``Quantiles``, in the order the tables show them.
QUANTILES: tuple[Literal["p50", "p99"], ...] = ("p50", "p99")


def _p(summary_p: Percentiles) -> Quantiles:
    return {"p50": summary_p.get("p50"), "p99": summary_p.get("p99")}


def step_figures(summary: Summary, slow: int = 1) -> StepFigures:
    """The figures of one step from a run's ``LatencyResult.summary()``: the slow seat's share of
    races and of decided games (ties left out) with 95% Wilson intervals, confirmation times per
    seat, and room for ``fast_added_ms`` (filled in by ``add_fast_cost``)."""
    fast = 1 - slow
    imp = summary["impairment"]
    n_races = summary["race_count"]
    won_races = summary["races"][str(slow)]["won"]
    decided = summary["wins"]["0"] + summary["wins"]["1"]
    won_games = summary["wins"][str(slow)]

    def share(won: int, n: int) -> tuple[float | None, list[float] | None]:
        lo, hi = wilson(won, n)
        if lo is None or hi is None:
            return None, None
        return round(won / n, 4), [round(lo, 4), round(hi, 4)]

    races_share, races_ci = share(won_races, n_races)
    games_share, games_ci = share(won_games, decided)
    duration = summary["duration_s"]
    fast_plays = summary["confirm_ms_by_seat"][str(fast)]["n"]
    return {
        "delay_ms": round(imp[str(slow)]["delay_ms"] - imp[str(fast)]["delay_ms"], 3),
        "order": summary["order"],
        "slow_seat": slow,
        "races": n_races,
        "races_won": won_races,
        "races_share": races_share,
        "races_ci95": races_ci,
        "races_void": summary["races_void"],
        "games": summary["games"],
        "games_decided": decided,
        "games_won": won_games,
        "games_share": games_share,
        "games_ci95": games_ci,
        "ties": summary["ties"],
        "duration_s": duration,
        "fast_confirm_ms": _p(summary["confirm_ms_by_seat"][str(fast)]),
        "slow_confirm_ms": _p(summary["confirm_ms_by_seat"][str(slow)]),
        "fast_plays_per_s": round(fast_plays / duration, 3) if duration > 0 else None,
        "fast_pace": summary.get("plays_per_playable_s", {}).get(str(fast)),
        "fast_pace_change": None,
        "fast_parts_ms": summary.get("parts_ms", {}).get(str(fast)),
        "slow_parts_ms": summary.get("parts_ms", {}).get(str(slow)),
        "hold_ms": _p(summary["hold_ms"]),
        "fast_added_ms": {"p50": None, "p99": None},
    }


def add_fast_cost(steps: list[StepFigures]) -> list[StepFigures]:
    """Fill in each step's ``fast_added_ms``: the fast seat's confirmation p50 and p99 minus those of
    arrival order at the same delay (0 for arrival order itself; None without an arrival step), and
    ``fast_pace_change``: its plays per second while it had a playable card, against arrival
    order's at the same delay (-0.03: 3 % fewer)."""
    base = {s["delay_ms"]: s["fast_confirm_ms"] for s in steps if s["order"] == "arrival"}
    pace = {s["delay_ms"]: s.get("fast_pace") for s in steps if s["order"] == "arrival"}
    for s in steps:
        ref_pace, own = pace.get(s["delay_ms"]), s.get("fast_pace")
        s["fast_pace_change"] = round(own / ref_pace - 1, 4) if own is not None and ref_pace else None
        ref = base.get(s["delay_ms"])
        added: Quantiles = {"p50": None, "p99": None}
        if ref is not None:
            for q in QUANTILES:
                x, y = s["fast_confirm_ms"][q], ref[q]
                added[q] = None if x is None or y is None else round(x - y, 3)
        s["fast_added_ms"] = added
    return steps


def slow_seat(impairments: Sequence[SeatImpairment]) -> int:
    """The seat with the longer delay (seat 1 when they are equal, as in a sweep's first step)."""
    return 0 if impairments[0].delay_s > impairments[1].delay_s else 1


# ---------------------------------------------------------------------------- the run


@dataclass
class LatencyConfig:
    server: str | None = None  # broker URL with a relay; None: start a local one
    trust: TLSTrust = field(default_factory=TLSTrust)  # whom an mqtts:// server believes (--ca, --insecure)
    game: str = "blink"
    matches: int = 4
    duration_s: float = 10.0
    impairments: list[SeatImpairment] = field(default_factory=lambda: [SeatImpairment()] * SEATS)
    order: Order = "arrival"
    reaction_s: float = 0.35
    seed: int | None = None
    fair_cap_ms: float | None = None  # local relay only
    settings: dict[str, object] | None = None  # game settings; default: the game's quick_settings
    games: int | None = None  # stop once this many games have finished (duration_s stays a cap)
    log_path: str | None = None  # local relay: its event log, after a header with the impairment profile


class RecordingClock(ClockFilter):
    """The usual clock filter, which also keeps every sample it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.all: list[Sample] = []

    def add(self, s: Sample) -> None:
        self.all.append(s)
        super().add(s)


@dataclass
class SeatData:
    seat: int
    rtt_ns: list[int]
    offset_ns: int | None
    playable_ns: int = 0  # how long its view showed a card it could play (its pace is measured over this)


@dataclass
class LatencyResult:
    config: LatencyConfig
    server_url: str
    local: bool
    duration_s: float
    codes: list[str]
    events: list[m.Event]
    plays: list[PlayRecord]
    seats: list[SeatData]
    stopped_early: bool = False

    # -- derived -------------------------------------------------------------------------------

    def races(self) -> RaceCount:
        return count_races(self.events, self.plays)

    def rtt_ns(self, seat: int | None = None) -> list[int]:
        return [x for s in self.seats if seat is None or s.seat == seat for x in s.rtt_ns]

    def confirm_ns(self, seat: int | None = None) -> list[int]:
        return [p.confirm_ns for p in self.plays
                if p.confirm_ns is not None and (seat is None or p.seat == seat)]

    def playable_ns(self, seat: int) -> int:
        return sum(s.playable_ns for s in self.seats if s.seat == seat)

    def pace(self, seat: int) -> float | None:
        """A seat's plays per second while its view showed a card it could play."""
        t = self.playable_ns(seat)
        return round(sum(1 for p in self.plays if p.seat == seat) / (t / 1e9), 3) if t > 0 else None

    def hold_ns(self) -> list[int]:
        return [p.hold_ns for p in self.plays if p.ok and p.hold_ns is not None]

    def games(self) -> tuple[int, dict[int, int], int]:
        """Finished games, wins per seat, ties."""
        games, ties = 0, 0
        wins = {s: 0 for s in range(SEATS)}
        for result in (MATCH_EVENTS.read(ev) for ev in self.events):
            if not isinstance(result, GameResult):
                continue
            games += 1
            winners = result.winners
            if len(winners) == 1 and winners[0] in wins:
                wins[winners[0]] += 1
            else:
                ties += 1
        return games, wins, ties

    def log_gaps(self) -> int:
        gaps = 0
        by_match: dict[str, list[int]] = {}
        for ev in self.events:
            by_match.setdefault(ev.match, []).append(ev.seq)
        for seqs in by_match.values():
            s = sorted(set(seqs))
            gaps += (s[-1] - s[0] + 1) - len(s) + (s[0] - 1)
        return gaps

    def summary(self) -> Summary:
        answered = [p for p in self.plays if p.answered_ns is not None]
        rejected = Counter(p.code or "?" for p in answered if not p.ok)
        races = self.races()
        games, wins, ties = self.games()
        offsets: dict[str, float | None] = {}
        for seat in range(SEATS):
            vals = [s.offset_ns for s in self.seats if s.seat == seat and s.offset_ns is not None]
            offsets[str(seat)] = round(statistics.median(vals) / 1e6, 3) if vals else None
        total_races = races.races
        out: Summary = {
            "game": self.config.game,
            "order": self.config.order,
            "server": "local" if self.local else self.server_url,
            "matches": self.config.matches,
            "duration_s": round(self.duration_s, 3),
            "reaction_s": self.config.reaction_s,
            "seed": self.config.seed,
            "impairment": {str(i): imp.to_json() for i, imp in enumerate(self.config.impairments)},
            "rtt_ms": percentiles_ms(self.rtt_ns()),
            "confirm_ms": percentiles_ms(self.confirm_ns()),
            "rtt_ms_by_seat": {str(s): percentiles_ms(self.rtt_ns(s)) for s in range(SEATS)},
            "confirm_ms_by_seat": {str(s): percentiles_ms(self.confirm_ns(s)) for s in range(SEATS)},
            "hold_ms": percentiles_ms(self.hold_ns()),
            "parts_ms": {str(s): parts_ms(self.plays, s) for s in range(SEATS)},
            "parts_confirm_ms": {str(s): parts_confirm_ms(self.plays, s) for s in range(SEATS)},
            "playable_s": {str(s): round(self.playable_ns(s) / 1e9, 3) for s in range(SEATS)},
            "plays_per_playable_s": {str(s): self.pace(s) for s in range(SEATS)},
            "clock_offset_ms": offsets,
            "plays": len(self.plays),
            "verdicts": len(answered),
            "unanswered": len(self.plays) - len(answered),
            "accepted": sum(1 for p in answered if p.ok),
            "rejected": dict(sorted(rejected.items())),
            "races": races.to_json(),
            "race_count": total_races,
            "races_void": races.void,
            "race_share": {str(s): (round(races.won[s] / total_races, 4) if total_races else None)
                           for s in range(SEATS)},
            "games": games,
            "wins": {str(s): wins[s] for s in range(SEATS)},
            "ties": ties,
            "log_gaps": self.log_gaps(),
        }
        if self.stopped_early:
            out["stopped_early"] = True
        return out


Progress = Callable[[float, float, dict[str, int]], None]


@dataclass
class Playable:
    """A seat's time with a playable card in view: the closed spells' sum, and since when the open
    one runs (None: no playable card now)."""

    closed_ns: int = 0
    since_ns: int | None = None


class _Slot:
    """One running match: two instrumented players and their bots; rematches when it ends."""

    def __init__(self, index: int, address: BrokerAddress, topics: Topics, cfg: LatencyConfig,
                 plays: list[PlayRecord]) -> None:
        from client.player import Player

        self.index = index
        self.cfg = cfg
        self.plays = plays
        self.players: list[Player] = []
        self.playable: dict[int, Playable] = {}
        for seat in range(SEATS):
            imp = cfg.impairments[seat]
            seed = None if cfg.seed is None else cfg.seed * 1000 + index * 10 + seat
            impairment = ProfileImpairment(imp, seed)
            player = Player(address, f"lat{index}s{seat}", topics, impairment,  # type: ignore[arg-type]
                            ping_interval_s=PING_INTERVAL_S)
            player.model.clock = RecordingClock()
            self._instrument(player, seat)
            self.players.append(player)
        self.code: str | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.rematches = 0

    def _instrument(self, player: Player, seat: int) -> None:
        mine: dict[int, PlayRecord] = {}
        deliver = player.conn.on_message
        model = player.model
        # Time with a playable card in view: from the view's change that gave one to the change that
        # took the last away (each message and each play may change it).
        playable = self.playable[seat] = Playable()

        def note_playable(now_ns: int) -> None:
            state, me, rules = model.state(), model.seat, model.rules
            can = (state is not None and me is not None and rules is not None
                   and any(type(a).__name__ == "PlayCard" for a in rules.legal_actions(state, me)))
            if can and playable.since_ns is None:
                playable.since_ns = now_ns
            elif not can and playable.since_ns is not None:
                playable.closed_ns += now_ns - playable.since_ns
                playable.since_ns = None

        showing: list[PlayRecord] = []  # accepted plays the confirmed view does not show yet

        def on_message(msg: object, now_ns: int) -> None:
            if isinstance(msg, (m.ActionAccepted, m.ActionRejected)):
                rec = mine.get(msg.id)
                if rec is not None and rec.answered_ns is None and msg.match == rec.match:
                    rec.answered_ns = now_ns
                    rec.hold_ns, rec.recv_ns, rec.relay_sent_ns = msg.hold_ns, msg.recv_ns, msg.sent_ns
                    rec.offset_ns = model.clock.offset_ns
                    if isinstance(msg, m.ActionAccepted):
                        rec.ok, rec.code, rec.accepted_seq = True, "accepted", msg.seq
                        showing.append(rec)
                    else:
                        rec.ok, rec.code = False, msg.code
                        rec.drawn_ns = now_ns  # a bounce shows as soon as its verdict is in
            deliver(msg, now_ns)
            note_playable(now_ns)
            if showing:
                confirmed = model.predictor.confirmed_seq if model.predictor else -1
                for rec in [r for r in showing if r.match == model.match and (r.accepted_seq or 0) <= confirmed]:
                    rec.drawn_ns = now_ns
                    showing.remove(rec)

        async def act(action: object, seen_seq: int | None = None) -> m.Act | Rejected:
            # Player.act, plus a record of the play (the same steps, in the same order).
            now = time.time_ns()
            result = model.act(action, now, seen_seq=seen_seq)
            if isinstance(result, m.Act) and model.match:
                rec = PlayRecord(match=model.match, seat=model.seat if model.seat is not None else seat, id=result.id,
                                 seq=result.seq, kind=type(action).__name__, pile=getattr(action, "pile", None),
                                 card=getattr(action, "card", None), sent_ns=now, reaction_ns=result.reaction_ns)
                mine[result.id] = rec
                self.plays.append(rec)
                await player.conn.act(model.match, result)
            note_playable(time.time_ns())
            player.changed.set()
            return result

        player.conn.on_message = on_message
        player.act = act  # type: ignore[method-assign]  # the same steps, and a record of the play

    async def open(self, settings: dict[str, object]) -> None:
        for p in self.players:
            await p.__aenter__()
        self.code = await self.players[0].create(self.cfg.game, settings, seats=SEATS)
        await self.players[1].join(self.code)

    def start(self, stop: asyncio.Event) -> None:
        from client.bots import Bot

        for seat, p in enumerate(self.players):
            seed = None if self.cfg.seed is None else self.cfg.seed * 1000 + self.index * 10 + 5 + seat
            bot = Bot(p, reaction_s=self.cfg.reaction_s, seed=seed)
            self.tasks.append(asyncio.create_task(bot.run(until_over=False, stop=stop)))

    async def rematch(self) -> None:
        self.rematches += 1
        await asyncio.gather(*(p.rematch() for p in self.players), return_exceptions=True)

    stopped_ns = 0  # when the bots were told to stop: a playable stretch still open ends there

    async def stop(self) -> None:
        from mqttkit import stop_task

        self.stopped_ns = time.time_ns()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=0.6)
        for t in self.tasks:
            await stop_task(t)

    def seat_data(self) -> list[SeatData]:
        out = []
        for seat, p in enumerate(self.players):
            clock = p.model.clock
            samples = clock.all if isinstance(clock, RecordingClock) else list(clock.samples)
            real_seat = p.model.seat if p.model.seat is not None else seat
            playing = self.playable.get(seat, Playable())
            closed, since = playing.closed_ns, playing.since_ns
            if since is not None and self.stopped_ns:
                closed += max(0, self.stopped_ns - since)
            out.append(SeatData(real_seat, [s.delay_ns for s in samples], clock.offset_ns, closed))
        return out

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.players), return_exceptions=True)


def _friendly(exc: BaseException, url: str) -> LatencyError:
    from client.player import RequestError

    if isinstance(exc, LatencyError):
        return exc
    if isinstance(exc, RequestError):
        if exc.code == "timeout":
            return LatencyError(f"no relay answered on {url}: is `blink serve` running on that broker?")
        return LatencyError(f"the relay refused: {exc}")
    if isinstance(exc, ImportError) and "fair" in str(exc):
        return LatencyError("fair ordering is not available in this relay build")
    if isinstance(exc, (ConnectionError, OSError)):
        text = str(exc) or type(exc).__name__
        return LatencyError(text if "broker" in text else f"cannot reach the MQTT broker at {url}: {text}")
    try:
        import aiomqtt

        if isinstance(exc, aiomqtt.MqttError):
            return LatencyError(f"cannot reach the MQTT broker at {url}: {exc}")
    except ImportError:  # pragma: no cover
        pass
    return LatencyError(f"{type(exc).__name__}: {exc}")


def match_settings(cfg: LatencyConfig, remote: bool) -> dict[str, object]:
    settings = dict(cfg.settings) if cfg.settings is not None else dict(game_for(cfg.game).quick_settings)
    if remote:
        settings["order"] = cfg.order  # the relay takes the ordering per match and strips it from the game's
    return settings


async def run_latency(cfg: LatencyConfig, topics: Topics | None = None, progress: Progress | None = None,
                      stop_early: asyncio.Event | None = None) -> LatencyResult:
    """Run the whole measurement; raises ``LatencyError`` (one line) for anything a user can fix."""
    from mqttkit import parse_url

    topics = topics or Topics()
    url = cfg.server or "the local relay"
    server: LocalServer | None = None
    try:
        if cfg.server is None:
            from relay import RelayConfig
            from relay.hosting import LocalServer, temporary_data_dir

            rc = RelayConfig(order=cfg.order)
            if cfg.fair_cap_ms is not None:
                rc.fair_cap_ns = int(cfg.fair_cap_ms * 1e6)
            # A private journal directory (removed afterwards): the measured relay journals as a served one does.
            if cfg.log_path is not None:
                write_header(cfg)
            server = LocalServer(None, cfg.seed, rc, log_path=cfg.log_path, topics=topics, data_dir=temporary_data_dir(),
                                 remove_data_dir=True)
            await server.__aenter__()
            address = server.address
            url = address.url
        else:
            address = parse_url(cfg.server, cfg.trust)
        try:
            return await _measure(cfg, address, url, topics, progress, stop_early, local=server is not None)
        finally:
            if server is not None:
                await server.__aexit__(None, None, None)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - one readable line for the user
        raise _friendly(exc, url) from exc


async def _measure(cfg: LatencyConfig, address: BrokerAddress, url: str, topics: Topics, progress: Progress | None,
                   stop_early: asyncio.Event | None, local: bool) -> LatencyResult:
    from client.net import Connection, new_client_id

    events: list[m.Event] = []
    plays: list[PlayRecord] = []
    slots: dict[str, _Slot] = {}
    background: set[asyncio.Task[None]] = set()
    stopping = False

    def on_spectated(msg: object, now_ns: int) -> None:
        if not isinstance(msg, m.Event):
            return
        events.append(msg)
        slot = slots.get(msg.match)
        if slot is not None and isinstance(MATCH_EVENTS.read(msg), MatchOver) and not stopping:
            task = asyncio.ensure_future(slot.rematch())
            background.add(task)
            task.add_done_callback(background.discard)

    spectator = Connection(address, new_client_id("lat"), topics, on_spectated, ping_interval_s=0)
    await spectator.__aenter__()
    all_slots = [_Slot(i, address, topics, cfg, plays) for i in range(cfg.matches)]
    try:
        await spectator.watch_all()
        settings = match_settings(cfg, remote=not local)
        # Open the slots a few at a time: a burst of many connections at once can stall a small broker.
        for i in range(0, len(all_slots), 8):
            batch = all_slots[i:i + 8]
            await asyncio.gather(*(s.open(settings) for s in batch))
            for s in batch:
                assert s.code is not None
                slots[s.code] = s
        stop = asyncio.Event()
        started = time.monotonic()
        for s in all_slots:
            s.start(stop)
        early = False
        while True:
            elapsed = time.monotonic() - started
            finished = sum(1 for e in events if e.match in slots and isinstance(MATCH_EVENTS.read(e), GameResult))
            if progress is not None:
                stats = {"games": finished, "plays": len(plays)}
                if cfg.games is not None:
                    stats["games_target"] = cfg.games
                progress(elapsed, cfg.duration_s, stats)
            if elapsed >= cfg.duration_s or (cfg.games is not None and finished >= cfg.games):
                break
            if stop_early is not None and stop_early.is_set():
                early = True
                break
            crashed = [t for s in all_slots for t in s.tasks if t.done() and not t.cancelled() and t.exception()]
            if crashed:
                raise crashed[0].exception()  # type: ignore[misc]
            await asyncio.sleep(min(0.2, max(0.0, cfg.duration_s - elapsed)))
        duration = time.monotonic() - started
        stopping = True
        stop.set()
        await asyncio.gather(*(s.stop() for s in all_slots))
        # Verdicts still in flight: the added delay both ways (reordering can double it), a fair hold.
        worst = max(2 * (2 * (i.delay_s + i.jitter_s)) for i in cfg.impairments)
        await asyncio.sleep(min(3.0, 0.3 + worst + (0.2 if cfg.order == "fair" else 0.0)))
        for t in list(background):
            t.cancel()
        seats = [d for s in all_slots for d in s.seat_data()]
        mine = [e for e in events if e.match in slots]
        return LatencyResult(cfg, url, local, duration, list(slots), mine, plays, seats, stopped_early=early)
    finally:
        stopping = True
        for s in all_slots:
            for t in s.tasks:
                if not t.done():
                    t.cancel()
        await asyncio.gather(*(s.close() for s in all_slots), return_exceptions=True)
        await spectator.close(leave=False)


def run_blocking(cfg: LatencyConfig, topics: Topics | None = None, progress: Progress | None = None) -> LatencyResult:
    """``run_latency`` in a fresh event loop; Ctrl-C ends the measurement early (results are kept)."""

    async def main() -> LatencyResult:
        early = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, early.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        try:
            return await run_latency(cfg, topics, progress, early)
        finally:
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    return asyncio.run(main())


# ---------------------------------------------------------------------------- output


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _cell(v: float | None, width: int = 9) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.3f}"


def format_table(s: Summary) -> str:
    lines = []
    where = "local relay (embedded broker)" if s["server"] == "local" else s["server"]
    lines.append(f"blink latency: {s['matches']} match{'es' if s['matches'] != 1 else ''} of {s['game']} for {s['duration_s']:.1f} s, "
                 f"{s['order']} order, {where}, bot reaction {s['reaction_s']:g} s")
    for seat in ("0", "1"):
        imp = s["impairment"][seat]
        rate = f", at most {imp['rate_per_s']:g} messages/s" if imp.get("rate_per_s") else ""
        lines.append(f"  seat {seat}: delay {imp['delay_ms']:g} ms, jitter {imp['jitter_ms']:g} ms "
                     f"({imp.get('jitter_dist', 'uniform')}), loss {imp['loss'] * 100:g}%, "
                     f"reorder {imp['reorder'] * 100:g}%{rate} (each way)")
    lines.append("")
    lines.append(f"{'':22}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}{'n':>8}")

    def row(label: str, p: Percentiles) -> None:
        lines.append(f"{label:22}{_cell(p['p50'])}{_cell(p['p90'])}{_cell(p['p99'])}{_cell(p['max'])}{p['n']:>8}")

    row("round trip (ms)", s["rtt_ms"])
    for seat in ("0", "1"):
        row(f"  seat {seat}", s["rtt_ms_by_seat"][seat])
    row("play -> verdict (ms)", s["confirm_ms"])
    for seat in ("0", "1"):
        row(f"  seat {seat}", s["confirm_ms_by_seat"][seat])
    if s["order"] == "fair" and s["hold_ms"]["n"]:
        row("fair hold (ms)", s["hold_ms"])
    parts, whole = s.get("parts_ms", {}), s.get("parts_confirm_ms", {})
    if any(seat in whole and whole[seat]["n"] for seat in ("0", "1")):
        lines.append("")
        lines.append("a play's time in parts, mean (p50/p99) ms: " + ", ".join(PARTS))
        for seat in ("0", "1"):
            ps, cs = parts[seat], whole[seat]
            if not cs["n"]:
                continue
            cells = "  ".join(f"{name} {_num(ps[name]['mean'])} ({_num(ps[name]['p50'])}/{_num(ps[name]['p99'])})"
                              for name in PARTS)
            lines.append(f"  seat {seat}: {cells}; confirmation {_num(cs['mean'])} (n={cs['n']})")
    off = s["clock_offset_ms"]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:+.3f}"

    lines.append(f"clock offset (ms)     seat 0 {fmt(off['0'])}   seat 1 {fmt(off['1'])}")
    lines.append("")
    rej = ", ".join(f"{k} {v}" for k, v in s["rejected"].items()) or "none"
    lines.append(f"plays {s['plays']}: accepted {s['accepted']}, rejected {sum(s['rejected'].values())} ({rej}), "
                 f"unanswered {s['unanswered']}")
    n = s["race_count"]
    r = s["races"]
    if n:
        seats = []
        for seat in ("0", "1"):
            lo, hi = wilson(r[seat]["won"], n)
            seats.append(f"seat {seat} won {r[seat]['won']} ({r[seat]['won'] / n:.0%}, 95% CI {lo:.0%}-{hi:.0%})")
        lines.append(f"races {n}: " + ", ".join(seats) + (f"; {s['races_void']} undecided" if s["races_void"] else ""))
    else:
        lines.append("races 0")
    lines.append(f"games {s['games']}: seat 0 won {s['wins']['0']}, seat 1 won {s['wins']['1']}, ties {s['ties']}")
    if s.get("log_gaps"):
        lines.append(f"warning: {s['log_gaps']} public events were missed by the log; races may be undercounted")
    return "\n".join(lines)


#: summary keys every run of one ``blink latency`` command has alike (``json_report``)
SharedKey = Literal["game", "server", "matches", "reaction_s", "seed"]
SHARED_KEYS: tuple[SharedKey, ...] = ("game", "server", "matches", "reaction_s", "seed")


def json_report(summaries: Sequence[Summary], steps: Sequence[StepFigures]) -> Report | RunsReport:
    """The ``--json`` object: a single run's keys at the top level, or, with several runs, every
    run under ``runs`` (and only what they share at the top level); ``sweep`` either way."""
    if len(summaries) == 1:
        return {**summaries[0], "sweep": list(steps)}
    first = summaries[0]

    def alike(key: SharedKey) -> bool:
        return key in first and all(s.get(key) == first[key] for s in summaries)

    shared: SharedFigures = {}
    if alike("game"):
        shared["game"] = first["game"]
    if alike("server"):
        shared["server"] = first["server"]
    if alike("matches"):
        shared["matches"] = first["matches"]
    if alike("reaction_s"):
        shared["reaction_s"] = first["reaction_s"]
    if alike("seed"):
        shared["seed"] = first["seed"]
    return {**shared, "runs": list(summaries), "sweep": list(steps)}


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(result: LatencyResult, summary: Summary, path: str) -> None:
    """A PNG: CDFs of round trip and play->verdict (per seat), race and game win rates per seat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    colours = ["tab:blue", "tab:orange"]

    def cdf(ax: Axes, values_ns: Sequence[int], label: str, colour: str, style: str = "-") -> None:
        xs = sorted(v / 1e6 for v in values_ns)
        if not xs:
            return
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{label} (n={len(xs)})", color=colour, linestyle=style)

    ax = axes[0]
    for seat in range(SEATS):
        cdf(ax, result.rtt_ns(seat), f"seat {seat}", colours[seat])
    ax.set_title("Round trip to the relay (pings)")
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction <= x")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)

    ax = axes[1]
    for seat in range(SEATS):
        cdf(ax, result.confirm_ns(seat), f"seat {seat}", colours[seat])
    if summary["order"] == "fair" and summary["hold_ms"]["n"]:
        cdf(ax, result.hold_ns(), "fair hold", "tab:gray", "--")
    ax.set_title("Play -> verdict (confirmation)")
    ax.set_xlabel("ms")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)

    ax = axes[2]
    n_races = summary["race_count"]
    n_games = summary["games"] - summary["ties"]
    width = 0.38
    for seat in range(SEATS):
        rates, errs_lo, errs_hi = [], [], []
        for won, n in ((summary["races"][str(seat)]["won"], n_races), (summary["wins"][str(seat)], n_games)):
            rate = won / n if n else 0.0
            lo, hi = wilson(won, n)
            rates.append(rate)
            errs_lo.append(rate - (lo if lo is not None else rate))
            errs_hi.append((hi if hi is not None else rate) - rate)
        xs = [i + (seat - 0.5) * width for i in range(2)]
        imp = summary["impairment"][str(seat)]
        bars = ax.bar(xs, rates, width, yerr=[errs_lo, errs_hi], capsize=4, color=colours[seat],
                      label=f"seat {seat} (+{imp['delay_ms']:g} ms each way)")
        for b, rate in zip(bars, rates):
            inside = rate >= 0.1
            ax.text(b.get_x() + b.get_width() / 2, 0.02 if inside else rate + 0.02, f"{rate:.0%}", ha="center",
                    va="bottom", fontsize=8, color="white" if inside else "black")
    if not n_games:
        ax.text(1, 0.5, "no game finished\n(a longer --duration)", ha="center", va="center", fontsize=8, color="gray")
    ax.axhline(0.5, color="black", linewidth=0.8, linestyle=":")
    ax.set_xticks([0, 1], [f"races won (n={n_races})", f"games won (n={n_games})"])
    ax.set_ylim(0, 1.22)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_title(f"Win rates, {summary['order']} order (95% CI)")
    ax.legend(loc="upper center", fontsize=8, ncol=2)
    parts_panel(axes[3], summary)
    fig.suptitle(f"blink latency: {summary['matches']} matches, {summary['duration_s']:.0f} s, "
                 f"{summary['order']} order", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


PART_COLOURS = {"uplink": "tab:blue", "held": "tab:red", "judging": "tab:purple", "downlink": "tab:cyan",
                "drawing": "tab:olive"}


def parts_panel(ax: Axes, summary: Summary) -> None:
    """A play's time in parts, stacked per seat (means), with the confirmation mean marked."""
    seats = [str(s) for s in range(SEATS)]
    bottoms = [0.0] * SEATS
    for name in PARTS:
        heights = [summary["parts_ms"][s][name]["mean"] or 0.0 for s in seats]
        ax.bar(range(SEATS), heights, 0.55, bottom=bottoms, color=PART_COLOURS[name], label=name)
        for i, h in enumerate(heights):
            if h >= 8:
                ax.text(i, bottoms[i] + h / 2, f"{h:.0f}", ha="center", va="center", fontsize=8, color="white")
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, s in enumerate(seats):
        mean = summary["parts_confirm_ms"][s]["mean"]
        if mean is not None:
            ax.plot([i - 0.35, i + 0.35], [mean, mean], color="black", linewidth=1.2, linestyle="--",
                    label="confirmation (mean)" if i == 0 else None)
    labels = []
    for s in seats:
        imp = summary["impairment"][s]
        labels.append(f"seat {s} (+{imp['delay_ms']:g} ms)\nn={summary['parts_confirm_ms'][s]['n']}")
    ax.set_xticks(range(SEATS), labels)
    ax.set_ylabel("ms (mean)")
    ax.set_title("A play's time in parts")
    ax.set_ylim(0, max([*bottoms, 1.0]) * 1.35)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper left", fontsize=7, ncol=3)


def _share_cell(share: float | None, ci: list[float] | None, won: int, n: int) -> str:
    if share is None or ci is None:
        return "-  (n=0)"
    return f"{share:6.1%} [{ci[0]:5.1%}-{ci[1]:5.1%}] {won}/{n}"


def _pace(pace: float | None, change: float | None) -> str:
    if pace is None:
        return "-"
    return f"{pace:.2f}" + ("" if change is None else f" ({change:+.1%})")


def format_sweep(steps: Sequence[StepFigures]) -> str:
    """The sweep as a table: one row per step (delay, order)."""

    def ms(v: float | None, signed: bool = False) -> str:
        return "-" if v is None else (f"{v:+.1f}" if signed else f"{v:.1f}")

    lines = [f"{'+ms':>6} {'order':8} {'slow seat: races won [95% CI] won/n':38} "
             f"{'slow seat: games won [95% CI] won/n':38} {'fast confirm p50/p99':21} {'fast added p50/p99':19}"
             f"{'fast pace':>10}"]
    for s in steps:
        fc, fa = s["fast_confirm_ms"], s["fast_added_ms"]
        lines.append(f"{s['delay_ms']:>6g} {s['order']:8} "
                     f"{_share_cell(s['races_share'], s['races_ci95'], s['races_won'], s['races']):38} "
                     f"{_share_cell(s['games_share'], s['games_ci95'], s['games_won'], s['games_decided']):38} "
                     f"{ms(fc['p50']) + '/' + ms(fc['p99']):21} "
                     f"{ms(fa['p50'], True) + '/' + ms(fa['p99'], True):19}"
                     f"{_pace(s.get('fast_pace'), s.get('fast_pace_change')):>10}")
    lines.append("")
    lines.append("seat 1 is +ms slower each way; games won counts decided games (ties left out); fast added is "
                 "the fast seat's confirmation minus arrival order's at the same delay; fast pace is its plays "
                 "per second while it had a playable card (against arrival order's)")
    return "\n".join(lines)


def _share(step: StepFigures, what: Literal["races", "games"]) -> tuple[float, list[float]] | None:
    """The slow seat's share of races or of games in a step, with its 95% interval; None without one."""
    share, ci = ((step["races_share"], step["races_ci95"]) if what == "races"
                 else (step["games_share"], step["games_ci95"]))
    return None if share is None or ci is None else (share, ci)


def delay_axis(delays_ms: Sequence[float]) -> tuple[float, float, float]:
    """(left, right, dodge) of the curves' x axis: from no difference (0 ms) to the largest one with
    a margin, never the few-ms span matplotlib gives one value alone (96-104 for a single +100 ms
    run); ``dodge`` sets the orders a little apart, so that a point is never hidden under another
    order's point at the same delay."""
    hi = max([50.0, *delays_ms])
    lo = min([0.0, *delays_ms])
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad, (hi - lo) * 0.012


def sweep_figure(steps: Sequence[StepFigures]) -> Figure:
    """The fairness curves as a matplotlib figure (``plot_sweep`` saves it): the slow seat's share
    of races and of games against the latency difference (95% intervals), and the fast seat's added
    confirmation time; one curve per order, each order's points a little apart (``delay_axis``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    colours = {"arrival": "tab:blue", "fair": "tab:green"}
    markers = {"arrival": "o", "fair": "s"}
    orders = [o for o in ORDERS if any(s["order"] == o for s in steps)]
    left, right, dodge = delay_axis([s["delay_ms"] for s in steps])
    shift = {o: (k - (len(orders) - 1) / 2) * dodge * 2 for k, o in enumerate(orders)}
    panels: tuple[tuple[Axes, Literal["races", "games"], str], ...] = (
        (axes[0], "races", "Slow seat's share of races"), (axes[1], "games", "Slow seat's share of games"))
    for ax, what, title in panels:
        for order in orders:
            points = [(s["delay_ms"] + shift[order], figure) for s in steps
                      if s["order"] == order and (figure := _share(s, what)) is not None]
            xs = [x for x, _ in points]
            ys = [share for _, (share, _) in points]
            lo = [share - ci[0] for _, (share, ci) in points]
            hi = [ci[1] - share for _, (share, ci) in points]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker=markers[order], capsize=4, color=colours[order],
                        label=f"{order} order")
        ax.axhline(0.5, color="black", linewidth=0.8, linestyle=":")
        ax.set_ylim(0, 1)
        ax.set_xlim(left, right)
        ax.set_title(f"{title} (95% CI)")
        ax.set_xlabel("seat 1 slower by, ms each way")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", fontsize=8)
    ax = axes[2]
    for order in orders:
        if order == "arrival":
            continue  # the reference: 0 by definition, the dotted line
        for q, style in zip(QUANTILES, ("-", "--")):
            pts = [s for s in steps if s["order"] == order and s["fast_added_ms"][q] is not None]
            if pts:
                ax.plot([s["delay_ms"] for s in pts], [s["fast_added_ms"][q] for s in pts], marker=markers[order],
                        linestyle=style, color=colours[order], label=f"{order} order, {q}")
    ax.axhline(0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlim(left, right)
    ax.set_title("Fast seat's added confirmation time")
    ax.set_xlabel("seat 1 slower by, ms each way")
    ax.set_ylabel("ms against arrival order")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    n_games = sum(s["games"] for s in steps)
    fig.suptitle(f"blink latency: fairness curve, {len(steps)} runs, {n_games} games", fontsize=11)
    fig.tight_layout()
    return fig


def plot_sweep(steps: Sequence[StepFigures], path: str) -> None:
    """A PNG of the fairness curves (``sweep_figure``)."""
    import matplotlib.pyplot as plt

    fig = sweep_figure(steps)
    fig.savefig(path, dpi=100)
    plt.close(fig)
