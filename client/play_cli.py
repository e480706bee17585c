"""``blink play``: the window (placeholder until the pyglet client lands)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    sub.add_parser("play", help="open the game window")


def run(args: argparse.Namespace, topics: Any) -> int:
    raise SystemExit("blink play: the window is not built yet")
