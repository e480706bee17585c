"""Builds blink: the pure-Python packages, and the modules that pay for it compiled to C by mypyc.

How this works
--------------
Everything but the compiled modules is declared in pyproject.toml; this file only adds the
extension modules. ``COMPILED`` lists the modules compiled by mypyc: each becomes a C extension of
the same name (beside a shared library of the group, ``blink_compiled__mypyc``, at the packages'
root); the ``.py`` files are installed too, and Python imports the extension first when there is one.

Which modules: those that measure faster compiled (docs/performance.md, "The compiled build", has
the figures and commands). ``mqttkit.packets`` does -- its parser and packer are loops over bytes
and ints, about twice as fast compiled, and every message the relay and ``blink load`` read or
write crosses them. The codec, the judge's parts and the BLINK engine measure the same compiled as
pure (their time is in msgpack, in building dicts and dataclasses and in code the codec generates
at run time, all of which stays CPython's), and compiling the engine or the messages would change
behaviour: mypyc erases the generic annotations the codec and the events read back (``dict[str,
object]`` becomes ``dict``), its classes have no ``__dict__`` (the engine's caches, the snapshot
codec and pickling use it) and it checks every ``cast`` at run time.

The build option ``BLINK_COMPILE`` (an environment variable of the ``pip install`` / ``pip wheel``
/ ``python -m build`` command; README.md and CONTRIBUTING.md document it) says what to do:

- ``auto`` (the default): compile a wheel (``pip install .``) when a C compiler works, else build
  it pure. An editable install (``pip install -e .``) stays pure: its point is that an edit takes
  effect at once, and a compiled module would shadow its edited source; it also removes the
  extensions an earlier compiled editable build left in the checkout.
- ``yes``: compile, wheel or editable, and fail the build when it cannot (CI, so a broken
  compiler never passes as a pure build). An editable compiled build puts the extensions in the
  checkout beside their sources (setuptools' editable mode builds extensions in place) and writes
  ``mqttkit/compiled-inplace.json`` with each compiled source's hash; ``mqttkit/__init__.py``
  refuses to import once a source differs from what was compiled (build again, or reinstall
  pure), so a stale extension never runs silently in place of edited code.
- ``no``: pure, wheel or editable (and an editable one removes extensions left in place).

"A C compiler works" is decided by compiling a two-line C file that includes ``Python.h`` with the
compiler and flags the build would use (``CC`` and the interpreter's own configuration): that fails
without a compiler (or with ``CC=/bin/false``) and without Python's headers. In ``auto`` any failure
of the compilation itself (mypyc, the compiler, the linker) also falls back to a pure build, with
one warning line, and removes what it half built so a wheel never holds part of the extensions.

mypyc (from the build requirement ``mypy``) runs only when the extensions are built (``build_ext``),
not each time setuptools reads this file for metadata; it type-checks the program the compiled
modules import with the ``[tool.mypy]`` settings first (about half a minute on two cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

#: The modules compiled by mypyc (paths from the checkout's root): see the header for why these.
COMPILED = (
    "mqttkit/packets.py",
)
#: The shared library of the compiled modules (mypyc's "group"): one file beside the packages.
GROUP = "blink_compiled"
#: What an editable compiled build records: each compiled source's hash (see mqttkit/__init__.py).
INPLACE_RECORD = ROOT / "mqttkit" / "compiled-inplace.json"
OPTION = "BLINK_COMPILE"
CHOICES = ("auto", "yes", "no")


def _choice() -> str:
    value = os.environ.get(OPTION, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        sys.exit(f"{OPTION}={value!r}: must be one of {', '.join(CHOICES)}")
    return value


def _say(text: str) -> None:
    print(f"blink build: {text}", file=sys.stderr, flush=True)


def _compiler_works(build: build_ext) -> str | None:
    """None when the compiler the build would use compiles a file that includes Python.h, else why not."""
    from distutils.ccompiler import new_compiler
    from distutils.errors import CCompilerError, DistutilsError
    from distutils.sysconfig import customize_compiler

    try:
        compiler = new_compiler(compiler=build.compiler, force=True)
        customize_compiler(compiler)
        with tempfile.TemporaryDirectory(prefix="blink-cc-") as tmp:
            source = Path(tmp, "probe.c")
            source.write_text("#include <Python.h>\nint blink_probe(void) { return 0; }\n")
            compiler.compile([str(source)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]])
    except (CCompilerError, DistutilsError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _ext_paths(cmd: build_ext, inplace: bool) -> list[Path]:
    """Where ``cmd`` writes (or, in place, copies) every extension of this build."""
    names = [*(m[:-3].replace("/", ".") for m in COMPILED), f"{GROUP}__mypyc"]
    if inplace:
        return [ROOT / cmd.get_ext_filename(name) for name in names]
    return [Path(cmd.build_lib, cmd.get_ext_filename(name)) for name in names]


def _remove_inplace(cmd: build_ext) -> None:
    for path in [*_ext_paths(cmd, inplace=True), INPLACE_RECORD]:
        if path.exists():
            path.unlink()
            _say(f"removed {path.relative_to(ROOT)}")


class BuildExt(build_ext):
    """Compiles ``COMPILED`` with mypyc when the build option and the machine allow (see the header)."""

    def run(self) -> None:
        choice = _choice()
        editable = bool(getattr(self, "editable_mode", False) or self.inplace)
        if choice == "no" or (choice == "auto" and editable):
            self._pure("pure build" + (f" ({OPTION}=no)" if choice == "no" else " (an editable install stays pure: "
                                       f"{OPTION}=yes compiles it in place)"), editable)
            return
        why = _compiler_works(self)
        if why is not None:
            if choice == "yes":
                raise SystemExit(f"blink build: {OPTION}=yes but no working C compiler: {why}")
            self._pure(f"pure build: no working C compiler ({why})", editable)
            return
        try:
            self._compile(editable)
        except (Exception, SystemExit) as exc:
            if choice == "yes":
                raise
            self._pure(f"pure build: compiling failed ({type(exc).__name__}: {exc})", editable)

    def _pure(self, why: str, editable: bool) -> None:
        """Build no extension, and leave none of an earlier build where this one would pick it up:
        setuptools' build folder (a wheel takes all it holds) and, editable, the checkout."""
        _say(why)
        for path in _ext_paths(self, inplace=False):
            if path.exists():
                path.unlink()
        if editable:
            _remove_inplace(self)
        self.extensions = []

    def _compile(self, editable: bool) -> None:
        from mypyc.build import mypycify

        _say(f"compiling {len(COMPILED)} modules with mypyc")
        here = os.getcwd()
        os.chdir(ROOT)  # mypy reads [tool.mypy] and finds the packages from the project's root
        try:
            extensions = mypycify(list(COMPILED), opt_level="3", group_name=GROUP)
        finally:
            os.chdir(here)
        self.extensions = extensions
        self.distribution.ext_modules = extensions
        # What build_ext.finalize_options derives from the extensions, for the ones mypyc made.
        self.check_extensions_list(self.extensions)
        for ext in self.extensions:
            name = ext._full_name = self.get_ext_fullname(ext.name)
            self.ext_map[name] = self.ext_map[name.split(".")[-1]] = ext
            ext._links_to_dynamic = ext._needs_stub = False
            ext._file_name = self.get_ext_filename(name)
        super().run()
        if editable:
            record = {path: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for path in COMPILED}
            INPLACE_RECORD.write_text(json.dumps({"compiled": record}, indent=1) + "\n")
            _say(f"compiled in place: {INPLACE_RECORD.relative_to(ROOT)} records the sources")


# A stand-in, so that setuptools runs build_ext (which decides what to compile) and tags the wheel
# for this platform; BuildExt replaces it by mypyc's extensions or by none.
PLACEHOLDER = Extension(f"{GROUP}__placeholder", sources=[])

setup(ext_modules=[PLACEHOLDER], cmdclass={"build_ext": BuildExt})
