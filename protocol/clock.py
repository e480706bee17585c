"""Clock maths: round-trip time and clock offset from four-timestamp pings (the NTP formula).

How this works
--------------
A client sends ``Ping(t0)`` at t0 on its clock; the relay stamps t1 (receive) and t2 (send) on its
clock; the client notes t3 on receipt. Then

    delay  = (t3 - t0) - (t2 - t1)            the time spent on the network, both ways
    offset = ((t1 - t0) + (t2 - t3)) / 2      relay clock minus client clock

The offset is exact when the two legs are symmetric and off by at most delay/2 otherwise, so the
samples with the lowest delay are the most trustworthy: ``ClockFilter`` keeps the recent samples
and reports the offset of the lowest-delay one (as NTP's clock filter does).

Where the four stamps come from. A play is a ping already: the client notes when it sent the
``Act`` (t0) and when its verdict arrived (t3), and the verdict (``ActionAccepted`` /
``ActionRejected``) carries the relay's ``recv_ns`` (t1: the act arrived) and ``sent_ns`` (t2: the
verdict left). ``verdict_sample`` turns that into a sample -- the fair-order hold and the judging
lie between t1 and t2, so they cancel like a pong's turnaround. A verdict without both stamps
(a duplicate's remembered answer, which does not keep when the play first came; a relay that does
not stamp) gives none, and so does a play sent more than once (its t0 is the first send, the
answer may be to a later one). So a player that plays needs no pings: ``ping_due`` sends an
explicit ``Ping`` only while no sample came within the last ping period -- before the first play,
between games, while waiting for the other player -- and the round trip and offset on the HUD, in
``blink latency`` and the load generator come from plays and idle pings alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    delay_ns: int
    offset_ns: int
    at_ns: int  # client time the sample was taken (t3)


def sample(t0: int, t1: int, t2: int, t3: int) -> Sample:
    delay = (t3 - t0) - (t2 - t1)
    offset = ((t1 - t0) + (t2 - t3)) // 2
    return Sample(delay_ns=max(0, delay), offset_ns=offset, at_ns=t3)


def verdict_sample(sent_ns: int, recv_ns: int, relay_sent_ns: int, answered_ns: int, sends: int = 1) -> Sample | None:
    """The sample a play gives: sent at ``sent_ns`` and answered at ``answered_ns`` on the client's
    clock, arrived at ``recv_ns`` and answered at ``relay_sent_ns`` on the relay's (the verdict's
    stamps). None when the verdict lacks a stamp, the stamps are out of order, or the play was sent
    ``sends`` > 1 times (the answer may be to a resend: its t0 is unknown)."""
    if sends != 1 or recv_ns <= 0 or relay_sent_ns < recv_ns or answered_ns < sent_ns:
        return None
    return sample(sent_ns, recv_ns, relay_sent_ns, answered_ns)


def ping_due(last_sample_ns: int | None, now_ns: int, period_ns: int) -> bool:
    """Is an explicit ping due? Only while idle: no sample (a pong, a play's verdict) taken within
    the last ``period_ns``. A player that plays keeps its clock from its plays."""
    return last_sample_ns is None or now_ns - last_sample_ns >= period_ns


@dataclass
class ClockFilter:
    """Keeps the last ``window`` samples; the best is the one with the lowest delay."""

    window: int = 8
    samples: list[Sample] = field(default_factory=list)

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        if len(self.samples) > self.window:
            del self.samples[0]

    @property
    def last_ns(self) -> int | None:
        """When the newest sample was taken (client time), or None before the first."""
        return self.samples[-1].at_ns if self.samples else None

    def best(self) -> Sample | None:
        return min(self.samples, key=lambda s: s.delay_ns) if self.samples else None

    @property
    def rtt_ns(self) -> int | None:
        b = self.best()
        return b.delay_ns if b else None

    @property
    def offset_ns(self) -> int | None:
        b = self.best()
        return b.offset_ns if b else None

    def to_relay(self, client_ns: int) -> int:
        """A client timestamp expressed on the relay's clock (best estimate)."""
        return client_ns + (self.offset_ns or 0)
