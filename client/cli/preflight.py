"""Checks of a server before a command starts its real work: is a relay online on this broker, and
is there a match with this code?

How this works
--------------
Each relay keeps a retained ``RelayStatus`` on ``relay/<id>/status`` (its last will turns it
offline), so a subscription to ``relay/+/status`` answers at once whether one is online; the
broker not answering at all is the network's error, worded by ``failures.friendly``. Every command
that needs a relay on a broker it is given (``--server``) asks ``require_relay`` first, so a broker
with no relay -- or a relay under another ``--prefix``, which is the same thing seen from here -- is
one line within seconds, not a request resent until its wait ends. A match code is checked by
spectating it for a moment (``Player.watch``): the relay answers ``no_such_match`` for a code it does
not know, and re-sends the events of one it does (a match waiting for its players included).
``blink play --server`` uses that so that a wrong URL or code is one line on stderr before any
window opens.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from client.cli.failures import UserError, friendly

if TYPE_CHECKING:
    from mqttkit import BrokerAddress, TLSTrust
    from protocol.topics import Topics

RELAY_STATUS_WAIT_S = 1.5  # retained status messages arrive at once; this is only the "none" case
SEALED_STATUS_WAIT_S = 5.0  # a sealed relay's status may have been overwritten: it restates it every 4 s
MATCH_ANSWER_S = 5.0  # the relay answers a spectator at once; this is only a relay that does not answer


async def relay_online(address: BrokerAddress, topics: Topics) -> bool:
    """Is any relay online on this broker (with a pin: the sealed relay it names)? Raises what the
    network raises when the broker is not there, and a ``UserError`` for a sealed relay and a URL
    without its pin, or the reverse (``client/sealing.py``)."""
    import aiomqtt

    from client.net import new_client_id
    from protocol import messages as m
    from protocol.codec import DecodeError, decode

    if address.pin is not None:
        from client.sealing import SealProblem, new_seal, relay_keys

        try:
            # Longer than the relay restates its status (4 s): one a stranger overwrote comes again.
            body = await relay_keys(address, topics, new_seal(address.pin), SEALED_STATUS_WAIT_S)
        except SealProblem as exc:
            if "no relay is online" in str(exc):
                return False
            raise UserError(str(exc)) from None
        try:
            return any(isinstance(msg, m.RelayStatus) and msg.online for msg in [decode(body)])
        except DecodeError:
            return False
    from protocol.seal import is_sealed

    sealed = False

    async with aiomqtt.Client(address.host, address.port, identifier=new_client_id("wq"),
                              username=address.username, password=address.password,
                              tls_context=address.ssl_context()) as client:
        await client.subscribe(topics.relay_status("+"), qos=0)
        try:
            async with asyncio.timeout(RELAY_STATUS_WAIT_S):
                async for message in client.messages:
                    payload = bytes(message.payload) if isinstance(message.payload, (bytes, bytearray)) else b""
                    sealed = sealed or is_sealed(payload)
                    try:
                        msg = decode(payload)
                    except DecodeError:
                        continue
                    if isinstance(msg, m.RelayStatus) and msg.online:
                        return True
        except TimeoutError:
            pass
    if sealed:
        raise UserError(f"the relay on {address.url} seals its messages: connect with the URL `blink serve --seal` "
                        "printed (it ends in /?pin=…)")
    return False


def no_relay(address: BrokerAddress, topics: Topics) -> UserError:
    """No relay online: the broker's URL, the topic the relays announce themselves on, and what to do."""
    from protocol.topics import DEFAULT_PREFIX

    other = "" if topics.prefix == DEFAULT_PREFIX else f" --prefix {topics.prefix}"
    return UserError(f"no relay is online on {address.url} (none announced itself on {topics.relay_status('+')}): "
                     f"start one with `blink{other} serve --broker {address.url}`, or give the --prefix "
                     "the relay there uses")


async def require_relay(address: BrokerAddress, topics: Topics) -> None:
    """A ``UserError`` (one line, status 1) unless the broker answers and a relay is online on it."""
    import aiomqtt

    from mqttkit import connect_problem

    try:
        online = await relay_online(address, topics)
    except aiomqtt.MqttCodeError as exc:  # the broker answered: a refused login, worded with its hint
        raise friendly(exc) from exc
    except aiomqtt.MqttError as exc:  # worded here, where the URL's scheme is known
        raise UserError(f"cannot reach the MQTT broker at {address.url}: {connect_problem(exc, address)}") from exc
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - one readable line
        raise friendly(exc) from exc
    if not online:
        raise no_relay(address, topics)


async def check_server(url: str, topics: Topics, match: str | None = None, trust: TLSTrust | None = None) -> None:
    """A ``UserError`` (one line, status 1) unless a relay is online at ``url`` and, given
    ``match``, it runs a match with that code (``trust``: whom an ``mqtts://`` URL believes)."""
    from client.player import Player, RequestError
    from mqttkit import parse_url

    address = parse_url(url, trust)
    await require_relay(address, topics)
    try:
        if match is not None:
            async with Player(address, "spectator", topics, ping_interval_s=0) as player:
                await player.watch(match, timeout=MATCH_ANSWER_S)
    except RequestError as exc:
        code = match.strip().upper() if match else ""
        if exc.code == "no_such_match":
            raise UserError(f"no match {code} on {address.url} (check the code; a match ends when its "
                            "players leave)") from None
        raise UserError(f"the relay refused: {exc}") from None
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - one readable line
        raise friendly(exc) from exc
