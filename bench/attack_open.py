"""An attacker with full read and write access on a broker that enforces nothing, against
``blink serve --broker URL`` with and without ``--seal`` (``bench/attack.py --broker open [--seal]``).

How this works
--------------
The broker is Mosquitto with ``allow_anonymous true`` and no access rules: what a public MQTT broker
is. ``blink serve --broker mqtt://127.0.0.1:PORT --no-journal`` (and ``--seal``) runs on it; the players
connect with the URL it prints (with ``?pin=`` when sealed). A *victim* (a bot reacting in
``--victim-reaction`` seconds, 4 by default: a slow player) creates a BLINK match and an
*opponent* bot joins it. *Eve* subscribes to ``#`` for the whole match, learns the victim's client id
and match from the topics she sees, and does everything a reader and writer of every topic can:

- reads every private message she can decode (hands, verdicts, seat tokens): each is counted;
- keeps a model of the victim's view from what she reads and plays for the victim's seat with it,
  every ``FORGE_EVERY_S``, as plain ``Act``s on the victim's action topic and, when the relay
  seals, sealed with a key of her own ("a play signed for another seat");
- replays every sealed play of the victim she sees, and sends it cut and altered; replays what the
  relay said to the victim; puts the opponent's plays on the victim's action topic;
- floods the victim's action topic with junk plays (``FLOOD_PER_S`` a second), which on an open
  relay spends the victim's rate;
- forges the relay: a ``match_over`` naming her the winner on the match's events, a snapshot, an
  offline status -- plain, and signed with a relay key of her own.

Counted at the end: ``private_read`` (messages on other clients' private topics Eve decoded),
``tokens_read`` (seat tokens among them), ``forged_plays_accepted`` (plays the relay applied for the
victim's seat, from its event log, beyond the victim's own accepted plays), ``victim_plays``,
``victim_rate_limited`` (the victim's plays refused ``rate_limited``), ``forged_relay_accepted``
(forged events, snapshots or statuses the victim's client took). ``ok``: Eve got nothing and the
match finished with a valid log. Exit status 0 if ok.

Run:  .venv/bin/python bench/attack.py --broker open            # the relay as it was: the attacker wins
      .venv/bin/python bench/attack.py --broker open --seal     # blink serve --seal: nothing
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiomqtt

from bench.benchkit import find_mosquitto
from bench.fuzz import Stack
from client import Bot, ClientModel, Player, RandomChance, new_client_id
from mqttkit import BrokerAddress, free_port, parse_url
from protocol import messages as m
from protocol.codec import DecodeError, decode_all, encode
from protocol.events import logged_event
from protocol.rules import blink, game_for
from protocol.seal import (MAGIC, ClientSeal, RelayIdentity, RelaySeal, SealError, fingerprint, is_sealed)
from protocol.topics import Topics

T = Topics()
FORGE_EVERY_S = 0.1
FLOOD_PER_S = 150
SETTINGS = {"best_of": 1}
MATCH_TIMEOUT_S = 240.0


class OpenMosquitto:
    """Mosquitto on a free loopback port with ``allow_anonymous true`` and no access rules."""

    def __init__(self) -> None:
        binary = find_mosquitto()
        if binary is None:
            raise RuntimeError("mosquitto is not installed")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="blink-open-mosq-"))
        self.dir.chmod(0o755)  # started as root, Mosquitto drops to its own user
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        conf = self.dir / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\n")
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        import socket

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def player_url(stack: Stack) -> str:
    """The URL ``blink serve`` printed for players (its lines after "running")."""
    assert stack.relay is not None and stack.relay.stdout is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = stack.relay.stdout.readline().decode()
        if "players connect with" in line:
            return line.rsplit(" ", 1)[1].strip()
        if line.startswith("blink relay data"):
            if "--seal" not in stack.serve_args:
                return stack.client_url
    raise RuntimeError("blink serve printed no URL for players")


class Eve:
    """The attacker (see the module header): one MQTT connection reading and writing every topic."""

    def __init__(self, address: BrokerAddress, seed: int) -> None:
        self.id = new_client_id("eve")
        self.address = address
        self.client = aiomqtt.Client(address.host, address.port, identifier=self.id)
        self.rng = random.Random(seed)
        self.got: list[tuple[str, bytes]] = []
        self.private_read = 0
        self.tokens: set[str] = set()
        self.victim: str | None = None
        self.match: str | None = None
        self.model: ClientModel | None = None  # the victim's view, from what Eve can read
        self.victim_acts: list[bytes] = []  # the victim's plays as sent (sealed or not)
        self.replayed = self.scanned = 0
        self.mine: set[bytes] = set()  # what she published herself
        self.sent: Counter[str] = Counter()
        self.seal: ClientSeal | None = None  # a key of her own, keyed from the relay's public status
        self._status: tuple[str, bytes] | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Eve:
        await self.client.__aenter__()
        await self.client.subscribe("#", qos=0)
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await asyncio.wait_for(self.client.__aexit__(None, None, None), 5)
        except Exception:  # noqa: BLE001 - closing
            pass

    def follow(self, victim: str, match: str) -> None:
        """The victim's client id and match: both on the topics she reads (checked in ``saw_victim``)."""
        self.victim, self.match = victim, match
        self.model = ClientModel(victim, "victim")
        self.model.next_id = 1_000_000  # her own ids, apart from the victim's
        for topic, payload in list(self.got):
            self._learn(topic, payload)

    def saw_victim(self) -> bool:
        return any(self.victim is not None and t.endswith("/" + self.victim) for t, _ in self.got)

    async def _read(self) -> None:
        async for msg in self.client.messages:
            payload = bytes(msg.payload) if isinstance(msg.payload, (bytes, bytearray)) else b""
            topic = msg.topic.value
            self.got.append((topic, payload))
            if topic.startswith(f"{T.prefix}/c/") and not topic.endswith("/" + self.id) and payload:
                try:
                    for x in decode_all(payload):
                        self.private_read += 1
                        if isinstance(x, m.MatchJoined) and x.token:
                            self.tokens.add(x.token)
                except DecodeError:
                    pass
            if topic.startswith(f"{T.prefix}/relay/") and topic.endswith("/status") and is_sealed(payload) \
                    and payload not in self.mine:
                self._status = (topic, payload)
            self._learn(topic, payload)

    def _learn(self, topic: str, payload: bytes) -> None:
        if self.model is None or self.victim is None or not payload:
            return
        if topic.endswith(f"/act/{self.victim}"):
            if payload not in self.mine:  # (her own, read back)
                self.victim_acts.append(payload)
            return
        if topic == T.client(self.victim) or (self.match is not None and topic.endswith(f"/{self.match}/ev")):
            if is_sealed(payload) and payload[1:2] == b"S":
                payload = payload[10:-64]  # a signed message hides nothing: its body is readable
            try:
                msgs = decode_all(payload)
            except DecodeError:
                return
            for x in msgs:
                self.model.on_message(x, time.time_ns())

    async def publish(self, topic: str, payload: bytes, what: str, retain: bool = False) -> None:
        self.sent[what] += 1
        self.mine.add(payload)
        try:
            await self.client.publish(topic, payload, qos=0, retain=retain)
        except aiomqtt.MqttError:
            pass

    def _own_seal(self) -> ClientSeal | None:
        """A key of her own, keyed from the relay's status (public: anyone can take its keys)."""
        if self.seal is None and self._status is not None:
            topic, data = self._status
            pin = fingerprint(data[18:50], data[50:82])
            seal = ClientSeal(os.urandom(32), pin)
            try:
                seal.open_status(topic, data)
            except SealError:
                return None
            self.seal = seal
        return self.seal

    async def forge_plays(self, stop: asyncio.Event) -> None:
        """Plays for the victim's seat from her model of its view, and replays of its own."""
        assert self.victim is not None and self.match is not None and self.model is not None
        topic = T.act(self.match, self.victim)
        chance = RandomChance(self.rng)
        while not stop.is_set():
            model = self.model
            state, seat, rules = model.state(), model.seat, model.rules
            act: m.Act | None = None
            if state is not None and seat is not None and rules is not None:  # she knows the hand
                action = rules.bot_action(state, seat, chance)
                made = model.act(action, time.time_ns()) if action is not None else None
                act = made if isinstance(made, m.Act) else None
                if act is not None:
                    await self.publish(topic, encode(act), "forged_plain")
            own = self._own_seal()
            if own is not None:  # a play sealed with her own key: not the victim's
                guess = act or m.Act(id=3_000_000 + self.sent["forged_own_key"], seq=0,
                                     action={"t": "PlayCard", "v": 1, "card": "1-red-moon", "pile": 0})
                await self.publish(topic, own.seal(topic, encode(guess)), "forged_own_key")
            # What the relay said to the victim, said again; another player's play, put on the victim's topic.
            for t, payload in self.got[self.scanned:]:
                self.scanned += 1
                if not payload or payload in self.mine:
                    continue
                if t == T.client(self.victim):
                    await self.publish(t, payload, "replayed_private")
                elif f"/{self.match}/act/" in t and not t.endswith("/" + self.victim):
                    await self.publish(topic, payload, "other_players_play")
            for payload in self.victim_acts[self.replayed:]:
                self.replayed += 1
                await self.publish(topic, payload, "replayed")
                await self.publish(topic, payload, "replayed")
                altered = bytearray(payload)
                altered[-1] ^= 0x40
                await self.publish(topic, bytes(altered), "altered")
                await self.publish(topic, payload[: len(payload) // 2], "cut")
            await asyncio.sleep(FORGE_EVERY_S)

    async def flood(self, stop: asyncio.Event) -> None:
        """Junk plays on the victim's action topic, faster than its rate (plain, and sealed ones)."""
        assert self.victim is not None and self.match is not None
        topic = T.act(self.match, self.victim)
        n = 0
        batch = max(1, FLOOD_PER_S // 20)
        while not stop.is_set():
            for _ in range(batch):
                n += 1
                act = encode(m.Act(id=2_000_000 + n, seq=0, action={"t": "PlayCard", "v": 1,
                                                                     "card": "1-red-moon", "pile": n % 2}))
                if self.victim_acts and n % 2:
                    act = bytes((MAGIC,)) + self.victim_acts[-1][1:]  # a replay of its latest, once more
                await self.publish(topic, act, "flood")
            await asyncio.sleep(0.05)

    async def forge_relay(self) -> None:
        """The relay's voice, plain and signed with a relay key of her own."""
        assert self.match is not None
        code = self.match
        evil = RelaySeal(RelayIdentity(os.urandom(32), os.urandom(32)), os.urandom(8), time.time_ns())
        over = encode(m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"}))
        snap = encode(m.Snapshot(code, 100000, time.time_ns(), 0, "over", ("EVIL",), {}, {}, "blink"))
        status = encode(m.RelayStatus("relay-0", False))
        for topic, payload in ((T.ev(code), over), (T.snap(code), snap), (T.relay_status("relay-0"), status)):
            await self.publish(topic, payload, "forged_relay_plain")
            signed = evil.status(topic, payload) if topic.endswith("/status") else evil.sign(topic, payload)
            await self.publish(topic, signed, "forged_relay_signed")
        # The relay's own last event bundle, replayed: harmless by seq, and signed by the relay.
        real = [p for t, p in self.got if t == T.ev(code)]
        if real:
            await self.publish(T.ev(code), real[-1], "replayed_event")


def victim_seat_plays(records: list[dict[str, Any]], match: str, seat: int) -> int:
    """Plays the relay applied for ``seat`` of ``match``: its action events in the relay's log."""
    plays = (blink.CardPlayed, blink.CardDrawn, blink.PickMade)
    return sum(1 for r in records if r.get("kind") == "event" and r.get("match") == match
               and isinstance(what := blink.EVENTS.read(logged_event(r)), plays) and what.player == seat)


async def run(stack: Stack, url: str, seed: int, victim_reaction: float = 4.0,
              opponent_reaction: float = 0.5) -> dict[str, Any]:
    address = parse_url(url)
    statuses_off: list[m.RelayStatus] = []
    forged_seen: list[str] = []
    victim = Player(address, "victim", T)
    opponent = Player(address, "opponent", T)
    base = victim._on_message

    def victim_hears(msg: Any, now_ns: int) -> None:
        if isinstance(msg, m.RelayStatus) and not msg.online:
            statuses_off.append(msg)
        if isinstance(msg, (m.Event, m.Snapshot)) and (msg.seq >= 100000 or "EVIL" in json.dumps(
                getattr(msg, "data", None) or getattr(msg, "players", ()), default=str)):
            forged_seen.append(type(msg).__name__)
        base(msg, now_ns)

    victim.conn.on_message = victim_hears
    stop = asyncio.Event()
    started = time.monotonic()
    async with Eve(address, seed) as eve, victim, opponent:
        code = await victim.create("blink", SETTINGS)
        await opponent.join(code)
        eve.follow(victim.client_id, code)
        bots = [Bot(victim, reaction_s=victim_reaction, seed=seed), Bot(opponent, reaction_s=opponent_reaction,
                                                                        seed=seed + 1)]
        tasks = [asyncio.create_task(b.run()) for b in bots]
        attacks = [asyncio.create_task(eve.forge_plays(stop)), asyncio.create_task(eve.flood(stop))]
        await asyncio.sleep(2.0)
        await eve.forge_relay()
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), MATCH_TIMEOUT_S)
        except asyncio.TimeoutError:
            timed_out = True
        stop.set()
        await asyncio.gather(*attacks, return_exceptions=True)
        await asyncio.sleep(1.0)  # the last answers and events
        seen_victim = eve.saw_victim()
        accepted = {v.id for v in victim.model.verdicts if v.ok}
        limited = sum(1 for v in victim.model.verdicts if v.code == "rate_limited")
        unanswered = sum(1 for v in victim.model.verdicts if v.code == "no_answer")
        seat = victim.model.seat or 0
        over = victim.match_over()
        winner = victim.model.match_state.get("winner")
    seconds = time.monotonic() - started
    records = stack.records()
    applied = victim_seat_plays(records, code, seat)
    forged = max(0, applied - len(accepted))
    # The relay answers a flood once a burst (``rate_limited``) and drops the rest unanswered.
    limited_bursts = sum(1 for r in records if r.get("kind") == "bad_input" and r.get("code") == "rate_limited"
                         and r.get("client") == victim.client_id)
    result = {
        "broker": "open",
        "seal": "--seal" in stack.serve_args,
        "url": url,
        "match": code,
        "match_over": over and not timed_out,
        "winner": winner,
        "seconds": round(seconds, 1),
        "victim_reaction_s": victim_reaction,
        "eve_saw_the_victims_id_on_a_topic": seen_victim,
        "private_read": eve.private_read,
        "tokens_read": len(eve.tokens),
        "victim_plays": len(accepted),
        "victim_seat_plays_applied": applied,
        "forged_plays_accepted": forged,
        "victim_rate_limited": limited,
        "victim_rate_limited_bursts": limited_bursts,
        "victim_plays_unanswered": unanswered,
        "forged_relay_accepted": len(forged_seen) + len(statuses_off),
        "eve_sent": dict(eve.sent),
        "relay_alive": stack.alive(),
        "relay_internal_errors": sum(1 for r in records if r.get("code") == "internal_error"),
    }
    result["ok"] = bool(result["match_over"] and result["relay_alive"] and not result["relay_internal_errors"]
                        and seen_victim and not eve.private_read and not eve.tokens and not forged and not limited
                        and not limited_bursts and not result["forged_relay_accepted"])
    return result


def main(seal: bool, seed: int) -> int:
    broker = OpenMosquitto()
    broker.start()
    stack = Stack("open", broker_url=broker.url, seed=seed,
                  serve_args=("--no-journal", *(("--seal",) if seal else ())))
    try:
        stack.start()
        url = player_url(stack)
        result = asyncio.run(run(stack, url, seed))
    finally:
        stack.stop()
        broker.stop()
    result["command"] = ".venv/bin/python bench/attack.py --broker open" + (" --seal" if seal else "")
    if result["ok"]:
        shutil.rmtree(stack.dir, ignore_errors=True)
    else:
        result["kept"] = str(stack.dir)
    print(json.dumps(result))
    return 0 if result["ok"] else 1
