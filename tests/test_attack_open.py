"""``bench/attack.py --broker open``: an attacker reading and writing every topic of a Mosquitto that
enforces nothing, during a match whose victim reacts in 4 s. Against ``blink serve --seal`` she reads
no private message, makes no play for the victim's seat, spends none of its rate and passes for the
relay to nobody, and the match finishes; against the same relay unsealed the same attacker does all
of it (the attack is real). Behaviour only."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest

from bench.attack_open import OpenMosquitto, player_url, run
from bench.fuzz import Stack

pytestmark = pytest.mark.integration("mosquitto")


def attack(seal: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    broker = OpenMosquitto()
    broker.start()
    stack = Stack("open", broker_url=broker.url, seed=7, serve_args=("--no-journal", *(("--seal",) if seal else ())))
    monkeypatch.setenv("XDG_DATA_HOME", str(stack.dir))
    try:
        stack.start()
        url = player_url(stack)
        return asyncio.run(run(stack, url, 7))
    finally:
        stack.stop()
        broker.stop()
        shutil.rmtree(stack.dir, ignore_errors=True)


def test_on_an_open_broker_a_sealed_relay_gives_the_attacker_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    result = attack(True, monkeypatch)
    assert "?pin=" in result["url"]
    assert result["eve_saw_the_victims_id_on_a_topic"], result  # she knew whom to attack
    sent = result["eve_sent"]
    assert sent["forged_own_key"] and sent["flood"] and sent["replayed"] and sent["replayed_private"] \
        and sent["other_players_play"] and sent["forged_relay_signed"], sent  # and she tried
    assert result["private_read"] == 0 and result["tokens_read"] == 0, result
    assert result["forged_plays_accepted"] == 0, result
    assert result["victim_seat_plays_applied"] == result["victim_plays"], result
    assert result["victim_rate_limited"] == 0 and result["victim_rate_limited_bursts"] == 0, result
    assert result["forged_relay_accepted"] == 0, result
    assert result["match_over"] and result["relay_alive"] and result["relay_internal_errors"] == 0, result
    assert result["ok"], result


def test_on_an_open_broker_an_unsealed_relay_is_the_attackers(monkeypatch: pytest.MonkeyPatch) -> None:
    result = attack(False, monkeypatch)
    assert "?pin=" not in result["url"]
    assert result["private_read"] > 0 and result["tokens_read"] > 0, result
    assert result["forged_plays_accepted"] > 0, result
    assert result["forged_relay_accepted"] > 0, result
    assert not result["ok"]
