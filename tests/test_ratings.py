"""Ratings without accounts, in the judge: proven keys, rated matches, the leaderboard, quick match's
band and the ratings' record -- driven without a broker or a clock."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocol import messages as m
from protocol.codec import encode
from protocol.identity import CHALLENGE_TTL_NS, challenge_message, fingerprint, verify
from protocol.topics import Topics
from relay.core import Publish, RelayConfig, RelayCore
from relay.judge.ratings import Rated
from relay.storage import snapshot

T = Topics()
S = 1_000_000_000
WALL = 1_700_000_000 * S  # the relay's wall clock in these tests


class Key:
    def __init__(self) -> None:
        self.private = Ed25519PrivateKey.generate()
        self.public = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def proof(self, client: str, nonce: int) -> dict[str, Any]:
        return {"key": self.public, "nonce": nonce, "sig": self.private.sign(challenge_message(client, nonce))}


class Relay:
    def __init__(self, core: RelayCore | None = None) -> None:
        self.core = core or RelayCore(T, RelayConfig(), seed=7)
        self.now = 10 * S
        self.out: list[Any] = []
        self.inputs: list[tuple[str, str, bytes, int, int]] = []  # what a journal would hold

    def send(self, client: str, msg: Any) -> list[Any]:
        self.inputs.append(("handle", T.req(client), encode(msg), self.now, self.now + WALL))
        out = self.core.handle(T.req(client), encode(msg), self.now, self.now + WALL)
        self.out.extend(out)
        return out

    def tick(self, dt_s: float) -> None:
        self.now += int(dt_s * S)
        self.inputs.append(("tick", "", b"", self.now, self.now + WALL))
        self.out.extend(self.core.tick(self.now, self.now + WALL))

    def to(self, client: str, out: list[Any] | None = None) -> list[Any]:
        return [o.msg for o in (self.out if out is None else out)
                if isinstance(o, Publish) and o.topic == T.client(client)]

    def challenge(self, client: str) -> int:
        out = self.send(client, m.Challenge())
        return next(x for x in self.to(client, out) if isinstance(x, m.Challenged)).nonce

    def proof(self, client: str, key: Key | None) -> dict[str, Any]:
        return {} if key is None else key.proof(client, self.challenge(client))

    def forfeit_match(self, a: tuple[str, Key | None], b: tuple[str, Key | None], names: tuple[str, str] = ("ann", "bob"),
                      game: str = "blink") -> str:
        """a opens a match, b joins, the game starts, b leaves: a wins by forfeit."""
        (ca, ka), (cb, kb) = a, b
        out = self.send(ca, m.CreateMatch(name=names[0], game=game, **self.proof(ca, ka)))
        code = next(x for x in self.to(ca, out) if isinstance(x, m.MatchJoined)).match
        self.send(cb, m.JoinMatch(name=names[1], match=code, **self.proof(cb, kb)))
        self.tick(3.01)
        self.send(cb, m.Leave(code))
        assert self.core.matches[code].status == "over"
        return code


def test_the_signature_covers_the_client_and_the_nonce() -> None:
    k = Key()
    p = k.proof("c1", 5)
    assert verify(p["key"], p["sig"], challenge_message("c1", 5))
    assert not verify(p["key"], p["sig"], challenge_message("c2", 5))
    assert not verify(p["key"], p["sig"], challenge_message("c1", 6))
    assert not verify(Key().public, p["sig"], challenge_message("c1", 5))
    assert not verify(b"short", p["sig"], challenge_message("c1", 5))
    assert not verify(p["key"], b"\x00" * 64, challenge_message("c1", 5))
    assert len(fingerprint(k.public)) == 8


def test_the_challenge_is_the_relays_wall_clock() -> None:
    r = Relay()
    assert r.challenge("c1") == r.now + WALL


def test_a_forfeit_is_rated_as_a_loss_and_both_hear_their_change() -> None:
    r = Relay()
    ka, kb = Key(), Key()
    code = r.forfeit_match(("ca", ka), ("cb", kb))
    match = r.core.matches[code]
    assert [s.key for s in match.players] == [ka.public, kb.public]
    board = r.core.leaderboard("blink")
    assert [(row["name"], row["key"], row["matches"]) for row in board] == [
        ("ann", fingerprint(ka.public), 1), ("bob", fingerprint(kb.public), 1)]
    assert board[0]["rating"] > board[1]["rating"]
    up = next(x for x in r.to("ca") if isinstance(x, m.RatingChanged))
    down = next(x for x in r.to("cb") if isinstance(x, m.RatingChanged))
    assert (up.match, up.game, up.matches) == (code, "blink", 1)
    assert up.after > up.before and down.after < down.before
    assert up.before == down.before == 0.0  # a new player stands at mu - 3 sigma = 0


def test_the_leaderboard_answers_a_ratings_request() -> None:
    r = Relay()
    ka, kb = Key(), Key()
    for _ in range(3):
        r.forfeit_match(("ca", ka), ("cb", kb))
    out = r.send("q", m.Ratings(game="blink", limit=1))
    board = next(x for x in r.to("q", out) if isinstance(x, m.RatingBoard))
    assert board.game == "blink" and board.players == 2
    assert [row["key"] for row in board.rows] == [fingerprint(ka.public)]
    assert board.rows[0]["matches"] == 3
    # another game has nobody rated yet; an asked limit is capped
    out = r.send("q", m.Ratings(game="takeaway", limit=10_000))
    empty = next(x for x in r.to("q", out) if isinstance(x, m.RatingBoard))
    assert (empty.rows, empty.players) == ((), 0)


def test_a_join_whose_signature_does_not_match_its_key_is_refused() -> None:
    r = Relay()
    ka, thief = Key(), Key()
    nonce = r.challenge("cx")
    forged = {"key": ka.public, "nonce": nonce, "sig": thief.private.sign(challenge_message("cx", nonce))}
    out = r.send("cx", m.CreateMatch(name="ann", **forged))
    refusal = next(x for x in r.to("cx", out) if isinstance(x, m.RequestRejected))
    assert refusal.code == "bad_signature"
    assert not r.core.matches
    # a proof made for another client id is no proof for this one
    out = r.send("cy", m.QuickMatch(name="ann", **ka.proof("cx", nonce)))
    assert next(x for x in r.to("cy", out) if isinstance(x, m.RequestRejected)).code == "bad_signature"
    # nor is one over an old challenge
    old = r.now + WALL - CHALLENGE_TTL_NS - S
    out = r.send("cx", m.JoinMatch(name="ann", match="ABCDE", **ka.proof("cx", old)))
    assert next(x for x in r.to("cx", out) if isinstance(x, m.RequestRejected)).code == "stale_challenge"


def test_a_match_with_an_unrated_seat_is_not_rated() -> None:
    r = Relay()
    r.forfeit_match(("ca", Key()), ("cb", None))
    assert r.core.leaderboard("blink") == []
    assert not any(isinstance(x, m.RatingChanged) for x in r.to("ca"))
    # nor is a key playing itself
    k = Key()
    r.forfeit_match(("ca", k), ("cb", k))
    assert r.core.leaderboard("blink") == []


def test_ratings_are_per_game() -> None:
    r = Relay()
    ka, kb = Key(), Key()
    r.forfeit_match(("ca", ka), ("cb", kb), game="takeaway")
    assert r.core.leaderboard("blink") == []
    assert len(r.core.leaderboard("takeaway")) == 2


def test_a_stolen_name_is_worn_with_the_thiefs_fingerprint() -> None:
    r = Relay()
    quick, slow, thief = Key(), Key(), Key()
    r.forfeit_match(("ca", quick), ("cb", slow), names=("quick", "slow"))
    code = r.forfeit_match(("cc", thief), ("cb", slow), names=("quick", "slow"))
    assert r.core.matches[code].names == (f"quick~{fingerprint(thief.public)[:4]}", "slow")
    code = r.forfeit_match(("cd", None), ("ce", None), names=("quick", "anyone"))
    assert r.core.matches[code].names == ("quick~anon", "anyone")
    rows = {row["key"]: row for row in r.core.leaderboard("blink")}
    assert rows[fingerprint(quick.public)]["name"] == "quick"
    assert rows[fingerprint(quick.public)]["matches"] == 1  # the thief's win is its own
    assert rows[fingerprint(thief.public)]["matches"] == 1


def test_quick_match_pairs_the_closest_rating_in_the_band_and_never_keeps_anyone_waiting() -> None:
    r = Relay()
    keys = {c: Key() for c in ("w1", "w2", "w3", "new")}
    table = r.core.ratings.games.setdefault("blink", {})
    for client, rating in (("w1", 0.0), ("w2", 20.0), ("w3", 11.0), ("new", 19.0)):
        table[keys[client].public] = Rated(name=client, mu=rating + 3 * 5.0, sigma=5.0, matches=4)
    # three quick matches wait (opened one after the other), as several shards' worth of players might
    codes = {}
    for client in ("w1", "w2", "w3"):
        out: list[Any] = []
        match = r.core.lobby.create(client, client, "blink", {}, 2, True, r.now, out, keys[client].public)
        assert match is not None
        codes[client] = match.code
        r.now += S
    # the newcomer rated 19 takes w2 (20): the closest, within the band
    r.send("new", m.QuickMatch(name="new", **r.proof("new", keys["new"])))
    assert r.core.client_match["new"] == codes["w2"]


def test_quick_match_band_widens_as_a_match_waits() -> None:
    r = Relay()
    keys = {c: Key() for c in ("w1", "w2", "new")}
    table = r.core.ratings.games.setdefault("blink", {})
    for client, rating in (("w1", 0.0), ("w2", 30.0), ("new", 10.0)):
        table[keys[client].public] = Rated(name=client, mu=rating + 15.0, sigma=5.0, matches=4)
    codes = {}
    for client in ("w1", "w2"):
        match = r.core.lobby.create(client, client, "blink", {}, 2, True, r.now, [], keys[client].public)
        assert match is not None
        codes[client] = match.code
    w1 = r.core.matches[codes["w1"]]
    assert r.core.lobby.band(w1, r.now) == pytest.approx(3.0)
    # 10 apart from w1: beyond its band at first, within it after 14 s of waiting
    r.now += 14 * S
    assert r.core.lobby.band(w1, r.now) >= 10.0
    r.send("new", m.QuickMatch(name="new", **r.proof("new", keys["new"])))
    assert r.core.client_match["new"] == codes["w1"]


def test_quick_match_out_of_every_band_still_pairs_at_once() -> None:
    r = Relay()
    far, new = Key(), Key()
    table = r.core.ratings.games.setdefault("blink", {})
    table[far.public] = Rated(name="far", mu=60.0, sigma=1.0, matches=40)
    table[new.public] = Rated(name="new", mu=25.0, sigma=8.0, matches=1)
    r.send("far", m.QuickMatch(name="far", **r.proof("far", far)))
    r.send("new", m.QuickMatch(name="new", **r.proof("new", new)))
    # out of the band, but the only one waiting: paired now, as quick match always has
    assert r.core.client_match["new"] == r.core.client_match["far"]
    # unrated players pair as they always did: the first waiting
    r.send("u1", m.QuickMatch(name="u1"))
    r.send("u2", m.QuickMatch(name="u2"))
    assert r.core.client_match["u1"] == r.core.client_match["u2"]


def _rated_relay() -> tuple[Relay, Key, Key]:
    r = Relay()
    ka, kb = Key(), Key()
    for _ in range(2):
        r.forfeit_match(("ca", ka), ("cb", kb))
    return r, ka, kb


def test_ratings_survive_a_snapshot() -> None:
    r, ka, kb = _rated_relay()
    back = snapshot.load(snapshot.dump(r.core))
    assert back.leaderboard("blink") == r.core.leaderboard("blink")
    assert back.refused_on_load() == []
    # and go on from where they were: a third match counts as the third
    r2 = Relay(back)
    r2.now = r.now
    r2.forfeit_match(("ca", ka), ("cb", kb))
    assert [row["matches"] for row in back.leaderboard("blink")] == [3, 3]


def _tampered(blob: bytes, change: Any) -> bytes:
    """The snapshot blob with its ratings record changed by ``change(record)``."""
    head = len(snapshot.MAGIC) + 2
    record = msgpack.unpackb(blob[head:], raw=False, strict_map_key=False)
    change(record)
    return blob[:head] + msgpack.packb(record, use_bin_type=True)


def test_a_tampered_ratings_row_is_refused_in_one_line_and_the_others_stay() -> None:
    r, ka, kb = _rated_relay()
    blob = snapshot.dump(r.core)

    def raise_ann(record: Any) -> None:
        rows = record["core"]["ratings"]["blink"] if "core" in record else record["ratings"]["blink"]
        row = next(x for x in rows if x[0] == ka.public)
        row[2] += 10.0  # a better rating, without the relay's check

    back = snapshot.load(_tampered(blob, raise_ann))
    refused = back.refused_on_load()
    assert len(refused) == 1 and fingerprint(ka.public) in refused[0] and "\n" not in refused[0]
    assert [row["key"] for row in back.leaderboard("blink")] == [fingerprint(kb.public)]
    # the relay goes on: the tampered player plays again, as a new player
    r2 = Relay(back)
    r2.now = r.now
    r2.forfeit_match(("ca", ka), ("cb", kb))
    rows = {row["key"]: row["matches"] for row in back.leaderboard("blink")}
    assert rows == {fingerprint(ka.public): 1, fingerprint(kb.public): 3}


@pytest.mark.parametrize("garbage", [None, 7, "x", {"blink": 3}, {"blink": [[1, 2]]}, {"blink": [["k"] * 6]},
                                     {3: []}])
def test_a_ratings_record_of_any_shape_never_crashes_the_load(garbage: Any) -> None:
    r, _, _ = _rated_relay()

    def replace(record: Any) -> None:
        target = record["core"] if "core" in record else record
        target["ratings"] = garbage

    back = snapshot.load(_tampered(snapshot.dump(r.core), replace))
    assert back.leaderboard("blink") == []
    assert all("\n" not in line for line in back.refused_on_load())
    assert back.refused_on_load()


def test_a_replayed_core_rates_as_the_live_one() -> None:
    ka, kb = Key(), Key()
    live = Relay()
    live.forfeit_match(("ca", ka), ("cb", kb))
    live.forfeit_match(("ca", ka), ("cb", kb))
    replayed = RelayCore(T, RelayConfig(), seed=7)
    replayed.replaying = True
    for entry in live.inputs:
        if entry[0] == "handle":
            replayed.handle(entry[1], entry[2], entry[3], entry[4])
        else:
            replayed.tick(entry[3], entry[4])
    del replayed.replaying
    assert replayed.ratings.games == live.core.ratings.games
    assert replayed.leaderboard("blink") == live.core.leaderboard("blink") != []


def test_the_player_keeps_its_rating_change_for_the_results_screen() -> None:
    from client import ClientModel
    from client.results import rating_line

    model = ClientModel("c1", "ann")
    model.match = "ABCDE"
    model.on_message(m.RatingChanged(match="OTHER", game="blink", before=0.0, after=1.0, matches=1), 0)
    assert model.rating is None  # another match's
    change = m.RatingChanged(match="ABCDE", game="blink", before=1.5, after=0.25, matches=2)
    model.on_message(change, 0)
    assert model.rating == change
    assert rating_line(change.before, change.after, change.matches) == "your rating 1.50 → 0.25 (-1.25) · 2 rated matches"
    assert rating_line(0.0, 3.44, 1).endswith("(+3.44) · 1 rated match")
    model.on_message(m.Challenged(nonce=42), 0)
    assert model.challenge == 42


def test_a_players_key_signs_what_the_relay_checks(tmp_path: Any) -> None:
    from client.identity import bot_identity_path, identity_path, load_identity

    ann = load_identity(tmp_path / "ann.key")
    r = Relay()
    proof = ann.prove("c1", r.challenge("c1"))
    out = r.send("c1", m.CreateMatch(name="ann", **proof))
    joined = next(x for x in r.to("c1", out) if isinstance(x, m.MatchJoined))
    assert r.core.matches[joined.match].players[0].key == ann.public
    # one file per name, one per bot difficulty; odd names make plain file names
    assert identity_path("ann").name == "ann.key"
    assert identity_path("a/b c").name.startswith("a_b_c-")
    assert bot_identity_path(0.35).name == "bot-0.35s.key"


def test_a_full_leaderboard_fits_the_brokers_payload_limit() -> None:
    r = Relay()
    table = r.core.ratings.games.setdefault("blink", {})
    for i in range(m.RATING_ROWS + 5):
        table[bytes([i]) * 32] = Rated(name="\U0001f4a5" * 24, mu=-123.456789 * (i + 1), sigma=7.123456789,
                                      matches=1_000_000 + i)
    out = r.send("q", m.Ratings(game="blink", limit=10_000))
    board = next(o for o in out if isinstance(o, Publish) and isinstance(o.msg, m.RatingBoard))
    assert len(board.msg.rows) == m.RATING_ROWS and board.msg.players == m.RATING_ROWS + 5
    assert len(encode(board.msg)) <= RelayConfig().max_payload
