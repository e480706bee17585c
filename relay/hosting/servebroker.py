"""The broker ``blink serve`` runs for itself in a process of its own: an installed Mosquitto.

How this works
--------------
Without ``--broker``, ``blink serve`` brings its broker along. With a Mosquitto installed
(``find_mosquitto``) and without ``--embedded``, that is Mosquitto in a child process, and the relay
logs in to it over loopback as it would to any broker (``BrokerChild``): Mosquitto is a compiled
broker on a core of its own, so the relay and its broker spread over two cores. Its configuration
is the one ``blink broker-config`` writes (relay/hosting/mosquitto.py: the access rules, a fresh
relay password, the size limits), in a temporary directory that is removed when it stops. Else --
nothing installed, or ``--embedded`` -- the relay runs inside the embedded broker, in ``blink
serve``'s own process (relay/embedded/inprocess.py); ``choose`` says which.

With a certificate and key (``tls``) the broker also listens with TLS, on ``tls_host`` (default:
the plain listener's): the plain listener on loopback for the relay and the TLS one on ``0.0.0.0``
faces the internet with TLS only. ``describe`` says where each listener is and who can reach it,
and when every one is on loopback, how to open it (``listeners_text``).

``start`` checks the ports first (a taken port is ``PortInUse``, as for the embedded broker,
naming the option that moves it), spawns Mosquitto and waits until its port takes a connection.
``exited`` is done when the child ends; ``lost`` then says why in one line if nobody asked it to
stop (Mosquitto's reason at start is its last log line, without its timestamp). ``stop`` ends it in
order (SIGTERM), then kills it if it takes too long, and removes what it wrote. Mosquitto's files
are for the user it runs as alone (the log, the password file and the certificate copies are mode
600), even where a killed ``blink serve`` could not remove them.

No orphan, whatever happens to ``blink serve``: the child runs in a session of its own (a Ctrl-C in
the terminal reaches ``blink serve`` alone, which stops the relay first and then the broker), and
asks the kernel to end it when its parent dies (``PR_SET_PDEATHSIG``, Linux), even by SIGKILL (a
Mosquitto started by root takes the user its configuration names before exec, since changing user
later would drop that request).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pwd
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from mqttkit import DEFAULT_MAX_PAYLOAD, RELAY_USER, BrokerAddress, Scheme, check_port, check_tls_port
from protocol.topics import DEFAULT_PREFIX
from relay.hosting.mosquitto import is_loopback, share_a_port
from relay import RelayError

#: How long a child may take to serve (a busy machine imports amqtt slowly).
START_TIMEOUT_S = 60.0
#: How long ``stop`` waits for an orderly exit before it kills the child.
STOP_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1


class BrokerFailed(RelayError):
    """The broker could not start: one line saying why."""


def find_mosquitto() -> str | None:
    """An installed Mosquitto (``/usr/sbin`` is often not on an ordinary user's PATH)."""
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(p, os.X_OK)), None)


def choose(embedded: bool) -> str | None:
    """Mosquitto's binary when that is the broker to run in a child; None: the embedded broker, with
    the relay inside it."""
    return None if embedded else find_mosquitto()


def _end_with_parent(user: tuple[int, int] | None = None) -> None:
    """In the child, before exec: become ``user`` (uid, gid) if given, then ask the kernel to send
    SIGTERM when the parent dies (Linux)."""
    if user is not None:
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _exec_user(user: pwd.struct_passwd | None, ports: tuple[int, ...]) -> tuple[int, int] | None:
    """The user (uid, gid) a Mosquitto started by root should start as: the one its configuration
    names (``relay.hosting.mosquitto.broker_user``). Left to itself it drops from root to that user after
    binding its ports, and a process that changes its user loses its parent-death signal (prctl(2)):
    it would outlive a killed ``blink serve``. So the child takes that user before exec -- unless a
    port is one only root may bind (Mosquitto then drops by itself)."""
    if os.geteuid() != 0 or user is None or user.pw_uid == 0 or min(ports) < 1024:
        return None
    return user.pw_uid, user.pw_gid


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def listeners_text(listeners: list[tuple[Scheme, str, int]]) -> str:
    """Where each listener (scheme, bind address, port) is and who can reach it; when only this
    machine can, how to open it to others."""
    urls = [f"{scheme}://{host}:{port}" for scheme, host, port in listeners]
    if all(is_loopback(host) for _, host, _ in listeners):
        tls = any(scheme == "mqtts" for scheme, _, _ in listeners)
        return (" and ".join(urls) + " (loopback: this machine only; other machines: --host 0.0.0.0 or --lan; "
                "the internet, over TLS only: --tls-host 0.0.0.0" + ("" if tls else " --tls-cert FILE --tls-key FILE")
                + ")")
    return " and ".join(url + (" (this machine only)" if is_loopback(host) else " (every interface)"
                               if host in ("", "0.0.0.0", "::") else "")
                        for url, (_, host, _) in zip(urls, listeners))


class BrokerChild:
    """Mosquitto (the binary ``mosquitto``) in a child process on host:port; ``relay_address`` is the
    relay's login (keep it to the relay), ``address`` where players connect."""

    def __init__(self, host: str, port: int, prefix: str = DEFAULT_PREFIX, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 mosquitto: str = "mosquitto", tls: tuple[str, str, int] | None = None,
                 tls_host: str | None = None) -> None:
        #: (certificate, key, port) of a TLS listener beside the plain one, or None; on ``tls_host``.
        self.tls = tls
        self.tls_host = host if tls_host is None else tls_host
        self.host, self.port, self.prefix, self.max_payload = host, port, prefix, max_payload
        self.mosquitto = mosquitto
        self.relay_address: BrokerAddress | None = None
        self.proc: asyncio.subprocess.Process | None = None
        #: Why the child ended without being asked to (one line), once it has.
        self.lost: str | None = None
        self._dir: Path | None = None
        self._stopping = False
        self._exited: asyncio.Task[None] | None = None

    @property
    def address(self) -> BrokerAddress:
        return BrokerAddress(_connect_host(self.host), self.port)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def exited(self) -> asyncio.Task[None]:
        assert self._exited is not None, "start() first"
        return self._exited

    @property
    def listeners(self) -> list[tuple[Scheme, str, int]]:
        """(scheme, bind address, port) of each listener."""
        found: list[tuple[Scheme, str, int]] = [("mqtt", self.host, self.port)]
        if self.tls is not None:
            found.append(("mqtts", self.tls_host, self.tls[2]))
        return found

    def describe(self) -> str:
        """What the "running" line says about the broker."""
        return f"Mosquitto broker ({self.mosquitto}, pid {self.pid}) on {listeners_text(self.listeners)}"

    async def __aenter__(self) -> BrokerChild:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        check_port(self.host, self.port)
        if self.tls is not None:
            check_tls_port(self.tls_host, self.tls[2])
        try:
            await self._start_mosquitto()
        except BaseException:
            await self.stop()
            raise
        self._exited = asyncio.create_task(self._watch())

    async def _start_mosquitto(self) -> None:
        from relay.hosting.mosquitto import broker_user, write_mosquitto_config

        self._dir = Path(tempfile.mkdtemp(prefix="blink-serve-mosquitto-"))
        # Started as root, Mosquitto drops to its own user before it reads the ACL, the password
        # file and the certificate (each given to that user, mode 600): it must reach them.
        self._dir.chmod(0o755)
        user = broker_user(self._dir)
        tls = None
        if self.tls is not None:  # copies its own user can read (the originals may sit in a closed folder)
            cert, key = self._dir / "tls-cert.pem", self._dir / "tls-key.pem"
            for source, copy in ((self.tls[0], cert), (self.tls[1], key)):
                _private(copy, user).write_bytes(Path(source).read_bytes())
            tls = (str(cert), str(key), self.tls[2])
        login = write_mosquitto_config(self._dir, self.host, self.port, self.prefix, self.max_payload, tls=tls,
                                       tls_host=self.tls_host)
        conf = self._dir / "mosquitto.conf"
        log = _private(self._dir / "mosquitto.log", user)  # its user writes it, after dropping root
        conf.write_text(conf.read_text() + f"log_dest file {log}\nlog_type error\n")
        ports = (self.port,) if self.tls is None else (self.port, self.tls[2])
        self.proc = await asyncio.create_subprocess_exec(
            self.mosquitto, "-c", str(conf), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            preexec_fn=functools.partial(_end_with_parent, _exec_user(user, ports)))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not await _accepts(self.address.host, self.port):
            if self.proc.returncode is not None:
                raise BrokerFailed(f"Mosquitto ended at start (exit status {self.proc.returncode})"
                                   f"{self._why(_last_line(log))}")
            if time.monotonic() > deadline:
                raise BrokerFailed(f"Mosquitto did not listen on {self.address.url} within {START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.05)
        self.relay_address = BrokerAddress(_connect_host(self.host), self.port, RELAY_USER, login.password)

    def _why(self, line: str) -> str:
        """``: REASON`` from Mosquitto's last log line, naming the ports when one was taken meanwhile."""
        if not line:
            return ""
        if "address already in use" in line.lower():
            which = f"port {self.port} on {self.host}" + (
                "" if self.tls is None else f" or TLS port {self.tls[2]} on {self.tls_host}")
            return f": {which} is already in use (taken since it was checked): pick another with --port/--tls-port"
        return f": {line}"

    async def _watch(self) -> None:
        assert self.proc is not None
        status = await self.proc.wait()
        if not self._stopping:
            how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
            self.lost = f"Mosquitto (pid {self.proc.pid}) stopped unexpectedly ({how})"

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._exited is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._exited
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


#: Mosquitto's log lines start with the time in seconds since 1970: nobody reads that.
_STAMP = re.compile(r"^\d+: ")


def _last_line(path: Path) -> str:
    """The last line of Mosquitto's log, without its timestamp ("" if none)."""
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return _STAMP.sub("", lines[-1]) if lines else ""


def _private(path: Path, user: pwd.struct_passwd | None) -> Path:
    """``path`` made empty, mode 600, and ``user``'s (see ``relay.hosting.mosquitto.give_to``)."""
    from relay.hosting.mosquitto import give_to

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    path.chmod(0o600)
    give_to(path, user)
    return path


__all__ = ["BrokerChild", "BrokerFailed", "choose", "find_mosquitto", "listeners_text",
           "share_a_port"]
