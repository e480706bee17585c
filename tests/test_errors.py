"""One error root per package, and names that each mean one thing.

Every exception class of ``protocol``, ``relay``, ``mqttkit`` and ``client`` derives from its
package's root (``ProtocolError``, ``RelayError``, ``MqttkitError``, ``ClientError``, defined in the
package's face with the tree in its docstring), so a caller can catch one package's failures at
once, as with httpx's ``HTTPError``. No two exception classes share a name, and the names that once
meant two things (``Gate``, ``Deadlines``, ``Out``, ``Resync``, ``ClusterError``) mean one. Read from
the source with ``ast``: the window's modules need a display to import."""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOTS = {"protocol": "ProtocolError", "relay": "RelayError", "mqttkit": "MqttkitError", "client": "ClientError"}
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)}


def classes() -> list[tuple[str, str, list[str], ast.ClassDef]]:
    """(package, module path, base names, node) of every class of the four packages."""
    found = []
    for package in ROOTS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]
                    found.append((package, path.relative_to(ROOT).as_posix(), bases, node))
    return found


def exception_classes() -> dict[str, list[tuple[str, str, list[str]]]]:
    """Each exception class name: (package, path, bases) of every class of that name."""
    by_name: dict[str, list[tuple[str, str, list[str]]]] = defaultdict(list)
    for package, path, bases, node in classes():
        by_name[node.name].append((package, path, bases))
    exceptions: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, defs in by_name.items():
            if name not in exceptions and any(b in BUILTIN_EXCEPTIONS or b in exceptions for _, _, bases in defs for b in bases):
                exceptions.add(name)
                grew = True
    return {name: by_name[name] for name in exceptions}


def roots_of(name: str, found: dict[str, list[tuple[str, str, list[str]]]]) -> set[str]:
    """The tree's exception classes ``name`` derives from, itself included."""
    seen = {name}
    todo = [name]
    while todo:
        for _, _, bases in found.get(todo.pop(), []):
            for base in bases:
                if base in found and base not in seen:
                    seen.add(base)
                    todo.append(base)
    return seen


def test_every_exception_derives_from_its_packages_root() -> None:
    found = exception_classes()
    assert set(ROOTS.values()) <= set(found) and {"JournalError", "UsageError", "DecodeError", "ConnectRefused"} <= set(found)
    strays = [f"{path}: {name}({', '.join(bases)})" for name, defs in found.items() for package, path, bases in defs
              if ROOTS[package] not in roots_of(name, found)]
    assert not strays, "exceptions outside their package's root:\n" + "\n".join(strays)


def test_each_root_is_in_its_face_with_the_tree_in_the_docstring() -> None:
    found = exception_classes()
    for package, root in ROOTS.items():
        face = ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))
        assert any(isinstance(n, ast.ClassDef) and n.name == root for n in face.body), package
        doc = ast.get_docstring(face) or ""
        members = [name for name, defs in found.items() if not name.startswith("_") and any(p == package for p, _, _ in defs)]
        missing = [name for name in members if name not in doc]
        assert not missing, f"{package}'s face docstring leaves out {missing}"


def test_no_two_exception_classes_share_a_name() -> None:
    shared = {name: [path for _, path, _ in defs] for name, defs in exception_classes().items() if len(defs) > 1}
    assert not shared, shared


def test_the_names_that_meant_two_things_mean_one() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for package in ROOTS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                names = [node.name] if isinstance(node, ast.ClassDef) else [
                    t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
                for name in names:
                    defined[name].append(path.relative_to(ROOT).as_posix())
    for name in ("Gate", "Deadlines", "Out", "Resync", "ClusterError", "Held"):
        assert len(defined[name]) == 1, (name, defined[name])
    relay_classes = defaultdict(list)
    for package, path, _, node in classes():
        if package == "relay":
            relay_classes[node.name].append(path)
    assert not {n: p for n, p in relay_classes.items() if len(p) > 1}, "two classes of relay share a name"
