"""Match codes: the letters a code is made of, and which codes name which shard.

How this works
--------------
A match code is ``CODE_LEN`` letters of ``CODE_ALPHABET`` (no 0/O, no 1/I: codes are read aloud).
Read as a base-32 number (first letter most significant) a code is a number below ``CODE_SPACE``,
and on a relay of ``total`` shards the code belongs to shard ``number % total``. The lobby draws
each new code here (``draw_code``) from the relay's seeded chance: from the whole code space on a
single relay, else the ``k``-th code of its own shard, so that a request naming the code is routed
back to that shard (``relay.cluster.shards`` reads codes with ``code_number``). The arithmetic lives
with the judge, which makes the codes; the routing that reads them sits above it.
"""

from __future__ import annotations

from typing import Final

from protocol.chance import SeededChance

CODE_ALPHABET: Final = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LEN: Final = 5
CODE_SPACE: Final = len(CODE_ALPHABET) ** CODE_LEN
_INDEX: Final = {c: i for i, c in enumerate(CODE_ALPHABET)}


def code_number(code: str) -> int | None:
    """A code's number (base 32, first letter most significant), or None if it is not a code."""
    if len(code) != CODE_LEN:
        return None
    n = 0
    for c in code:
        i = _INDEX.get(c)
        if i is None:
            return None
        n = n * len(CODE_ALPHABET) + i
    return n


def codes_in_shard(shard: int, total: int) -> int:
    """How many codes belong to ``shard``: the ``k`` of ``code_in_shard`` is below this."""
    return (CODE_SPACE - 1 - shard) // total + 1


def code_in_shard(k: int, shard: int, total: int) -> str:
    """The ``k``-th code of ``shard`` (``0 <= k < codes_in_shard(shard, total)``)."""
    n = k * total + shard
    if not 0 <= shard < total or not 0 <= n < CODE_SPACE:
        raise ValueError(f"no code {k} in shard {shard} of {total}")
    letters = []
    for _ in range(CODE_LEN):
        n, i = divmod(n, len(CODE_ALPHABET))
        letters.append(CODE_ALPHABET[i])
    return "".join(reversed(letters))


def draw_code(chance: SeededChance, shard: int, total: int) -> str:
    """A code drawn from ``chance``: any code when ``total`` is 1, else one of ``shard``'s. Each way
    takes a fixed number of draws from the chance, so a journal's replay draws the same codes."""
    if total > 1:
        return code_in_shard(chance.randbelow(codes_in_shard(shard, total)), shard, total)
    return "".join(CODE_ALPHABET[chance.randbelow(len(CODE_ALPHABET))] for _ in range(CODE_LEN))


__all__ = ["CODE_ALPHABET", "CODE_LEN", "CODE_SPACE", "code_in_shard", "code_number", "codes_in_shard", "draw_code"]
