"""A game is nothing but a ``Game``: the toy game of tests/toygame.py, registered for the test only,
is played to the end by two bots through the real relay (shell + core) and a real broker, and its bad
actions are rejected on the wire like the real games' -- with no change outside the tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterator

import pytest

from protocol import messages as m
from protocol.codec import encode
from protocol.rules import GAMES, game_for, register, unregister
from protocol.rules import blink
from mqttkit import BrokerAddress
from client import run_match
from relay.hosting import LocalServer
from client import Connection, new_client_id
from tests.toygame import TOY, State, Take

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0  # generous: a loaded machine is slow, never wrong


@pytest.fixture
def toy() -> Iterator[None]:
    assert register(TOY) is None  # a new name: it replaces nothing
    try:
        yield
    finally:
        unregister(TOY.name)
    assert TOY.name not in GAMES


async def until(check: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    """Wait for ``check()`` to return something true (polled), or fail saying what did not happen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def relay_trouble(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("code") == "internal_error" or r.get("kind") == "timer_refused"]


def test_the_registry_finds_the_toy_game_only_while_registered(toy: None) -> None:
    assert game_for("toy") is TOY
    assert TOY.seats_problem(3) == "Toy Pile is for 2 players, not 3"


@pytest.mark.parametrize("broker", ["embedded", "mosquitto"])
def test_two_bots_play_the_toy_game_to_the_end_through_the_relay(toy: None, broker: str,
                                                                 request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("mosquitto").login_url if broker == "mosquitto" else None

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with LocalServer(url, seed=3) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            result = await asyncio.wait_for(
                run_match(server.address, "toy", 2, {"pile": 7}, seed=1, reaction_s=0.0, timeout_s=DEADLINE_S),
                DEADLINE_S * 2)
            return result.summary(), server.relay.eventlog.records

    summary, records = asyncio.run(main())
    assert relay_trouble(records) == []
    assert summary["game"] == "toy" and summary["players"] == ["bot1", "bot2"]
    # From 7, the first to move can always leave a multiple of three: the bots' policy wins for seat 0.
    assert summary["winner"] == "bot1" and summary["match_result"] == "won"
    assert summary["games"] == [{"game": 0, "winner": "bot1", "winners": ["bot1"], "reason": "took_last"}]
    takes = [r for r in records if r.get("kind") == "event" and r.get("type") == "taken"]
    # 7 -> 6 (a multiple of three for bob) -> 5 -> 3 -> 2 -> 0: ann takes the last.
    assert [t["n"] for t in takes] == [1, 1, 2, 1, 2] and [t["left"] for t in takes] == [6, 5, 3, 2, 0]
    assert [t["seat"] for t in takes] == [0, 1, 0, 1, 0]
    assert summary["accepted"] == len(takes) and summary["rejected"] == {}


def test_bad_toy_actions_are_rejected_on_the_wire_and_change_nothing(toy: None) -> None:
    async def main() -> None:
        async with LocalServer(None, seed=5) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            inbox: dict[str, list[Any]] = {"a": [], "b": []}

            def collect(who: str) -> Callable[[Any, int], None]:
                return lambda msg, now: inbox[who].append(msg)

            a = Connection(server.address, new_client_id("a"), on_message=collect("a"), ping_interval_s=0)
            b = Connection(server.address, new_client_id("b"), on_message=collect("b"), ping_interval_s=0)
            async with a, b:
                await a.request(m.CreateMatch(name="ann", game="toy", settings={"pile": 4}))
                joined = await until(lambda: next((x for x in inbox["a"] if isinstance(x, m.MatchJoined)), None),
                                     "ann's seat")
                code = joined.match
                await b.request(m.JoinMatch(name="bob", match=code))

                def view(who: str) -> m.ViewUpdated | None:
                    return next((x for x in reversed(inbox[who]) if isinstance(x, m.ViewUpdated)), None)

                first = await until(lambda: view("a"), "the first view")
                assert TOY.from_wire(first.state).left == 4

                def verdict(who: str, action_id: int) -> Awaitable[Any]:
                    return until(lambda: next((x for x in inbox[who] if isinstance(x, (m.ActionAccepted,
                                 m.ActionRejected)) and x.id == action_id), None), f"the answer to {who}'s {action_id}")

                seq = first.seq
                bad: list[tuple[Connection, str, int, bytes, str]] = [
                    (a, "a", 1, encode(m.Act(1, seq, TOY.action_to_wire(Take(3)))), "bad_take"),  # more than 2
                    (b, "b", 1, encode(m.Act(1, seq, TOY.action_to_wire(Take(1)))), "not_your_turn"),
                    (a, "a", 2, encode(m.Act(2, seq, blink.action_to_wire(blink.PlayCard("1-red-star", 0)))),
                     "malformed"),  # another game's action
                    (a, "a", 3, encode(m.Act(3, seq, {"t": "ToyTake", "n": "two"})), "malformed"),
                    (a, "a", 4, encode(m.Act(4, seq + 5, TOY.action_to_wire(Take(1)))), "bad_seq"),
                ]
                for conn, who, action_id, payload, code_wanted in bad:
                    await conn.send_raw(conn.topics.act(code, conn.client_id), payload)
                    answer = await verdict(who, action_id)
                    assert isinstance(answer, m.ActionRejected) and answer.code == code_wanted, answer
                    assert answer.seq == seq  # nothing was applied
                await a.send_raw(a.topics.act(code, a.client_id), b"\x00not msgpack")
                await until(lambda: any(isinstance(x, m.ActionRejected) and x.code == "malformed" and x.id == -1
                                        for x in inbox["a"]), "the answer to garbage")

                # The state is as it was: a resync shows the same seq and state; then a good take lands
                # on top of it, as the next seq.
                before = len(inbox["a"])
                await a.request(m.Resync(code))
                again = await until(lambda: next((x for x in inbox["a"][before:] if isinstance(x, m.ViewUpdated)),
                                                 None), "the resynced view")
                assert (again.seq, again.state) == (first.seq, first.state)
                await a.send_raw(a.topics.act(code, a.client_id), encode(m.Act(9, seq, TOY.action_to_wire(Take(1)))))
                ok = await verdict("a", 9)
                assert isinstance(ok, m.ActionAccepted) and ok.seq == seq + 1
                after = await until(lambda: (v := view("b")) is not None and v.seq > seq and v, "the view after")
                assert TOY.from_wire(after.state) == State(left=3, turn=1)
            rejected = [r["code"] for r in server.relay.eventlog.records if r.get("kind") == "rejected"]
            assert sorted(rejected) == sorted(["bad_take", "not_your_turn", "malformed", "malformed", "bad_seq"])
            assert relay_trouble(server.relay.eventlog.records) == []

    asyncio.run(main())
