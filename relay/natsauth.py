"""Authorization for a blink NATS cluster: a relay password, players confined -- ``python -m relay.natsauth FILE``.

How this works
--------------
A node of ``client/tools/templates/nats-node.conf.in`` lets anyone in as anyone. ``write_nats_auth(FILE)`` writes
an ``authorization`` block for a node's configuration to ``include`` (every node of a cluster
includes the same file) and returns the relay's new password; ``secure_node_conf`` adds that
``include`` to a node's configuration and ``no_auth_user: "player"`` to its ``mqtt`` block (a
second ``mqtt`` block would replace the first, listener and all, so it goes inside):

- user ``relay`` (a fresh random password of 128 bits, stored bcrypt-hashed when this Python can
  hash it, else as is -- the file is then written mode 600) may publish and subscribe to anything:
  the relays' MQTT connections and their core-NATS connections (leases, journals: JetStream's API)
  log in with it -- ``mqtt://relay:PASSWORD@HOST:MQTT_PORT``, ``nats://relay:PASSWORD@HOST:PORT``;
- an MQTT client that gives no user name is user ``player`` (``no_auth_user``; its own password is
  random and never handed out): it may publish only to request and action topics
  (``{prefix}/lobby/req/+``, ``{prefix}/m/+/+/act/+``) and subscribe only to private topics and
  the public ones (events, snapshots, the match lists, relay status), plus ``$MQTT.sub.>``, which
  nats-server needs to deliver a QoS 1 subscription (MQTT clients cannot subscribe to ``$MQTT/``
  topics themselves: nats-server reserves them). So no player can log in as the relay, publish
  an event, a snapshot (retained or not), a relay status or a private message, read anyone's
  requests or actions, or subscribe to ``#``. A core-NATS connection without the relay's
  password is refused outright.

What it cannot do (nats-server 2.9's static permissions have no per-connection variable such as
Mosquitto's ``%c``): tie a player to *its own* client id. A player may subscribe to
``{prefix}/c/+`` -- every private topic, so every hand and every client id -- and, knowing an id,
publish on that client's request and action topics. Mosquitto's ACL (``relay/mosquitto.py``) and
the embedded broker (``relay/broker.py``) do confine each client to its own id; on NATS that
needs a user per player (NATS accounts with JWTs, or the auth callout of nats-server 2.10+, whose
request names the MQTT client id), which is not built. ``tests/test_trust_nats.py`` shows what
this configuration does stop, on a real nats-server.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import warnings
from pathlib import Path

from mqttkit import RELAY_USER
from protocol.topics import DEFAULT_PREFIX

PLAYER_USER = "player"
BCRYPT_ROUNDS = 11


def subject(topic: str) -> str:
    """An MQTT topic (filter) as nats-server's MQTT maps it to a NATS subject (blink's topics only:
    no ``.`` or spaces in them)."""
    return topic.replace("/", ".").replace("+", "*").replace("#", ">")


def hash_password(password: str) -> str:
    """bcrypt (``$2b$``, which nats-server reads) when the C library offers it, else the password
    as is (nats-server accepts plain passwords; the file is then private to its owner)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # removed in Python 3.13: then the plain password is stored

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << BCRYPT_ROUNDS))
    except (ImportError, AttributeError, OSError, ValueError):
        return password
    return hashed if hashed and hashed.startswith("$2") else password


def _quote(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def auth_text(relay_secret_hash: str, player_password: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The block to ``include`` in each node's configuration (see the module doc)."""
    if not prefix or any(c in prefix for c in ". *>#+\"\\"):
        raise ValueError(f"topic prefix {prefix!r} cannot be written as NATS subjects")
    p = subject(prefix)
    publish = [f"{p}.lobby.req.*", f"{p}.m.*.*.act.*"]
    subscribe = ["$MQTT.sub.>", f"{p}.c.*", f"{p}.m.*.*.ev", f"{p}.m.*.*.snap", f"{p}.lobby.matches",
                 f"{p}.lobby.matches.*", f"{p}.relay.*.status"]
    return f"""# blink: who may do what on this NATS cluster (written by `python -m relay.natsauth`).
# Include it in every node's configuration (`include "auth.conf"`), and name the player user in the
# node's mqtt block (`no_auth_user: "player"`): `python -m relay.natsauth auth.conf NODE.conf...` does both.
# The relay logs in as "{RELAY_USER}" (MQTT and core NATS); MQTT clients without a user name are "{PLAYER_USER}".
# Players write only request and action topics and read only private and public topics. NOT
# enforced here (nats-server's static permissions cannot name a client id): that a player reads
# and writes only its own client id's topics -- see relay/natsauth.py.
authorization {{
  users = [
    {{ user: "{RELAY_USER}", password: "{relay_secret_hash}", permissions: {{ publish: ">", subscribe: ">" }} }}
    {{ user: "{PLAYER_USER}", password: "{player_password}",
      permissions: {{
        publish: {{ allow: {_quote(publish)} }}
        subscribe: {{ allow: {_quote(subscribe)} }}
      }}
    }}
  ]
}}
"""


def secure_node_conf(text: str, auth_name: str = "auth.conf") -> str:
    """A node's configuration with the player user named in its ``mqtt`` block and the auth file
    included (unchanged if it has both already); ValueError if it has no ``mqtt {`` block."""
    lines = text.splitlines()
    if not any(line.strip().startswith("no_auth_user") for line in lines):
        opens = ("mqtt{", "mqtt:{")
        at = next((i for i, line in enumerate(lines) if line.split("#")[0].strip().replace(" ", "") in opens), None)
        if at is None:
            raise ValueError("no `mqtt {` block in the node's configuration")
        lines.insert(at + 1, f'  no_auth_user: "{PLAYER_USER}"  # MQTT clients without a user name (relay/natsauth.py)')
    include = f'include "{auth_name}"'
    if include not in (line.strip() for line in lines):
        lines += ["", "# Who may do what: the relay's password, players confined (relay/natsauth.py).", include]
    return "\n".join(lines) + "\n"


def write_nats_auth(path: str | Path, prefix: str = DEFAULT_PREFIX) -> str:
    """Write the authorization block to ``path`` (mode 600); return the relay's new password."""
    secret = secrets.token_hex(16)
    hashed = hash_password(secret)
    text = auth_text(hashed, secrets.token_hex(16), prefix)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(target, 0o600)
    return secret


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m relay.natsauth",
        description="write a NATS authorization block for blink (relay password, confined players)")
    p.add_argument("file", help="where to write it, e.g. DIR/auth.conf beside the nodes' configurations")
    p.add_argument("nodes", nargs="*", help="node configurations (beside FILE) to change so that they use it")
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"topic prefix (default {DEFAULT_PREFIX})")
    args = p.parse_args(argv)
    try:
        texts = {node: secure_node_conf(Path(node).read_text(encoding="utf-8"), Path(args.file).name)
                 for node in args.nodes}
        secret = write_nats_auth(args.file, args.prefix)
        for node, text in texts.items():
            Path(node).write_text(text, encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"natsauth: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.file}" + (f" and changed {', '.join(args.nodes)} to use it" if args.nodes else
                                  f": add  include \"{Path(args.file).name}\"  to each node's configuration and "
                                  f"no_auth_user: \"{PLAYER_USER}\" to its mqtt block"))
    print(f"relay logins: mqtt://{RELAY_USER}:{secret}@HOST:MQTT_PORT  nats://{RELAY_USER}:{secret}@HOST:PORT")
    print(secret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
