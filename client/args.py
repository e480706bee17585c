"""Argument types shared by every ``blink`` sub-command: each turns text into a value or raises
``argparse.ArgumentTypeError`` with a message a person can act on (argparse then prints one line
and exits with status 2)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable


def settings(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--settings must be a JSON object: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--settings must be a JSON object, e.g. '{\"best_of\": 1}'")
    return value


def url(text: str) -> str:
    from mqttkit import BadURL, parse_url

    try:
        parse_url(text)
    except BadURL as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def seconds(lo: float, hi: float) -> Callable[[str], float]:
    """A number of seconds (a trailing ``s`` allowed) from ``lo`` to ``hi``."""

    def parse(text: str) -> float:
        try:
            v = float(text.strip().removesuffix("s"))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from exc
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g} seconds: {text!r}")
        return v

    return parse


def whole(lo: int, hi: int, unit: str = "") -> Callable[[str], int]:
    """A whole number from ``lo`` to ``hi``."""
    what = f" {unit}" if unit else ""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a whole number{what}: {text!r}") from exc
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi}{what}: {text!r}")
        return v

    return parse
