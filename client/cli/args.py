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
from typing import TYPE_CHECKING, Callable, NoReturn
from urllib.parse import urlparse

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


def settings(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--settings must be a JSON object: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--settings must be a JSON object, e.g. '{\"best_of\": 1}'")
    return value


def url(text: str) -> str:
    """A broker URL: ``mqtt://HOST:PORT`` or ``mqtts://HOST:PORT`` (the port may be left out), or
    ``HOST:PORT``. A bare word is refused: it is more often a mistake than a host name."""
    from mqttkit import BadURL, parse_url

    stripped = text.strip()
    if "://" not in stripped:
        host, colon, port = stripped.rpartition(":")
        if not (colon and host and port.isdigit()):
            raise argparse.ArgumentTypeError(f"not a broker URL: {text!r} (use mqtt://HOST:PORT, or mqtts://HOST:PORT "
                                             "for TLS)")
    try:
        parse_url(stripped)
    except BadURL as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if urlparse(stripped if "://" in stripped else f"mqtt://{stripped}").port == 0:  # else taken as "no port"
        raise argparse.ArgumentTypeError(f"port 0 in {text!r}: a port is from 1 to 65535")
    return text


#: The longest name at a table: the relay keeps the first 24 characters of a longer one
#: (``relay/judge/lobby.py``); the command line refuses it instead, so nobody's name is cut unseen.
NAME_CHARS = 24


def player_name(text: str) -> str:
    """A name at the table: 1 to ``NAME_CHARS`` printable characters, none of ``/ + #`` (which the
    relay would drop)."""
    name = text.strip()
    if not name:
        raise argparse.ArgumentTypeError("needs a name")
    if len(name) > NAME_CHARS:
        raise argparse.ArgumentTypeError(f"at most {NAME_CHARS} characters, not {len(name)}: {name[:NAME_CHARS]!r}...")
    bad = sorted({c for c in name if c in "/+#" or not c.isprintable()})
    if bad:
        raise argparse.ArgumentTypeError(f"a name cannot hold {', '.join(repr(c) for c in bad)}: {name!r}")
    return name


def topic_prefix(text: str) -> str:
    """The topic prefix every topic starts with: levels joined by ``/``, none empty, with no MQTT
    wildcard (``+``, ``#``), space or control character, not starting with ``$`` (the broker's own)."""
    bad = sorted({c for c in text if c in "+#" or c.isspace() or not c.isprintable()})
    if not text:
        raise argparse.ArgumentTypeError("the topic prefix is empty")
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise argparse.ArgumentTypeError(f"a topic prefix cannot hold {shown}: {text!r} (e.g. blink/v1 or game/test)")
    if "" in text.split("/"):
        raise argparse.ArgumentTypeError(f"a topic prefix has no empty level (no leading, trailing or double /): "
                                         f"{text!r}")
    if text.startswith("$"):
        raise argparse.ArgumentTypeError(f"a topic prefix cannot start with $ (the broker's own topics): {text!r}")
    return text


def speaks_tls(args: argparse.Namespace) -> bool:
    """Does a broker URL on the command line (``--server``, ``--broker``) ask for TLS? ``--insecure``
    warns only then: a plain ``mqtt://`` connection has no certificate to leave unchecked."""
    urls = ",".join(u for u in (getattr(args, "server", None), getattr(args, "broker", None)) if u)
    return any(u.strip().lower().startswith(("mqtts://", "ssl://")) for u in urls.split(","))


def add_tls_trust(parser: argparse.ArgumentParser) -> None:
    """``--ca FILE`` and ``--insecure``, for a command that connects to ``mqtts://`` brokers
    (``main`` checks them before the command runs; ``trust`` makes them the one ``TLSTrust`` the
    command hands to every URL it parses)."""
    parser.add_argument("--ca", metavar="FILE", help="with mqtts:// URLs: believe only the CAs in this PEM file "
                        "(default: the system's CAs; not with --insecure)")
    parser.add_argument("--insecure", action="store_true", help="with mqtts:// URLs: do not check the broker's "
                        "certificate or host name (anyone on the path can read and change the connection)")


def trust(args: argparse.Namespace) -> TLSTrust:
    """Whom the command's ``mqtts://`` connections believe (``--ca``, ``--insecure``; none given: the
    system's CAs)."""
    from mqttkit import TLSTrust

    return TLSTrust(getattr(args, "ca", None), bool(getattr(args, "insecure", False)))


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

    from mqttkit import TLSTrust

    #: What ``blink``'s parser hands each command module's ``register``: its sub-command parsers.
    Subcommands: TypeAlias = "argparse._SubParsersAction[OneLineParser]"
