"""The client does not depend on the server package.

``client/`` may import from ``relay`` only where a command deliberately runs or sets up server
processes, and then only their entry points: ``relay.local`` (a local relay), ``relay.serve``
(``blink serve``) and ``relay.lanhost`` (advertising a local relay on the LAN). Shared plumbing
lives in ``mqttkit``, which imports neither side. Checked by reading the source with ``ast`` (every
import statement, at module level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The files that start or set up server processes, and the entry points each may import: `blink serve` / `blink match` / `blink broker-config`, `blink play`
#: (the window's session, which may host its local relay on the LAN), the latency harness and the
#: NATS cluster launcher (which reads the relay's password file as `blink serve` does, and words the auth
#: callout's refusal when its keys cannot be made).
ENTRY_FILES: dict[str, set[str]] = {
    "client/cli/serve.py": {"relay.serve"},
    "client/cli/match.py": {"relay.local"},
    "client/cli/broker_config.py": {"relay.local"},
    "client/window/session.py": {"relay.local", "relay.lanhost"},
    "client/tools/latency.py": {"relay.local"},
    "client/tools/nats_cluster.py": {"relay.local", "relay.serve", "relay.natscallout"},
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import stays inside its own package
                continue
            base = node.module or ""
            found.append((node.lineno, base))
            # `from relay import runtime` imports the module relay.runtime
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if base == "relay")
    return found


def is_relay(module: str) -> bool:
    return module == "relay" or module.startswith("relay.")


def test_the_checker_sees_imports_anywhere_in_a_file(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import relay.core\nfrom relay import runtime\n\ndef f():\n    from relay.broker import X\n")
    modules = [name for _, name in imported_modules(sample)]
    assert "relay.core" in modules and "relay.runtime" in modules and "relay.broker" in modules


def test_client_imports_from_relay_only_the_entry_points_in_the_command_files() -> None:
    files = sorted((ROOT / "client").rglob("*.py"))
    assert len(files) > 10  # the walk found the package
    bad: list[str] = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        allowed = ENTRY_FILES.get(rel, set())
        for line, module in imported_modules(path):
            if not is_relay(module):
                continue
            if module == "relay" and allowed:
                continue  # `from relay import local` names the entry point too (checked as relay.local)
            if module not in allowed:
                bad.append(f"{rel}:{line} imports {module}")
    assert not bad, "client/ may import only these entry points of relay/:\n" + "\n".join(
        f"  {f}: {', '.join(sorted(m))}" for f, m in sorted(ENTRY_FILES.items())) + "\n" + "\n".join(bad)


def test_the_shared_mqtt_package_imports_neither_side() -> None:
    for path in sorted((ROOT / "mqttkit").rglob("*.py")):
        for line, module in imported_modules(path):
            root = module.split(".")[0]
            assert root not in ("relay", "client", "pyglet"), f"{path.relative_to(ROOT)}:{line} imports {module}"


#: What the pure core may not import (DESIGN.md: no I/O, clocks, randomness or concurrency; time and
#: chance come in as arguments). protocol/ and the relay's judging core (core, model, fair) are checked.
IMPURE = {"asyncio", "socket", "select", "selectors", "threading", "multiprocessing", "concurrent", "subprocess",
          "time", "datetime", "random", "secrets", "os", "io", "pathlib", "shutil", "tempfile", "logging",
          "aiomqtt", "paho", "amqtt", "gmqtt", "nats", "pyglet", "zeroconf", "sqlite3", "mqttkit"}


def test_the_pure_core_imports_no_io_clocks_randomness_or_threads() -> None:
    files = sorted((ROOT / "protocol").rglob("*.py")) + [ROOT / "relay" / f"{name}.py" for name in ("core", "model", "fair")]
    bad = [f"{path.relative_to(ROOT).as_posix()}:{line} imports {module}"
           for path in files for line, module in imported_modules(path) if module.split(".")[0] in IMPURE]
    assert not bad, "the pure core imports:\n" + "\n".join(bad)
