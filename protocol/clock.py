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


@dataclass
class ClockFilter:
    """Keeps the last ``window`` samples; the best is the one with the lowest delay."""

    window: int = 8
    samples: list[Sample] = field(default_factory=list)

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        if len(self.samples) > self.window:
            del self.samples[0]

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
