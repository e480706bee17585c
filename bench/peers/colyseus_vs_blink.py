"""The server's CPU per BLINK play: ``blink serve`` as shipped (every process it runs) against a Colyseus room, same players.

How this works
--------------
Each side is started fresh, one after the other, as separate processes on loopback, and played by
the same simulated people -- ``blink load --pace human``'s player (client/tools/load_player.py), and for
Colyseus the same player reproduced move for move in Node (bench/peers/load.mjs: log-normal
reaction around 0.35 s, moves chosen on the predicted state, at most three plays in flight, a ping
a second only to a player with no verdict in that second, one game a match with a 0.5 s countdown, a rematch when it ends):

  colyseus     node server.mjs (the room, bench/peers/room.mjs)  <-  node load.mjs
  blink serve  ``blink serve --port P --no-journal`` as shipped, with the broker it runs itself in a
               child (an installed Mosquitto)  <-  blink load --server URL --pace human --json
  blink serve --embedded  (``--blink embedded``) the embedded broker with the relay inside it, one process
  blink --broker  (``--blink broker``) mosquitto started here (``blink broker-config``: TCP_NODELAY,
               the shipped ACL)  <-  blink serve --broker URL --no-journal  <-  blink load ...
  +journal     (``--journal``) each blink side once more with the journal as ``blink serve`` ships it
               (--data DIR, fsync every batch)

A ``blink serve`` side's server CPU is every process it runs: the serve process and, walked from
/proc on every progress line, its children and theirs (the broker child), shown apart and summed.

Both generators print a progress line every 5 s from one second into their measured window, with
the plays made so far ("N actions"). On each line this script reads every server process's CPU
from /proc (each process apart) and, for blink, counts finished games from the
matches' retained snapshots (the Colyseus generator counts its own). CPU per play is then the
CPU between the first and the last line over the plays made between them: the same interval for
the CPU and the plays, in the steady part of the window, on both sides. The rest (verdict
percentiles, unanswered plays, rejections, the generator's CPU and event-loop lag, messages
received per play) is each generator's own report of its whole window. blink load reports its
message rate as CPU per message, so its messages per play are derived from that (to within the
rounding of its figures, well under 1 %).

npm dependencies (pinned in package-lock.json) are installed on the first run with ``npm ci``
into bench/peers/node_modules. Without Node or npm, with npm unreachable, or without Mosquitto
the script ends in one line with status 1; bad arguments are status 2, Ctrl-C 130. Every process
it starts is stopped on every path (and has the kernel end it should this script be killed).

    .venv/bin/python bench/peers/colyseus_vs_blink.py --matches 300 --duration 30
    .venv/bin/python bench/peers/colyseus_vs_blink.py --matches 300 --duration 30 --blink serve --blink broker
    .venv/bin/python bench/peers/colyseus_vs_blink.py --matches 20 --duration 30 --journal --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, NoReturn, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit import find_mosquitto, wait_port  # noqa: E402
from mqttkit import free_port  # noqa: E402
from protocol import messages as m  # noqa: E402  (registers the message types decode reads)
from protocol.codec import DecodeError, decode  # noqa: E402

NODE_MIN = 18
NPM_TIMEOUT_S = 300.0
START_TIMEOUT_S = 30.0
PROGRESS = re.compile(r"(\d+) actions")
GAMES = re.compile(r"games (\d+)")
PREFIX = "blink/v1"


class BenchError(RuntimeError):
    """The comparison cannot go on; the message is the one line the user sees."""


class Interrupted(Exception):
    """SIGINT or SIGTERM: stop everything and end with status 130."""


# ------------------------------------------------------------------------------------ processes


def _die_with_parent() -> None:
    """In each child, before exec: SIGTERM when this script dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere the orderly stop below still applies
        pass


#: A watchdog for a child the kernel will not end with this script: Mosquitto started as root drops to
#: its own user, and a change of user clears the parent-death signal. It polls for this script's end.
#: It also removes the run's temporary directory.
WATCHDOG = ("import os, shutil, signal, sys, time\n"
            "parent, child, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
            "while os.getppid() == parent:\n"
            "    time.sleep(0.5)\n"
            "try:\n"
            "    os.kill(child, signal.SIGTERM)\n"
            "except OSError:\n"
            "    pass\n"
            "time.sleep(2)\n"
            "shutil.rmtree(work, ignore_errors=True)\n")


class Processes:
    """Every process this script starts, each in its own session (the terminal's Ctrl-C reaches
    only this script, which stops them in order: last started, first stopped)."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen[bytes], int]] = []

    def start(self, cmd: Sequence[str], stop_signal: int = signal.SIGINT, with_parent: bool = True,
              **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent if with_parent else None, **kw)
        self.procs.append((proc, stop_signal))
        return proc

    def watch(self, proc: subprocess.Popen[bytes], work: Path) -> None:
        """Have ``proc`` stopped even if this script is killed outright (see ``WATCHDOG``)."""
        self.start([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(proc.pid), str(work)],
                   stop_signal=signal.SIGKILL, with_parent=False)

    def stop_all(self) -> None:
        while self.procs:
            proc, sig = self.procs.pop()
            stop_process(proc, sig)


def stop_process(proc: subprocess.Popen[bytes], sig: int, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        except ProcessLookupError:
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def cpu_s(pid: int, reaped: bool = False) -> float | None:
    """User + system CPU seconds of a process, its threads included (/proc), or None if it is gone;
    ``reaped``: with its children that it has waited for (cutime, cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's list, /proc/PID/task/TID/children)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(found))


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def tree_cpu(pid: int, top: str) -> dict[str, float | None]:
    """CPU seconds of ``pid`` (named ``top``) and of every process under it, each by name and pid: a
    server's cost is every process it runs. A child's name is its command plus what it runs when
    that is Python. ``top``'s own figure includes the children it has reaped: a short-lived child (a
    forked journal snapshot) counts there once it has ended."""
    out: dict[str, float | None] = {top: cpu_s(pid, reaped=True)}
    todo = children(pid)
    while todo:
        child = todo.pop(0)
        name = comm(child)
        if name.startswith("python") or name == "blink":
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                mod = next((argv[i + 1].decode() for i, a in enumerate(argv[:-1]) if a == b"-m"), None)
                name = mod.rsplit(".", 1)[-1] if mod else name
            except OSError:
                pass
        out[f"{name} ({child})"] = cpu_s(child)
        todo += children(child)
    return out


def wait_line(proc: subprocess.Popen[bytes], marker: str, what: str, timeout: float = START_TIMEOUT_S) -> None:
    """Read the process's stdout until a line holds ``marker``; BenchError if it ends or stays silent."""
    assert proc.stdout is not None
    found = threading.Event()
    seen: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not found.is_set():
                seen.append(line)
                if marker in line:
                    found.set()  # and read on: a full pipe would stop the process
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not found.wait(timeout):
        last = next((x for x in reversed(seen) if x), "no output")
        raise BenchError(f"{what} did not start within {timeout:g} s: {last[:200]}")


# ------------------------------------------------------------------------------------ node and npm


def node_tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise BenchError(f"{'node' if node is None else 'npm'} is not installed: the Colyseus side needs Node "
                         f"{NODE_MIN} or newer with npm")
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        major = int(version.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise BenchError(f"cannot tell node's version: {exc}") from exc
    if major < NODE_MIN:
        raise BenchError(f"node {version} is too old: Colyseus 0.16 needs Node {NODE_MIN} or newer")
    return node, npm


def npm_install(npm: str) -> None:
    """``npm ci`` once: when node_modules is missing or older than the lock file."""
    lock = HERE / "package-lock.json"
    installed = HERE / "node_modules" / ".package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    print("colyseus_vs_blink: installing the Colyseus packages (npm ci) ...", file=sys.stderr, flush=True)
    try:
        out = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE,
                             capture_output=True, text=True, timeout=NPM_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"npm ci did not finish within {NPM_TIMEOUT_S:g} s (is the npm registry reachable?)") from exc
    if out.returncode != 0:
        why = [x.removeprefix("npm error").strip() for x in (out.stderr + out.stdout).splitlines()
               if x.strip() and "complete log" not in x and not x.rstrip().endswith("-debug-0.log")]
        said = "; ".join(x for x in why[:2] if x) or f"status {out.returncode}"
        raise BenchError(f"npm ci failed (is the npm registry reachable?): {said[:240]}")


# ------------------------------------------------------------------------------------ one side


@dataclass
class Sample:
    """One progress line of a generator, and what the servers had used by then."""

    at: float
    actions: int
    cpu: dict[str, float | None]
    games: int | None
    #: blink: each match's finished games, from its snapshot (a match can be missing from one census)
    per_match: dict[str, int] | None = None


@dataclass
class SideResult:
    name: str
    report: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)
    load_avg: tuple[float, float] = (0.0, 0.0)

    def figures(self) -> dict[str, Any]:
        """What the table shows: server CPU per play over the sampled interval, the generator's report."""
        r = self.report
        out: dict[str, Any] = {"side": self.name}
        first, last = (self.samples[0], self.samples[-1]) if len(self.samples) >= 2 else (None, None)
        plays = (last.actions - first.actions) if first and last else 0
        interval = (last.at - first.at) if first and last else 0.0
        per_play: dict[str, float | None] = {}
        pct: dict[str, float | None] = {}
        if first and last:
            # A process under the server that started after the first line counts from zero; one gone
            # by the last (a forked snapshot) counts in its parent's figure, which includes the
            # children it reaped (``tree_cpu``).
            for proc in [*first.cpu, *(k for k in last.cpu if k not in first.cpu)]:
                if proc not in last.cpu:
                    continue
                a, b = first.cpu.get(proc, 0.0), last.cpu.get(proc)
                used = None if a is None or b is None else b - a
                per_play[proc] = None if used is None or not plays else round(used / plays * 1e6, 1)
                pct[proc] = None if used is None or interval <= 0 else round(used / interval * 100, 1)
        known = [v for v in per_play.values() if v is not None]
        out["server_us_per_play"] = per_play
        out["server_us_per_play_total"] = round(sum(known), 1) if known and len(known) == len(per_play) else None
        out["server_cpu_pct"] = pct
        out["sampled_s"] = round(interval, 2)
        out["sampled_plays"] = plays
        if first and last and first.per_match is not None and last.per_match is not None:
            before, after = first.per_match, last.per_match
            out["games_finished"] = sum(after[k] - before[k] for k in before if k in after)
        else:
            out["games_finished"] = (last.games - first.games) if first and last and first.games is not None \
                and last.games is not None else None
        for key in ("matches", "matches_running", "duration_s", "actions", "actions_per_s", "accepted", "rejected",
                    "bounced_locally", "verdict_ms", "unanswered", "generator_cpu_pct", "generator_lag_ms",
                    "setup_failed", "lost_connections"):
            out[key] = r.get(key)
        out["rejections"] = sum(r.get("rejected", {}).values())
        out["messages_per_play"] = messages_per_play(r)
        out["generator_us_per_play"] = generator_us_per_play(r)
        out["load_avg_1m"] = [round(x, 2) for x in self.load_avg]
        return out


def messages_per_play(r: dict[str, Any]) -> float | None:
    if r.get("messages_per_play") is not None:
        return float(r["messages_per_play"])
    # blink load reports its CPU per message received and its CPU share: messages = CPU / (CPU per message).
    cpu_pct, us, wall, actions = (r.get("generator_cpu_pct"), r.get("generator_us_per_msg"), r.get("duration_s"),
                                  r.get("actions"))
    if not cpu_pct or not us or not wall or not actions:
        return None
    return round(float(cpu_pct) / 100 * float(wall) / (float(us) * 1e-6) / int(actions), 2)


def generator_us_per_play(r: dict[str, Any]) -> float | None:
    """The generator's CPU over its whole window per play made."""
    cpu_pct, wall, actions = r.get("generator_cpu_pct"), r.get("duration_s"), r.get("actions")
    if cpu_pct is None or not wall or not actions:
        return None
    return round(float(cpu_pct) / 100 * float(wall) / int(actions) * 1e6, 1)


def run_generator(procs: Processes, cmd: Sequence[str], cwd: Path, duration: float,
                  on_line: Callable[[int, str], Sample], what: str) -> tuple[dict[str, Any], list[Sample]]:
    """Start a generator, sample on each of its progress lines, and return its JSON report."""
    gen = procs.start(cmd, stop_signal=signal.SIGINT, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    samples: list[Sample] = []
    tail: list[str] = []
    assert gen.stderr is not None and gen.stdout is not None

    def read(stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            m = PROGRESS.search(line)
            if m and "/" in line.split("matches")[0]:
                samples.append(on_line(int(m.group(1)), line))
            elif line.strip():
                tail.append(line)
                del tail[:-20]
    chunks: list[bytes] = []
    reader = threading.Thread(target=read, args=(gen.stderr,), daemon=True)
    reader.start()
    report_reader = threading.Thread(target=lambda: chunks.append(gen.stdout.read() if gen.stdout else b""),
                                     daemon=True)
    report_reader.start()
    try:
        gen.wait(timeout=duration + 900)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{what} did not finish within {duration + 900:g} s") from exc
    reader.join(10)
    report_reader.join(10)
    out = b"".join(chunks)
    if gen.returncode not in (0, 130):
        last = tail[-1] if tail else f"status {gen.returncode}"
        raise BenchError(f"{what} failed: {last[:300]}")
    try:
        report: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BenchError(f"{what} printed no report: {(tail[-1] if tail else '')[:200]}") from exc
    if gen.returncode == 130 or report.get("interrupted"):
        raise Interrupted()
    return report, samples


def colyseus_side(args: argparse.Namespace, node: str) -> SideResult:
    procs = Processes()
    try:
        port = free_port()
        server_cmd = [node, "server.mjs", "--port", str(port)]
        if args.seed is not None:
            server_cmd += ["--seed", str(args.seed)]
        server = procs.start(server_cmd, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wait_line(server, "colyseus listening", "the Colyseus server (node server.mjs)")
        load_avg0 = os.getloadavg()[0]

        def on_line(actions: int, line: str) -> Sample:
            games = GAMES.search(line)
            return Sample(time.monotonic(), actions, {"colyseus": cpu_s(server.pid)},
                          int(games.group(1)) if games else None)

        gen_cmd = [node, "load.mjs", "--url", f"ws://127.0.0.1:{port}", "--matches", str(args.matches),
                   "--duration", str(args.duration), "--reaction", str(args.reaction)]
        if args.seed is not None:
            gen_cmd += ["--seed", str(args.seed)]
        report, samples = run_generator(procs, gen_cmd, HERE, args.duration, on_line,
                                        "the Colyseus load generator (node load.mjs)")
        if server.poll() is not None:
            raise BenchError(f"the Colyseus server stopped during the run, status {server.returncode}")
        return SideResult("colyseus", report, samples, (load_avg0, os.getloadavg()[0]))
    finally:
        procs.stop_all()


def blink_command() -> list[str]:
    """``blink`` of this environment: its console script, else its entry point run by this Python."""
    script = Path(sys.executable).parent / "blink"
    if script.exists():
        return [str(script)]
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="console_scripts") if e.name == "blink"]
    if not found:
        raise BenchError("the blink command is not installed here: run with the project's venv "
                         "(.venv/bin/python, after pip install -e .)")
    module, _, attr = found[0].value.partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {attr} as main; sys.exit(main())"]


def census(url: str, expected: int) -> dict[str, int] | None:
    """Games finished so far on each match of the broker, from the matches' retained snapshots (a
    finished game is every game before the current one, and the current one once it is over)."""
    from mqttkit import parse_url
    from mqttkit.connection import connect

    address = parse_url(url)
    games: dict[str, int] = {}

    async def count() -> dict[str, int]:
        last = [time.monotonic()]

        def on_messages(messages: list[Any]) -> None:
            for message in messages:
                try:
                    snap = decode(message.payload)
                except DecodeError:
                    continue
                if isinstance(snap, m.Snapshot):
                    # Games count from 0; a game is finished once the match is between games or over.
                    finished = snap.game_index + 1 if snap.status in ("over", "between") else snap.game_index
                    games[snap.match] = 0 if snap.status == "waiting" else finished
            last[0] = time.monotonic()

        conn = await connect(address.host, address.port, client_id=f"census{os.urandom(6).hex()}",
                             on_messages=on_messages, username=address.username, password=address.password,
                             keepalive=60, timeout=10)
        try:
            await conn.subscribe([(f"{PREFIX}/m/+/+/snap", 0)])
            started = last[0] = time.monotonic()
            # The retained snapshots come right after the SUBACK: done when every match's has come,
            # or they have stopped coming.
            while len(games) < expected and time.monotonic() - last[0] < 0.5 and time.monotonic() - started < 5.0:
                await asyncio.sleep(0.02)
        finally:
            await conn.disconnect()
        return dict(games)

    try:
        return asyncio.run(count())
    except Exception:  # noqa: BLE001 - a census that failed leaves the games unknown, not the run
        return None


def serve_side(args: argparse.Namespace, journal: bool, embedded: bool) -> SideResult:
    """``blink serve`` as shipped: the broker it runs itself, every process under it measured."""
    blink = blink_command()
    procs = Processes()
    work = Path(tempfile.mkdtemp(prefix="colyseus-vs-blink-"))
    try:
        port = free_port()
        store = ["--data", str(work / "data")] if journal else ["--no-journal"]
        serve_cmd = [*blink, "--prefix", PREFIX, "serve", "--port", str(port), *store,
                     *(["--embedded"] if embedded else [])]
        if args.seed is not None:
            serve_cmd += ["--seed", str(args.seed)]
        # SIGTERM: a service manager's stop, after which serve stops its relay, then its broker.
        serve = procs.start(serve_cmd, stop_signal=signal.SIGTERM, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
        wait_line(serve, "running", "blink serve")
        load_avg0 = os.getloadavg()[0]
        url = f"mqtt://127.0.0.1:{port}"  # players and spectators log in as anyone; snapshots are public

        def on_line(actions: int, line: str) -> Sample:
            cpu = tree_cpu(serve.pid, "relay (blink serve)")
            games = census(url, args.matches)
            return Sample(time.monotonic(), actions, cpu, None if games is None else sum(games.values()), games)

        gen_cmd = [*blink, "--prefix", PREFIX, "load", "--server", url, "--relay-pid", str(serve.pid),
                   "--matches", str(args.matches), "--duration", str(args.duration), "--pace", "human",
                   "--reaction", str(args.reaction), "--json"]
        if args.seed is not None:
            gen_cmd += ["--seed", str(args.seed)]
        report, samples = run_generator(procs, gen_cmd, ROOT, args.duration, on_line, "blink load")
        if serve.poll() is not None:
            raise BenchError(f"blink serve stopped during the run, status {serve.returncode}")
        name = "serve --embedded" if embedded else "blink serve"
        return SideResult(name + "+journal" if journal else name, report, samples, (load_avg0, os.getloadavg()[0]))
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def blink_side(args: argparse.Namespace, journal: bool) -> SideResult:
    binary = find_mosquitto()
    if binary is None:
        raise BenchError("mosquitto is not installed: the blink side runs on Mosquitto (apt install mosquitto)")
    blink = blink_command()
    procs = Processes()
    work = Path(tempfile.mkdtemp(prefix="colyseus-vs-blink-"))
    work.chmod(0o755)  # Mosquitto started as root drops to its own user and must read its files
    try:
        port = free_port()
        out = subprocess.run([*blink, "--prefix", PREFIX, "broker-config", str(work / "broker"), "--port", str(port)],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        login = next((x.strip() for x in out.stdout.splitlines() if x.strip().startswith("mqtt://")), None)
        if out.returncode != 0 or login is None:
            raise BenchError(f"blink broker-config failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
        broker = procs.start([binary, "-c", str(work / "broker" / "mosquitto.conf")], stop_signal=signal.SIGTERM,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.watch(broker, work)
        try:
            wait_port(port)
        except RuntimeError as exc:
            raise BenchError(f"mosquitto did not start on port {port}") from exc
        store = ["--data", str(work / "data")] if journal else ["--no-journal"]
        # The relay's password in a file, not on a command line every local user's `ps` shows.
        from mqttkit import parse_url

        secret = work / "relay-password"
        secret.write_text(parse_url(login).password or "")
        secret.chmod(0o600)
        relay_cmd = [*blink, "--prefix", PREFIX, "serve", "--broker", f"mqtt://127.0.0.1:{port}",
                     "--password-file", str(secret), *store]
        if args.seed is not None:
            relay_cmd += ["--seed", str(args.seed)]
        relay = procs.start(relay_cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        wait_line(relay, "running", "the relay (blink serve)")
        load_avg0 = os.getloadavg()[0]

        def on_line(actions: int, line: str) -> Sample:
            cpu = {"relay": cpu_s(relay.pid), "broker": cpu_s(broker.pid)}
            games = census(login, args.matches)
            return Sample(time.monotonic(), actions, cpu, None if games is None else sum(games.values()), games)

        gen_cmd = [*blink, "--prefix", PREFIX, "load", "--server", f"mqtt://127.0.0.1:{port}", "--relay-pid",
                   str(relay.pid), "--matches", str(args.matches), "--duration", str(args.duration), "--pace",
                   "human", "--reaction", str(args.reaction), "--json"]
        if args.seed is not None:
            gen_cmd += ["--seed", str(args.seed)]
        report, samples = run_generator(procs, gen_cmd, ROOT, args.duration, on_line, "blink load")
        if relay.poll() is not None:
            raise BenchError(f"the relay stopped during the run, status {relay.returncode}")
        return SideResult("blink --broker+journal" if journal else "blink --broker", report, samples,
                          (load_avg0, os.getloadavg()[0]))
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------------ the table


def _f(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def process_role(name: str) -> str:
    """What a measured process is, for the table's rows: the room, the relay, the broker."""
    if name == "colyseus":
        return "room (node)"
    if name.startswith("relay"):
        return "relay"
    return "broker (" + name.split(" (")[0] + ")" if name != "broker" else "broker (mosquitto)"


def table(results: list[dict[str, Any]], ratios: dict[str, dict[str, float | None]]) -> str:
    cols = [r["side"] for r in results]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, fn: Callable[[dict[str, Any]], Any]) -> None:
        rows.append((label, [_f(fn(r)) for r in results]))

    row("server CPU per play, µs", lambda r: r["server_us_per_play_total"])
    roles: list[str] = []
    for r in results:
        roles += [x for x in map(process_role, r["server_us_per_play"]) if x not in roles]
    def of_role(role: str) -> Callable[[dict[str, Any]], float | None]:
        def cost(r: dict[str, Any]) -> float | None:
            found = [v for k, v in r["server_us_per_play"].items() if process_role(k) == role and v is not None]
            return round(sum(found), 1) if found else None
        return cost

    for role in roles:
        row("  " + role, of_role(role))
    row("server CPU, % of a core", lambda r: sum(v for v in r["server_cpu_pct"].values() if v is not None))
    row("plays/s", lambda r: r["actions_per_s"])
    row("verdict p50 ms", lambda r: r["verdict_ms"]["p50"])
    row("verdict p90 ms", lambda r: r["verdict_ms"]["p90"])
    row("verdict p99 ms", lambda r: r["verdict_ms"]["p99"])
    row("unanswered", lambda r: r["unanswered"])
    row("rejections", lambda r: r["rejections"])
    row("games finished", lambda r: r["games_finished"])
    row("  per minute", lambda r: None if r["games_finished"] is None or not r["sampled_s"]
        else round(r["games_finished"] / r["sampled_s"] * 60, 1))
    row("sampled interval, s", lambda r: r["sampled_s"])
    row("generator CPU %", lambda r: r["generator_cpu_pct"])
    row("generator lag p99 ms", lambda r: r["generator_lag_ms"]["p99"])
    row("generator CPU per play, µs", lambda r: r["generator_us_per_play"])
    row("messages received per play", lambda r: r["messages_per_play"])
    row("load average (start, end)", lambda r: "{}, {}".format(*r["load_avg_1m"]))
    width = max(len(label) for label, _ in rows) + 2
    colw = max(14, *(len(c) + 2 for c in cols))
    lines = ["".ljust(width) + "".join(c.rjust(colw) for c in cols)]
    lines += [label.ljust(width) + "".join(v.rjust(colw) for v in values) for label, values in rows]
    lines.append("(server CPU and games finished: between each generator's first and last progress line, the "
                 "sampled interval; the rest: each generator's whole window)")
    for side, ratio in ratios.items():
        lines.append(f"{side} / colyseus: server CPU per play {_f(ratio['server_cpu_per_play'], 2)}, verdict p50 "
                     f"{_f(ratio['verdict_p50'], 2)}, p99 {_f(ratio['verdict_p99'], 2)}, generator CPU per play "
                     f"{_f(ratio['generator_cpu_per_play'], 2)}")
    for r in results:
        if len(r["server_us_per_play"]) > 1:
            lines.append(f"{r['side']}: " + ", ".join(f"{k} {_f(v)} µs" for k, v in r["server_us_per_play"].items()))
    for r in results:
        extra = []
        if r["rejected"]:
            extra.append("rejected " + ", ".join(f"{k} {n}" for k, n in sorted(r["rejected"].items(), key=lambda kv: -kv[1])))
        if r["setup_failed"]:
            extra.append(f"set-up failed {sum(r['setup_failed'].values())}")
        if r["lost_connections"]:
            extra.append(f"lost connections {r['lost_connections']}")
        if r["matches_running"] != r["matches"]:
            extra.append(f"matches running {r['matches_running']}/{r['matches']}")
        if extra:
            lines.append(f"{r['side']}: " + "; ".join(extra))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="colyseus_vs_blink", description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--matches", type=int, required=True, help="concurrent matches, two players each (1-2000)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds each generator measures (10-3600, default 30)")
    ap.add_argument("--reaction", type=float, default=0.35, help="median reaction time, seconds (default 0.35)")
    ap.add_argument("--blink", action="append", choices=("serve", "embedded", "broker"),
                    help="a blink side, repeatable: serve (`blink serve` as shipped, with the broker it runs "
                    "itself; the default), embedded (`blink serve --embedded`), broker (Mosquitto started here "
                    "and `blink serve --broker URL`)")
    ap.add_argument("--journal", action="store_true", help="also run each blink side with its journal on, as shipped")
    ap.add_argument("--seed", type=int, help="seed for the players and the servers' shuffles")
    ap.add_argument("--json", action="store_true", help="print one JSON object")

    def one_line_error(message: str) -> NoReturn:
        print(f"colyseus_vs_blink: {message}", file=sys.stderr)
        sys.exit(2)

    ap.error = one_line_error  # type: ignore[method-assign]
    args = ap.parse_args(argv)
    args.blink = list(dict.fromkeys(args.blink or ["serve"]))
    if not 1 <= args.matches <= 2000:
        ap.error(f"--matches must be from 1 to 2000, not {args.matches}")
    if not 10 <= args.duration <= 3600:
        ap.error(f"--duration must be from 10 to 3600 s (two progress lines, 5 s apart, are needed), not {args.duration:g}")
    if not 0.05 <= args.reaction <= 10:
        ap.error(f"--reaction must be from 0.05 to 10 s, not {args.reaction:g}")
    return args


def ratios_to(side: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """A side's figures over Colyseus's: server CPU per play, verdict p50 and p99, generator CPU per play."""
    def over(a: Any, b: Any) -> float | None:
        return round(float(a) / float(b), 2) if a is not None and b else None

    return {"server_cpu_per_play": over(side["server_us_per_play_total"], base["server_us_per_play_total"]),
            "verdict_p50": over(side["verdict_ms"]["p50"], base["verdict_ms"]["p50"]),
            "verdict_p99": over(side["verdict_ms"]["p99"], base["verdict_ms"]["p99"]),
            "generator_cpu_per_play": over(side["generator_us_per_play"], base["generator_us_per_play"])}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def interrupted(signum: int, frame: Any) -> None:
        raise Interrupted()

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    try:
        node, npm = node_tools()
        npm_install(npm)
        if "broker" in args.blink and find_mosquitto() is None:
            raise BenchError("mosquitto is not installed: the blink side runs on Mosquitto (apt install mosquitto)")
        sides: list[SideResult] = []

        def note(text: str) -> None:
            if not args.json:
                print(f"colyseus_vs_blink: {text}", file=sys.stderr, flush=True)

        note(f"colyseus, {args.matches} matches, {args.duration:g} s ...")
        sides.append(colyseus_side(args, node))
        for journal in (False, True) if args.journal else (False,):
            for kind in args.blink:
                note(f"blink {kind} ({'journal as shipped' if journal else 'no journal'}), {args.matches} matches, "
                     f"{args.duration:g} s ...")
                sides.append(blink_side(args, journal) if kind == "broker"
                             else serve_side(args, journal, embedded=kind == "embedded"))
    except BenchError as exc:
        print(f"colyseus_vs_blink: {exc}", file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt):
        print("colyseus_vs_blink: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    results = [s.figures() for s in sides]
    ratios = {r["side"]: ratios_to(r, results[0]) for r in results[1:]}
    if args.json:
        print(json.dumps({"matches": args.matches, "duration_s": args.duration, "sides": results,
                          "ratio_to_colyseus": ratios,
                          "raw": {s.name: s.report for s in sides}}))
    else:
        print(f"BLINK at human pace, {args.matches} matches, {args.duration:g} s a side "
              f"(load average now {os.getloadavg()[0]:.2f})")
        print(table(results, ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
