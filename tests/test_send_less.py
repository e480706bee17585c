"""Sending less: a client that applies the public events plus its private updates holds exactly the
relay's view for its seat after every seq (and a spectator the public view), for random games of all
four kinds; a private update only ever reaches its owner's topic."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from client import ClientModel
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.rules import blink, roll_your_own, sequence, takeaway
from protocol.topics import Topics
from relay.core import Publish, RelayConfig, RelayCore
from relay.publishing import wire_messages

T = Topics()
S = 1_000_000_000


CLIENTS = "abcdefgh"


class Table:
    """A relay core, every player's model and a spectator's, fed every output in order (through the
    codec, as on the wire)."""

    def __init__(self, seed: int, game_settings: dict[str, Any], game: str = "blink", seats: int = 2) -> None:
        self.core = RelayCore(T, RelayConfig(), seed=seed)
        self.now = 1
        self.clients = CLIENTS[:seats]
        self.models = {c: ClientModel(c, c) for c in self.clients}
        self.spectator = ClientModel("s", "s")
        self.ids = 0
        self.resyncs: list[tuple[str, Any]] = []
        self.private = 0  # private updates sent (each checked as it goes out)
        self.private_checked = 0  # ... and of them, those checked against the seat's own view
        self.kinds: set[str] = set()  # the types of the events published
        self.views = 0  # whole views sent after the game started (sending less: only at its boundaries)
        out = self.core.handle(T.req("a"), encode(m.CreateMatch(name="ann", game=game, settings=game_settings,
                                                                 seats=seats)), self.now)
        self.code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
        self.spectator.spectate(self.code)
        self.deliver(out)
        for c in self.clients[1:]:
            self.send(T.req(c), m.JoinMatch(name=f"p{c}", match=self.code))

    def deliver(self, out: list[Any]) -> None:
        # As the relay publishes them: a topic's messages of a step bundled, then decoded as a client does.
        wires = wire_messages([o for o in out if isinstance(o, Publish)], encode)
        for topic, msg in ((w.topic, x) for w in wires if w.payload for x in decode_all(w.payload)):
            if isinstance(msg, m.Event):
                self.kinds.add(msg.type)
            if isinstance(msg, m.PrivateUpdate):
                self.check_private(topic, msg)
            elif isinstance(msg, m.ViewUpdated):
                self.views += 1
            for client, model in self.models.items():
                if topic in (T.client(client), T.ev(self.code)):
                    for req in model.on_message(msg, self.now):
                        self.resyncs.append((client, req))
            if topic in (T.ev(self.code), T.snap(self.code)):
                for req in self.spectator.on_message(msg, self.now):
                    self.resyncs.append(("s", req))

    def check_private(self, topic: str, update: m.PrivateUpdate) -> None:
        """A private update goes to its owner's topic only and holds nothing but what that seat's own
        view holds at its seq (never another seat's hidden part)."""
        self.private += 1
        match = self.core.matches[self.code]
        owners = {T.client(s.client): seat for seat, s in enumerate(match.players)}
        assert topic in owners, topic
        seat = owners[topic]
        state = match.state_at(update.seq)
        if state is None or update.game_index != max(match.game_index, 0):
            return  # the game ended in the same step (its history is gone): the topic was checked
        self.private_checked += 1
        rules = match.rules
        assert rules.apply_private is not None
        own = rules.view(state, seat)
        assert rules.to_wire(rules.apply_private(own, seat, update.delta)) == rules.to_wire(own)

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
        for seat, client in enumerate(self.clients):
            p = self.models[client].predictor
            assert p is not None and p.confirmed_seq == match.seq, (client, p and p.confirmed_seq, match.seq)
            assert rules.to_wire(p.confirmed) == rules.to_wire(rules.view(match.state, seat)), client
        sp = self.spectator.predictor
        if sp is not None and sp.confirmed is not None and sp.game == max(match.game_index, 0):
            assert sp.confirmed_seq == match.seq
            assert rules.to_wire(sp.confirmed) == rules.to_wire(rules.view(match.state, None))


#: An action of each dice game for a seat that may not act (refused: the views must not move).
DUMMY: dict[str, Any] = {"takeaway": takeaway.Reroll(), "sequence": sequence.RemoveChip(0, 0),
                         "ryo": roll_your_own.RaiseFace(0)}

SMALL_DECK = {"colours": ["red", "blue", "green"], "shapes": ["star", "moon"], "counts": [1, 2, 3]}


def play_out(table: Table, steps: list[tuple[int, int]]) -> None:
    """Drive the match: ``(who, pick)`` -- who 0..3: seat who % seats (or, in a turn game, whoever
    may act) makes its pick-th legal action (from the true state); who 4: time passes (pick ms)."""
    table.check()
    seats = len(table.clients)
    for who, pick in steps:
        match = table.core.matches.get(table.code)
        if match is None or match.status == "over":
            break
        if who == 4 or match.status != "playing":
            table.tick(pick * 1_000_000)  # up to a second: countdowns, stalemates, picks, timers, snapshots
        else:
            rules = match.rules
            seat = who % seats
            if not rules.realtime and who != 3:  # a turn game: whoever may act (who 3: anyone, maybe refused)
                seat = next(((seat + i) % seats for i in range(seats)
                             if rules.legal_actions(match.state, (seat + i) % seats)), seat)
            legal = rules.legal_actions(match.state, seat)
            if not legal and who == 3 and not rules.realtime:
                table.ids += 1  # refused (not this seat's turn): nothing may change
                table.send(T.act(table.code, table.clients[seat]), m.Act(id=table.ids, seq=match.seq,
                                                                         action=rules.action_to_wire(DUMMY[rules.name])))
            elif not legal:
                table.tick(100_000_000)
            else:
                action = legal[pick % len(legal)]
                table.ids += 1
                table.send(T.act(table.code, table.clients[seat]), m.Act(id=table.ids, seq=match.seq,
                                                                         action=rules.action_to_wire(action)))
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


# --- the dice games ---------------------------------------------------------------------------------

STEPS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1000)), min_size=1, max_size=300)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), seats=st.integers(2, 6), layout=st.sampled_from(["hex19", "random"]),
       once=st.booleans(), timer=st.sampled_from([0.0, 0.2]), steps=STEPS)
def test_takeaway_events_rebuild_every_view(seed: int, seats: int, layout: str, once: bool, timer: float,
                                            steps: list[tuple[int, int]]) -> None:
    game_settings = {"layout": layout, "size": 12, "reroll_once_per_game": once, "turn_timer_s": timer}
    if layout != "random":
        del game_settings["size"]
    table = Table(seed, game_settings, "takeaway", seats)
    play_out(table, steps)
    assert table.private == 0  # nothing is secret: the events say it all
    assert table.views <= 3 * seats  # whole views only at the start, the game's end and the match's end


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), seats=st.integers(2, 4), length=st.integers(3, 5),
       max_turns=st.sampled_from([12, 400]), timer=st.sampled_from([0.0, 0.2]), steps=STEPS)
def test_sequence_events_rebuild_every_view(seed: int, seats: int, length: int, max_turns: int, timer: float,
                                            steps: list[tuple[int, int]]) -> None:
    game_settings = {"sequence_length": length, "max_turns": max_turns, "turn_timer_s": timer}
    table = Table(seed, game_settings, "sequence", seats)
    play_out(table, steps)
    assert table.private == 0
    assert table.views <= 3 * seats


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), seats=st.integers(2, 4), budget=st.sampled_from([1, 6, 21]),
       pool=st.sampled_from([None, 8]), timer=st.sampled_from([0.0, 0.2]), steps=STEPS)
def test_roll_your_own_events_plus_private_updates_rebuild_every_view(seed: int, seats: int, budget: int,
                                                                      pool: int | None, timer: float,
                                                                      steps: list[tuple[int, int]]) -> None:
    # Small budgets make identical one-valued dice (lots drawn) and choices that cannot be made.
    game_settings: dict[str, Any] = {"budget": budget, "rolls_per_round": 2, "rounds_per_game": 2,
                                     "games_per_match": 2, "turn_timer_s": timer}
    if pool is not None and budget == 21:  # a finite pool: tiles swap in and out, and run short
        game_settings["tile_pool"] = pool
    table = Table(seed, game_settings, "ryo", seats)
    play_out(table, steps)
    assert table.views <= 3 * seats


def test_whole_dice_matches_rebuild_every_view() -> None:
    """Whole seeded dice matches (timeouts included): the same check at length, and every event kind
    the appliers read is seen."""
    import random

    kinds: set[str] = set()
    privates = 0
    for game, game_settings in (("takeaway", {"layout": "random", "size": 14, "turn_timer_s": 0.3}),
                                ("sequence", {"sequence_length": 3, "turn_timer_s": 0.3}),
                                ("sequence", {"max_turns": 20}),
                                ("ryo", {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 2,
                                         "turn_timer_s": 0.3, "tile_pool": 8}),
                                ("ryo", {"budget": 0, "rolls_per_round": 1, "rounds_per_game": 2, "games_per_match": 1}),
                                ("ryo", {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 2})):
        for seed in range(4):
            rnd = random.Random(seed)
            seats = rnd.randint(2, 4)
            table = Table(seed, dict(game_settings), game, seats)
            play_out(table, [(rnd.randint(0, 4), rnd.randint(0, 1000)) for _ in range(3000)])
            assert table.core.matches[table.code].status == "over", (game, seed)
            privates += table.private_checked
            kinds |= table.kinds
    assert privates > 0  # Roll Your Own's builds went to their builders
    assert {"order_decided", "reroll_requested", "blink_claimed", "turn_timeout",  # Takeaway
            "rolloff", "first_player", "chip_placed", "chip_removed", "no_move",  # Sequence
            "die_built", "dice_revealed", "face_raised", "face_lowered", "lower_chosen", "choice_started",
            "roll_won", "round_won", "game_won", "build_started", "lot_drawn", "roll_tied"} <= kinds, kinds


def test_a_roll_your_own_build_stays_secret_until_the_reveal() -> None:
    """While dice are built, no public message (event or snapshot) carries a built die; each builder
    hears its own die on its own topic."""
    table = Table(3, {"budget": 21}, "ryo", 3)
    public: list[Any] = []
    seen = table.deliver

    def watching(out: list[Any]) -> None:
        public.extend(o for o in out if isinstance(o, Publish) and o.topic in (T.ev(table.code), T.snap(table.code)))
        seen(out)

    table.deliver = watching  # type: ignore[method-assign]
    builds = [(1, 2, 3, 4, 5, 6), (0, 0, 0, 7, 7, 7), (3, 3, 3, 3, 3, 3)]
    for seat in range(3):
        table.ids += 1
        table.send(T.act(table.code, table.clients[seat]), m.Act(id=table.ids, seq=table.core.matches[table.code].seq,
                                                                 action=roll_your_own.action_to_wire(
                                                                     roll_your_own.BuildDie(builds[seat]))))
        table.tick(1_000_000_000)  # snapshots too
        table.check()
        state = table.models[table.clients[seat]].predictor
        assert state is not None and state.confirmed.dice[seat] == builds[seat]
        if seat < 2:
            for client in table.clients[seat + 1:]:  # the others do not know it yet
                p = table.models[client].predictor
                assert p is not None and p.confirmed.dice[seat] is None
    assert table.private == 3
    revealed = next(i for i, o in enumerate(public) if isinstance(o.msg, m.Event) and o.msg.type == "dice_revealed")
    before = json.dumps([dataclasses.asdict(o.msg) for o in public[:revealed]], default=str)
    assert public[:revealed] and '"die_built"' in before
    for faces in builds:
        assert json.dumps(list(faces)) not in before  # no die, as a list, in any public message before the reveal
    assert table.resyncs == []


def test_a_seated_player_that_lost_events_asks_again_when_the_snapshot_shows_it() -> None:
    """Events lost while the game then waits for this player: no later event shows the gap, but the
    retained snapshot (published after the events it covers) does, and the player asks for its view
    again instead of waiting for ever."""
    table = Table(seed=3, game_settings={}, game="ryo", seats=2)
    play_out(table, [(0, 0), (1, 0), (0, 1), (1, 1)])
    match = table.core.matches[table.code]
    model = table.models["a"]
    assert model.on_message(table.core.events.snapshot_of(match, table.now).msg, table.now) == []  # up to date
    rules = match.rules
    seat = next(s for s in range(2) if rules.legal_actions(match.state, s))
    lost: list[Any] = []
    model.on_message = lambda msg, now: lost.append(msg) or []  # type: ignore[method-assign]
    table.ids += 1
    table.send(T.act(table.code, table.clients[seat]),
               m.Act(id=table.ids, seq=match.seq, action=rules.action_to_wire(rules.legal_actions(match.state, seat)[0])))
    del model.on_message
    assert any(isinstance(x, m.Event) for x in lost)
    assert model.predictor is not None and model.predictor.confirmed_seq < match.seq
    asks = model.on_message(table.core.events.snapshot_of(match, table.now).msg, table.now)
    assert asks == [m.Resync(table.code)]
    table.send(T.req("a"), asks[0])  # the relay answers with the whole view
    table.check()
