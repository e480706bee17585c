"""Who may do what on the embedded broker: blink's access rules, by MQTT client id, and the amqtt
plugin that applies them.

How this works
--------------
The rules are the same as ``deploy/mosquitto.acl``'s. Only a CONNECT with user ``relay`` and the
broker's relay secret (a random one each start) is the relay (``is_relay_login``, compared in
constant time); it may do anything under the topic prefix. Anyone else (anonymous, or any other user
name) is a client ``C`` = its client id: it publishes only to ``lobby/req/C`` and ``m/+/+/act/C``; it
reads (subscribes to and receives) only ``c/C`` and the public ``m/+/+/ev``, ``m/+/+/snap``,
``lobby/matches`` (and ``/+``, per shard), ``relay/+/status``. ``#`` and other clients' private topics
give nothing.

``Access`` holds the rules as pure functions of a client id and a topic (or a filter), so they read
like the ACL they mirror and the broker's hot paths can ask them directly. ``BlinkAccessPlugin`` is
the amqtt auth and topic-checking plugin that enforces them on every publish, subscribe and delivery
amqtt itself handles; the broker's own gate and fast path (``relay.embedded.gate``,
``relay.embedded.route``) ask ``Access`` the same questions.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from amqtt.contexts import Action, BaseContext

from mqttkit import RELAY_USER
from protocol.topics import DEFAULT_PREFIX, valid_id
from relay.embedded.amqttapi import BaseAuthPlugin, BaseTopicPlugin, Session

__all__ = ["Access", "BlinkAccessPlugin", "is_relay_login"]


class Access:
    """Who may do what, by client id: pure, so the rules read like the Mosquitto ACL they mirror."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        p = prefix.split("/")
        self._prefix = p
        self._public = [p + ["m", "+", "+", "ev"], p + ["m", "+", "+", "snap"], p + ["lobby", "matches"],
                        p + ["lobby", "matches", "+"], p + ["relay", "+", "status"]]

    def may_publish(self, client: str, topic: str) -> bool:
        """A client writes only its own request topic and its own action topics."""
        if not valid_id(client):
            return False
        levels = topic.split("/")
        return levels == self._prefix + ["lobby", "req", client] \
            or _fits(levels, self._prefix + ["m", "+", "+", "act", client])

    def may_read(self, client: str, topic: str) -> bool:
        """Subscribe (``topic`` may be a filter) or receive: its own private topic, or a public one."""
        levels = topic.split("/")
        if "#" in levels:
            return False
        if valid_id(client) and levels == self._prefix + ["c", client]:
            return True
        return any(_fits(levels, pattern) for pattern in self._public)


def _fits(levels: list[str], pattern: list[str]) -> bool:
    """A topic (or a filter using ``+``) lies inside the pattern: same length, and every literal
    level of the pattern equal (a ``+`` in the pattern stands for one whole level)."""
    return len(levels) == len(pattern) and all(p == "+" or p == lv for lv, p in zip(levels, pattern))


def is_relay_login(username: str | None, password: str | None, secret: str) -> bool:
    return bool(secret) and username == RELAY_USER and password is not None \
        and hmac.compare_digest(password.encode(), secret.encode())


class BlinkAccessPlugin(BaseAuthPlugin, BaseTopicPlugin):
    """amqtt plugin: authenticates the relay by its secret and applies ``Access`` to everyone else."""

    @dataclass
    class Config:
        relay_secret: str = ""
        prefix: str = DEFAULT_PREFIX

    config: Config  # amqtt fills it in from the broker's "plugins" section

    def __init__(self, context: BaseContext) -> None:
        super().__init__(context)
        self.access = Access(self.config.prefix)
        self.secret: str = self.config.relay_secret

    def is_relay(self, session: Session | None) -> bool:
        return session is not None and is_relay_login(session.username, session.password, self.secret)

    async def authenticate(self, *, session: Session) -> bool:
        if session.username == RELAY_USER:
            return self.is_relay(session)
        return True  # anyone else is an ordinary client, confined by topic_filtering

    async def topic_filtering(self, *, session: Session | None = None, topic: str | None = None,
                              action: Action | None = None) -> bool:
        if session is None or not topic:
            return False
        if self.is_relay(session):
            return True
        client = session.client_id or ""
        if action == Action.PUBLISH:
            return self.access.may_publish(client, topic)
        return self.access.may_read(client, topic)  # SUBSCRIBE or RECEIVE

