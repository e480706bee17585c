"""amqtt as the embedded broker uses it, typed: the classes it extends and what it reads of a session.

How this works
--------------
amqtt is annotated but ships no ``py.typed`` marker, so a type checker takes its names as untyped
(and strict mode refuses to subclass them). Under ``TYPE_CHECKING`` this module declares what the
embedded broker's modules (``relay.embedded.broker``, ``relay.embedded.route``, ``relay.embedded.gate``,
``relay.embedded.access``) use of amqtt's ``Broker``, ``ReaderAdapter``, plugin bases and ``Session``,
with amqtt 0.12's own signatures (the ``Broker`` private members listed are the ones those modules
override or call); at run time the names are amqtt's real classes. What the broker's modules read of
amqtt's other objects is declared here too, at run time as well: a connection's protocol handler
(``Handler``), the plugin manager and a message on the broadcast queue (``Broadcast``). One place
for these declarations, so every module that extends or reads amqtt agrees on them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NotRequired, Protocol, TypedDict

from amqtt.adapters import StreamWriterAdapter
from amqtt.contexts import Action, BaseContext

__all__ = ["BaseAuthPlugin", "BaseTopicPlugin", "Broadcast", "Broker", "Handler", "ReaderAdapter", "RetainedApplicationMessage",
           "Session"]


class Handler(Protocol):
    """A connection's protocol handler (amqtt's ``BrokerProtocolHandler``)."""

    writer: object  # what it writes to (ours: a ``relay.embedded.route.ClientWriter``); None when detached
    def attach(self, session: Session, reader: ReaderAdapter, writer: StreamWriterAdapter) -> None: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def handle_connection_closed(self) -> None: ...
    async def mqtt_connack_authorize(self, authorize: bool) -> None: ...
    async def mqtt_publish(self, topic: str, data: bytes | bytearray, qos: int | None, retain: bool) -> object: ...


class _Plugins(Protocol):
    async def fire_event(self, event_name: object, *, wait: bool = False, **method_kwargs: object) -> None: ...


class Broadcast(TypedDict):
    """A message on amqtt's broadcast queue (``qos`` only when it forces one)."""

    session: Session | None
    topic: str
    data: bytes | bytearray
    qos: NotRequired[int]


if TYPE_CHECKING:
    class _SessionState(Protocol):
        state: str
        def is_connected(self) -> bool: ...
        def connect(self) -> None: ...

    class Session(Protocol):
        client_id: str | None
        username: str | None
        password: str | None
        transitions: _SessionState
        clean_session: bool | None
        is_anonymous: bool

    class ReaderAdapter:
        async def read(self, n: int = -1) -> bytes: ...
        def feed_eof(self) -> None: ...

    class BaseAuthPlugin:
        def __init__(self, context: BaseContext) -> None: ...
        async def authenticate(self, *, session: Session) -> bool | None: ...

    class BaseTopicPlugin:
        def __init__(self, context: BaseContext) -> None: ...
        async def topic_filtering(self, *, session: Session | None = None, topic: str | None = None,
                                  action: Action | None = None) -> bool | None: ...

    class _Retained(Protocol):
        topic: str
        data: bytes
        qos: int | None

    class RetainedApplicationMessage:
        topic: str
        data: bytes
        qos: int | None
        def __init__(self, source_session: Session | None, topic: str, data: bytes, qos: int | None = None) -> None: ...

    class Broker:
        _subscriptions: dict[str, list[tuple[Session, int]]]
        _sessions: dict[str, tuple[Session, Handler]]
        listeners_config: dict[str, object]  # a listener's settings, handed back to ``_authenticate`` unread
        plugins_manager: _Plugins
        async def add_subscription(self, subscription: tuple[str, int], session: Session) -> int: ...
        def _del_subscription(self, a_filter: str, session: Session) -> int: ...
        async def _del_all_subscriptions(self, session: Session) -> None: ...
        async def _authenticate(self, session: Session, listener: object) -> bool: ...
        async def _publish_session_retained_messages(self, session: Session) -> None: ...
        async def _client_message_loop(self, client_session: Session, handler: Handler) -> None: ...
        async def _handle_subscription(self, client_session: Session, handler: Handler,
                                       waiter: asyncio.Future[object]) -> None: ...
        async def _handle_unsubscription(self, client_session: Session, handler: Handler,
                                         waiter: asyncio.Future[object]) -> None: ...
        async def _publish_retained_messages_for_subscription(self, subscription: tuple[str, int],
                                                              session: Session) -> None: ...
        _broadcast_queue: asyncio.Queue[Broadcast]
        _retained_messages: dict[str, _Retained]
        def _matches(self, topic: str, a_filter: str) -> bool: ...
        def _get_handler(self, session: Session) -> Handler | None: ...
        async def _retain_broadcast_message(self, broadcast: Broadcast, qos: int, target_session: Session) -> None: ...
        def __init__(self, config: dict[str, object] | None = None) -> None: ...
        @property
        def sessions(self) -> dict[str, tuple[Session, Handler]]: ...
        async def start(self) -> None: ...
        async def shutdown(self) -> None: ...
        async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                   listener_name: str) -> None: ...
        async def external_connected(self, reader: ReaderAdapter, writer: StreamWriterAdapter,
                                     listener_name: str) -> None: ...
        async def internal_message_broadcast(self, topic: str, data: bytes, qos: int | None = None) -> None: ...
        async def retain_message(self, source_session: Session | None, topic_name: str | None,
                                 data: bytes | bytearray | None, qos: int | None = None) -> None: ...
else:
    from amqtt.adapters import ReaderAdapter
    from amqtt.broker import Broker, RetainedApplicationMessage
    from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
    from amqtt.session import Session

