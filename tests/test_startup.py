"""``blink serve`` starts without importing what it does not run (a restart's start-up time):
the other commands' modules, the tools and amqtt stay unloaded; every command still parses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from client.cli import COMMANDS, build_parser, command_of

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_word_is_found_after_the_global_options() -> None:
    assert command_of(["serve", "--broker", "mqtt://x"]) == "serve"
    assert command_of(["--prefix", "serve", "load", "--matches", "1"]) == "load"  # "serve" is the prefix here
    assert command_of(["--prefix=p", "-v", "serve"]) == "serve"
    assert command_of(["--pre", "p", "serve"]) is None  # an abbreviation: unsure, so the whole parser
    assert command_of(["-h"]) is None and command_of([]) is None


def test_serve_parses_without_loading_the_other_commands_or_amqtt() -> None:
    code = ("import sys, client.cli as c; c.build_parser(c.command_of(['serve'])); import relay.hosting.local, relay.hosting.serve; "
            "print(sorted(m for m in sys.modules if m.startswith(('client.tools', 'client.window', 'pyglet', 'amqtt', "
            "'protocol.verify')) or (m.startswith('client.cli.') and m not in "
            "('client.cli.serve', 'client.cli.args', 'client.cli.failures'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_command_parses_with_the_parser_built_for_it() -> None:
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")  # noqa: SLF001 - argparse's subparsers
    assert set(COMMANDS) == set(sub.choices)  # type: ignore[arg-type]
    for command in sub.choices:  # type: ignore[union-attr]
        parser = build_parser(command_of([command]))
        assert command in next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[operator]
