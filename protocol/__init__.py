"""blink's protocol: the messages, their codec and topics, the games' rules, sealing, and the
log checker -- pure code that both sides share and that imports nothing of either.

Errors
------
Every exception this package raises derives from ``ProtocolError``; each also keeps the builtin
class it has always been (``ValueError``), so code that catches that still catches it::

    ProtocolError
    ├── DecodeError      bytes that are not a message of this protocol version (protocol.codec)
    ├── SealError        a sealed payload refused, ``reason`` in a word (protocol.seal)
    ├── BadEvent         an event whose map does not fit its class (protocol.events)
    ├── NotALog          text that is not an event log at all: exit status 2 (protocol.verify)
    └── FalseDecision    a fair-order decision line that contradicts the rules (protocol.fairlog)
"""

from __future__ import annotations

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """The root of every exception of ``protocol``: catch it to catch any of them."""
