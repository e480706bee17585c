"""Authorization for a blink NATS cluster: the relay's password, each player confined to its own id -- ``python -m relay.cluster.natsauth FILE``.

How this works
--------------
A node of ``client/tools/templates/nats-node.conf.in`` lets anyone in as anyone. ``write_nats_auth(FILE)`` writes
an ``authorization`` block for a node's configuration to ``include`` (every node of a cluster
includes the same file) and returns the relay's new password; ``secure_node_conf`` adds that
``include`` to a node's configuration:

- user ``relay`` (a fresh random password of 128 bits, stored bcrypt-hashed when this Python can
  hash it, else as is -- the file is then written mode 600) may publish and subscribe to anything:
  the relays' MQTT connections and their core-NATS connections (leases, journals: JetStream's API)
  log in with it -- ``mqtt://relay:PASSWORD@HOST:MQTT_PORT``, ``nats://relay:PASSWORD@HOST:PORT``;
- every other connection goes to the **auth callout** (nats-server 2.10 and newer), which the relays
  answer (``relay/cluster/natscallout.py``): the block names the issuer, a public key derived from the
  relay's password, and lists ``relay`` in ``auth_users`` (it never goes to the callout). An MQTT
  client without a user name gets the permissions of its own client id: publish on its own
  request and action topics (``{prefix}/lobby/req/ID``, ``{prefix}/m/+/+/act/ID``), subscribe to its
  own private topic (``{prefix}/c/ID``) and the public ones (events, snapshots, the match lists,
  relay status). Anything else is refused, and so is everyone while no relay runs.

So no player can log in as the relay, publish an event, a snapshot (retained or not), a relay
status or a private message, read another player's private topic (``{prefix}/c/+`` is refused),
requests or actions, publish on another player's request or action topics, or subscribe to ``#``;
a core-NATS connection without the relay's password is refused outright. The topic prefix is the
relays' own (each relay grants its ``--prefix``). What is left, as on Mosquitto: a client that
knows another's client id (a 128-bit secret, never published) can connect under it and take its
session over. ``tests/test_trust_nats.py`` shows all of this on a real nats-server.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import warnings
from pathlib import Path

from mqttkit import RELAY_USER

BCRYPT_ROUNDS = 11
#: How long a node waits for a client's CONNECT and for the callout's answer (nats-server's default is 2 s:
#: a relay on a busy machine may need longer to answer).
AUTH_TIMEOUT_S = 5


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


def auth_text(relay_secret_hash: str, issuer: str) -> str:
    """The block to ``include`` in each node's configuration (see the module doc); ``issuer`` is the
    callout's public key (``relay.cluster.natscallout.issuer_public(password)``)."""
    if not (issuer.startswith("A") and len(issuer) == 56 and issuer.isalnum()):
        raise ValueError(f"{issuer!r} is not an account public key")
    return f"""# blink: who may do what on this NATS cluster (written by `python -m relay.cluster.natsauth`).
# Include it in every node's configuration (`include "auth.conf"`): `python -m relay.cluster.natsauth auth.conf NODE.conf...`
# does it. The relay logs in as "{RELAY_USER}" (MQTT and core NATS); every other connection is handed to the
# auth callout, which the running relays answer (relay/cluster/natscallout.py): an MQTT player may publish only its
# own requests and actions and read only its own private topic and the public ones. Needs nats-server 2.10+.
authorization {{
  timeout: {AUTH_TIMEOUT_S}
  users = [
    {{ user: "{RELAY_USER}", password: "{relay_secret_hash}" }}
  ]
  auth_callout {{
    issuer: "{issuer}"
    auth_users: [ "{RELAY_USER}" ]
  }}
}}
"""


def secure_node_conf(text: str, auth_name: str = "auth.conf") -> str:
    """A node's configuration that includes the auth file (unchanged if it does already); a
    ``no_auth_user`` line an older configuration has is taken out (its user is gone). ValueError if
    it has no ``mqtt {`` block (players speak MQTT)."""
    lines = [line for line in text.splitlines() if not line.strip().startswith("no_auth_user")]
    opens = ("mqtt{", "mqtt:{")
    if not any(line.split("#")[0].strip().replace(" ", "") in opens for line in lines):
        raise ValueError("no `mqtt {` block in the node's configuration")
    include = f'include "{auth_name}"'
    if include not in (line.strip() for line in lines):
        lines += ["", "# Who may do what: the relay's password, each player its own id (relay/cluster/natsauth.py).", include]
    return "\n".join(lines) + "\n"


def write_nats_auth(path: str | Path) -> str:
    """Write the authorization block to ``path`` (mode 600); return the relay's new password.
    ``relay.cluster.natscallout.CalloutError`` when the nkeys package is missing."""
    from relay.cluster.natscallout import issuer_public

    secret = secrets.token_hex(16)
    text = auth_text(hash_password(secret), issuer_public(secret))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(target, 0o600)
    return secret


def main(argv: list[str] | None = None) -> int:
    from relay.cluster.natscallout import CalloutError

    p = argparse.ArgumentParser(
        prog="python -m relay.cluster.natsauth",
        description="write a NATS authorization block for blink (relay password, each player its own id)")
    p.add_argument("file", help="where to write it, e.g. DIR/auth.conf beside the nodes' configurations")
    p.add_argument("nodes", nargs="*", help="node configurations (beside FILE) to change so that they use it")
    args = p.parse_args(argv)
    try:
        texts = {node: secure_node_conf(Path(node).read_text(encoding="utf-8"), Path(args.file).name)
                 for node in args.nodes}
        secret = write_nats_auth(args.file)
        for node, text in texts.items():
            Path(node).write_text(text, encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"natsauth: {exc}", file=sys.stderr)
        return 2
    except CalloutError as exc:
        print(f"natsauth: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.file}" + (f" and changed {', '.join(args.nodes)} to use it" if args.nodes else
                                  f": add  include \"{Path(args.file).name}\"  to each node's configuration"))
    print(f"relay logins: mqtt://{RELAY_USER}:{secret}@HOST:MQTT_PORT  nats://{RELAY_USER}:{secret}@HOST:PORT "
          f"(players connect while a relay runs: the relays answer the nodes' auth callout)")
    print(secret)
    return 0


if __name__ == "__main__":
    sys.exit(main())
