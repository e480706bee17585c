"""The errors a ``blink`` command ends with, and how a network failure becomes one line.

How this works
--------------
A command raises ``UserError`` (exit status 1: a failure at run time the user can fix) or
``UsageError`` (status 2: bad input on the command line, found before anything starts); ``main``
prints it as ``blink COMMAND: message``. ``refusal`` words a relay's refusal (or its silence);
``friendly`` turns what the network libraries raise (a taken port, a refused login, an unreachable
broker) into a ``UserError`` worded for a person.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from client.cli.args import FAILED, USAGE
from client import ClientError

if TYPE_CHECKING:
    from client.player import RequestError

LOGIN_HINT = ("(the relay's: mqtt://relay:SECRET@HOST:PORT as `blink broker-config` prints it, or --password-file "
              "DIR/relay-password for a `blink cluster up` cluster)")


class UserError(ClientError):
    """A problem at run time the user can fix; printed as one line, exit status 1."""

    status = FAILED

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class UsageError(UserError):
    """Bad input on the command line (options that do not go together, a number of players the
    game does not allow): one line, exit status 2, before anything starts."""

    status = USAGE


def friendly(exc: BaseException) -> UserError:
    from mqttkit import PortInUse

    if isinstance(exc, PortInUse):
        return UserError(str(exc))
    from mqttkit import TLSProblem, tls_refusal

    if isinstance(exc, TLSProblem):
        return UserError(str(exc))
    refusal = tls_refusal(exc)
    if refusal is not None:
        return UserError(refusal)
    if isinstance(exc, ConnectionError) and "certificate was refused" in str(exc):
        return UserError(str(exc))  # the broker's certificate, not the network, is the problem
    if isinstance(exc, (ConnectionError, OSError)):
        return UserError(f"network problem: {exc}")
    from mqttkit.connection import ConnectRefused, MqttError  # the relay's own connection

    if isinstance(exc, ConnectRefused) and exc.rc in (4, 5):
        return UserError(f"the MQTT broker refused the login ({exc}): check the user and password in the URL "
                         + LOGIN_HINT)
    if isinstance(exc, MqttError):
        return UserError(f"cannot reach the MQTT broker: {exc}")
    try:
        import aiomqtt

        if isinstance(exc, aiomqtt.MqttCodeError):
            rc: object = exc.rc
            code = getattr(rc, "value", rc)
            if int(code if isinstance(code, int) else 0) in (4, 5, 134, 135):
                return UserError(f"the MQTT broker refused the login ({exc}): check the user and password in the URL "
                                 + LOGIN_HINT)
        if isinstance(exc, aiomqtt.MqttError):
            return UserError(f"cannot reach the MQTT broker: {tls_refusal(str(exc)) or exc}")
    except ImportError:
        pass
    return UserError(f"{type(exc).__name__}: {exc}")


def refusal(exc: RequestError, url: str) -> UserError:
    """A request the relay refused, or one no relay answered in time (nothing refused it then)."""
    if exc.code == "timeout":
        return UserError(f"no answer from the relay on {url} in time: a relay is online there but did not answer "
                         "(it may be busy or handing its matches to another; try again)")
    return UserError(f"the relay refused: {exc}")


def read_lines(path: str) -> list[str] | str:
    """The lines of a text file, or why it cannot be read (one phrase, for a one-line refusal)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
