"""Sending less: a client that applies the public events plus its private updates holds exactly the
relay's view for its seat after every seq (and a spectator the public view), for random games."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from client.model import ClientModel
from protocol import messages as m
from protocol.codec import decode, encode
from protocol.rules import blink
from protocol.topics import Topics
from relay.core import Publish, RelayConfig, RelayCore

T = Topics()
S = 1_000_000_000


class Table:
    """A relay core, two players' models and a spectator's, fed every output in order (through the
    codec, as on the wire)."""

    def __init__(self, seed: int, game_settings: dict[str, Any]) -> None:
        self.core = RelayCore(T, RelayConfig(), seed=seed)
        self.now = 1
        self.models = {"a": ClientModel("a", "a"), "b": ClientModel("b", "b")}
        self.spectator = ClientModel("s", "s")
        self.ids = 0
        self.resyncs: list[tuple[str, Any]] = []
        out = self.core.handle(T.req("a"), encode(m.CreateMatch(name="ann", settings=game_settings)), self.now)
        self.code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
        self.spectator.spectate(self.code)
        self.deliver(out)
        self.send(T.req("b"), m.JoinMatch(name="bob", code=self.code))

    def deliver(self, out: list[Any]) -> None:
        for o in out:
            if not isinstance(o, Publish) or isinstance(o.msg, bytes):
                continue
            msg = decode(encode(o.msg))
            for client, model in self.models.items():
                if o.topic in (T.client(client), T.ev(self.code)):
                    for req in model.on_message(msg, self.now):
                        self.resyncs.append((client, req))
            if o.topic in (T.ev(self.code), T.snap(self.code)):
                for req in self.spectator.on_message(msg, self.now):
                    self.resyncs.append(("s", req))

    def send(self, topic: str, msg: Any) -> list[Any]:
        out = self.core.handle(topic, encode(msg), self.now)
        self.deliver(out)
        return out

    def tick(self, dt_ns: int) -> None:
        self.now += dt_ns
        self.deliver(self.core.tick(self.now))

    def check(self) -> None:
        match = self.core.matches[self.code]
        if match.state is None:
            return
        rules = match.rules
        for seat, client in enumerate(("a", "b")):
            p = self.models[client].predictor
            assert p is not None and p.confirmed_seq == match.seq, (client, p and p.confirmed_seq, match.seq)
            assert rules.to_wire(p.confirmed) == rules.to_wire(rules.view(match.state, seat)), client
        sp = self.spectator.predictor
        if sp is not None and sp.confirmed is not None and sp.game == max(match.game_index, 0):
            assert sp.confirmed_seq == match.seq
            assert rules.to_wire(sp.confirmed) == rules.to_wire(rules.view(match.state, None))


SMALL_DECK = {"colours": ["red", "blue", "green"], "shapes": ["star", "moon"], "counts": [1, 2, 3]}


def play_out(table: Table, steps: list[tuple[int, int]]) -> None:
    """Drive the match: ``(who, pick)`` -- who 0..3: seat who % 2 makes its pick-th legal action
    (from the true state); who 4: time passes (pick ms)."""
    table.check()
    for who, pick in steps:
        match = table.core.matches.get(table.code)
        if match is None or match.status == "over":
            break
        if who == 4 or match.status != "playing":
            table.tick(pick * 1_000_000)  # up to a second: countdowns, stalemates, picks, snapshots
        else:
            legal = blink.legal_actions(match.state, who % 2)
            if not legal:
                table.tick(100_000_000)
            else:
                action = legal[pick % len(legal)]
                table.ids += 1
                table.send(T.act(table.code, "ab"[who % 2]), m.Act(id=table.ids, seq=match.seq,
                                                                   action=blink.action_to_wire(action)))
                table.now += 1_000_000
        table.check()
    assert table.resyncs == []  # delivered in order, nothing is ever in doubt


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), hand=st.integers(1, 4), auto_refill=st.booleans(), small=st.booleans(),
       steps=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1000)), min_size=1, max_size=400))
def test_events_plus_private_updates_rebuild_every_view(seed: int, hand: int, auto_refill: bool, small: bool,
                                                        steps: list[tuple[int, int]]) -> None:
    game_settings: dict[str, Any] = {"hand_size": hand, "auto_refill": auto_refill, "countdown_s": 0.5,
                                     "stalemate_pause_s": 0.3, "pick_time_s": 1.0, "best_of": 3}
    if small:
        game_settings["deck"] = SMALL_DECK  # more stalemates: flips and picks
    play_out(Table(seed, game_settings), steps)


def test_whole_matches_rebuild_every_view() -> None:
    """Whole best-of-3 matches (flips and picks included), seeded: the same check at length."""
    import random

    kinds: dict[str, int] = {}
    for seed in range(12):
        rnd = random.Random(seed)
        game_settings: dict[str, Any] = {"hand_size": rnd.randint(1, 4), "auto_refill": rnd.random() < 0.5,
                                         "countdown_s": 0.5, "stalemate_pause_s": 0.3, "pick_time_s": 1.0}
        if seed % 2:
            game_settings["deck"] = SMALL_DECK
        table = Table(seed, game_settings)
        seen = table.deliver

        def counting(out: list[Any], seen: Any = seen) -> None:
            for o in out:
                if isinstance(o, Publish) and isinstance(o.msg, m.Event):
                    kinds[o.msg.type] = kinds.get(o.msg.type, 0) + 1
            seen(out)

        table.deliver = counting  # type: ignore[method-assign]
        play_out(table, [(rnd.randint(0, 4), rnd.randint(0, 1000)) for _ in range(1500)])
    assert {"card_played", "hand_refilled", "card_drawn", "card_flipped", "pick_made", "card_picked"} <= set(kinds)


def test_a_private_update_never_reaches_another_players_topic() -> None:
    table = Table(7, {"hand_size": 3})
    table.tick(S)
    out: list[Any] = []
    for i in range(60):
        match = table.core.matches[table.code]
        if match.status != "playing":
            break
        legal = [a for s in (0, 1) for a in blink.legal_actions(match.state, s)]
        seat = next((s for s in (0, 1) if blink.legal_actions(match.state, s)), None)
        if seat is None or not legal:
            table.tick(S)
            continue
        action = blink.legal_actions(match.state, seat)[0]
        out += table.send(T.act(table.code, "ab"[seat]), m.Act(id=i + 1, seq=match.seq,
                                                               action=blink.action_to_wire(action)))
    updates = [o for o in out if isinstance(o, Publish) and isinstance(o.msg, m.PrivateUpdate)]
    assert updates, "some play refilled a hand"
    for o in updates:
        match = table.core.matches[table.code]
        owner = [s.client for s in match.players]
        assert o.topic in (T.client(owner[0]), T.client(owner[1]))
    # Each update names exactly its owner's hand at that seq: never the other's cards.
    for o in updates:
        seat = 0 if o.topic == T.client("a") else 1
        state = table.core.matches[table.code].state_at(o.msg.seq)
        if state is not None:
            assert o.msg.delta["hand"] == [str(c) for c in state.hands[seat]]
