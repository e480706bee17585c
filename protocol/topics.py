"""Topic names, in one place, so relay, clients and the broker ACL agree.

How this works
--------------
``Topics(prefix, shard)`` builds every topic of DESIGN.md. The last level of a topic a client may
write to is always that client's MQTT client id, so a broker ACL (Mosquitto's ``pattern write
.../%c``) can let each client write only its own topics. ``parse_act`` and ``parse_req`` turn an
incoming topic back into (match, client) or client, or None for anything that is not ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

DEFAULT_PREFIX = "blink/v1"

# The relay checks every incoming topic's ids: ASCII ones (all of them, in practice) by one regex.
_ASCII_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def valid_id(text: str) -> bool:
    """Ids used as topic levels: short, no MQTT wildcards or separators (letters and digits of
    any script, ``-``, ``_``, ``.``)."""
    if text.isascii():
        return _ASCII_ID.fullmatch(text) is not None
    return 0 < len(text) <= 64 and all(c.isalnum() or c in "-_." for c in text)


@dataclass(frozen=True)
class Topics:
    prefix: str = DEFAULT_PREFIX
    shard: str = "0"

    # lobby
    @property
    def match_list(self) -> str:
        return f"{self.prefix}/lobby/matches"

    def req(self, client: str) -> str:
        """Control requests from one client: lobby (create/join/quick), pings, resync."""
        return f"{self.prefix}/lobby/req/{client}"

    @property
    def req_all(self) -> str:
        return f"{self.prefix}/lobby/req/+"

    # match
    def act(self, match: str, client: str) -> str:
        return f"{self.prefix}/m/{self.shard}/{match}/act/{client}"

    @property
    def act_all(self) -> str:
        return f"{self.prefix}/m/{self.shard}/+/act/+"

    def ev(self, match: str) -> str:
        return f"{self.prefix}/m/{self.shard}/{match}/ev"

    def snap(self, match: str) -> str:
        return f"{self.prefix}/m/{self.shard}/{match}/snap"

    # private
    def client(self, client: str) -> str:
        return f"{self.prefix}/c/{client}"

    def relay_status(self, relay: str) -> str:
        return f"{self.prefix}/relay/{relay}/status"

    # parsing
    @cached_property
    def _act_head(self) -> str:
        return f"{self.prefix}/m/{self.shard}/"

    def parse_act(self, topic: str) -> tuple[str, str] | None:
        head = self._act_head  # built once: every action the relay receives is parsed here
        if not topic.startswith(head):
            return None
        parts = topic[len(head):].split("/")
        if len(parts) != 3 or parts[1] != "act" or not parts[0] or not parts[2]:
            return None
        return parts[0], parts[2]

    def parse_req(self, topic: str) -> str | None:
        head = f"{self.prefix}/lobby/req/"
        if not topic.startswith(head):
            return None
        client = topic[len(head):]
        return client if client and "/" not in client else None
