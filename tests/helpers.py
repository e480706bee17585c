"""Small helpers the rule-engine tests share."""

from __future__ import annotations

import random
from typing import Any

from protocol.rules.base import Accepted


class RandomChance:
    """Chance from a seeded ``random.Random``: the tests' stand-in for the relay's generator."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(seed)

    def randbelow(self, n: int) -> int:
        return self._r.randrange(n)


def ok(result: Any) -> Any:
    """The accepted result of an engine call (the test fails with the rejection otherwise)."""
    assert isinstance(result, Accepted), result
    return result
