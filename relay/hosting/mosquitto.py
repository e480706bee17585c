"""A ready-to-run Mosquitto configuration for a blink relay: ``blink broker-config DIR``.

How this works
--------------
``write_mosquitto_config(DIR)`` writes three files and returns the relay's login:

- ``mosquitto.conf``: one listener, anonymous clients allowed (players need no account), the
  password file and ACL below, no persistence, TCP_NODELAY, and size limits -- a PUBLISH payload
  over ``max_payload`` is dropped (``message_size_limit``) and any packet over the protocol's own
  ceiling ends the connection before Mosquitto buffers it (``max_packet_size``);
- ``mosquitto.acl``: the same rules as ``deploy/mosquitto.acl`` (``acl_text``), for the topic prefix;
- ``passwd``: user ``relay`` with a fresh random password (128 bits), hashed as Mosquitto 2 expects:
  by ``mosquitto_passwd -b`` when it is installed, else here in the same ``$7$`` format
  (PBKDF2-HMAC-SHA512, 101 iterations, 12-byte salt, both base64: ``$7$101$SALT$HASH``).

With ``tls=(cert, key, port)`` (``blink broker-config --tls-cert --tls-key``) the conf has a
second listener on ``port`` that speaks only TLS with that certificate and key (Mosquitto's
``certfile``/``keyfile`` belong to the listener above them), on ``tls_host`` (default: the plain
listener's host); the plain listener stays, for a relay on the same machine -- on loopback, with
the TLS one on ``0.0.0.0``, only TLS faces the network. The files are named by their absolute
paths, not copied.

Anyone who logs in as ``relay`` must know that password; everyone else is anonymous and confined
by the ACL to its own client id's topics. ``mosquitto -c DIR/mosquitto.conf`` runs it as is.
The configuration and the ACL are world-readable (nothing secret in them). The password file,
though it holds only a salted hash of 128 random bits, is mode 600: readable by the user who runs
the broker and nobody else.

Started by root, Mosquitto gives up root for the user the conf's ``user`` line names before it
reads the ACL, the password file and the certificate and key, so that user must reach them all.
Written by root, the conf names that user (``broker_user``): Mosquitto's own (``mosquitto``) where
it can read every one of those files, else DIR's owner -- DIR in a folder closed to others, such
as root's home (mode 700), is reached by its owner alone -- else root; the password file is then
that user's. Written by anyone else, there is no ``user`` line: Mosquitto keeps the user who starts it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from mqttkit import DEFAULT_MAX_PAYLOAD, RELAY_USER, BrokerAddress
from protocol.codec import MAX_MESSAGE_BYTES
from protocol.topics import DEFAULT_PREFIX

PBKDF2_ITERATIONS = 101  # mosquitto_passwd's default for sha512-pbkdf2
SALT_BYTES = 12


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def share_a_port(a: str, b: str) -> bool:
    """Whether listeners on addresses ``a`` and ``b`` would collide on one port (the same address,
    both loopback, or either on every interface)."""
    every = ("", "0.0.0.0", "::")
    return a == b or a in every or b in every or (is_loopback(a) and is_loopback(b))


def hash_password(password: str, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """Mosquitto 2's ``$7$`` password hash (what ``mosquitto_passwd -H sha512-pbkdf2`` writes)."""
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def find_mosquitto_passwd() -> str | None:
    return shutil.which("mosquitto_passwd") or next(
        (p for p in ("/usr/bin/mosquitto_passwd", "/usr/local/bin/mosquitto_passwd") if Path(p).exists()), None)


def password_line(user: str, password: str, use_tool: bool = True) -> str:
    """``user:HASH`` for a Mosquitto password file."""
    tool = find_mosquitto_passwd() if use_tool else None
    if tool:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "passwd"
            done = subprocess.run([tool, "-c", "-b", str(path), user, password], capture_output=True, text=True,
                                  timeout=30)
            if done.returncode == 0 and path.exists():
                line = path.read_text().strip()
                if line.startswith(f"{user}:"):
                    return line
    return f"{user}:{hash_password(password)}"


def acl_text(prefix: str = DEFAULT_PREFIX) -> str:
    """The ACL: each client writes only its own request and action topics and reads only its own
    private topic plus the public ones; user ``relay`` (password-protected) reads and writes all."""
    return f"""# Mosquitto ACL for blink (topic prefix {prefix}). %c is the connecting client's MQTT client id.
# Clients may write only their own request and action topics, and read only their own private
# topic plus public match events, snapshots, the lobby and relay status.
# (Mosquitto reads `topic` lines before any `user` line as rules for every client; `pattern`
# lines apply to every client too.)

topic read {prefix}/m/+/+/ev
topic read {prefix}/m/+/+/snap
topic read {prefix}/lobby/matches
topic read {prefix}/lobby/matches/+
topic read {prefix}/relay/+/status

pattern write {prefix}/lobby/req/%c
pattern write {prefix}/m/+/+/act/%c
pattern read {prefix}/c/%c

# The relay logs in as user "relay", whose password is in the password file (password_file):
# without it nobody can log in under that name.
user {RELAY_USER}
topic readwrite {prefix}/#
"""


def tls_listener_text(host: str, cert: str, key: str, port: int) -> str:
    """Mosquitto's TLS listener: the listener line, then its certificate and key."""
    return (f"# TLS (mqtts://): the same rules and limits; clients check this certificate.\n"
            f"listener {port} {host}\ncertfile {Path(cert).resolve()}\nkeyfile {Path(key).resolve()}\n")


def conf_text(directory: Path, host: str, port: int, max_payload: int = DEFAULT_MAX_PAYLOAD,
              tls: tuple[str, str, int] | None = None, tls_host: str | None = None, user: str | None = None) -> str:
    d = directory.resolve()
    who = "" if user is None else (
        f"# Started by root, Mosquitto runs as this user, which can read the files named here.\nuser {user}\n")
    return f"""# A Mosquitto 2.x configuration for a blink relay, written by `blink broker-config`.
# Run:  mosquitto -c {d / 'mosquitto.conf'}
{who}listener {port} {host}
allow_anonymous true
password_file {d / 'passwd'}
acl_file {d / 'mosquitto.acl'}
persistence false
set_tcp_nodelay true
max_queued_messages 10000
# A PUBLISH payload over this is dropped; a packet over max_packet_size ends the connection
# before Mosquitto reads it (no client of this protocol needs more).
message_size_limit {max_payload}
max_packet_size {MAX_MESSAGE_BYTES + 512}
""" + ("" if tls is None else tls_listener_text(host if tls_host is None else tls_host, *tls))


def _may(user: pwd.struct_passwd, st: os.stat_result, bit: int) -> bool:
    """Whether ``user`` has permission ``bit`` (4 read, 1 search) on a file with status ``st``."""
    if user.pw_uid == 0:
        return True
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in os.getgrouplist(user.pw_name, user.pw_gid):
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def can_read(user: pwd.struct_passwd, path: Path, own: bool = False) -> bool:
    """Whether ``user`` can open ``path`` for reading: every folder above it searchable, the file
    itself readable (``own``: it will be given to that user, so only the folders count)."""
    try:
        path = path.resolve()
        if not all(_may(user, folder.stat(), 1) for folder in path.parents):
            return False
        return own or _may(user, path.stat(), 4)
    except OSError:
        return False


def broker_user(directory: Path, reads: tuple[str | Path, ...] = ()) -> pwd.struct_passwd | None:
    """The user Mosquitto started by root should run as, with its configuration in ``directory``
    and also reading ``reads`` (a certificate and key): see the module header. None unless root."""
    if os.geteuid() != 0:
        return None
    candidates = []
    with contextlib.suppress(KeyError):
        candidates.append(pwd.getpwnam("mosquitto"))
    with contextlib.suppress(KeyError, OSError):
        candidates.append(pwd.getpwuid(directory.stat().st_uid))
    for user in candidates:  # the ACL is world-readable and the password file becomes the user's: DIR must be reached
        if can_read(user, directory / "passwd", own=True) and all(can_read(user, Path(f)) for f in reads):
            return user
    return pwd.getpwuid(0)


def give_to(path: Path, user: pwd.struct_passwd | None) -> None:
    """Make ``path`` ``user``'s (nothing for None: the file stays its writer's)."""
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)


def write_mosquitto_config(directory: str | Path, host: str = "127.0.0.1", port: int = 1883,
                           prefix: str = DEFAULT_PREFIX, max_payload: int = DEFAULT_MAX_PAYLOAD,
                           use_tool: bool = True, tls: tuple[str, str, int] | None = None,
                           tls_host: str | None = None) -> BrokerAddress:
    """Write DIR/mosquitto.conf, DIR/mosquitto.acl and DIR/passwd; return the relay's login
    (``.login_url`` is what ``blink serve --broker`` takes; it holds the new secret)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(16)
    user = broker_user(d, () if tls is None else (tls[0], tls[1]))
    _write(d / "mosquitto.acl", acl_text(prefix), 0o644)
    # The password file (a hash, but one an attacker could try to crack) is for the broker's eyes
    # only; the others hold nothing secret and the broker may read them as any user.
    _write(d / "passwd", password_line(RELAY_USER, secret, use_tool) + "\n", 0o600)
    give_to(d / "passwd", user)
    _write(d / "mosquitto.conf", conf_text(d, host, port, max_payload, tls, tls_host,
                                           None if user is None else user.pw_name), 0o644)
    connect_host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return BrokerAddress(connect_host, port, RELAY_USER, secret)


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)  # never readable by others, not even briefly
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    path.chmod(mode)
