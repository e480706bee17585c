"""The client does not depend on the server package.

``client/`` may import from ``relay`` only where a command deliberately runs or sets up server
processes, and then only the faces of relay's rooms (a package's ``__init__``): ``relay.hosting``
(a local relay, ``blink serve``, advertising a local relay on the LAN), ``relay.cluster`` (a NATS
cluster's authorization), ``relay.storage`` (the journal's error) and ``relay`` itself (the
relay's settings). Shared plumbing lives in ``mqttkit``, which imports neither side. Checked by
reading the source with ``ast`` (every import statement, at module level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The files that start or set up server processes, and the faces each may import: `blink serve` / `blink match` / `blink broker-config`, `blink play`
#: (the window's session, which may host its local relay on the LAN, with the relay's settings), the latency harness and the
#: NATS cluster launcher (which reads the relay's password file as `blink serve` does, and words the auth
#: callout's refusal when its keys cannot be made).
ENTRY_FILES: dict[str, set[str]] = {
    "client/cli/serve.py": {"relay.hosting"},
    "client/cli/match.py": {"relay", "relay.hosting", "relay.storage"},
    "client/cli/broker_config.py": {"relay.hosting"},
    "client/window/session.py": {"relay", "relay.hosting"},
    "client/tools/latency.py": {"relay", "relay.hosting"},
    "client/tools/nats_cluster.py": {"relay.cluster", "relay.hosting"},
}


def face_names(package: str, root: Path = ROOT) -> set[str]:
    """The names a package's face lists in ``__all__`` (none for a module or a missing face)."""
    init = root.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        return set()
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def is_module(name: str, root: Path = ROOT) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file: ``from pkg import name`` imports
    ``pkg`` when its face lists ``name``, else the module ``pkg.name`` when there is one."""
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
            exported = face_names(base, root)
            # `from relay import runtime` imports the module relay.runtime
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names
                         if alias.name not in exported and is_module(f"{base}.{alias.name}", root))
    return found


def is_face(module: str, root: Path = ROOT) -> bool:
    """A package's ``__init__``: what another package may import of it."""
    return root.joinpath(*module.split("."), "__init__.py").is_file()


def is_relay(module: str) -> bool:
    return module == "relay" or module.startswith("relay.")


def test_the_checker_sees_imports_anywhere_in_a_file(tmp_path: Path) -> None:
    (tmp_path / "relay" / "hosting").mkdir(parents=True)
    for name in ("relay/__init__.py", "relay/core.py", "relay/runtime.py", "relay/hosting/serve.py", "relay/hosting/lanhost.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "relay" / "hosting" / "__init__.py").write_text('__all__ = ["lanhost", "serve_relay"]\n')
    sample = tmp_path / "sample.py"
    sample.write_text("import relay.core\nfrom relay import runtime\n\ndef f():\n    from relay.embedded.broker import X\n"
                      "    from relay.hosting import lanhost, serve, serve_relay\n")
    modules = [name for _, name in imported_modules(sample, tmp_path)]
    assert "relay.core" in modules and "relay.runtime" in modules and "relay.embedded.broker" in modules
    assert "relay.hosting" in modules and "relay.hosting.serve" in modules  # a module its face does not list
    assert "relay.hosting.lanhost" not in modules  # the face lists it: imported through the face
    assert is_face("relay.hosting", tmp_path) and not is_face("relay.hosting.serve", tmp_path)


def test_client_imports_from_relay_only_faces_in_the_command_files() -> None:
    files = sorted((ROOT / "client").rglob("*.py"))
    assert len(files) > 10  # the walk found the package
    bad: list[str] = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        allowed = ENTRY_FILES.get(rel, set())
        for line, module in imported_modules(path):
            if is_relay(module) and not (module in allowed and is_face(module)):
                bad.append(f"{rel}:{line} imports {module}")
    assert not bad, "client/ may import only these faces of relay/:\n" + "\n".join(
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
