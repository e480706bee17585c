"""A bot stops when its task is cancelled, even when an await inside its loop let the cancel pass
(aiomqtt's publish waits with ``asyncio.wait_for``, which on Python 3.11 swallows a cancel that
lands as its wait ends)."""

from __future__ import annotations

import asyncio

import pytest

from client import Bot, Player
from mqttkit import parse_url


def test_a_cancelled_bot_stops_even_if_an_await_swallowed_the_cancel() -> None:
    async def scenario() -> None:
        player = Player(parse_url("mqtt://127.0.0.1:1"), "bot")  # never connected: nothing to play yet
        waits: list[int] = []

        async def swallowing(timeout: float | None = None) -> None:
            waits.append(1)
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # what a swallowing wait_for does: the wait ends as if nothing happened

        player.wait_change = swallowing  # type: ignore[method-assign]
        bot = asyncio.create_task(Bot(player, reaction_s=0.0).run())
        while not waits:
            await asyncio.sleep(0)
        bot.cancel()
        done, _ = await asyncio.wait({bot}, timeout=30)
        assert done, "the bot played on after its cancel"
        with pytest.raises(asyncio.CancelledError):
            bot.result()

    asyncio.run(scenario())
