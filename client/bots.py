"""Bots: players driven by a policy with a human-like reaction time, through the same ``Player``
(networking + prediction) a human's client uses.

How this works
--------------
A bot waits for the drawn state to change (a new pile top, a new hand, its turn), looks at it,
picks an action with its game's policy (``Game.bot_action``), waits its reaction time (sampled
from a log-normal distribution around ``reaction_s``, as human reaction times are), and then
acts -- naming the seq
of the state it looked at, so the relay can tell a lost race from a mistake. If its own client
already knows the move has become illegal meanwhile, the move bounces locally, as it would for a
person. A bot plays on its predicted state without waiting for verdicts (a person does not wait
for the network either), with a small cap on plays in flight. Its ``Player`` resends unanswered
plays and reconnects by itself; the bot stops only when the match is over or the connection is
lost for good.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import Callable

from protocol.rules.base import Chance, Rejected
from client.player import Player

#: An action for a seat in (its view of) a state, or None to wait: ``Game.bot_action`` by default.
#: (State and action are the game's own: the bot hands them from the model to the model unread.)
Policy = Callable[[object, int, Chance], object]

MAX_IN_FLIGHT = 3  # plays awaiting the relay's verdict; prediction already stops impossible ones


class RandomChance:
    """A ``Chance`` drawn from a bot's own ``random.Random`` (seeded for a repeatable bot)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def randbelow(self, n: int) -> int:
        return self.rng.randrange(n)


class Bot:
    def __init__(self, player: Player, reaction_s: float = 0.35, spread: float = 0.25, seed: int | None = None,
                 policy: Policy | None = None) -> None:
        self.player = player
        self.reaction_s = reaction_s
        self.spread = spread
        self.rng = random.Random(seed)
        self.chance = RandomChance(self.rng)
        self.policy = policy  # None: the policy of the game being played (its ``Game.bot_action``)
        self.plays = 0
        self.local_bounces = 0

    def reaction(self) -> float:
        if self.reaction_s <= 0:
            return 0.0
        # log-normal with median reaction_s: never negative, a long right tail like real people
        return self.reaction_s * math.exp(self.rng.gauss(0.0, self.spread))

    async def run(self, until_over: bool = True, stop: asyncio.Event | None = None) -> None:
        model = self.player.model
        me = asyncio.current_task()
        while True:
            if me is not None and me.cancelling():
                # Cancelled, but an await below let it pass: aiomqtt waits for a publish with
                # ``asyncio.wait_for``, which on Python 3.11 swallows a cancel that lands as its wait
                # ends -- and a bot that plays on holds up whoever is waiting for it to stop.
                raise asyncio.CancelledError
            if stop is not None and stop.is_set():
                return
            if until_over and self.player.match_over():
                return
            if model.connection == "lost":  # the broker stayed away past the reconnect budget
                return
            state = model.state()
            seat = model.seat
            pending = model.predictor.pending if model.predictor else []
            action = None
            # Like a person, a bot plays on what its screen shows (the prediction), not waiting for the
            # relay's verdict on its last play -- so its pace does not depend on its round trip.
            unanswered = sum(1 for p in pending if p.accepted_seq is None)
            game = model.rules
            if state is not None and seat is not None and game is not None and unanswered < MAX_IN_FLIGHT:
                policy = self.policy or game.bot_action
                action = policy(state, seat, self.chance)
            if action is None:
                await self.player.wait_change(timeout=0.5)
                continue
            seen = model.predictor.confirmed_seq if model.predictor else None
            seen_version = model.version
            await asyncio.sleep(self.reaction())
            result = await self.player.act(action, seen_seq=seen)
            if isinstance(result, Rejected):
                self.local_bounces += 1
                if model.version == seen_version:
                    await self.player.wait_change(timeout=0.5)
            else:
                self.plays += 1
