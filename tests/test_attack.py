"""``bench/attack.py`` (the attacks against ``blink serve`` during a bot match) on the
embedded broker, on the broker plain ``blink serve`` runs, on Mosquitto as ``blink broker-config``
sets it up, and on a NATS cluster as ``blink cluster up`` sets it up (a ``blink serve --cluster`` relay): every attack fails for the attacker but the one a broker's design admits (named in ``KNOWN_LIMITS``, with its reason), the bot
match finishes with a valid log, the relay stays up with no ``internal_error``. Behaviour only."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest

from bench.attack import KNOWN_LIMITS, NatsStack, run
from bench.fuzz import Stack

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("broker", ["embedded", "serve", "mosquitto",
                                    pytest.param("nats", marks=pytest.mark.integration("nats-server"))])
def test_every_attack_fails_and_the_match_finishes_valid(broker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = NatsStack(seed=5) if broker == "nats" else Stack(broker, seed=5)
    monkeypatch.setenv("XDG_DATA_HOME", str(stack.dir))
    stack.start()
    try:
        result: dict[str, Any] = asyncio.run(run(stack, 5, best_of=1))
    finally:
        stack.stop()
        shutil.rmtree(stack.dir, ignore_errors=True)
    attacks = result["attacks"]
    assert len(attacks) == 10 and all(v["attacker_won"] is not None for v in attacks.values()), attacks
    assert result["attacker_won"] == [], attacks
    admitted = {k for k, v in attacks.items() if v["attacker_won"]}
    assert admitted == set(KNOWN_LIMITS[broker]), attacks  # nothing else, and the limit is real
    assert result["bot_match"]["valid"] and result["bot_match"]["winner"] in ("bot1", "bot2"), result["bot_match"]
    assert result["relay_alive"] and result["internal_errors"] == 0
    assert result["ok"]
    assert os.environ.get("XDG_DATA_HOME") == str(stack.dir)
