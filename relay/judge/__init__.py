"""The judge: every decision of the relay's core, pure (no I/O, clocks or randomness).

How this works
--------------
``relay.core.RelayCore`` composes these parts and hands each the inputs it owns; time and chance
come in as arguments. ``Tables`` (``tables.py``) holds the matches and the settings every part
reads; ``Lobby`` creates, pairs and joins matches; ``Referee`` judges plays and ends matches;
``Gate`` paces each client; ``Answers`` remembers what was answered so a resent request gets the
same answer; ``Deadlines`` fires what is due; ``Events`` keeps each match's recent events for a
resync; ``Housekeeping`` forgets what nobody needs any more. Each part says more in its header.
"""

from relay.judge.answers import ACCEPTED_SEQ_BITS, REMEMBERED_ANSWERS, Answers
from relay.judge.deadlines import Deadlines
from relay.judge.events import PAST_EVENTS, Events, past_event
from relay.judge.gate import Gate
from relay.judge.housekeeping import Housekeeping
from relay.judge.lobby import Lobby
from relay.judge.referee import Referee
from relay.judge.tables import ORDERS, Tables

__all__ = ["ACCEPTED_SEQ_BITS", "ORDERS", "PAST_EVENTS", "REMEMBERED_ANSWERS", "Answers", "Deadlines", "Events", "Gate",
           "Housekeeping", "Lobby", "Referee", "Tables", "past_event"]
