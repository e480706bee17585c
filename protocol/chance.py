"""A seeded, portable source of chance for the relay (pure: no ``random``, no OS).

How this works
--------------
``SeededChance(seed)`` is SplitMix64: a 64-bit counter run through a fixed mixing function. It is
tiny, fast enough for shuffles and dice, and -- unlike ``random.Random`` -- its output is defined
here, so a logged seed replays the same shuffle on any Python version. ``randbelow`` uses
rejection sampling so every outcome is exactly equally likely.

``derive(seed, *parts)`` makes independent sub-seeds (one per game of a match, one for the
relay's tie-break coins) with SHA-256, so revealing one game's seed reveals nothing about the next.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

_MASK = (1 << 64) - 1


class SeededChance:
    def __init__(self, seed: int) -> None:
        self.seed = seed & _MASK
        self._state = self.seed
        self.draws = 0

    def _next64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def copy(self) -> SeededChance:
        """An independent twin at the same point: a checker tries a draw on the copy and keeps
        the original unchanged if the attempt is thrown away."""
        twin = SeededChance(self.seed)
        twin._state = self._state
        twin.draws = self.draws
        return twin

    @classmethod
    def at(cls, seed: int, position: int, draws: int) -> SeededChance:
        """The generator of ``seed`` standing at ``position`` after ``draws`` draws: what a saved
        relay restores (``position()`` and ``draws`` are all a generator is beside its seed)."""
        chance = cls(seed)
        chance._state = position & _MASK
        chance.draws = draws
        return chance

    def to_record(self) -> list[int]:
        """The generator as plain data (a relay snapshot's): its seed, position and draws."""
        return [self.seed, self._state, self.draws]

    @classmethod
    def from_record(cls, record: Sequence[int]) -> SeededChance:
        """The generator ``to_record`` wrote."""
        return cls.at(record[0], record[1], record[2])

    def position(self) -> int:
        """Where in its stream the generator stands: two chances of one seed at the same position
        draw the same values from here on."""
        return self._state

    def randbelow(self, n: int) -> int:
        if n <= 0:
            raise ValueError("randbelow needs n > 0")
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = self._next64()
            if x < limit:
                self.draws += 1
                return x % n


def derive(seed: int, *parts: object) -> int:
    text = ":".join([str(seed), *map(str, parts)]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def commitment(seed: int) -> str:
    """Published before a game so players can check, once the seed is revealed, that the shuffle
    was fixed before anyone played."""
    return hashlib.sha256(f"blink-seed:{seed}".encode()).hexdigest()
