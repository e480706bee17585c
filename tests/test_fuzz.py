"""A short fuzz of a live relay during a bot match, on the embedded broker and on Mosquitto (the
shipped ACL): a few thousand hostile payloads of every kind in ``bench/fuzz.py``. Behaviour only --
the relay stays up and answers, writes no ``internal_error``, and the match finishes with a valid
log; no speed is asserted (``bench/fuzz.py`` runs 100,000 and reports figures)."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest

from bench.fuzz import KINDS, Stack, fuzz
from mqttkit import BrokerAddress

pytestmark = pytest.mark.integration  # each test drives a relay through a broker

PAYLOADS = 2_400  # 200 of each of the twelve kinds


def _run(stack: Stack) -> dict[str, Any]:
    stack.start()
    try:
        return asyncio.run(fuzz(stack, PAYLOADS, seed=3, connections=24, match_settings={"best_of": 1},
                                reaction=0.03, match_timeout=240.0, window=300))
    finally:
        stack.stop()
        shutil.rmtree(stack.dir, ignore_errors=True)


def _check(result: dict[str, Any]) -> None:
    assert set(result["kinds"]) == set(KINDS) and sum(result["kinds"].values()) == PAYLOADS
    assert result["relay_alive"], result
    assert result["internal_errors"] == 0, result["bad_input_codes"]
    assert result["matches"], "no bot match was played"
    for match in result["matches"]:
        assert match["status"] == 0, match
        assert match["valid"], match
        assert match["summary"]["winner"] is not None
    # The relay refused what it was sent, with reasons: the log says so.
    codes = result["bad_input_codes"]
    for code in ("malformed", "bad_settings", "unknown_type"):
        assert codes.get(code, 0) > 0, codes


def test_fuzzing_through_the_embedded_broker(tmp_path: Any) -> None:
    _check(_run(Stack("embedded", seed=5, workdir=tmp_path)))


def test_fuzzing_through_mosquitto(tmp_path: Any, mosquitto: BrokerAddress) -> None:
    result = _run(Stack("mosquitto", broker_url=mosquitto.login_url, seed=6, workdir=tmp_path))
    _check(result)
