"""The compiled build against the pure one, in the same run: what mypyc gains, module by module.

What it measures
----------------
- The modules setup.py compiles (``COMPILED``: ``mqttkit.packets``): packing PUBLISH packets the way
  a relay's step does (``pack_publish`` of 50 messages into one buffer) and parsing them the way a
  reader does (``Parser.feed`` on 1 KiB reads), in microseconds of the thread's CPU per message (the
  best of ``--rounds`` rounds), compiled and pure, each in a process of its own, alternated; and the
  ratio pure / compiled.
- ``--candidates PATHS`` (comma-separated paths of modules setup.py does not compile): whether
  compiling them would pay. They are compiled by mypyc into a temporary copy of this checkout
  (``mypyc PATHS`` there, about half a minute and more), then ``bench/core_bench.py``'s play (the
  judge's ``handle`` and the encoding of what it publishes, many live BLINK matches) runs in that
  copy compiled and pure, alternated: the median thread CPU per play, and the ratio. A module that
  changes behaviour compiled (docs/architecture.md, "The compiled build") may fail here instead.

The pure side runs the same files with every extension ignored: an import hook loads the ``.py``
beside each ``.so``, so both sides are the same revision. The compiled side needs the compiled build
where this runs (``BLINK_COMPILE=yes .venv/bin/pip install --no-deps -e .``); without it the script
says so in one line and exits 2. The machine is shared: compare the two sides of one run, never a
figure of another run.

    .venv/bin/python bench/compiled_bench.py [--rounds 7] [--json]
    .venv/bin/python bench/compiled_bench.py --candidates protocol/codec.py,relay/judge/referee.py [--plays 20000]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "relay", "client", "mqttkit")


class PureFinder(importlib.abc.MetaPathFinder):
    """Finds every module as the path finder would, but from its ``.py`` where an extension stands beside it."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            return spec
        source = Path(origin).with_name(name.rsplit(".", 1)[-1] + ".py")
        return importlib.util.spec_from_file_location(name, source) if source.exists() else spec


# ------------------------------------------------------------------------------------ what runs in each process


def packets_worker(rounds: int) -> dict[str, object]:
    from mqttkit import packets

    topics = [f"blink/v1/m/0/ABCDE/act/c{i:030d}" for i in range(50)]
    payload = b"\x85" + bytes(60)  # about a verdict's size

    def pack() -> bytes:
        buf = bytearray()
        for topic in topics:
            packets.pack_publish(buf, topic, payload)
        return bytes(buf)

    data = pack()

    def parse() -> None:
        parser = packets.Parser()
        for i in range(0, len(data), 1024):
            parser.feed(data[i:i + 1024])

    best: dict[str, float] = {}
    for name, fn in (("pack_us", pack), ("parse_us", parse)):
        samples = []
        for _ in range(rounds):
            t0 = time.thread_time()
            for _ in range(1000):
                fn()
            samples.append((time.thread_time() - t0) / 1000 / len(topics) * 1e6)
        best[name] = round(min(samples), 3)
    return {"module": packets.__file__, **best}


def core_worker(plays: int) -> dict[str, object]:
    sys.path.insert(0, str(Path.cwd() / "bench"))
    import core_bench  # type: ignore[import-not-found]

    S = core_bench.S
    bench = core_bench.Bench()
    for i in range(200):
        bench.new_match(i)
    bench.advance(4 * S)
    core_bench.timed_plays(bench, min(2000, plays))  # warm up
    cpu: list[float] = []
    core_bench.timed_plays(bench, plays, cpu=cpu)
    compiled = sorted(str(Path(m.__file__).relative_to(Path.cwd())) for m in list(sys.modules.values())
                      if getattr(m, "__file__", None) and str(m.__file__).endswith(".so")
                      and str(m.__file__).startswith(str(Path.cwd())))
    return {"cpu_us": round(statistics.median(cpu), 2), "extensions": compiled}


# ------------------------------------------------------------------------------------ the run


def run_worker(kind: str, pure: bool, cwd: Path, amount: int) -> dict[str, object]:
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--amount", str(amount)]
    if pure:
        args.append("--pure")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(cwd)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"compiled_bench: the {'pure' if pure else 'compiled'} {kind} run failed: "
                         f"{done.stderr.strip().splitlines()[-1:] or done.returncode}")
    result: dict[str, object] = json.loads(done.stdout)
    return result


def alternate(kind: str, cwd: Path, amount: int, runs: int, keys: Sequence[str]) -> dict[str, object]:
    sides: dict[str, list[dict[str, object]]] = {"compiled": [], "pure": []}
    for _ in range(runs):
        for side in ("compiled", "pure"):
            sides[side].append(run_worker(kind, side == "pure", cwd, amount))
    report: dict[str, object] = {"runs": runs}
    for key in keys:
        compiled = statistics.median(float(str(r[key])) for r in sides["compiled"])
        pure = statistics.median(float(str(r[key])) for r in sides["pure"])
        report[key] = {"compiled": compiled, "pure": pure, "pure_over_compiled": round(pure / compiled, 2)}
    report["extensions"] = sides["compiled"][0].get("extensions", sides["compiled"][0].get("module"))
    return report


def candidates_copy(paths: list[str]) -> Path:
    """A copy of the checkout (its packages, bench/ and project files) with ``paths`` compiled by mypyc."""
    for path in paths:
        if not (ROOT / path).is_file() or not path.endswith(".py"):
            raise SystemExit(f"compiled_bench: --candidates: no module {path!r} in this checkout")
    tmp = Path(tempfile.mkdtemp(prefix="blink-candidates-"))
    for name in (*PACKAGES, "bench"):
        shutil.copytree(ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.json",
                                                                               "node_modules"))
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    mypyc = [sys.executable, "-c", "import sys; from mypyc.__main__ import main; sys.exit(main())"]
    done = subprocess.run([*mypyc, *paths], cwd=tmp, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        errors = [ln for ln in done.stdout.splitlines() + done.stderr.splitlines() if "error" in ln][:5]
        raise SystemExit(f"compiled_bench: mypyc cannot compile {', '.join(paths)}: {' | '.join(errors)}")
    return tmp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=7, help="rounds per process for the packets (best is kept)")
    p.add_argument("--runs", type=int, default=3, help="processes per side, alternated (the median is kept)")
    p.add_argument("--candidates", help="comma-separated module paths to compile in a copy and measure the play with")
    p.add_argument("--plays", type=int, default=20000, help="plays per process with --candidates")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.add_argument("--worker", choices=("packets", "core"), help=argparse.SUPPRESS)
    p.add_argument("--amount", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pure", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        if args.pure:
            sys.meta_path.insert(0, PureFinder())
        result = packets_worker(args.amount) if args.worker == "packets" else core_worker(args.amount)
        print(json.dumps(result))
        return 0

    load = os.getloadavg()
    report: dict[str, object] = {"load_average": [round(x, 2) for x in load]}
    if args.candidates:
        paths = [x.strip() for x in args.candidates.split(",") if x.strip()]
        copy = candidates_copy(paths)
        try:
            report["candidates"] = {"paths": paths, **alternate("core", copy, args.plays, args.runs, ["cpu_us"])}
        finally:
            shutil.rmtree(copy, ignore_errors=True)
    else:
        probe = run_worker("packets", False, ROOT, 1)
        if not str(probe["module"]).endswith(".so"):
            print("compiled_bench: mqttkit.packets is not compiled here: build it with "
                  "`BLINK_COMPILE=yes .venv/bin/pip install --no-deps -e .`", file=sys.stderr)
            return 2
        report["packets"] = alternate("packets", ROOT, args.rounds, args.runs, ["pack_us", "parse_us"])
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(report))
        return 0
    for name in ("packets", "candidates"):
        part = report.get(name)
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if isinstance(value, dict):
                unit = "us a message" if name == "packets" else "us of CPU a play"
                print(f"{name} {key.removesuffix('_us')}: compiled {value['compiled']:.3f} / pure {value['pure']:.3f} "
                      f"{unit} -> pure/compiled {value['pure_over_compiled']}x")
        print(f"{name}: extensions {part.get('extensions')}")
    print(f"load average {report['load_average']} -> {report['load_average_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
