"""The package layering the design relies on, read from the source: no import circle in relay/ (the
fair-order scheduler knows nothing of the core), and the pure protocol imports nothing of the relay
or the client."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (also inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def package_graph(package: str) -> dict[str, set[str]]:
    modules = {f"{package}.{p.stem}": p for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    return {name: {i for i in imports(path) if i in modules} for name, path in modules.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (the modules round it, the first repeated last), or None."""
    done: set[str] = set()

    def visit(path: list[str]) -> list[str] | None:
        for nxt in sorted(graph[path[-1]]):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done:
                found = visit(path + [nxt])
                if found:
                    return found
        done.add(path[-1])
        return None

    for node in sorted(graph):
        found = None if node in done else visit([node])
        if found:
            return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"a"}}) == ["a", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_in_the_relay() -> None:
    graph = package_graph("relay")
    assert {"relay.core", "relay.fair", "relay.model"} <= set(graph)
    assert cycle(graph) is None, cycle(graph)
    assert "relay.core" not in graph["relay.fair"]  # a pure scheduler: the core asks it, not the reverse
    assert graph["relay.model"] == set()  # plain data


def test_the_protocol_imports_nothing_of_the_relay_or_the_client() -> None:
    for path in (ROOT / "protocol").rglob("*.py"):
        bad = {i for i in imports(path) if i.split(".")[0] in ("relay", "client", "asyncio", "aiomqtt", "pyglet")}
        assert not bad, (path, bad)
