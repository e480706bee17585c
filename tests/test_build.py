"""The build: a machine without a C compiler installs blink pure, and a build compiled in place
refuses to run once a compiled module's source has changed.

How this works
--------------
setup.py compiles ``COMPILED`` with mypyc where a C compiler works and builds pure elsewhere
(``BLINK_COMPILE``: ``auto``, ``yes``, ``no``). The wheel tests build from a copy of what ``pip
install .`` reads (the README lane's ``_sources``) with ``CC=/bin/false`` -- a compiler that always
fails, as good as none -- so they run on any machine: ``auto`` must give a wheel with no extension
in it, ``yes`` must fail and say why. The compiled wheel itself is the README lane's
(tests/test_readme.py checks that its install is the compiled one where a compiler is there).

The stale check (``mqttkit/__init__.py``) is run on a copy of the ``mqttkit`` package whose record
of an in-place build names a source hash that is not the source's: importing it must fail with
``ImportError`` naming the file; with the true hash it imports.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_readme import ROOT, _sources

BUILD_TIMEOUT = 900.0  # pip fetches the build requirements (setuptools, mypy): it only bounds a hang


def _copy_sources(to: Path) -> Path:
    for path in _sources():
        target = to / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return to


def _wheel(src: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("BLINK_COMPILE", "CC", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(src)],
                          cwd=src, env={**environ, **env}, capture_output=True, text=True, timeout=BUILD_TIMEOUT)


@pytest.mark.integration
def test_without_a_c_compiler_the_wheel_is_pure_and_yes_refuses(tmp_path: Path) -> None:
    src = _copy_sources(tmp_path / "src")
    done = _wheel(src, tmp_path / "auto", CC="/bin/false")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "blink build: pure build: no working C compiler" in done.stdout + done.stderr
    (wheel,) = (tmp_path / "auto").glob("blink_race-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mqttkit/packets.py" in names and "client/cli/__init__.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))], names
    refused = _wheel(src, tmp_path / "yes", CC="/bin/false", BLINK_COMPILE="yes")
    assert refused.returncode != 0
    assert "BLINK_COMPILE=yes but no working C compiler" in refused.stdout + refused.stderr
    assert not list((tmp_path / "yes").glob("*.whl"))
    bad = _wheel(src, tmp_path / "bad", BLINK_COMPILE="maybe")
    assert bad.returncode != 0 and "BLINK_COMPILE='maybe': must be one of auto, yes, no" in bad.stdout + bad.stderr


def _load_copy(package: Path, name: str) -> None:
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up there)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)


def test_a_build_compiled_in_place_refuses_an_edited_source(tmp_path: Path) -> None:
    package = tmp_path / "mqttkit"
    shutil.copytree(ROOT / "mqttkit", package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.json"))
    source = package / "packets.py"
    record = package / "compiled-inplace.json"
    record.write_text(json.dumps({"compiled": {"mqttkit/packets.py": hashlib.sha256(b"what was compiled").hexdigest()}}))
    with pytest.raises(ImportError, match=r"mqttkit/packets\.py changed since compiled in place .*BLINK_COMPILE=yes"):
        _load_copy(package, "mqttkit_stale_copy")
    record.write_text(json.dumps({"compiled": {"mqttkit/packets.py": hashlib.sha256(source.read_bytes()).hexdigest()}}))
    _load_copy(package, "mqttkit_fresh_copy")  # the sources are what was compiled: it imports
    source.unlink()
    with pytest.raises(ImportError, match="mqttkit/packets.py changed"):
        _load_copy(package, "mqttkit_gone_copy")
