"""The judge: every decision of the relay's core, pure (no I/O, clocks or randomness).

How this works
--------------
``relay.core.RelayCore`` composes these parts and hands each the inputs it owns; time and chance
come in as arguments. ``Tables`` (``tables.py``) holds the matches and the settings every part
reads; ``Lobby`` creates, pairs and joins matches; ``Referee`` judges plays and ends matches;
``Ratings`` rates finished matches of players who proved their keys (the leaderboard);
``Gate`` paces each client; ``Answers`` remembers what was answered so a resent request gets the
same answer; ``Deadlines`` fires what is due; ``Events`` keeps each match's recent events for a
resync; ``Housekeeping`` forgets what nobody needs any more. Each part says more in its header.
``codes.py`` is the arithmetic of match codes (which codes name which shard), which the lobby draws
from and the cluster's routing reads.

The judge imports nothing else of the relay but its pure neighbours ``relay.model`` (plain data),
``relay.limits`` (token buckets, the deadline heap) and ``relay.fair`` (the fair-order scheduler):
every room of the relay may import the judge, never the reverse (tests/test_layering.py).
"""

from protocol.match import ORDERS
from relay.judge.answers import ACCEPTED_SEQ_BITS, REMEMBERED_ANSWERS, Answers
from relay.judge.codes import CODE_ALPHABET, CODE_LEN, CODE_SPACE, code_in_shard, code_number, codes_in_shard
from relay.judge.deadlines import Deadlines
from relay.judge.events import PAST_EVENTS, Events, past_event
from relay.judge.gate import Gate
from relay.judge.housekeeping import Housekeeping
from relay.judge.lobby import Lobby
from relay.judge.ratings import LeaderRow, Ratings, Verifier
from relay.judge.referee import Referee
from relay.judge.tables import RelayStats, Tables, new_stats

__all__ = ["ACCEPTED_SEQ_BITS", "CODE_ALPHABET", "CODE_LEN", "CODE_SPACE", "ORDERS", "PAST_EVENTS", "REMEMBERED_ANSWERS", "Answers", "Deadlines", "Events", "Gate",
           "Housekeeping", "LeaderRow", "Lobby", "Ratings", "Referee", "Verifier", "RelayStats", "Tables", "code_in_shard", "code_number", "codes_in_shard",
           "new_stats", "past_event"]
