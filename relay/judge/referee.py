"""The referee: judging a play, in arrival or fair order; a game's start, timers and end.

How this works
--------------
An action (``on_act``) is decoded, answered again if it is a duplicate (the remembered answers),
checked (its match, its seat, its phase, its ``seq``) and judged against the state as it is then
(``judge``): the engine completes and applies it; a rejection is ``stale`` (the game's code) when the
state the player saw would have accepted it, else the engine's code. An accepted change is
committed: its events are published by the events part and the state is kept in the match's
history for later stale checks. In fair order a play that races others (the game's ``RaceRule``)
is submitted to the scheduler (``relay/fair.py``) instead and judged when ``release`` finds it due.
After every change the game's timers are re-armed from the new state and fired when due
(``fire_timers``, with ``player=SYSTEM``); an outcome ends the game, and the match's own rules
(``protocol/match.py``, which the log checker uses too) say whether that ends the match: a seat has
won the majority of its ``best_of``, or the cap on games is reached. A leave or a grace running out
ends it through the lobby, by the same rules.

Each seat's figures (``relay.model.SeatFigures``: races lost, latest round trip, latest hold) are
kept as its plays are judged, from the times the judge is given, and published in the match's
state: what a spectator may know of a player's connection, never of their cards.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from protocol import messages as m
from protocol.chance import SeededChance, commitment, derive
from protocol.codec import DecodeError, decode
from protocol.match import GameResult, GameStarted, MatchEnd, after_game
from protocol.records import plain
from protocol.rules.base import SYSTEM, Accepted, Outcome, RaceKey, Rejected
from protocol.topics import valid_id
from relay.fair import Table
from relay.judge.answers import Answers, Reply
from relay.judge.deadlines import Deadlines
from relay.judge.events import Events
from relay.judge.gate import Gate
from relay.judge.ratings import Ratings
from relay.judge.tables import DETAIL_CHARS, NS, Tables
from relay.model import LogRecord, Match, Out, Publish

MAX_RTT_NS = 10 * NS  # a longer "round trip" is a claim no network makes: not taken as one



class Referee:
    def __init__(self, t: Tables, events: Events, gate: Gate, deadlines: Deadlines, answers: Answers,
                 ratings: Ratings) -> None:
        self.t = t
        self.ratings = ratings
        self.events = events
        self.gate = gate
        self.deadlines = deadlines
        self.answers = answers

    def on_act(self, code: str, client: str, payload: bytes, now_ns: int, out: list[Out],
                ids_ok: bool | None = None) -> None:
        if ids_ok is None:  # not checked by the caller
            ids_ok = valid_id(client) and valid_id(code)
        if not ids_ok:
            self.gate.bad_quietly(now_ns, out, "bad_topic", match=code[:80], client=client[:80])
            return
        try:
            act = decode(payload)
        except DecodeError as exc:
            self.answer(client, code, -1, m.ActionRejected(code, -1, "malformed", exc.detail), now_ns, out)
            return
        if not isinstance(act, m.Act):
            self.answer(client, code, -1, m.ActionRejected(code, -1, "malformed", f"expected Act, got {type(act).__name__}"),
                         now_ns, out)
            return
        remembered = self.answers.recall(client, code, act.id)
        if remembered is not None:
            out.append(Publish(self.t.topics.client(client), remembered))
            out.append(LogRecord({"kind": "duplicate", "match": code, "client": client, "id": act.id}))
            return
        match = self.t.matches.get(code)
        if match is None:
            self.reject(client, code, act, "no_such_match", f"no match {code!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            self.reject(client, code, act, "not_a_player", "you are not a player in this match", now_ns, out)
            return
        try:
            action = match.rules.action_from_wire(act.action)
        except (ValueError, TypeError) as exc:
            self.reject(client, code, act, "malformed", str(exc), now_ns, out)
            return
        if match.status != "playing":
            reason = {"waiting": "not_running", "between": "not_running", "over": "game_over"}[match.status]
            self.reject(client, code, act, reason, f"the match is {match.status}", now_ns, out)
            return
        if act.seq > match.seq or act.seq < 0:
            self.reject(client, code, act, "bad_seq", f"seq {act.seq} is not a seq of this match", now_ns, out)
            return
        reaction = act.reaction_ns
        if reaction is not None:  # the play was a round trip (see SeatFigures)
            published = match.published_at(act.seq)
            if published is not None and 0 <= now_ns - published - reaction <= MAX_RTT_NS:
                match.figures_of(seat).rtt_ns = now_ns - published - reaction
        race = match.rules.race
        key = race.key(match.state_at(act.seq), action) if race is not None and match.order == "fair" else None
        if key is not None:  # it races others for the same thing: the scheduler holds it until due
            self.t.fair.submit(self.table(match), seat, act, action, key, now_ns)
            self.release(match, now_ns, out)
            self.deadlines.wake_up(match)
            return
        self.judge(match, seat, client, act, action, now_ns, out)

    def table(self, match: Match) -> Table:
        race = match.rules.race
        assert race is not None  # only a game with a race rule has plays held

        def could_race(seat: int, key: RaceKey) -> bool:
            return race.could_race(match.state, seat, key)

        return Table(match.code, match.clients, could_race, match.seed, match.seq)

    def release(self, match: Match, now_ns: int, out: list[Out]) -> None:
        """Judge the held plays that are due, in the scheduler's order, until none is."""
        if not self.t.fair.holding(match.code):
            return
        table = self.table(match)
        while batch := self.t.fair.next_batch(table, now_ns):
            for r in batch:
                h = r.play
                self.judge(match, h.seat, h.client, h.act, h.action, now_ns, out, hold_ns=r.hold_ns, note=r.note)

    def probe(self, now_ns: int, out: list[Out]) -> None:
        """Probe the idle players of a running fair match (a play measures its player's round trip
        too: ``relay/fair.py``): their replies measure their round trips."""
        fair = self.t.fair
        for code in self.t.fair_live:
            match = self.t.live[code]
            if match.status in ("playing", "between"):
                for s in match.players:
                    if fair.probe_wanted(s.client, now_ns):
                        out.append(Publish(self.t.topics.client(s.client), m.Probe(sent_ns=now_ns)))

    def judge(self, match: Match, seat: int, client: str, act: m.Act, action: object, now_ns: int, out: list[Out],
              hold_ns: int = 0, note: dict[str, object] | None = None) -> bool:
        """Apply one action against the state as it is now; answer it; publish what follows."""
        if match.status != "playing":  # (a held play whose game ended meanwhile: its decision is logged too)
            self.reject(client, match.code, act, "not_running", f"the match is {match.status}", now_ns, out,
                        hold_ns=hold_ns, note=note)
            return False
        assert match.chance is not None  # set when a game starts
        action = match.rules.complete(match.state, seat, action, match.chance)
        result = match.rules.apply(match.state, seat, action)
        if isinstance(result, Rejected):
            code, detail = result.code, result.detail
            then = match.state_at(act.seq)
            if then is not None and then is not match.state and code != "malformed":
                earlier = match.rules.apply(then, seat, action)
                if isinstance(earlier, Accepted):
                    code = match.rules.stale_code
                    detail = f"the state changed after the one you saw (seq {act.seq}): {result.detail}"
                    match.figures_of(seat).races_lost += 1
            if match.order == "fair":
                match.figures_of(seat).held_ns = hold_ns
            self.reject(client, match.code, act, code, detail, now_ns, out, hold_ns=hold_ns, note=note)
            return False
        if match.order == "fair":
            match.figures_of(seat).held_ns = hold_ns
        extra = {"client": client, "id": act.id, "reaction_ns": act.reaction_ns, "hold_ns": hold_ns}
        if note:
            extra.update(note)
        start = len(out)
        self.commit(match, result, now_ns, out, extra=extra)
        self.t.stats["accepted"] += 1
        # (an accepted action's sender was checked before it was judged: by ``_on_act``, or on its way to fair order's hold)
        self.answer(client, match.code, act.id,
                    m.ActionAccepted(match.code, act.id, match.seq, hold_ns, now_ns - hold_ns + self.t.wall_offset),
                    now_ns, out, log=False, client_ok=True)
        # The verdict goes out first, beside the private updates: a client keeps an accepted play until
        # its events come (``seq``), and the sender's verdict and new cards then leave as one message.
        out.insert(start, out.pop())
        self.after_change(match, now_ns, out)
        return True

    def commit(self, match: Match, result: Accepted[object], now_ns: int, out: list[Out], extra: dict[str, object]) -> None:
        before, match.state = match.state, result.state
        first = match.seq + 1
        start = len(out)
        if result.events:
            names = match.names  # a tuple built per call: once for all the change's events
            for ev in result.events:
                self.events.event(match, now_ns, out, ev, names)
        rules = match.rules
        if rules.private_delta is not None and rules.sends_less and not self.t.replaying:
            # Send less: the events say what changed in public; each player is told privately only
            # what they cannot learn from them (the cards drawn into their own hand).
            # They go out *before* the events: a client holds one until its seq, so the view it shows
            # after a change's last event already has the cards drawn in it.
            game = max(match.game_index, 0)
            private: list[Out] = []
            for seat, s in enumerate(match.players):
                delta = rules.private_delta(before, match.state, seat)
                if delta is not None:
                    private.append(Publish(self.t.topics.client(s.client), m.PrivateUpdate(match.code, match.seq, game, delta)))
            out[start:start] = private
        match.remember(now_ns)
        out.append(LogRecord({"kind": "applied", "match": match.code, "game": match.game_index,
                              "seq": [first, match.seq], "ts": now_ns, **extra}))

    def reject(self, client: str, code: str, act: m.Act, reason: str, detail: str, now_ns: int, out: list[Out],
                hold_ns: int = 0, note: dict[str, object] | None = None) -> None:
        detail = detail[:DETAIL_CHARS]  # it may quote what the player sent
        match = self.t.matches.get(code)
        seq = match.seq if match else 0
        rej = self.t.stats["rejected"]
        rej[reason] = rej.get(reason, 0) + 1
        self.answer(client, code, act.id,
                    m.ActionRejected(code, act.id, reason, detail, seq, hold_ns, now_ns - hold_ns + self.t.wall_offset),
                    now_ns, out, log=False)
        out.append(LogRecord({"kind": "rejected", "match": code, "client": client, "id": act.id, "code": reason,
                              "detail": detail, "ts": now_ns, "reaction_ns": act.reaction_ns, "hold_ns": hold_ns,
                              **(note or {})}))

    def answer(self, client: str, code: str, action_id: int, answer: Reply, now_ns: int, out: list[Out],
                log: bool = True, client_ok: bool = False) -> None:
        """Answer an action to its sender (``client_ok``: its id has been checked already)."""
        if isinstance(answer, m.ActionRejected) and len(answer.detail) > DETAIL_CHARS:  # e.g. a decode error
            answer = dataclasses.replace(answer, detail=answer.detail[:DETAIL_CHARS])
        if client_ok or valid_id(client):
            out.append(Publish(self.t.topics.client(client), answer))
            if action_id >= 0:
                self.answers.remember(client, code, action_id, answer)
        if log:
            out.append(self.events.bad(now_ns, getattr(answer, "code", "answer"), client=client, match=code,
                                 detail=getattr(answer, "detail", "")))

    def start_game(self, match: Match, now_ns: int, out: list[Out]) -> None:
        match.game_index += 1
        match.status = "playing"
        if self.t.waiting.pop(match.code, None) is not None:
            match.housekeep_at = None  # no longer waiting: it cannot expire
        self.t.live[match.code] = match
        if match.order == "fair":
            self.t.fair_live[match.code] = None
        match.game_seed = derive(match.seed, "game", match.game_index)
        match.chance = SeededChance(match.game_seed)
        match.state = match.rules.new_game(match.settings, match.seats, match.chance)
        match.forget()
        match.timers.clear()
        self.events.event(match, now_ns, out, GameStarted(players=match.names,
                                                               seed_commitment=commitment(match.game_seed)))
        match.remember(now_ns)
        self.after_change(match, now_ns, out, starting=True)

    def after_change(self, match: Match, now_ns: int, out: list[Out], starting: bool = False) -> None:
        """Re-arm timers from the new state, publish views and snapshot, and handle the end."""
        outcome = match.rules.outcome(match.state)
        if outcome is not None:
            match.timers.clear()
            self.end_game(match, outcome, now_ns, out)
        else:
            self.arm_timers(match, now_ns)
        if starting or outcome is not None or not match.rules.sends_less:
            self.events.send_views(match, out)  # whole views: at a game's boundaries, or for a game without an applier
        self.events.snapshot_soon(match, now_ns, out, now=outcome is not None or starting)
        if outcome is None:
            self.fire_timers(match, now_ns, out)
        self.deadlines.wake_up(match)

    def arm_timers(self, match: Match, now_ns: int) -> None:
        timers = match.rules.timers(match.state)
        if not timers:  # most changes (a BLINK play): no timer wanted, so none may stay armed
            if match.timers:
                match.timers.clear()
            return
        wanted = {t.name: t for t in timers}
        for name in list(match.timers):
            if name not in wanted:
                del match.timers[name]
        for name, t in wanted.items():
            if name not in match.timers:
                match.timers[name] = (now_ns + max(0, t.delay_ns), t.action)

    def fire_timers(self, match: Match, now_ns: int, out: list[Out]) -> None:
        if not match.timers:
            return
        for _ in range(10_000):  # zero-delay timers may chain (roll, then roll again); bounded anyway
            due = [(d, n) for n, (d, _) in match.timers.items() if d <= now_ns]
            if not due or match.status != "playing":
                return
            _, name = min(due)
            _, action = match.timers.pop(name)
            assert match.chance is not None  # set when a game starts
            action = match.rules.complete(match.state, SYSTEM, action, match.chance)
            result = match.rules.apply(match.state, SYSTEM, action)
            if isinstance(result, Rejected):
                out.append(LogRecord({"kind": "timer_refused", "match": match.code, "timer": name, "code": result.code}))
                continue
            self.commit(match, result, now_ns, out, extra={"timer": name})
            self.after_change(match, now_ns, out)
            return

    def end_game(self, match: Match, outcome: Outcome[str], now_ns: int, out: list[Out]) -> None:
        winners = list(outcome.winners)
        for w in winners:
            match.wins[w] += 1
        match.results.append({"game_index": match.game_index, "winners": winners, "reason": outcome.reason,
                              "scores": list(outcome.scores)})
        self.events.event(match, now_ns, out, GameResult(winner=winners[0] if len(winners) == 1 else None, winners=tuple(winners),
                                                              reason=outcome.reason, scores=outcome.scores,
                                                              wins=tuple(match.wins), seed=match.game_seed,
                                                              extra=plain(outcome.extra)))
        end = after_game(match.wins, match.game_index + 1, match.best_of, outcome.reason)
        if end is not None:
            self.end_match(match, end, now_ns, out)
        else:
            match.status = "between"
            match.next_game_at = now_ns + int(self.t.config.between_games_s * NS)

    def take_out(self, match: Match, seat: int, why: Literal["left", "grace"], now_ns: int, out: list[Out]) -> bool:
        """Take ``seat`` out of a running game that plays on without it (the game's ``leave``
        action: a match of three or more); False when the game cannot, and the match must end."""
        leave = match.rules.leave
        if leave is None or match.seats < 3 or match.status != "playing":
            return False
        result = match.rules.apply(match.state, SYSTEM, leave(seat))
        if isinstance(result, Rejected):
            out.append(LogRecord({"kind": "leave_refused", "match": match.code, "seat": seat, "code": result.code}))
            return False
        match.players[seat].left = True
        self.commit(match, result, now_ns, out, extra={"left": seat, "why": why})
        self.after_change(match, now_ns, out)
        return True

    def end_match(self, match: Match, end: MatchEnd, now_ns: int, out: list[Out], losers: tuple[int, ...] = ()) -> None:
        """End the match as ``end`` says (``protocol/match.py`` decides when and how), and rate it
        (``relay/judge/ratings.py``): ``losers`` are seats that forfeited it (a leaver)."""
        match.status = "over"
        match.winner = end.winner
        match.timers.clear()
        match.next_game_at = None
        match.forget()
        self.t.live.pop(match.code, None)
        self.t.fair_live.pop(match.code, None)
        self.gate.disown(match)
        self.deadlines.schedule(match, now_ns + int(self.t.config.linger_s * NS))
        self.events.event(match, now_ns, out, end.event(match.wins))
        self.events.publish_snapshot(match, now_ns, out)
        self.events.send_views(match, out)
        self.ratings.rate(match, end, losers, now_ns, out)
