"""The lobby: control requests -- create, join, quick match, leave, rejoin, rematch, resync, pings.

How this works
--------------
Matches are created waiting (in the gate's limits: ``too_many_matches``, ``relay_full``), joined by
code or by quick match (a waiting quick match of the same game and settings: for a rated player the
closest rating within the band of a waiting one, a band that widens the longer it waits; else the
first waiting, so nobody waits while an opponent is waiting), and started by the referee when their
last seat is taken. A create, join or quick match may carry a proof of identity (a public key and
its signature over the relay's ``Challenged`` nonce, ``protocol/identity.py``): a seat that proved
its key is rated (``relay/judge/ratings.py``); a proof that does not hold is refused
(``bad_signature``, ``stale_challenge``), and a name a rated key holds on this relay is worn by
another with its own key's fingerprint (``name~1a2b``). A code is drawn from the relay's seeded chance (naming
the shard on a sharded relay). Joining gives a seat a secret token; a client's last will
(``Leave(dropped=True)``) marks its seat dropped in a running match for ``grace_s``, and
``Rejoin(match, token)`` from any client id within it gives the seat back; leaving a running match
otherwise forfeits it. In a game that plays on without a player (``Game.leave``: the dice games of
three or more) a leave, or a grace running out, takes only that seat out of play (the referee's
``take_out``): the game goes on for the others, and ends as a forfeit to the last one standing. A
seat taken out stays out: no rejoin, no second leave. A rematch starts once every seat asked for it. Every refusal is a
``RequestRejected`` with a reason code to the requester's private topic.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal, Mapping, TypedDict, cast

from protocol import messages as m
from protocol.chance import SeededChance, derive
from protocol.identity import CHALLENGE_TTL_NS, challenge_message, fingerprint
from protocol.codec import DecodeCode, DecodeError, decode
from protocol.match import (ORDERS, MatchCreated, PlayerDropped, PlayerReturned, RematchRequested, RematchStarted,
                            SeatLeft, SeatTaken, abandoned, left)
from protocol.rules import canonical, game_for
from protocol.topics import valid_id
from relay.judge.codes import draw_code
from relay.judge.deadlines import Deadlines
from relay.judge.events import Events
from relay.judge.gate import Gate
from relay.judge.ratings import NAME_CHARS, Ratings
from relay.judge.referee import Referee
from relay.judge.tables import DETAIL_CHARS, NS, Tables
from relay.model import LogRecord, Match, Out, Publish, Seat


class LobbyRecord(TypedDict):
    """The lobby in a relay snapshot: where the chance that draws match codes stands."""

    codes: list[int]

MAX_GRACE_S = 600.0  # a dropped player's seat is kept at most this long (the ``grace_s`` setting)
#: The lobby's own refusals of a request (a decoding error's code comes from the codec).
RequestRefusal = Literal["too_many_matches", "relay_full", "bad_settings", "no_such_match", "match_full",
                         "bad_token", "not_a_player", "not_over", "unexpected", "bad_signature", "stale_challenge"]
#: Quick match's band of ratings (OpenSkill ordinals, ``relay/judge/ratings.py``): a waiting player
#: takes a newcomer within ``QUICK_BAND`` of its rating at once, and the band widens by
#: ``QUICK_BAND_PER_S`` for every second it has waited.
QUICK_BAND = 3.0
QUICK_BAND_PER_S = 0.5
#: A join, create or quick match that carries a proof of identity (``protocol/identity.py``).
Proving = m.JoinMatch | m.CreateMatch | m.QuickMatch
#: Refusals a flood meets: answered each time (within the sender's rate), logged once per burst.
LIMIT_CODES = frozenset({"too_many_matches", "relay_full", "too_large"})


class Lobby:
    def __init__(self, t: Tables, events: Events, gate: Gate, deadlines: Deadlines, referee: Referee,
                 ratings: Ratings) -> None:
        self.t = t
        self.ratings = ratings
        self.events = events
        self.gate = gate
        self.deadlines = deadlines
        self.referee = referee
        self.codes = SeededChance(derive(t.seed, "codes"))

    def to_record(self) -> LobbyRecord:
        """Where the chance that draws match codes stands (a relay snapshot's)."""
        return {"codes": self.codes.to_record()}

    def load_record(self, snapshot: Mapping[str, object]) -> None:
        """Take what ``to_record`` wrote (the snapshot holds it as written)."""
        self.codes = SeededChance.from_record(cast(LobbyRecord, snapshot)["codes"])

    def on_req(self, client: str, payload: bytes, now_ns: int, out: list[Out]) -> None:
        if not valid_id(client):
            self.gate.bad_quietly(now_ns, out, "bad_client_id", client=client[:80])
            return
        try:
            msg = decode(payload)
        except DecodeError as exc:
            self.reject_req(client, exc.code, exc.detail, now_ns, out)
            return
        if isinstance(msg, m.Ping):
            out.append(Publish(self.t.topics.client(client), m.Pong(t0=msg.t0, t1=now_ns + self.t.wall_offset, t2=now_ns + self.t.wall_offset)))
        elif isinstance(msg, m.CreateMatch):
            key = self.proven(client, msg, now_ns, out)
            if key is not None:
                self.create(client, msg.name, msg.game, msg.settings, msg.seats, False, now_ns, out, key)
        elif isinstance(msg, m.JoinMatch):
            key = self.proven(client, msg, now_ns, out)
            if key is not None:
                self.join(client, msg.name, msg.match.upper(), now_ns, out, key)
        elif isinstance(msg, m.QuickMatch):
            key = self.proven(client, msg, now_ns, out)
            if key is not None:
                self.quick(client, msg, now_ns, out, key)
        elif isinstance(msg, m.Challenge):
            out.append(Publish(self.t.topics.client(client), m.Challenged(nonce=now_ns + self.t.wall_offset)))
        elif isinstance(msg, m.Ratings):
            game = canonical(msg.game)
            limit = min(max(msg.limit, 0), m.RATING_ROWS)
            out.append(Publish(self.t.topics.client(client), m.RatingBoard(
                game=game, rows=tuple(dict(r) for r in self.ratings.leaderboard(game, limit)),
                players=self.ratings.players(game))))
        elif isinstance(msg, m.Resync):
            match = self.t.matches.get(msg.match)
            if match is None:
                self.reject_req(client, "no_such_match", f"no match {msg.match[:16]!r}", now_ns, out)
            else:
                if msg.from_seq > 0:
                    self.events.resend_past(match.code, client, msg.from_seq, now_ns, out)
                self.events.send_views(match, out, only=client)
                self.events.publish_snapshot(match, now_ns, out)
        elif isinstance(msg, m.Rematch):
            self.rematch(client, msg.match, now_ns, out)
        elif isinstance(msg, m.Leave):
            self.leave(client, msg.match, now_ns, out, dropped=msg.dropped)
        elif isinstance(msg, m.Rejoin):
            self.rejoin(client, msg.match, msg.token, now_ns, out)
        elif isinstance(msg, m.ProbeReply):
            self.t.fair.on_probe_reply(client, msg.sent_ns, now_ns)
        else:
            self.reject_req(client, "unexpected", f"{type(msg).__name__} is not a request", now_ns, out)

    def proven(self, client: str, msg: Proving, now_ns: int, out: list[Out]) -> bytes | None:
        """The key a request proves its sender holds (b"": it offers none, an unrated player), or
        None: a proof that does not hold, refused here with its reason."""
        if not msg.key and not msg.sig:
            return b""
        wall_ns = now_ns + self.t.wall_offset
        if abs(wall_ns - msg.nonce) > CHALLENGE_TTL_NS:
            self.reject_req(client, "stale_challenge", "the challenge signed is not this relay's of the last "
                            f"{CHALLENGE_TTL_NS // NS} s: ask for a new one", now_ns, out)
            return None
        if not self.ratings.verify(msg.key, msg.sig, challenge_message(client, msg.nonce)):
            self.reject_req(client, "bad_signature", "the signature does not match the key offered", now_ns, out)
            return None
        return msg.key

    def reject_req(self, client: str, code: RequestRefusal | DecodeCode, detail: str, now_ns: int,
                   out: list[Out]) -> None:
        detail = detail[:DETAIL_CHARS]
        out.append(Publish(self.t.topics.client(client), m.RequestRejected(code, detail)))
        if code in LIMIT_CODES:  # a limit met by a flood: answered every time, logged once per burst
            self.gate.bad_quietly(now_ns, out, code, sender=client, client=client, detail=detail)
        else:
            out.append(self.events.bad(now_ns, code, client=client, detail=detail))

    def new_code(self) -> str:
        total = self.t.config.shards_total
        shard = int(self.t.topics.shard) if total > 1 else 0  # several relays: the code names this core's shard
        while True:
            code = draw_code(self.codes, shard, total)  # (relay/judge/codes.py)
            if code not in self.t.matches:
                return code

    def create(self, client: str, name: str, game: str, settings: dict[str, object], seats: int, quick: bool,
                now_ns: int, out: list[Out], key: bytes = b"") -> Match | None:
        owned = self.gate.owned.get(client)
        if owned is not None and len(owned) >= self.t.config.max_open_per_client:
            self.reject_req(client, "too_many_matches",
                             f"you already have {len(owned)} matches open (at most {self.t.config.max_open_per_client})",
                             now_ns, out)
            return None
        if len(self.t.matches) >= self.t.config.max_matches or len(self.t.waiting) >= self.t.config.max_waiting:
            self.reject_req(client, "relay_full", "this relay holds no more matches", now_ns, out)
            return None
        settings = dict(settings)
        order = settings.pop("order", self.t.config.order)
        if order not in ORDERS:
            self.reject_req(client, "bad_settings", f"order must be one of {', '.join(ORDERS)}, not {order!r}",
                             now_ns, out)
            return None
        grace_s = _grace(settings.pop("grace_s", None))
        if grace_s is None:
            self.reject_req(client, "bad_settings", f"grace_s must be a number of seconds from 0 to {MAX_GRACE_S:g}",
                             now_ns, out)
            return None
        try:
            rules = game_for(game, self.t.games)
            settings = rules.check_settings(settings, seats)
        except (ValueError, TypeError) as exc:
            self.reject_req(client, "bad_settings", str(exc), now_ns, out)
            return None
        problem = rules.seats_problem(seats)
        if problem is not None:
            self.reject_req(client, "bad_settings", problem, now_ns, out)
            return None
        code = self.new_code()
        match = Match(code=code, game=canonical(game), rules=rules, settings=settings, seats=seats, quick=quick,
                      seed=derive(self.t.seed, "match", code), best_of=rules.best_of(settings), order=order,
                      creator=client, grace_s=grace_s)
        self.t.matches[code] = match
        self.t.waiting[code] = match
        self.gate.owned.setdefault(client, set()).add(code)
        self.deadlines.schedule(match, now_ns + int(self.t.config.waiting_ttl_s * NS))
        self.events.event(match, now_ns, out, MatchCreated(game_name=match.game, seats=seats, settings=settings,
                                                                best_of=match.best_of, order=order))
        self.join(client, name, code, now_ns, out, key)
        return match

    def quick(self, client: str, msg: m.QuickMatch, now_ns: int, out: list[Out], key: bytes = b"") -> None:
        """Join a waiting quick match of the same game and settings, else open one. Among several, a
        rated player takes the closest rating whose band takes it in (the band widens as its match
        waits: ``band``); else, and for an unrated player, the longest waiting, so nobody waits for
        an opponent while one is waiting."""
        game = canonical(msg.game)
        mine = self.ratings.rating_of(game, key)
        checked: dict[int, dict[str, object] | None] = {}  # seats -> the settings asked for, checked once per call
        first: Match | None = None
        best: tuple[float, Match] | None = None
        for match in self.t.waiting.values():
            if (match.quick and match.game == game
                    and match.seat_of(client) is None and len(match.players) < match.seats):
                settings = dict(msg.settings)
                order = settings.pop("order", self.t.config.order)
                if _grace(settings.pop("grace_s", None)) != match.grace_s:
                    continue
                if match.seats not in checked:
                    try:
                        checked[match.seats] = match.rules.check_settings(settings, match.seats)
                    except (ValueError, TypeError):
                        checked[match.seats] = None
                wanted = checked[match.seats]
                if wanted == match.settings and order == match.order:
                    if mine is None:
                        first = match
                        break  # unrated: the first waiting, as quick match has always paired
                    first = first or match
                    theirs = [r for r in (self.ratings.rating_of(game, s.key) for s in match.players) if r is not None]
                    if theirs:
                        gap = min(abs(r - mine) for r in theirs)
                        if gap <= self.band(match, now_ns) and (best is None or gap < best[0]):
                            best = (gap, match)
        chosen = best[1] if best is not None else first
        if chosen is not None:
            self.join(client, msg.name, chosen.code, now_ns, out, key)
            return
        self.create(client, msg.name, msg.game, msg.settings, 2, True, now_ns, out, key)

    def band(self, match: Match, now_ns: int) -> float:
        """How far apart in rating a waiting quick match takes a newcomer first: ``QUICK_BAND``,
        widened by ``QUICK_BAND_PER_S`` a second since it opened (its waiting deadline less the
        waiting time to live: a waiting match's deadline is set once, when it opens)."""
        opened = (match.housekeep_at or now_ns) - int(self.t.config.waiting_ttl_s * NS)
        return QUICK_BAND + QUICK_BAND_PER_S * max(0, now_ns - opened) / NS

    def join(self, client: str, name: str, code: str, now_ns: int, out: list[Out], key: bytes = b"") -> None:
        match = self.t.matches.get(code)
        if match is None:
            self.reject_req(client, "no_such_match", f"no match with code {code[:16]!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            if match.status != "waiting" or len(match.players) >= match.seats:
                self.reject_req(client, "match_full", f"match {code} already has its players", now_ns, out)
                return
            name = _clean_name(name[:200]) or f"player{len(match.players) + 1}"
            holder = self.ratings.holder(name)
            if holder is not None and holder != key:  # a name a rated key holds here is not another's to wear
                name = f"{name[:NAME_CHARS - 5]}~{fingerprint(key)[:4] if key else 'anon'}"
            taken = set(match.names)
            base, n = name, 2
            while name in taken:
                name, n = f"{base}-{n}", n + 1
            match.players.append(Seat(client, name, token=self.seat_token(code, client, now_ns), key=key))
            seat = len(match.players) - 1
            self.t.client_match[client] = code
            self.events.event(match, now_ns, out, SeatTaken(player=seat, name=name))
        out.append(self.joined(match, seat))
        if match.status == "waiting" and len(match.players) == match.seats:
            match.wins = [0] * match.seats
            self.referee.start_game(match, now_ns, out)
        else:
            self.events.publish_snapshot(match, now_ns, out)
        out.append(self.events.match_list())

    def joined(self, match: Match, seat: int) -> Publish:
        """``MatchJoined`` for a seat, with its secret token: to the seat's private topic only."""
        s = match.players[seat]
        return Publish(self.t.topics.client(s.client), m.MatchJoined(
            match=match.code, seat=seat, game=match.game, players=match.names, seats=match.seats,
            settings=match.settings, shard=self.t.topics.shard, token=s.token))

    def seat_token(self, code: str, client: str, now_ns: int) -> str:
        """A seat's secret: from the relay's seed (the shell draws it from the OS; only the
        operator's log holds it), so a core fed the same inputs gives the same tokens."""
        return hashlib.sha256(f"{self.t.seed}:seat-token:{code}:{client}:{now_ns}".encode()).hexdigest()[:32]

    def leave(self, client: str, code: str, now_ns: int, out: list[Out], dropped: bool = False) -> None:
        match = self.t.matches.get(code) if code else self.t.matches.get(self.t.client_match.get(client, ""))
        if match is None:
            return
        seat = match.seat_of(client)
        if seat is None:
            return
        if match.players[seat].left:  # out of play already: nothing more to leave
            self.t.client_match.pop(client, None)
            return
        if dropped and match.status in ("playing", "between"):
            # The connection dropped (the client's last will): the seat waits ``grace_s`` for a Rejoin.
            s = match.players[seat]
            if s.dropped_at is None:
                s.dropped_at = now_ns
                self.events.event(match, now_ns, out, PlayerDropped(player=seat, grace_s=match.grace_s))
                self.schedule_grace(match)
            return
        self.t.client_match.pop(client, None)
        if match.status == "waiting":
            # Published while the seat is still there: the event names its player by the seat table
            # it was taken in (the seats after it move down one).
            self.events.event(match, now_ns, out, SeatLeft(player=seat))
            match.players.pop(seat)
            if not match.players:
                self.close(match, out)
            else:
                self.events.publish_snapshot(match, now_ns, out)
        elif match.status in ("playing", "between"):
            match.players[seat].dropped_at = None  # a leave settles a dropped seat's wait
            if self.referee.take_out(match, seat, "left", now_ns, out):
                if match.code in self.t.live:  # still running (one that ended keeps its linger deadline)
                    self.schedule_grace(match)
                out.append(self.events.match_list())
                return
            # Leaving a running match forfeits it: the others win.
            self.events.event(match, now_ns, out, SeatLeft(player=seat))
            self.referee.end_match(match, left(match.seats, seat, match.out_of_play()), now_ns, out, losers=(seat,))
        out.append(self.events.match_list())

    def schedule_grace(self, match: Match) -> None:
        """Housekeeping for a running match is the end of its earliest dropped seat's grace."""
        at = match.grace_deadline()
        if at is None:
            match.housekeep_at = None
        else:
            self.deadlines.schedule(match, at)

    def grace_over(self, match: Match, now_ns: int, out: list[Out]) -> None:
        """A dropped seat's grace ran out: the match is forfeited (``abandoned``) to those still there."""
        grace_ns = int(match.grace_s * NS)
        late = [i for i, s in enumerate(match.players) if s.dropped_at is not None and s.dropped_at + grace_ns <= now_ns]
        if not late:
            self.schedule_grace(match)
            return
        while late and match.status == "playing":  # a game that plays on without them takes them out
            s = match.players[late[0]]
            dropped_at, s.dropped_at = s.dropped_at, None
            if not self.referee.take_out(match, late[0], "grace", now_ns, out):
                s.dropped_at = dropped_at  # still late: the match ends below
                break
            late.pop(0)
        if not late or match.status == "over":
            if match.status != "over":  # (a match that ended keeps its linger deadline)
                self.schedule_grace(match)
            out.append(self.events.match_list())
            return
        self.referee.end_match(match, abandoned(match.seats, late, match.out_of_play()), now_ns, out)
        out.append(self.events.match_list())

    def rejoin(self, client: str, code: str, token: str, now_ns: int, out: list[Out]) -> None:
        """A seat taken back with its token, by a new client id (a restarted process) or the same
        one (a reconnect): the seat is the new client's, it gets ``MatchJoined`` and its view."""
        match = self.t.matches.get(code.upper()[:16])
        if match is None:
            self.reject_req(client, "no_such_match", f"no match {code[:16]!r}", now_ns, out)
            return
        seat = next((i for i, s in enumerate(match.players)
                     if s.token and hmac.compare_digest(s.token.encode(), token.encode()[:64])), None)
        if seat is None:
            self.reject_req(client, "bad_token", f"no seat of match {match.code} has this token", now_ns, out)
            return
        s = match.players[seat]
        if s.left:
            self.reject_req(client, "bad_token", f"this seat left match {match.code}: it is out of play", now_ns, out)
            return
        if s.client != client:
            if match.status == "over":
                self.reject_req(client, "bad_token", f"match {match.code} is over: its seats are closed", now_ns, out)
                return
            if match.seat_of(client) is not None:
                self.reject_req(client, "bad_token", "you already hold another seat of this match", now_ns, out)
                return
            if self.t.client_match.get(s.client) == match.code:
                del self.t.client_match[s.client]
            out.append(LogRecord({"kind": "seat_moved", "match": match.code, "seat": seat, "from": s.client,
                                  "to": client, "ts": now_ns}))
            s.client = client
        self.t.client_match[client] = match.code
        if s.dropped_at is not None:
            s.dropped_at = None
            if match.status in ("playing", "between"):
                self.events.event(match, now_ns, out, PlayerReturned(player=seat))
                self.schedule_grace(match)
        out.append(self.joined(match, seat))
        self.events.send_views(match, out, only=client)
        self.events.publish_snapshot(match, now_ns, out)

    def close(self, match: Match, out: list[Out]) -> None:
        self.t.matches.pop(match.code, None)
        self.events.past.pop(match.code, None)
        self.t.waiting.pop(match.code, None)
        self.t.live.pop(match.code, None)
        self.t.fair_live.pop(match.code, None)
        self.gate.disown(match)
        match.housekeep_at = None
        for s in match.players:
            if self.t.client_match.get(s.client) == match.code:
                del self.t.client_match[s.client]
        self.t.fair.drop_match(match.code)
        out.append(Publish(self.t.topics.snap(match.code), b"", retain=True))  # clears the retained snapshot

    def rematch(self, client: str, code: str, now_ns: int, out: list[Out]) -> None:
        match = self.t.matches.get(code)
        if match is None:
            self.reject_req(client, "no_such_match", f"no match {code[:16]!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            self.reject_req(client, "not_a_player", "you are not in this match", now_ns, out)
            return
        if match.status != "over":
            self.reject_req(client, "not_over", "the match is still running", now_ns, out)
            return
        match.players[seat].rematch = True
        self.events.event(match, now_ns, out, RematchRequested(player=seat))
        if all(s.rematch for s in match.players):
            for s in match.players:
                s.rematch = False
                s.dropped_at = None  # whoever asked for the rematch is there
            match.wins = [0] * match.seats
            match.winner = None
            match.results = []
            match.seed = derive(match.seed, "rematch")
            match.housekeep_at = None  # it stays while it is played again
            self.events.event(match, now_ns, out, RematchStarted())
            self.referee.start_game(match, now_ns, out)


def _grace(value: object) -> float | None:
    """The ``grace_s`` match setting, checked: None (absent) is the default 30 s; None back if bad."""
    if value is None:
        return 30.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_GRACE_S:
        return None
    return float(value)


def _clean_name(name: str) -> str:
    return "".join(c for c in name if c.isprintable() and c not in "/+#")[:NAME_CHARS].strip()
