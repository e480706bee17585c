"""The window's view-models without a window: a real ``RelayCore`` (no broker, no clock) feeds real
relay messages to ``ClientModel``s, and the view-models say what the screen would show."""

from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path
from typing import Any

from protocol import messages as m
from protocol.rules import blink
from protocol.rules import sequence as sq
from protocol.rules import takeaway as tk
from protocol.rules.base import Rejected
from relay.core import Publish
from client import ClientModel
from client.window.viewmodels import RyoViewModel
from client.window.viewmodels.turnbased import NS
from client.window.viewmodels import SequenceViewModel, TableViewModel, TakeawayViewModel
from tests.test_relay_core import T, Harness, race_deck

ROOT = Path(__file__).resolve().parent.parent
S = 1_000_000_000


class Room:
    """A relay core and the models of the clients at one match; every publish reaches the models
    that would receive it (their own topic, the match's events and snapshots)."""

    def __init__(self, **config: Any) -> None:
        self.h = Harness(**config)
        self.models: dict[str, ClientModel] = {}
        self.code = ""

    def _deliver(self, out: list[Any]) -> list[Any]:
        for o in out:
            if not isinstance(o, Publish):
                continue
            for client, model in self.models.items():
                if o.topic == T.client(client) or isinstance(o.msg, (m.Event, m.Snapshot)):
                    for reply in model.on_message(o.msg, self.h.now):
                        assert not isinstance(reply, m.Resync), "a model lost track of the events"
        return out

    def open(self, game: str = "blink", settings: dict[str, Any] | None = None, seats: int = 2) -> str:
        names = ["ann", "bob", "cat", "dan"][:seats]
        clients = ["a", "b", "c", "d"][:seats]
        for c, n in zip(clients, names):
            self.models[c] = ClientModel(c, n)
        self._deliver(self.h.send(T.req("a"), m.CreateMatch(name="ann", game=game, settings=settings or {},
                                                             seats=seats)))
        self.code = self.models["a"].match or ""
        assert self.code
        for c, n in zip(clients[1:], names[1:]):
            self._deliver(self.h.send(T.req(c), m.JoinMatch(name=n, match=self.code)))
        return self.code

    def tick(self, seconds: float, step: float = 0.05) -> None:
        for _ in range(max(1, round(seconds / step))):
            self._deliver(self.h.tick(step))

    def act(self, client: str, action: Any) -> Any:
        msg = self.models[client].act(action, self.h.now)
        if isinstance(msg, m.Act):
            self._deliver(self.h.send(T.act(self.code, client), msg))
        return msg

    def send_held(self, client: str, action: Any) -> tuple[Any, Any]:
        """Predict ``action`` now; return (the Act, a function that sends it later)."""
        msg = self.models[client].act(action, self.h.now)
        return msg, lambda: self._deliver(self.h.send(T.act(self.code, client), msg))

    def until(self, pred: Any, seconds: float = 60.0) -> None:
        waited = 0.0
        while not pred():
            assert waited < seconds, "the condition was not reached"
            self.tick(0.05)
            waited += 0.05

    @property
    def match(self) -> Any:
        return self.h.core.matches[self.code]


def test_importing_the_view_models_does_not_import_pyglet() -> None:
    code = ("import sys, client.window.viewmodels, client.window.viewmodels.feed, client.window.viewmodels.table, "
            "client.window.viewmodels.turnbased, client.window.viewmodels.takeaway, "
            "client.window.viewmodels.sequence, client.window.viewmodels.ryo, client.window.viewmodels.games; "
            "print('pyglet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_seat_choices_come_from_the_games_own_player_counts() -> None:
    from protocol.rules import GAMES
    from client.window.viewmodels import MAX_SEATS, seat_choices

    for name, game in GAMES.items():
        seats = seat_choices(name)
        assert seats[0] == game.min_players and seats[-1] == min(game.max_players, MAX_SEATS)
        assert list(seats) == list(range(seats[0], seats[-1] + 1))
    assert seat_choices("blink") == (2,)


# ---------------------------------------------------------------------------------------------------
# the BLINK table


def test_table_countdown_hand_pile_tops_and_go() -> None:
    room = Room(fixed_decks=(race_deck(),))
    room.open()
    model = room.models["a"]
    vm = TableViewModel()
    t0 = room.h.now
    vm.observe(model, t0)
    band = vm.band(model, "playing", "", "", t0 + int(0.5 * S))
    assert (band.big, band.where) == ("3", "centre")  # 3 s of countdown from game_started
    assert vm.band(model, "playing", "", "", t0 + int(2.5 * S)).big == "1"
    assert "tick" in vm.drain_cues()
    board = vm.board(model)
    assert board.playing and board.phase == "countdown"
    assert [str(c.card) for c in board.hand] == ["3-red-star", "1-red-moon", "2-red-moon"]
    assert [k for k, _ in board.keys] == ["1", "2", "3"]
    assert [p.style for p in board.piles] == ["back", "back"]  # face down until the start
    assert board.pile_labels == ("←  A    your pile", "bob's pile    D  →")
    assert sum(1 for c in board.opp_hand if c.style == "back") == 3
    assert board.score == "ann  0 – 0  bob" and board.opp_name == "bob"
    room.tick(3.1)
    vm.observe(model, room.h.now)
    assert "go" in vm.drain_cues()
    assert vm.band(model, "playing", "", "", room.h.now).big == "GO!"
    assert [str(p.card) for p in vm.board(model).piles] == ["3-green-moon", "1-blue-triangle"]
    assert vm.band(model, "playing", "", "", room.h.now + S).big == ""  # GO! is gone after a moment


def test_table_before_a_game_says_what_is_going_on() -> None:
    vm = TableViewModel()
    assert vm.band(None, "error", "no match ZZZZZ", "", 0).big == "Cannot play"
    assert vm.band(None, "connecting", "", "", 0).sub == "connecting…"
    waiting = ClientModel("a", "ann")
    waiting.match = "ABCDE"
    band = vm.band(waiting, "waiting", "", "blink play --server mqtt://10.0.0.5:1883", 0)
    assert band.big == "Match code  ABCDE" and "--server mqtt://10.0.0.5:1883 --match ABCDE" in band.sub
    assert not vm.board(None).playing


def test_table_a_play_is_shown_pending_then_confirmed() -> None:
    room = Room(fixed_decks=(race_deck(),))
    room.open()
    room.tick(3.1)
    model = room.models["a"]
    vm = TableViewModel()
    vm.observe(model, room.h.now)
    vm.board(model)
    assert vm.select(model, 0, room.h.now).noted and vm.selected == 0
    assert vm.board(model).hand[0].ring == "select" and vm.board(model).hand[0].raised
    step = vm.play(model, 0, None, room.h.now)
    assert step.action == blink.PlayCard("3-red-star", 0) and step.slot == 0
    _, send = room.send_held("a", step.action)
    vm.sent(step, None, room.h.now)
    board = vm.board(model)
    assert str(board.piles[0].card) == "3-red-star" and board.piles[0].ring == "pending"
    assert board.piles[0].alpha < 1 and vm.selected is None
    assert board.hand[0].style == "unknown"  # the card drawn in its place is not known yet
    send()
    vm.observe(model, room.h.now)
    assert "land" in vm.drain_cues()
    board = vm.board(model)
    assert str(board.piles[0].card) == "3-red-star" and board.piles[0].ring is None and board.piles[0].alpha == 1
    assert board.hand[0].style == "face"
    assert vm.pile_flash(0, room.h.now) == ("landed", 1.0)


def test_table_a_lost_race_bounces_back_with_its_reason() -> None:
    room = Room(fixed_decks=(race_deck(),))
    room.open()
    room.tick(3.1)
    a, b = room.models["a"], room.models["b"]
    vm = TableViewModel()
    vm.observe(b, room.h.now)
    vm.board(b)
    slot = vm.slot_of(blink.Card.parse("5-green-triangle"))
    assert slot is not None
    step = vm.play(b, 0, slot, room.h.now)
    _, send_b = room.send_held("b", step.action)
    assert str(vm.board(b).piles[0].card) == "5-green-triangle"  # b's own prediction
    room.act("a", blink.PlayCard("3-red-star", 0))  # a is first at the relay
    send_b()
    vm.observe(b, room.h.now)
    assert "bounce" in vm.drain_cues()
    assert vm.message(room.h.now)[0] == "too slow — pile changed"
    board = vm.board(b)  # as a frame does: the picture first, then the animations
    flying = vm.flight(room.h.now + S // 10)
    assert flying is not None and str(flying[0].card) == "5-green-triangle" and flying[0].pile == 0
    assert flying[2] == slot  # back to the slot it left
    assert str(board.piles[0].card) == "3-red-star" and board.piles[0].ring is None
    assert board.hand[slot].alpha < 1  # faded while its ghost flies back
    assert vm.flight(room.h.now + S) is None  # landed: the slot flashes
    assert vm.hand_flash(slot, room.h.now + S)[0] == "bounce"
    assert vm.message(room.h.now + 3 * S)[0] == ""  # the reason fades out
    assert str(a.state().top(0)) == "3-red-star"


def test_table_a_locally_refused_play_shakes_and_says_why() -> None:
    room = Room(fixed_decks=(race_deck(),))
    room.open()
    room.tick(3.1)
    model = room.models["a"]
    vm = TableViewModel()
    vm.observe(model, room.h.now)
    vm.board(model)
    assert vm.play(model, 0, None, room.h.now).action is None
    assert vm.message(room.h.now)[0] == "choose a card first: 1 2 3"
    step = vm.play(model, 1, 1, room.h.now)  # 1-red-moon on 1-blue-triangle: same count, fine
    assert step.action == blink.PlayCard("1-red-moon", 1)
    step = vm.play(model, 0, 2, room.h.now)  # 2-red-moon on 3-green-moon: same shape, fine too
    bad = vm.play(model, 1, 0, room.h.now)  # 3-red-star on 1-blue-triangle: nothing in common
    result = model.act(bad.action, room.h.now)
    assert isinstance(result, Rejected)
    vm.sent(bad, result, room.h.now)
    assert vm.message(room.h.now)[0] == "doesn't match"
    shake = vm.shake(room.h.now + S // 20)
    assert shake is not None and shake[0] == 0 and shake[1] != 0
    assert step.action is not None


# Nobody can play from the start: hands are green/blue triangles and moons of 4 and 5, the centre
# and draw cards red or yellow stars of 1-3. First a flip (both still have a draw card), then a pick.
STALE = ("1-red-star", "4-green-triangle", "5-green-moon", "4-blue-moon", "3-red-star",
         "2-red-star", "5-blue-triangle", "4-green-moon", "5-green-triangle", "1-yellow-star")


def test_table_stalemate_flip_then_the_pick_with_its_timer() -> None:
    room = Room(fixed_decks=(STALE,))
    room.open(settings={"countdown_s": 0.3, "stalemate_pause_s": 1.0, "pick_time_s": 3.0})
    model = room.models["a"]
    vm = TableViewModel()
    room.until(lambda: model.state().phase == "stalled")
    vm.observe(model, room.h.now)
    band = vm.band(model, "playing", "", "", room.h.now)
    assert band.big == "Stalemate" and "flip" in band.sub and band.where == "status"
    assert "stalemate" in vm.drain_cues()
    room.until(lambda: model.state().phase == "picking")
    vm.observe(model, room.h.now)
    board = vm.board(model)
    assert [str(p.card) for p in board.piles] == ["3-red-star", "1-yellow-star"]  # the flip happened
    assert all(c.ring == "pick" for c in board.hand if c.style == "face")
    assert board.hint.startswith("1 2 3  (or click)")
    band = vm.band(model, "playing", "", "", room.h.now + S)
    assert band.big == "Stalemate: choose a card" and band.timer is not None and 0.5 < band.timer < 0.8
    step = vm.select(model, 0, room.h.now)  # during the pick, a slot key chooses that card
    assert step.action == blink.PickCard("4-green-triangle")
    room.act("a", step.action)
    vm.observe(model, room.h.now)
    assert vm.band(model, "playing", "", "", room.h.now).big == "Card chosen"
    assert vm.board(model).hand[0].ring == "pending" or model.state().phase != "picking"


def _play_out(room: Room, clients: tuple[str, ...] = ("a", "b")) -> None:
    """Both players play greedily until the match is over."""
    room.until(lambda: room.match.status == "playing")
    for _ in range(20_000):
        if room.match.status == "over":
            return
        room.tick(0.05)
        if room.match.status != "playing":
            continue
        for seat, client in enumerate(clients):
            acts = blink.legal_actions(room.models[client].state(), seat) if room.models[client].state() else []
            if acts:
                room.act(client, acts[0])
    raise AssertionError("the match did not end")


REDS = tuple([f"{n}-red-star" for n in range(1, 6)] + [f"{n}-red-triangle" for n in range(1, 6)])


def test_table_a_game_result_and_the_match_over() -> None:
    room = Room(fixed_decks=(REDS,))
    room.open(settings={"countdown_s": 0.3, "best_of": 1})
    model = room.models["a"]
    vm = TableViewModel()
    vm.observe(model, room.h.now)
    _play_out(room)
    room.tick(0.1)
    vm.observe(model, room.h.now)
    band = vm.band(model, "playing", "", "", room.h.now)
    winner = room.match.winner
    assert band.big == ("You win the game!" if winner == 0 else "bob wins the game")
    assert band.sub.endswith("match over") and ("1 – 0" in band.sub or "0 – 1" in band.sub)
    assert vm.over_at is not None and not vm.results_due(room.h.now)
    assert vm.results_due(room.h.now + 2 * S)
    assert vm.board(model).hint == "Esc  menu"


def test_a_rematch_is_not_taken_for_the_previous_match_over() -> None:
    """A view-model made for a rematch must not find the earlier match's match_over."""
    room = Room(fixed_decks=(REDS,))
    room.open(settings={"countdown_s": 0.3, "best_of": 1})
    model = room.models["a"]
    _play_out(room)
    assert any(ev.type == "match_over" for ev in model.events)
    for client in ("a", "b"):
        room._deliver(room.h.send(T.req(client), m.Rematch(room.code)))
    assert (model.match_state or {}).get("status") == "playing"
    fresh = TableViewModel()  # what a new table scene makes
    fresh.observe(model, room.h.now)
    assert fresh.over_at is None
    assert not fresh.results_due(room.h.now + 10 * S)
    band = fresh.band(model, "playing", "", "", room.h.now)
    assert band.where == "centre" and band.big in ("1", "GO!")  # the new countdown, not a result
    # the rematch's own end is still seen
    _play_out(room)
    room.tick(0.1)
    fresh.observe(model, room.h.now)
    assert fresh.over_at is not None


# ---------------------------------------------------------------------------------------------------
# the turn-based games


def test_takeaway_whose_turn_legal_cells_reroll_and_the_turn_clock() -> None:
    room = Room()
    room.open("takeaway", {"turn_timer_s": 10})
    room.until(lambda: room.models["a"].state() is not None and room.models["a"].state().phase == "turn")
    state = room.match.state
    cur = state.current
    me_client, other_client = ("a", "b") if cur == 0 else ("b", "a")
    mine, theirs = room.models[me_client], room.models[other_client]
    vm_me, vm_other = TakeawayViewModel("Takeaway Dice"), TakeawayViewModel("Takeaway Dice")
    vm_me.observe(mine, room.h.now)
    vm_other.observe(theirs, room.h.now)
    banner = vm_me.banner(mine, room.h.now + S)
    assert banner.kind == "mine" and banner.big == "YOUR TURN" and "claim" in banner.small
    other = vm_other.banner(theirs, room.h.now + S)
    assert other.kind == "theirs" and other.big == f"{mine.name}'s turn"
    rows = vm_me.rows(mine)
    assert [r.acting for r in rows] == [s == cur for s in range(2)] and rows[cur].name.endswith("(you)")
    legal = vm_me.legal_cells(mine.state(), cur)
    assert legal == {(a.q, a.r) for a in tk.legal_actions(room.match.state, cur) if isinstance(a, tk.ClaimBlink)}
    assert vm_other.legal_cells(theirs.state(), 1 - cur) == set()
    assert vm_me.reroll(mine.state(), cur) == ("Re-roll all dice  (Space)", True)
    assert vm_other.reroll(theirs.state(), 1 - cur) == ("re-roll (on your turn)", False)
    left, total = vm_me.turn_clock(mine, room.h.now)
    later = vm_me.turn_clock(mine, room.h.now + 3 * S)
    assert total == 10 and later is not None and later[0] < left and abs((left - later[0]) - 3) < 0.01
    # a claim: shown pending, then confirmed; the other player hears of it
    q, r = sorted(legal)[0]
    _, send = room.send_held(me_client, tk.ClaimBlink(q, r))
    assert vm_me.pending_cells(mine) == [(q, r)]
    send()
    vm_other.observe(theirs, room.h.now)
    assert vm_me.pending_cells(mine) == []
    assert vm_other.message(room.h.now)[0].startswith(f"{mine.name} claimed a ")
    claimed = vm_me.claimed(mine.state(), cur)
    assert len(claimed) == 1 and claimed[0][1] == str(claimed[0][0])


def test_takeaway_a_refused_claim_says_why_and_marks_the_spot() -> None:
    room = Room()
    room.open("takeaway")
    room.until(lambda: room.models["a"].state() is not None and room.models["a"].state().phase == "turn")
    cur = room.match.state.current
    waiting = room.models["b" if cur == 0 else "a"]
    vm = TakeawayViewModel("Takeaway Dice")
    q, r = tk.free_cells(waiting.state().coords())[0]
    result = waiting.act(tk.ClaimBlink(q, r), room.h.now)
    assert isinstance(result, Rejected)
    vm.refused(tk.ClaimBlink(q, r), result.code, result.detail, room.h.now)
    assert vm.message(room.h.now) == ("✗ it is not your turn", (235, 60, 55, 255))
    assert vm.rejected_now(room.h.now) == tk.ClaimBlink(q, r)
    assert vm.rejected_now(room.h.now + 3 * S) is None
    assert vm.drain_cues() == ["bounce"]


def test_sequence_legal_spaces_and_the_roll() -> None:
    room = Room()
    room.open("sequence")
    room.until(lambda: room.match.state is not None and room.match.state.phase == "move")
    cur = room.match.state.current
    client = "ab"[cur]
    model = room.models[client]
    vm = SequenceViewModel("Sequence Dice")
    vm.observe(model, room.h.now)
    later = room.h.now + 2 * S  # past the dice's tumbling
    state = model.state()
    faces, total_line, tag = vm.dice(state, later)
    assert faces == tuple(state.dice) and total_line == f"total {sum(state.dice)}"
    assert vm.dice(state, room.h.now)[0] is None  # still tumbling right after the roll
    legal = vm.legal_spaces(state, cur, later)
    assert set(legal) == {(a.row, a.col) for a in sq.legal_actions(state, cur)}
    assert vm.legal_spaces(state, 1 - cur, later) == {}
    assert vm.banner(model, later).big == "YOUR TURN" and str(state.total) in vm.banner(model, later).small
    action = legal[sorted(legal)[0]]
    _, send = room.send_held(client, action)
    assert (action.row, action.col) in vm.pending_spaces(model)
    send()
    assert vm.pending_spaces(model) == set()


def test_ryo_builder_refuses_past_the_budget() -> None:
    room = Room()
    room.open("ryo", {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 1})
    room.until(lambda: room.models["a"].state() is not None and room.models["a"].state().phase == "build")
    model = room.models["a"]
    vm = RyoViewModel("Roll Your Own")
    state = model.state()
    faces = list(vm.builder(model, state))
    assert sum(faces) == state.settings.budget and vm.valid(state)
    assert vm.change(model, 0, +1, room.h.now)  # the budget is used up: refused with the reason
    assert vm.faces == faces and vm.message(room.h.now)[0].startswith("the budget is")
    vm.change(model, 0, -1, room.h.now)
    vm.change(model, 5, +1, room.h.now)
    assert vm.faces == [faces[0] - 1] + faces[1:5] + [faces[5] + 1] and vm.valid(state)
    assert vm.banner(model, room.h.now).big == "YOUR TURN"
    room.act("a", vm.build_action())
    assert vm.banner(model, room.h.now).big == "bob's turn"  # the only one still building


def test_ryo_asks_the_round_s_loser_only_once_the_rolls_that_decided_it_have_been_shown() -> None:
    """The relay rolls a whole round in an instant: the state asks the loser to choose at once,
    but the window replays the rolls first and must not say "you lost the round" beside them."""
    room = Room()
    room.open("ryo", {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 1})
    room.until(lambda: room.models["a"].state() is not None and room.models["a"].state().phase == "build")
    vms = {c: RyoViewModel("Roll Your Own") for c in ("a", "b")}
    for c, vm in vms.items():
        vm.observe(room.models[c], room.h.now)
        vm.builder(room.models[c], room.models[c].state())
        room.act(c, vm.build_action())
    room.until(lambda: room.models["a"].state().phase in ("choice", "lower", "over"))
    state = room.models["a"].state()
    if state.phase != "choice":  # a lot or a tie decided it: nothing to ask (rare with these builds)
        pytest.skip(f"the round ended in {state.phase}")
    loser = "a" if state.chooser == 0 else "b"
    vm, model = vms[loser], room.models[loser]
    now = room.h.now
    vm.observe(model, now)  # the round's rolls arrive together
    assert vm.deciding(now)
    banner = vm.banner(model, now)
    assert banner.big.startswith("ROLLING") and "lost the round" not in banner.small
    later = now
    for _ in range(200):  # every roll replayed in turn, each for a moment
        later += NS // 10
        vm.observe(model, later)
        vm.animating(state, later)
        if not vm.deciding(later):
            break
    assert not vm.deciding(later)
    banner = vm.banner(model, later)
    assert banner.big == "YOUR TURN" and "you lost the round" in banner.small


def _turn_words_agree(vm: SequenceViewModel, model: Any, now: int) -> str:
    """The message line's words about a turn agree with the banner and the state: "BONUS TURN for X"
    only while X is to act, "X rolled N: ..." only while X is to act with N rolled. Returns the
    message when it was one of those (else "")."""
    import re

    text, _ = vm.message(now)
    state = model.state()
    banner = vm.banner(model, now)
    if banner.kind == "over":  # the last turn's news may stay beside the result
        return ""
    acting = "you" if banner.big == "YOUR TURN" else banner.big.removesuffix("'s turn")
    bonus = re.fullmatch(r"BONUS TURN for (.+)!", text)
    if bonus:
        assert bonus.group(1) == acting, (text, banner)
        return text
    rolled = re.fullmatch(r"(.+) rolled (\d+): (BONUS|DEFENSIVE|WILD).*", text)
    if rolled:
        assert rolled.group(1) == acting and state.total == int(rolled.group(2)), (text, banner, state.total)
        return text
    return ""


def test_sequence_says_a_turn_s_news_only_during_that_turn() -> None:
    room = Room()
    room.open("sequence", {"max_turns": 300}, seats=3)
    clients = ["a", "b", "c"]
    model = room.models["c"]  # the third seat watches the other two play most turns
    vm = SequenceViewModel("Sequence Dice")
    said: list[str] = []
    turns_after_news = 0
    for _ in range(20_000):
        state = room.match.state
        if state is None or state.phase == "over":
            break
        news_turn = state.turn if said and vm.msg[0] == said[-1] else None
        if state.phase == "move":
            legal = [a for a in sq.legal_actions(state, state.current) if isinstance(a, (sq.PlaceChip, sq.RemoveChip))]
            if legal:
                room.act(clients[state.current], legal[len(legal) // 2])
        room.tick(0.05)
        vm.observe(model, room.h.now)
        words = _turn_words_agree(vm, model, room.h.now)
        if words:
            said.append(words)
        if news_turn is not None and model.state().turn != news_turn:
            turns_after_news += 1
    assert len(said) >= 3, said  # bonus, defensive and wild rolls were announced...
    assert turns_after_news >= 3  # ...and play moved on to the next turn while they were fresh


def test_ryo_says_what_its_numbers_mean_and_a_match_s_last_game_starts_nothing() -> None:
    # the three settings are wins needed, each in its own number
    room = Room()
    room.open("ryo", {"rolls_per_round": 1, "rounds_per_game": 1, "games_per_match": 1}, seats=3)
    room.until(lambda: room.models["a"].state() is not None and room.models["a"].state().phase == "build")
    model = room.models["a"]
    vm = RyoViewModel("Roll Your Own")
    state = model.state()
    where, rules = vm.rules_line(state)
    assert where == "game 1 · round 1"
    assert rules == "first to win 1 roll takes the round, 1 round the game, 1 game the match"
    assert "best" not in where + rules
    assert [r.score for r in vm.rows(model)] == ["0 games won"] * 3
    assert vm.row_text(state, 0) == "won: 0 rolls · 0 rounds   ·   building…"
    bigger = Room()
    bigger.open("ryo", {"rolls_per_round": 6, "rounds_per_game": 2, "games_per_match": 3}, seats=3)
    bigger.until(lambda: bigger.models["a"].state() is not None)
    assert vm.rules_line(bigger.models["a"].state())[1] == \
        "first to win 6 rolls takes the round, 2 rounds the game, 3 games the match"
    # one round is the whole match here: its game is its last, and nothing says "new dice next"
    vms = {c: RyoViewModel("Roll Your Own") for c in ("a", "b", "c")}
    for c, v in vms.items():
        v.observe(room.models[c], room.h.now)
        v.builder(room.models[c], room.models[c].state())
        room.act(c, v.build_action())
    room.until(lambda: model.state().phase == "over")
    now = room.h.now
    said: list[str] = []
    for _ in range(400):  # the rolls replayed, then what the relay said after them
        vm.observe(model, now)
        vm.animating(model.state(), now)
        text, _ = vm.message(now)
        if text and (not said or said[-1] != text):
            said.append(text)
        now += NS // 20
    state = model.state()
    winner = vm.pname(model, state.winner)
    assert f"{winner} won game 1 and the match" in said, said
    assert not any("new dice" in t for t in said), said
    tally = vm.tally(model, state)
    assert tally.startswith("games won  ") and "match over" in tally
    wins = [1 if seat == state.winner else 0 for seat in range(3)]
    assert all(f"{n}: {w}" in tally for n, w in zip(["ann", "bob", "cat"], wins)), tally
    assert [r.score for r in vm.rows(model)] == [f"{w} game{'' if w == 1 else 's'} won" for w in wins]


def test_a_replay_with_no_game_to_show_says_why_and_never_connecting() -> None:
    from tests.test_replay import drive
    from client.window.viewmodels import ReplaySession, load_replay

    def blanks(lines: list[str]) -> set[str]:
        replay = load_replay(lines)
        rs = ReplaySession(replay, name="you")
        vm = TableViewModel()
        said = set()
        for i in range(len(replay)):
            rs.seek(i, 10**18)
            band = vm.band(rs.model, rs.status, rs.message, rs.join_command, 10**18)
            if rs.model.state() is None:
                assert band.sub != "connecting…" and band.sub, (i, band)
                said.add(band.sub)
            else:
                assert rs.message == ""
        return said

    assert blanks(drive("blink", seed=3)[0]) == {"the match has not started yet"}
    # the first game is left: its cards are never revealed, so there is never a game to show
    assert blanks(drive("blink", seed=3, leave_after=5)[0]) == {
        "this game was left before its end: a forfeit never reveals its cards"}


def test_the_join_line_names_a_non_default_prefix_and_a_spectator_of_a_waiting_match_is_told_so() -> None:
    from types import SimpleNamespace

    from client.window import Session, SessionConfig
    from protocol.topics import Topics

    plain = Session(SessionConfig(server_url="mqtt://192.0.2.7:1883", name="you"))
    assert plain.join_command == "blink play --server mqtt://192.0.2.7:1883"
    other = Session(SessionConfig(server_url="mqtt://192.0.2.7:1883", name="you", topics=Topics(prefix="club/v1")))
    assert other.join_command == "blink --prefix club/v1 play --server mqtt://192.0.2.7:1883"

    host = SimpleNamespace(state=lambda: None, match="QDEDJ", spectating=False)
    watcher = SimpleNamespace(state=lambda: None, match="QDEDJ", spectating=True)
    band = TableViewModel().band(host, "waiting", "", other.join_command, 0)
    assert band.sub.endswith("blink --prefix club/v1 play --server mqtt://192.0.2.7:1883 --match QDEDJ")
    band = TableViewModel().band(watcher, "waiting", "", other.join_command, 0)
    assert band.big == "Match code  QDEDJ" and "waiting for the players" in band.sub and "blink" not in band.sub
    for vm in (TakeawayViewModel("Takeaway Dice"), SequenceViewModel("Sequence Dice"), RyoViewModel("Roll Your Own")):
        big, sub = vm.status("waiting", "", other.join_command, host)
        assert sub.endswith("--prefix club/v1 play --server mqtt://192.0.2.7:1883 --match QDEDJ"), sub
        big, sub = vm.status("waiting", "", other.join_command, watcher)
        assert "waiting for the players" in sub and "connecting" not in sub
