"""Remembered answers: a duplicate action (a QoS 1 redelivery, a resend) gets the same answer again.

How this works
--------------
Per client and (match, action id), oldest first, the answer it got. A client's book is a plain dict
(insertion ordered; an OrderedDict's links cost 57 bytes an answer more) capped at
``REMEMBERED_ANSWERS``: the oldest goes first, and a duplicate older than that is judged afresh. An
acceptance is kept as one int, ``hold_ns << ACCEPTED_SEQ_BITS | seq`` -- the rest of it is the key:
a relay of 1,000 matches keeps ~130 answers a match after 20 s at human pace. A rejection is kept
as the message itself. A remembered answer does not keep when the play first arrived (``recv_ns``,
for its player's time in parts): a repeat is answered without it.
"""

from __future__ import annotations

from typing import Mapping, TypedDict, cast

from protocol import messages as m
from protocol.codec import evolve
from relay.model import Decode, Encode

REMEMBERED_ANSWERS = 512  # per client: duplicates older than this are answered as unknown
ACCEPTED_SEQ_BITS = 40  # a remembered acceptance: ``hold_ns << ACCEPTED_SEQ_BITS | seq``
_SEQ_MASK = (1 << ACCEPTED_SEQ_BITS) - 1
#: An answer as a client's book keeps it: a rejection, an acceptance packed in an int, or an
#: acceptance whose seq or hold does not fit in one.
Answer = m.ActionAccepted | m.ActionRejected | int
Reply = m.ActionAccepted | m.ActionRejected


class AnswersRecord(TypedDict):
    """The books in a relay snapshot: per client, each remembered answer as [match, action id, answer]
    (a rejection as the snapshot codec wrote it, an acceptance as its int)."""

    answers: dict[str, list[tuple[str, int, object]]]


class Answers:
    def __init__(self) -> None:
        self.book: dict[str, dict[tuple[str, int], Answer]] = {}

    def recall(self, client: str, code: str, action_id: int) -> Reply | None:
        """The answer ``client`` got for action ``action_id`` in match ``code``, or None."""
        book = self.book.get(client)
        kept = book.get((code, action_id)) if book is not None else None
        if type(kept) is int:
            return m.ActionAccepted(code, action_id, kept & _SEQ_MASK, kept >> ACCEPTED_SEQ_BITS)
        return kept  # type: ignore[return-value]  # (not an int: a message, or None)

    def remember(self, client: str, code: str, action_id: int, answer: Reply) -> None:
        book = self.book.get(client)  # (not setdefault: it would build a map per answer)
        if book is None:
            book = self.book[client] = {}
        if (type(answer) is m.ActionAccepted and answer.match == code and answer.id == action_id
                and 0 <= answer.seq < 1 << ACCEPTED_SEQ_BITS and answer.hold_ns >= 0):
            book[(code, action_id)] = answer.hold_ns << ACCEPTED_SEQ_BITS | answer.seq  # (no recv_ns in it)
        else:
            book[(code, action_id)] = evolve(answer, recv_ns=0) if answer.recv_ns else answer
        while len(book) > REMEMBERED_ANSWERS:
            del book[next(iter(book))]  # the oldest

    def forget(self, client: str) -> None:
        self.book.pop(client, None)

    def to_record(self, enc: Encode) -> AnswersRecord:
        """The books as plain data (a rejection through ``enc``; an acceptance is its int)."""
        return {"answers": {client: [(code, i, enc(a)) for (code, i), a in book.items()]
                            for client, book in self.book.items()}}

    def load_record(self, snapshot: Mapping[str, object], dec: Decode) -> None:
        """Take the books ``to_record`` wrote (the snapshot holds them as written)."""
        record = cast(AnswersRecord, snapshot)
        self.book = {client: {(code, i): cast(Answer, dec(a)) for code, i, a in book}
                     for client, book in record["answers"].items()}
