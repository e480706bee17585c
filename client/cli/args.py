"""Argument types shared by every ``blink`` sub-command: each turns text into a value or raises
``argparse.ArgumentTypeError`` with a message a person can act on (argparse then prints one line
and exits with status 2).

The exit status convention of every sub-command: 0 done; 2 bad input on the command line (a usage
error, a value out of range, options that do not go together, a path that cannot be written) --
found before anything starts; 1 a failure at run time (an unreachable broker, no relay, a refused
or unknown match, a window that cannot open); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, NoReturn

USAGE = 2  # bad input on the command line
#: The help of every ``--game`` option.
GAME_HELP = ("game: blink (speed cards), takeaway, sequence or ryo (Roll Your Own) (default blink; "
             "`blink settings GAME` lists its settings)")
FAILED = 1  # a failure at run time


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (no usage block) and status 2;
    sub-parsers made with ``add_subparsers`` are of the same class."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(USAGE)


def out_file(text: str) -> str:
    """A file to write: its folder must exist (nothing creates folders: a typo is an error, not a
    new directory somewhere) and be writable, and it must not itself be a directory. Checked when
    the command line is read, before anything starts; argparse names the option."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a file name")
    path = os.path.abspath(os.path.expanduser(text))
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name (e.g. {os.path.join(text, 'out')})")
    if not os.path.exists(folder):
        raise argparse.ArgumentTypeError(f"no such directory: {folder} (it is not created for you)")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{folder} is not a directory")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    if not os.path.exists(path) and not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {folder}: permission denied")
    return os.path.expanduser(text)


def seats_problem(game: str, seats: int, option: str) -> str | None:
    """Why ``seats`` players cannot play ``game`` (one line naming the option), or None."""
    from protocol.rules import game_for

    problem = game_for(game).seats_problem(seats)
    return None if problem is None else f"{option}: {problem}"


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


def add_tls_trust(parser: argparse.ArgumentParser) -> None:
    """``--ca FILE`` and ``--insecure``, for a command that connects to ``mqtts://`` brokers
    (``main`` hands them to ``mqttkit.set_tls_defaults`` before the command runs)."""
    parser.add_argument("--ca", metavar="FILE", help="with mqtts:// URLs: believe only the CAs in this PEM file "
                        "(default: the system's CAs)")
    parser.add_argument("--insecure", action="store_true", help="with mqtts:// URLs: do not check the broker's "
                        "certificate or host name (anyone on the path can read and change the connection)")


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


def number(lo: float, hi: float, unit: str = "") -> Callable[[str], float]:
    """A number from ``lo`` to ``hi``."""
    what = f" {unit}" if unit else ""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a number{what}: {text!r}") from exc
        if not lo <= v <= hi:  # NaN too
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}{what}: {text!r}")
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


if TYPE_CHECKING:
    from typing import TypeAlias

    #: What ``blink``'s parser hands each command module's ``register``: its sub-command parsers.
    Subcommands: TypeAlias = "argparse._SubParsersAction[OneLineParser]"
