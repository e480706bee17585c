"""The package layering the design relies on, read from the source: no import circle in relay/ (the
fair-order scheduler knows nothing of the core), none between relay's rooms and its top modules
read as one node each, the judge imports of the relay only its pure neighbours, relay's rooms reach
each other only through their faces, and the pure protocol imports nothing of the relay or the client;
the client has no circle and its window on top, and its packages (``client``, ``client.window`` and
its ``viewmodels`` and ``scenes``, ``client.tools``, ``client.cli``) are entered only through faces.

relay's rooms (``relay.embedded``, ``relay.storage``, ``relay.cluster``, ``relay.hosting``) and the
client's packages but ``client.cli`` have lazy faces: an ``__init__`` whose ``_WHERE`` names the
module behind each name of ``__all__``, with the same imports under ``TYPE_CHECKING`` for the type
checker. The graph readers follow a name taken from such a face to the module that defines it, so
the circles they find are the real ones."""

from __future__ import annotations

import ast
import importlib
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
    """Every module of ``package`` (its sub-packages' too) and the modules of it each imports, a name
    taken from a lazy face counted as its module."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in (ROOT / package).rglob("*.py")
               if p.stem != "__init__"}
    return {name: {resolve(i) for i in imports(path)} & set(modules) for name, path in modules.items()}


def face_table(package: str) -> dict[str, str]:
    """A lazy face's ``_WHERE`` (each name of the face and its module), empty for any other module."""
    init = ROOT.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        return {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "_WHERE":
            assert node.value is not None
            table = ast.literal_eval(node.value)
            return {name: f"{package}.{module}" for name, module in table.items()}
    return {}


def resolve(dotted: str) -> str:
    """``pkg.name`` taken from a lazy face: the module that defines ``name``; else itself."""
    package, _, name = dotted.rpartition(".")
    return face_table(package).get(name, dotted) if package else dotted


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
    assert {"relay.core", "relay.fair", "relay.model", "relay.judge.lobby", "relay.hosting.local"} <= set(graph)
    assert "relay.cluster.space" in graph["relay.hosting.local"]  # `from relay.cluster import ShardedSpace`, through the face
    assert cycle(graph) is None, cycle(graph)
    assert "relay.core" not in graph["relay.fair"]  # a pure scheduler: the core asks it, not the reverse
    assert graph["relay.model"] == set()  # plain data


def relay_node(module: str) -> str:
    """The node of relay's package graph a module of relay belongs to: its room (``relay.cluster``
    for ``relay.cluster.leases``), or itself for a module directly in relay/ (and ``relay``, the face)."""
    return ".".join(module.split(".")[:2])


def relay_package_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """relay's rooms and its top modules, each one node, with an edge where a module of one imports a
    module of another -- every import, also under ``TYPE_CHECKING`` (a room that names another's
    types depends on it), a name taken from a lazy face counted as its module -- and for each edge
    the imports that make it ("module -> module")."""
    modules = {name: path for name, path in module_files().items() if name == "relay" or name.startswith("relay.")}
    graph: dict[str, set[str]] = {relay_node(name): set() for name in modules}
    why: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        for target in sorted({resolve(i) for i in imports(path)} & set(modules)):
            a, b = relay_node(name), relay_node(target)
            if a != b:
                graph[a].add(b)
                why.setdefault((a, b), []).append(f"{name} -> {target}")
    return graph, why


def test_the_package_graph_reads_each_room_as_one_node() -> None:
    graph, why = relay_package_graph()
    assert {"relay", "relay.core", "relay.runtime", "relay.judge", "relay.cluster", "relay.hosting"} <= set(graph)
    assert "relay.judge.lobby" not in graph
    assert "relay.embedded" in graph["relay.hosting"]
    assert "relay.hosting.local -> relay.embedded.broker" in why[("relay.hosting", "relay.embedded")]  # lazy face


def test_no_circle_between_the_rooms_and_the_modules_of_the_relay() -> None:
    """Rooms stack: each may import the ones below it, and nothing below imports back up -- so a room
    can be read, tested and changed knowing only what lies under it."""
    graph, why = relay_package_graph()
    found = cycle(graph)
    edges = [f"{a} -> {b}: " + ", ".join(why[(a, b)]) for a, b in zip(found, found[1:])] if found else []
    assert found is None, "a circle between relay's rooms and modules:\n" + "\n".join(edges)


#: What the judge may import of the relay outside relay/judge/: the pure modules under every room --
#: plain data (``relay.model``), the token buckets and the deadline heap (``relay.limits``) and the
#: fair-order scheduler (``relay.fair``). They hold no I/O, clock or chance of their own and import
#: nothing else of the relay, so the judge stays a pure core that every room may import: the judge
#: importing a room (the cluster, storage, hosting) would drag that room's I/O under it and make a
#: circle with every room that uses the judge.
JUDGE_MAY_IMPORT = frozenset({"relay.model", "relay.limits", "relay.fair"})
#: What the judge and its pure neighbours never import: I/O, event loops, clocks, chance, brokers.
IMPURE = ("asyncio", "socket", "threading", "time", "random", "os", "subprocess", "sqlite3", "mqttkit",
          "amqtt", "aiomqtt", "nats", "pyglet")


def test_the_judge_imports_of_the_relay_only_its_pure_neighbours() -> None:
    graph = package_graph("relay")
    outside = sorted(f"{name} imports {target}" for name, targets in graph.items() if room_of(name) == "relay.judge"
                     for target in targets if room_of(target) != "relay.judge" and target not in JUDGE_MAY_IMPORT)
    assert not outside, "the judge reaches outside relay/judge/:\n" + "\n".join(outside)
    for neighbour in JUDGE_MAY_IMPORT:  # pure in turn: no room of the relay under the judge by the back door
        assert graph[neighbour] <= JUDGE_MAY_IMPORT, (neighbour, graph[neighbour] - JUDGE_MAY_IMPORT)
    judge = [p for p in (ROOT / "relay" / "judge").rglob("*.py")]
    for path in judge + [ROOT.joinpath(*name.split(".")).with_suffix(".py") for name in JUDGE_MAY_IMPORT]:
        bad = {i for i in imports(path) if i.split(".")[0] in IMPURE}
        assert not bad, (_shown(path), bad)


def test_the_protocol_imports_nothing_of_the_relay_or_the_client() -> None:
    for path in (ROOT / "protocol").rglob("*.py"):
        bad = {i for i in imports(path) if i.split(".")[0] in ("relay", "client", "asyncio", "aiomqtt", "pyglet")}
        assert not bad, (path, bad)


# ------------------------------------------------------------------------------------------------
# The whole import graph of the four packages: no circle, no reach into another module's privates.

PACKAGES = ("protocol", "relay", "client", "mqttkit")


def module_files() -> dict[str, Path]:
    """Every module of the four packages by its dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                skip.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skip


def import_edges(name: str, path: Path, modules: set[str]) -> tuple[set[str], list[str]]:
    """The modules of ``modules`` that ``name`` imports (anywhere in the file, apart from
    ``TYPE_CHECKING`` blocks), and each private name it takes from another module ("line: what")."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    private: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            table = face_table(source)
            for alias in node.names:
                target = table.get(alias.name, f"{source}.{alias.name}")
                if target in modules:
                    edges.add(target)  # `from pkg import module`
                elif source in modules:
                    edges.add(source)
                    if alias.name.startswith("_") and not alias.name.startswith("__") and source != name:
                        private.append(f"{_shown(path)}:{node.lineno}: {source}.{alias.name}")
    edges.discard(name)
    return edges, private


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def whole_graph() -> tuple[dict[str, set[str]], list[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {}
    private: list[str] = []
    for name, path in files.items():
        graph[name], found = import_edges(name, path, set(files))
        private.extend(found)
    return graph, private


def test_the_graph_reader_sees_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n"
                      "def f():\n    from c import thing, _secret\n    import d\n")
    edges, private = import_edges("a", sample, {"a", "b", "c", "d"})
    assert edges == {"c", "d"}
    assert len(private) == 1 and private[0].endswith(":5: c._secret")


def test_no_import_circle_in_protocol_relay_client_or_mqttkit() -> None:
    graph, _ = whole_graph()
    assert {"client.window.scenes.base", "client.replays", "relay.core", "mqttkit.connection"} <= set(graph)
    assert cycle(graph) is None, cycle(graph)


#: Privates another module may take: none.
EXPECTED_PRIVATE_IMPORTS: set[str] = set()


def test_no_module_imports_another_modules_private_names() -> None:
    _, private = whole_graph()
    unexpected = [p for p in private if p.rpartition(": ")[2] not in EXPECTED_PRIVATE_IMPORTS]
    assert not unexpected, "private names imported from another module:\n" + "\n".join(unexpected)


# ------------------------------------------------------------------------------------------------
# The client, read strictly: `from pkg import name` runs pkg's face (its __init__), so it counts as
# importing pkg as well as the module `name` may be; and the window sits on top of the player's side.


def strict_edges(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports (outside ``TYPE_CHECKING``), a package
    counted whenever something is imported from it, and a name taken from a lazy face counted as
    the module that defines it too (the face itself imports nothing until it is asked)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source in modules:
                edges.add(source)
            table = face_table(source)
            edges.update(f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules)
            edges.update(table[alias.name] for alias in node.names if table.get(alias.name) in modules)
    edges.discard(name)
    return edges


def client_graph() -> dict[str, set[str]]:
    files = {n: p for n, p in module_files().items() if n == "client" or n.startswith("client.")}
    return {n: strict_edges(n, p, set(files)) for n, p in files.items()}


def test_the_strict_reader_counts_the_package_a_name_comes_from(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from p import args\nfrom p.q import thing\nimport r.s\n")
    assert strict_edges("x", sample, {"p", "p.args", "p.q", "r", "r.s"}) == {"p", "p.args", "p.q", "r.s"}


def test_the_strict_reader_follows_a_name_through_a_lazy_face() -> None:
    graph = client_graph()
    assert {"client.window.scenes", "client.window.scenes.registry"} <= graph["client.window.app"]
    assert {"client.window.viewmodels", "client.window.viewmodels.table"} <= graph["client.window.scenes.table"]
    assert graph["client.window.viewmodels"] == set()  # a lazy face: nothing until asked


def test_no_import_circle_in_the_client_and_the_window_on_top() -> None:
    graph = client_graph()
    assert {"client.cli", "client.cli.failures", "client.replays", "client.window.app"} <= set(graph)
    assert cycle(graph) is None, cycle(graph)
    # Only the window's own modules and the commands that open it (client/cli/) import the window:
    # the player's side (model, connection, bots, replays, tools) works without it.
    upward = sorted(f"{name} imports {target}" for name, targets in graph.items()
                    if not name.startswith(("client.window", "client.cli"))
                    for target in targets if target.startswith("client.window"))
    assert not upward, "\n".join(upward)


# ------------------------------------------------------------------------------------------------
# relay's rooms: each a sub-package with a face, reached from outside only through it.

ROOMS = ("relay.judge", "relay.embedded", "relay.storage", "relay.cluster", "relay.hosting", "relay.web")


def room_of(module: str) -> str | None:
    return next((room for room in ROOMS if module == room or module.startswith(room + ".")), None)


def face_all(package: str) -> list[str]:
    tree = ast.parse(ROOT.joinpath(*package.split("."), "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{package} has no __all__")


def test_each_room_of_the_relay_has_a_face_and_few_modules_lie_beside_them() -> None:
    assert {p.name for p in (ROOT / "relay").iterdir() if (p / "__init__.py").is_file()} == {r.split(".")[1] for r in ROOMS}
    for room in ROOMS:
        init = ROOT.joinpath(*room.split("."), "__init__.py")
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{room}: its face says how it works"
        assert face_all(room), room
    assert len([p for p in (ROOT / "relay").glob("*.py") if p.stem != "__init__"]) <= 12


def test_a_lazy_face_lists_each_name_once_and_types_what_it_loads() -> None:
    """``__all__``, ``_WHERE`` and the ``TYPE_CHECKING`` imports of a lazy face name the same things
    from the same modules, each of which defines the name (or is the module itself)."""
    assert {face for face in ("relay",) + ROOMS + CLIENT_PACKAGES if face_table(face)} >= {
        "relay.hosting", "client", "client.window", "client.window.viewmodels", "client.tools"}
    for face in ("relay",) + ROOMS + CLIENT_PACKAGES:
        table = face_table(face)
        if not table:
            continue  # an eager face: its imports are its table
        tree = ast.parse(ROOT.joinpath(*face.split("."), "__init__.py").read_text(encoding="utf-8"))
        own = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        assert sorted(face_all(face)) == sorted(set(table) | own), face  # loaded on demand, or defined right there
        typed: dict[str, str] = {}
        for node in ast.walk(ast.parse(ROOT.joinpath(*face.split("."), "__init__.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == face.split(".")[0]:
                for alias in node.names:
                    typed[alias.asname or alias.name] = node.module if node.module != face else f"{face}.{alias.name}"
        assert typed == table, face
        for name, module in table.items():
            if face.startswith("client"):  # read, not imported: the window's modules open a display
                assert module.endswith("." + name) or name in top_level_names(module), (face, name, module)
                continue
            loaded = importlib.import_module(module)
            assert module.endswith("." + name) or hasattr(loaded, name), (face, name, module)


def top_level_names(module: str) -> set[str]:
    """The names a module binds at its top level: its classes, functions, assignments and imports."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return names


def test_no_room_of_the_relay_reaches_into_another_but_through_its_face() -> None:
    """A module outside a room imports the room's face (``from relay.cluster import shards``), never
    one of its modules (``relay.cluster.leases``) and never a name its face does not list."""
    bad: list[str] = []
    for path in sorted((ROOT / "relay").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        own = room_of(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                named = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = [(node.module, alias.name) for alias in node.names]
            for module, taken in named:
                room = room_of(module)
                if room is None or room == own:
                    continue
                if module != room or (taken is not None and taken not in face_all(room)):
                    bad.append(f"{_shown(path)}:{node.lineno}: {module}" + (f" import {taken}" if taken else ""))
    assert not bad, "imports past a room's face:\n" + "\n".join(bad)


# ------------------------------------------------------------------------------------------------
# The client's packages: each a room with a face, entered from outside only through it.

CLIENT_PACKAGES = ("client", "client.cli", "client.tools", "client.window", "client.window.scenes",
                   "client.window.viewmodels")


def test_each_package_of_the_client_has_a_face() -> None:
    assert {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "client").rglob("__init__.py")} == set(CLIENT_PACKAGES)
    for package in CLIENT_PACKAGES:
        init = ROOT.joinpath(*package.split("."), "__init__.py")
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and "How this works" in doc, f"{package}: its face says how it works"
        assert face_all(package), package


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def past_a_face(path: Path, own: str, strict: bool) -> list[str]:
    """The imports in ``path`` that enter a package of the client it is not part of other than by a
    face: ``from face import name`` with ``name`` in the face's ``__all__`` (a face of an inner
    package is a door too). ``strict`` False (a test): only a name some face lists, taken from
    behind it -- a test may import a module's own helpers to test them. ``own``: the module
    ``path`` is ("" outside the client)."""
    faces = {package: set(face_all(package)) for package in CLIENT_PACKAGES}
    bad: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        named: list[tuple[str, str | None]] = []
        if isinstance(node, ast.Import):
            named = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named = [(node.module, alias.name) for alias in node.names]
        for module, taken in named:
            outside = [p for p in CLIENT_PACKAGES if _within(module, p) and not _within(own, p)]
            if not outside:
                continue
            through = module in faces and taken is not None and taken in faces[module]
            listed = taken is not None and any(taken in faces[p] and face_table(p).get(taken, p + "." + taken) == module
                                               for p in outside)
            if not through and (strict or listed):
                bad.append(f"{_shown(path)}:{node.lineno}: {module}" + (f" import {taken}" if taken else ""))
    return bad


def test_the_face_reader_tells_a_face_from_the_modules_behind_it(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from client.window import App\nfrom client.window.app import AppConfig\n"
                      "def f():\n    from client.window.layout import fit_text\n    import client.tools.latency\n"
                      "from client.tools import latency\nfrom client.window.viewmodels import ClientView\n")
    assert [line.split(": ", 1)[1] for line in past_a_face(sample, "", strict=True)] == [
        "client.window.app import AppConfig", "client.window.layout import fit_text", "client.tools.latency"]
    assert [line.split(": ", 1)[1] for line in past_a_face(sample, "", strict=False)] == [
        "client.window.app import AppConfig"]  # a test may take a module's own helpers, not a face's names
    assert past_a_face(sample, "client.window.hud", strict=True) == ["sample.py:5: client.tools.latency"]


def test_the_client_s_packages_are_entered_through_their_faces() -> None:
    """The client's code and the benchmarks import a package of the client they are not part of
    through its face (``from client.window import App``), never one of its modules
    (``client.window.app``); a test takes from the face every name the face lists."""
    def own(path: Path) -> str:
        return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")

    bad = [line for path in sorted((ROOT / "client").rglob("*.py")) for line in past_a_face(path, own(path), strict=True)]
    bad += [line for path in sorted((ROOT / "bench").rglob("*.py")) for line in past_a_face(path, "", strict=True)]
    bad += [line for path in sorted((ROOT / "tests").rglob("*.py")) for line in past_a_face(path, "", strict=False)]
    assert not bad, "imports past a face of the client:\n" + "\n".join(bad)
