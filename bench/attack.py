"""Attacks on the access rules, run as an attacker would, against ``blink serve`` during a bot match.

How this works
--------------
``bench/fuzz.py``'s ``Stack`` starts the relay as a person would: ``blink serve --embedded``, plain
``blink serve`` (which runs an installed Mosquitto with its generated configuration, else the
embedded broker), or Mosquitto as ``blink broker-config`` writes it (the shipped ACL, a relay password, the size
limits) with ``blink serve --broker``. A bot match (``blink match``, two bots, best of 3) plays
meanwhile; a *victim* -- a real client (``client.net.Connection``) waiting in a match it created --
stands for a player whose client id leaked, the worst case. Each attack is a plain MQTT client
(aiomqtt) that knows the protocol and the topic layout, and each says whether the attacker got
anything:

- ``hash_subscriber``: ``#`` and the wildcards over private, request and action topics, held for
  the whole match: any message on a private, request or action topic but its own is a win;
- ``read_victims_private_topic``: subscribes to the victim's private topic while the victim is answered;
- ``publish_on_victims_topics``: ``Leave``, ``Ping`` and ``Act`` on the victim's request and action
  topics: the victim being answered for any of them (or losing its seat) is a win;
- ``take_over_victims_id``: CONNECT under the victim's id while it is connected (no credentials);
- ``relay_login_without_secret``: user ``relay`` with no, an empty or a guessed password;
- ``connect_as_old_relay_id``: CONNECT as ``blink-relay-0`` (a fixed, guessable relay id; the relay's
  own id is random per start); the relay must still answer afterwards;
- ``forged_match_over`` and ``forged_retained_snapshot`` on the bot match's topics: a spectator
  (and the bots' result) must never see them, a newcomer must get only the relay's snapshot;
- ``payload_10mb``: the broker must cut the sender off; nothing may reach the relay;
- ``huge_deck_create``: a ``CreateMatch`` asking for a 10^6-card deck is refused (time to the answer
  reported);
- ``create_flood``: 2,000 ``CreateMatch`` from one client: at most ``max_open_per_client`` matches.

Then: the bot match's result and public log are checked (``tests/logcheck.py``), the relay must be
alive with no ``internal_error`` in its log. One JSON object: each attack's ``attacker_won`` and
detail, the match, the relay's log codes; ``ok`` if every attack failed, except the ones listed in
``known_limits`` for that broker (said there, with the reason). Exit status 0 if ok.

``--broker nats`` attacks a NATS cluster as the README's scale-out section sets it up: ``blink
cluster up`` (three nodes, its authorization: the relay's password, each player its own topics by
the relays' auth callout), one relay (``blink serve --broker ... --cluster ... --password-file``,
logged in on node 1), and the players -- victim, bots and attackers alike -- on node 3.

Run:  .venv/bin/python bench/attack.py --broker embedded
      .venv/bin/python bench/attack.py --broker serve      # the broker plain `blink serve` chooses
      .venv/bin/python bench/attack.py --broker mosquitto
      .venv/bin/python bench/attack.py --broker nats       # needs pip install -e '.[cluster]'
      .venv/bin/python bench/attack.py --broker open [--seal]   # a broker that enforces nothing (bench/attack_open.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiomqtt  # noqa: E402

from bench.benchkit import find_mosquitto  # noqa: E402
from bench.fuzz import Stack, _die_with_parent, bot_matches, ping_relay, rss_kb  # noqa: E402
from client import Connection, new_client_id  # noqa: E402
from mqttkit import BrokerAddress  # noqa: E402
from protocol import messages as m  # noqa: E402
from protocol.codec import decode_all, encode  # noqa: E402
from protocol.topics import Topics  # noqa: E402

T = Topics()
WAIT_S = 60.0
#: What a broker does not stop, by design, with the reason (each design says why).
KNOWN_LIMITS = {
    "mosquitto": {"take_over_victims_id": "MQTT lets a new CONNECT under a client id take over the session; "
                  "Mosquitto has no hook to refuse it without per-player credentials. Client ids are "
                  "128-bit secrets never published, so this needs a leaked id (README)."},
    "embedded": {},
    "nats": {"take_over_victims_id": "MQTT lets a new CONNECT under a client id take over the session; the "
             "relays' auth callout grants a connection its own client id's topics and cannot tell a leaked id "
             "from a player reconnecting. Client ids are 128-bit secrets never published, so this needs a "
             "leaked id (README)."},
}
#: Plain ``blink serve`` runs an installed Mosquitto, else the embedded broker: the limits of the one it runs.
KNOWN_LIMITS["serve"] = dict(KNOWN_LIMITS["mosquitto" if find_mosquitto() else "embedded"])


class NatsStack(Stack):
    """A 3-node ``blink cluster up`` (with its authorization) and one ``blink serve --cluster`` relay on
    it, with the interface of ``bench.fuzz.Stack``: ``port`` is node 3's MQTT port, where the players
    (and the attackers) connect; the relay logs in on node 1."""

    SHARDS = 2
    READY_S = 180.0

    def __init__(self, seed: int = 1, workdir: Path | None = None) -> None:
        import tempfile

        super().__init__("nats", seed=seed, workdir=Path(workdir or tempfile.mkdtemp(prefix="blink-attack-nats-")))
        self.cluster_dir = self.dir / "nats"

    def start(self) -> None:
        blink = [sys.executable, "-m", "client.cli"]
        up = subprocess.run([*blink, "cluster", "up", "--nodes", "3", "--dir", str(self.cluster_dir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=self.READY_S)
        if up.returncode != 0:
            raise RuntimeError(f"blink cluster up failed: {up.stderr.strip()}")
        info = json.loads(up.stdout)
        self.port = int(info["mqtt"][2].rsplit(":", 1)[1])
        out = self.dir / "relay.out"
        self.relay = subprocess.Popen(
            [*blink, "serve", "--broker", ",".join(info["mqtt"]), "--cluster", ",".join(info["nats"]),
             "--password-file", info["password_file"], "--shards-total", str(self.SHARDS), "--log", str(self.log)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=open(out, "wb"), stderr=open(self.dir / "relay.err", "wb"),
            start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.READY_S
        # every shard served: a request for a shard not served yet would go unanswered
        while time.monotonic() < deadline and self.relay.poll() is None:
            text = out.read_text(errors="replace")
            if "running" in text and text.count(" serves shard ") >= self.SHARDS:
                return
            time.sleep(0.1)
        self.stop()
        err = (self.dir / "relay.err").read_text(errors="replace").strip().splitlines()
        raise RuntimeError(f"blink serve --cluster did not start: {err[-1] if err else 'no output'}")

    def stop(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.send_signal(signal.SIGINT)
            try:
                self.relay.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait()
        from client.tools import nats_cluster

        nats_cluster.stop_cluster(self.cluster_dir)


async def until(cond: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


class Spy:
    """An aiomqtt client keeping (topic, payload) of everything it is sent."""

    def __init__(self, address: BrokerAddress, client_id: str | None = None, **login: Any) -> None:
        self.id = client_id or new_client_id("eve")
        self.client = aiomqtt.Client(address.host, address.port, identifier=self.id,
                                     tls_context=address.ssl_context(), **login)
        self.got: list[tuple[str, bytes]] = []
        self.closed = False  # the broker ended the connection
        self.subscribed = False  # to its own private topic
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Spy:
        await self.client.__aenter__()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await asyncio.wait_for(self.client.__aexit__(None, None, None), 5)
        except Exception:  # noqa: BLE001 - the broker may have closed us: the point of some attacks
            pass

    async def _read(self) -> None:
        try:
            async for msg in self.client.messages:
                payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
                self.got.append((msg.topic.value, bytes(payload)))
        except aiomqtt.MqttError:
            self.closed = True

    async def pong(self) -> bool:
        """A barrier: ask the relay for a Pong on our own topic and wait for it."""
        if not self.subscribed:
            await self.client.subscribe(T.client(self.id), qos=0)
            self.subscribed = True
        t0 = time.time_ns()
        await self.client.publish(T.req(self.id), encode(m.Ping(t0=t0)), qos=1)
        return await until(lambda: any(t == T.client(self.id) and _is_pong(p, t0) for t, p in self.got))


async def _pong_within(spy: Spy, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(spy.pong(), timeout)
    except asyncio.TimeoutError:
        return False


def _is_pong(payload: bytes, t0: int) -> bool:
    try:
        msgs = decode_all(payload)
    except Exception:  # noqa: BLE001
        return False
    return any(isinstance(msg, m.Pong) and msg.t0 == t0 for msg in msgs)


def _decoded(got: list[tuple[str, bytes]]) -> list[tuple[str, Any]]:
    out = []
    for t, p in got:
        try:
            out.extend((t, x) for x in decode_all(p))
        except Exception:  # noqa: BLE001
            pass
    return out


async def _refused_connect(address: BrokerAddress, client_id: str, **login: Any) -> bool:
    try:
        async with aiomqtt.Client(address.host, address.port, identifier=client_id, tls_context=address.ssl_context(),
                                  **login):
            return False
    except aiomqtt.MqttError:
        return True


class Attacks:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.address = BrokerAddress(stack.host, stack.port)
        self.victim_got: list[Any] = []
        self.victim = Connection(self.address, on_message=lambda msg, now: self.victim_got.append(msg),
                                 ping_interval_s=0)
        self.victim_match = ""

    async def victim_pong(self) -> bool:
        t0 = time.time_ns()
        await self.victim.request(m.Ping(t0=t0))
        return await until(lambda: any(isinstance(x, m.Pong) and x.t0 == t0 for x in self.victim_got))

    async def read_victims_private_topic(self) -> dict[str, Any]:
        async with Spy(self.address) as eve:
            codes = await eve.client.subscribe(T.client(self.victim.client_id), qos=0)
            await self.victim_pong()
            await eve.pong()
        got = [t for t, _ in eve.got if self.victim.client_id in t]
        return {"attacker_won": bool(got), "detail": f"suback {[int(getattr(c, 'value', c)) for c in codes]}, "
                                                    f"{len(got)} of the victim's messages"}

    async def publish_on_victims_topics(self) -> dict[str, Any]:
        before = len(self.victim_got)
        vid, code = self.victim.client_id, self.victim_match
        async with Spy(self.address) as eve:
            for topic, msg in ((T.req(vid), m.Leave(match=code)), (T.req(vid), m.Ping(t0=1)),
                               (T.act(code, vid), m.Act(id=1, seq=1, action={"t": "PlayCard", "v": 1,
                                                                             "card": "1-red-moon", "pile": 0}))):
                try:
                    await asyncio.wait_for(eve.client.publish(topic, encode(msg), qos=1), 10)
                except (aiomqtt.MqttError, asyncio.TimeoutError):
                    pass
        await self.victim_pong()
        after = [type(x).__name__ for x in self.victim_got[before:]]
        return {"attacker_won": after != ["Pong"], "detail": f"the victim was then sent {after}"}

    async def take_over_victims_id(self) -> dict[str, Any]:
        refused = await _refused_connect(self.address, self.victim.client_id)
        return {"attacker_won": not refused, "detail": "CONNECT refused" if refused else "CONNECT accepted"}

    async def relay_login_without_secret(self) -> dict[str, Any]:
        let_in = [repr(pw) for pw in (None, "", "relay", "0" * 32)
                  if not await _refused_connect(self.address, new_client_id("x"), username="relay", password=pw)]
        return {"attacker_won": bool(let_in), "detail": f"accepted passwords: {let_in}"}

    async def connect_as_old_relay_id(self) -> dict[str, Any]:
        async with Spy(self.address, "blink-relay-0") as old:
            served = await old.pong()
        still = await ping_relay(self.stack, WAIT_S)
        return {"attacker_won": still is None, "detail": f"relay answered afterwards: {still is not None}"
                                                         f" (and the impostor was served as a client: {served})"}

    async def forged_match_over_and_snapshot(self, code: str, watcher: Spy) -> dict[str, Any]:
        forged = m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"})
        snap = m.Snapshot(code, 100000, time.time_ns(), 0, "over", ("EVIL",), {}, {}, "blink")
        async with Spy(self.address) as eve:
            for topic, payload, retain in ((T.ev(code), encode(forged), False), (T.snap(code), encode(snap), True),
                                           (T.snap("FAKE1"), encode(snap), True)):
                try:
                    await asyncio.wait_for(eve.client.publish(topic, payload, qos=1, retain=retain), 10)
                except (aiomqtt.MqttError, asyncio.TimeoutError):
                    pass
            await eve.pong()
        await watcher.pong()
        seen = [x for _, x in _decoded(watcher.got) if isinstance(x, (m.Event, m.Snapshot)) and x.seq >= 100000]
        async with Spy(self.address) as late:
            await late.client.subscribe(T.snap("FAKE1"), qos=0)
            await late.client.subscribe(T.snap(code), qos=0)
            await late.pong()
        retained = [x for _, x in _decoded(late.got) if isinstance(x, m.Snapshot) and x.seq >= 100000]
        return {"attacker_won": bool(seen or retained),
                "detail": f"forged seen live: {len(seen)}, forged retained for newcomers: {len(retained)}"}

    async def payload_10mb(self) -> dict[str, Any]:
        rss0 = rss_kb(self.stack.pid) or 0
        async with Spy(self.address) as eve:
            task = asyncio.create_task(eve.client.publish(T.req(eve.id), os.urandom(10 * 1024 * 1024), timeout=60))
            await until(lambda: eve.closed or task.done(), 30)  # the broker cuts it off, or took it whole
            closed = eve.closed
            if not closed:
                try:
                    closed = not await asyncio.wait_for(eve.pong(), 15)
                except (aiomqtt.MqttError, asyncio.TimeoutError):
                    closed = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        rss1 = rss_kb(self.stack.pid) or 0
        too_large = sum(1 for r in self.stack.records() if r.get("code") == "too_large")
        return {"attacker_won": not closed or too_large > 0,
                "detail": f"sender cut off: {closed}; reached the relay: {too_large > 0}; "
                          f"relay RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MB"}

    async def huge_deck_create(self) -> dict[str, Any]:
        deck = {"colours": [f"c{i}" for i in range(100)], "shapes": [f"s{i}" for i in range(100)],
                "counts": list(range(1, 101))}  # 100 x 100 x 5,050 = 50 million cards
        async with Spy(self.address) as eve:
            await eve.pong()
            t0 = time.monotonic()
            await eve.client.publish(T.req(eve.id), encode(m.CreateMatch(name="deck", settings={"deck": deck})), qos=1)
            await until(lambda: any(isinstance(x, (m.RequestRejected, m.MatchJoined)) for _, x in _decoded(eve.got)))
            rtt = time.monotonic() - t0
        answers = [x for _, x in _decoded(eve.got) if isinstance(x, (m.RequestRejected, m.MatchJoined))]
        refused = bool(answers) and isinstance(answers[0], m.RequestRejected)
        return {"attacker_won": not refused,
                "detail": f"answer {answers[0].code if refused else answers[:1]} "
                          f"after {rtt * 1000:.1f} ms (round trip)"}

    async def create_flood(self) -> dict[str, Any]:
        async with Spy(self.address) as eve:
            await eve.pong()
            for i in range(2000):
                await eve.client.publish(T.req(eve.id), encode(m.CreateMatch(name=f"f{i}")), qos=0)
            # Over its rate, a client's requests are all dropped until it slows down (relay/limits.py
            # StrictBucket): a Ping a second gets through once it has earned a token back.
            for _ in range(30):
                if await _pong_within(eve, 1.0):
                    break
        msgs = [x for _, x in _decoded(eve.got)]
        joined = sum(1 for x in msgs if isinstance(x, m.MatchJoined))
        codes = Counter(x.code for x in msgs if isinstance(x, m.RequestRejected))
        return {"attacker_won": joined > 3, "detail": f"matches created {joined}, answers {dict(codes)}"}

    async def hash_subscriber(self, spy: Spy) -> dict[str, Any]:
        own = T.client(spy.id)
        bad = [t for t, _ in spy.got if t != own and any(s in t for s in ("/c/", "/act/", "/req/"))]
        public = sum(1 for t, _ in spy.got if t.endswith("/ev"))
        return {"attacker_won": bool(bad), "detail": f"{len(bad)} private/request/action messages, "
                                                     f"{public} public events seen"}


async def run(stack: Stack, seed: int, best_of: int = 3) -> dict[str, Any]:
    a = Attacks(stack)
    results: dict[str, dict[str, Any]] = {}
    matches: list[dict[str, Any]] = []
    stop = asyncio.Event()
    stop.set()  # one bot match, played out
    async with a.victim, Spy(a.address) as hashspy, Spy(a.address) as watcher:
        for t in ("#", f"{T.prefix}/#", f"{T.prefix}/c/+", f"{T.prefix}/m/+/+/act/+", f"{T.prefix}/lobby/req/+"):
            await hashspy.client.subscribe(t, qos=0)
        await watcher.client.subscribe(f"{T.prefix}/m/+/+/ev", qos=0)
        await watcher.client.subscribe(T.match_list, qos=0)
        await a.victim.request(m.CreateMatch(name="victim"))
        await until(lambda: any(isinstance(x, m.MatchJoined) for x in a.victim_got))
        a.victim_match = next(x for x in a.victim_got if isinstance(x, m.MatchJoined)).match
        bots = asyncio.create_task(bot_matches(stack, stop, seed, {"best_of": best_of}, 0.05, 240.0, matches))
        # The bot match's code, from the public events the watcher sees.
        await until(lambda: any(isinstance(x, m.Event) and x.match != a.victim_match for _, x in _decoded(watcher.got)))
        code = next(x.match for _, x in _decoded(watcher.got) if isinstance(x, m.Event) and x.match != a.victim_match)
        steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("read_victims_private_topic", a.read_victims_private_topic),
            ("publish_on_victims_topics", a.publish_on_victims_topics),
            ("relay_login_without_secret", a.relay_login_without_secret),
            ("connect_as_old_relay_id", a.connect_as_old_relay_id),
            ("forged_match_over_and_snapshot", lambda: a.forged_match_over_and_snapshot(code, watcher)),
            ("payload_10mb", a.payload_10mb),
            ("huge_deck_create", a.huge_deck_create),
            ("create_flood", a.create_flood),
            ("take_over_victims_id", a.take_over_victims_id),  # last: on Mosquitto it ends the victim's session
        ]
        for name, attack in steps:
            t0 = time.monotonic()
            try:
                results[name] = await attack()
            except Exception as exc:  # noqa: BLE001 - an attack that breaks is reported, not hidden
                results[name] = {"attacker_won": None,
                                 "detail": f"the attack itself failed: {type(exc).__name__}: {exc}"}
            results[name]["seconds"] = round(time.monotonic() - t0, 2)
            print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        await bots
        waited_for_match = round(time.monotonic() - t0, 2)
        results["hash_subscriber"] = await a.hash_subscriber(hashspy)
    records = stack.records()
    codes = Counter(r.get("code") for r in records if r.get("kind") == "bad_input")
    match = matches[0] if matches else {}
    winner = (match.get("summary") or {}).get("winner")
    limits = KNOWN_LIMITS.get(stack.broker, {})
    failed = [k for k, v in results.items() if v["attacker_won"] is not False and k not in limits]
    return {
        "broker": stack.broker,
        "attacks": results,
        "known_limits": {k: v for k, v in limits.items() if k in results},
        "bot_match": {"status": match.get("status"), "valid": match.get("valid"), "winner": winner,
                      "problem": match.get("problem")},
        "waited_for_the_match_s": waited_for_match,
        "relay_alive": stack.alive(),
        "relay_logged": dict(codes),
        "internal_errors": codes.get("internal_error", 0),
        "ok": bool(not failed and match.get("valid") and stack.alive() and not codes.get("internal_error")
                   and winner not in (None, "EVIL")),
        "attacker_won": failed,
    }


def main() -> int:
    p = argparse.ArgumentParser(description="attacks on the access rules against blink serve during a bot match")
    p.add_argument("--broker", choices=("embedded", "serve", "mosquitto", "nats", "open"), default="embedded",
                   help="open: a Mosquitto that enforces nothing, with an attacker reading and writing every "
                   "topic (bench/attack_open.py)")
    p.add_argument("--seal", action="store_true", help="with --broker open: blink serve --seal")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.broker == "open":
        from bench import attack_open

        return attack_open.main(args.seal, args.seed)
    if args.seal:
        p.error("--seal goes with --broker open")
    stack = NatsStack(args.seed) if args.broker == "nats" else Stack(args.broker, seed=args.seed)
    os.environ["XDG_DATA_HOME"] = str(stack.dir)  # the relay's journal in a private directory
    stack.start()
    try:
        result = asyncio.run(run(stack, args.seed))
    finally:
        stack.stop()
    result["command"] = " ".join([".venv/bin/python bench/attack.py", *sys.argv[1:]])
    if result["ok"]:
        shutil.rmtree(stack.dir, ignore_errors=True)
    else:
        result["kept"] = str(stack.dir)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
