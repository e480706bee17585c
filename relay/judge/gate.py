"""The gate: rate limits, payload size and quiet logging, applied before a payload is decoded.

How this works
--------------
Before a payload is decoded, its sender (named by the topic) takes a token from its action or
request bucket (``relay/limits.py``); a flood is answered once (``rate_limited``), then dropped and
counted until the bucket refills. A payload over ``max_payload`` is answered ``too_large``
undecoded. Limit refusals are logged once per burst (``bad_quietly``). The gate also keeps who was
heard from when (for housekeeping's idle clients) and which open matches each client created
(``max_open_per_client``).
"""

from __future__ import annotations

from typing import Literal, Mapping, TypedDict, cast

from protocol import messages as m
from relay.judge.events import Events
from relay.judge.tables import Tables
from relay.limits import Clients, Quiet, QuietRecord, TokenBucket
from relay.model import Match, Out, Publish


class GateRecord(TypedDict):
    """The gate in a relay snapshot: the matches each client opened, the clients seen, each one's
    buckets of actions and requests, and what was said quietly."""

    owned: dict[str, list[str]]
    clients: dict[str, object]
    act_buckets: dict[str, list[object]]
    req_buckets: dict[str, list[object]]
    quiet: QuietRecord

#: The relay's own refusals of an undecoded message.
Refusal = Literal["rate_limited", "too_large"]


class Gate:
    def __init__(self, t: Tables, events: Events) -> None:
        self.t = t
        self.events = events
        self.clients = Clients(int(t.config.client_idle_s * 1_000_000_000))
        self.act_buckets: dict[str, TokenBucket] = {}
        self.req_buckets: dict[str, TokenBucket] = {}
        self.quiet = Quiet()
        self.owned: dict[str, set[str]] = {}  # client -> codes of the matches it created, not over yet

    def admit(self, client: str, code: str | None, payload: bytes, now_ns: int, out: list[Out]) -> bool:
        """May this message from ``client`` (an action in match ``code``, or a request when None) be
        decoded? Costs a dict lookup and a little arithmetic -- before any decoding."""
        self.clients.touch(client, now_ns)
        cfg = self.t.config
        buckets = self.req_buckets if code is None else self.act_buckets
        bucket = buckets.get(client)
        if bucket is None:
            rate, burst = (cfg.req_rate, cfg.req_burst) if code is None else (cfg.act_rate, cfg.act_burst)
            bucket = buckets[client] = TokenBucket(rate, burst, now_ns)
        if not bucket.take(now_ns):
            limited = self.t.stats["limited"]
            limited["dropped"] += 1
            if bucket.first_refusal():
                limited["bursts"] += 1
                what = "requests" if code is None else "actions"
                detail = f"too many {what}: at most {bucket.rate:g} a second; the rest are dropped"
                self.refuse(client, code, payload, "rate_limited", detail, now_ns, out)
                out.append(self.events.bad(now_ns, "rate_limited", client=client, match=code or "", detail=detail))
            return False
        if len(payload) > cfg.max_payload:
            detail = f"{len(payload)} bytes > {cfg.max_payload}"
            self.refuse(client, code, b"", "too_large", detail, now_ns, out)
            self.bad_quietly(now_ns, out, "too_large", sender=client, client=client, match=code or "", detail=detail)
            return False
        return True

    def refuse(self, client: str, code: str | None, payload: bytes, reason: Refusal, detail: str, now_ns: int,
                out: list[Out]) -> None:
        """Tell the sender of an undecoded message that it was refused (never remembered as an answer:
        the same action sent again later is judged)."""
        if code is None:
            out.append(Publish(self.t.topics.client(client), m.RequestRejected(reason, detail)))
            return
        action_id = m.act_id(payload) if payload and len(payload) <= self.t.config.max_payload else -1
        match = self.t.matches.get(code)
        out.append(Publish(self.t.topics.client(client),
                           m.ActionRejected(code, action_id, reason, detail, match.seq if match else 0)))

    def bad_quietly(self, now_ns: int, out: list[Out], code: str, sender: str = "*", **fields: object) -> None:
        """A ``bad_input`` record, once per burst of this refusal from this sender (``*``: unknown)."""
        silenced = self.quiet.log(sender, code, now_ns)
        if silenced is not None:
            if silenced:
                fields["silenced_before"] = silenced
            out.append(self.events.bad(now_ns, code, **fields))

    def to_record(self) -> GateRecord:
        """What the gate keeps, as plain data (a relay snapshot's)."""
        return {
            "owned": {c: sorted(codes) for c, codes in self.owned.items()},
            "clients": self.clients.to_record(),
            "act_buckets": {c: b.to_record() for c, b in self.act_buckets.items()},
            "req_buckets": {c: b.to_record() for c, b in self.req_buckets.items()},
            "quiet": self.quiet.to_record(),
        }

    def load_record(self, snapshot: Mapping[str, object]) -> None:
        """Take what ``to_record`` wrote (the snapshot holds it as written)."""
        record = cast(GateRecord, snapshot)
        self.owned = {c: set(codes) for c, codes in record["owned"].items()}
        self.clients = Clients.from_record(record["clients"])
        self.act_buckets = {c: TokenBucket.from_record(b) for c, b in record["act_buckets"].items()}
        self.req_buckets = {c: TokenBucket.from_record(b) for c, b in record["req_buckets"].items()}
        self.quiet = Quiet.from_record(record["quiet"])

    def disown(self, match: Match) -> None:
        owned = self.owned.get(match.creator)
        if owned is not None:
            owned.discard(match.code)
            if not owned:
                del self.owned[match.creator]
