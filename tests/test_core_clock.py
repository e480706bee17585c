"""The core's two clocks: ``now_ns`` (monotonic) times everything; ``wall_ns`` only stamps."""

from __future__ import annotations

from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay.core import LogRecord, Publish, RelayConfig, RelayCore

T = Topics()
S = 1_000_000_000
WALL = 1_764_000_000 * S  # a wall clock far from the monotonic one


def test_wall_clock_stamps_events_and_monotonic_clock_runs_timers() -> None:
    core = RelayCore(T, RelayConfig(), seed=3)
    out = core.handle(T.req("a"), encode(m.CreateMatch(name="ann")), 10, wall_ns=WALL)
    code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
    out = core.handle(T.req("b"), encode(m.JoinMatch(name="bob", match=code)), 20, wall_ns=WALL + 10)
    events = [o.msg for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Event)]
    assert events and all(e.ts == WALL + 10 for e in events)
    assert all(o.record["ts"] >= WALL for o in out if isinstance(o, LogRecord) and "ts" in o.record)
    deadline = core.next_deadline()
    assert deadline is not None and deadline < S * 10  # on the monotonic clock, not the wall's
    # The wall clock jumps back an hour: the countdown still ends on the monotonic clock.
    out = core.tick(deadline, wall_ns=WALL - 3600 * S)
    started = [o.msg for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Event) and o.msg.type == "race_started"]
    assert started and started[0].ts == WALL - 3600 * S  # stamped with the wall clock given


def test_tick_visits_only_due_matches() -> None:
    core = RelayCore(T, RelayConfig(max_open_per_client=10**6, max_waiting=10**6), seed=4)
    for i in range(50):
        out = core.handle(T.req(f"a{i}"), encode(m.CreateMatch(name="ann")), 1)
        code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
        core.handle(T.req(f"b{i}"), encode(m.JoinMatch(name="bob", match=code)), 1)
    # Every countdown is due at the same time: one tick starts all 50 races.
    at = core.next_deadline()
    assert at is not None
    out = core.tick(at)
    assert sum(1 for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Event)
               and o.msg.type == "race_started") == 50
    # Nothing due before the next deadline: a tick then does nothing at all.
    nxt = core.next_deadline()
    assert nxt is not None and nxt > at
    assert [o for o in core.tick(nxt - 1) if isinstance(o, Publish)] == []
