"""The four rule engines, found by game name (see base.py for the surface they share)."""

from __future__ import annotations

import importlib
from typing import Any

MODULES = {
    "blink": "blink",
    "takeaway": "takeaway",
    "sequence": "sequence",
    "ryo": "roll_your_own",
    "roll_your_own": "roll_your_own",
}

#: Canonical names, as shown to users.
GAME_NAMES = ("blink", "takeaway", "sequence", "ryo")


def canonical(name: str) -> str:
    return "ryo" if name == "roll_your_own" else name


def rules_for(name: str) -> Any:
    """The ``RULES`` object of a game; raises ValueError for an unknown game."""
    module = MODULES.get(name)
    if module is None:
        raise ValueError(f"unknown game {name!r}; choose one of {', '.join(GAME_NAMES)}")
    return importlib.import_module(f"protocol.rules.{module}").RULES
