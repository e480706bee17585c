"""``blink latency`` (placeholder until the latency harness lands)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    sub.add_parser("latency", help="measure latency and fairness with concurrent bot matches")


def run(args: argparse.Namespace, topics: Any) -> int:
    raise SystemExit("blink latency: not built yet")
