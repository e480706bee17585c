"""The relay's CPU per play sealed (``blink serve --seal``) against plain, in the same run.

How this works
--------------
One Mosquitto that enforces nothing (``allow_anonymous true``, no access rules: the broker sealed
play is for) on a free port; then, alternated plain, sealed, plain, sealed, ... (``--rounds``
pairs) so both see the same machine, a fresh ``blink serve --no-journal --broker mqtt://127.0.0.1:PORT``
(with ``--seal`` every other time) and ``blink load --matches N --duration S --seed 7 --server URL
--relay-pid PID --json`` with the URL the relay printed (``?pin=`` when sealed). CPU µs per play =
``relay_cpu_pct`` / 100 x ``duration_s`` / ``actions`` (all of the relay's process). Printed: every
run, the means and the ratio sealed / plain, and -- measured in this process, apart from any
broker -- what sealing itself costs the relay per play: opening the play, sealing the verdict for
its player, signing the step's events (the three a BLINK play makes), and one client's opening and
verifying of what it receives.

    .venv/bin/python bench/seal_bench.py --matches 40 --duration 20 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attack_open import OpenMosquitto  # noqa: E402
from bench.benchkit import stop  # noqa: E402

BLINK = [sys.executable, "-m", "client.cli"]


def one_run(broker: OpenMosquitto, sealed: bool, args: argparse.Namespace) -> dict[str, Any]:
    relay = subprocess.Popen([*BLINK, "serve", "--no-journal", "--broker", broker.url, *(["--seal"] if sealed else [])],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert relay.stdout is not None
        url = ""
        for _ in range(5):
            line = relay.stdout.readline()
            if "players connect with" in line:
                url = line.rsplit(" ", 1)[1].strip()
                break
            if line.startswith("blink relay data") and not sealed:
                url = broker.url
                break
        if not url:
            raise RuntimeError("the relay did not start")
        load = subprocess.run([*BLINK, "load", "--server", url, "--relay-pid", str(relay.pid), "--matches",
                               str(args.matches), "--duration", str(args.duration), "--seed", "7", "--json"],
                              capture_output=True, text=True, cwd=ROOT, timeout=args.duration + 300)
        if load.returncode != 0:
            raise RuntimeError(f"blink load failed: {load.stderr.strip()[-300:]}")
        report: dict[str, Any] = json.loads(load.stdout)
    finally:
        stop(relay, signal.SIGINT, 20)
    actions = report["actions"] or 1
    return {"sealed": sealed, "actions": report["actions"],
            "relay_us_per_play": round(report["relay_cpu_pct"] / 100 * report["duration_s"] / actions * 1e6, 1),
            "verdict_ms_p50": report["verdict_ms"]["p50"], "verdict_ms_p99": report["verdict_ms"]["p99"],
            "unanswered": report["unanswered"], "bad_messages": report["bad_messages"],
            "load_avg": round(os.getloadavg()[0], 2)}


def crypto_per_play(n: int = 2000) -> dict[str, float]:
    """What sealing adds per BLINK play, in this process (µs): the relay opens the play, seals the
    verdict bundle for its player and signs the events bundle; a player opens its verdict and
    verifies the events."""
    from protocol import messages as m
    from protocol.codec import encode, pack_bundle
    from protocol.seal import ClientSeal, RelayIdentity, RelaySeal
    from protocol.topics import Topics

    t = Topics()
    relay = RelaySeal(RelayIdentity(os.urandom(32), os.urandom(32)), os.urandom(8), time.time_ns())
    status = t.relay_status("relay-0")
    client = ClientSeal(os.urandom(32), relay.pin)
    client.open_status(status, relay.status(status, encode(m.RelayStatus("relay-0", True))))
    act_topic, private, ev = t.act("ABCDE", client.client_id), t.client(client.client_id), t.ev("ABCDE")
    act = encode(m.Act(id=7, seq=41, action={"t": "PlayCard", "v": 1, "card": "4-red-moon", "pile": 1},
                       reaction_ns=412_000_000))
    verdict = pack_bundle([encode(m.ActionAccepted("ABCDE", 7, 43)),
                           encode(m.PrivateUpdate("ABCDE", 43, 0, {"hand": ["2-blue-star", None, "5-green-moon"]}))])
    events = pack_bundle([encode(m.Event("ABCDE", 42, time.time_ns(), 0, "card_played",
                                         {"player": "ann", "card": "4-red-moon", "pile": 1, "seat": 0})),
                          encode(m.Event("ABCDE", 43, time.time_ns(), 0, "hand_refilled",
                                         {"player": "ann", "count": 1, "seat": 0}))])
    sealed_acts = [client.seal(act_topic, act) for _ in range(n)]
    relay.open(act_topic, sealed_acts[0], 0)  # the session is made once, at the player's first message

    def timed(fn: Any, items: list[Any]) -> float:
        t0 = time.process_time()
        for item in items:
            fn(item)
        return (time.process_time() - t0) / len(items) * 1e6

    open_us = timed(lambda s: relay.open(act_topic, s, 1), sealed_acts[1:])
    seal_us = timed(lambda _: relay.seal(client.client_id, private, verdict), list(range(n)))
    sign_us = timed(lambda _: relay.sign(ev, events), list(range(n)))
    boxes = [relay.seal(client.client_id, private, verdict) for _ in range(n)]
    signed = relay.sign(ev, events)
    client_open_us = timed(lambda b: client.open(private, b), boxes)
    verify_us = timed(lambda _: client.open(ev, signed), list(range(n // 4)))
    return {"relay_open_play_us": round(open_us, 2), "relay_seal_verdict_us": round(seal_us, 2),
            "relay_sign_events_us": round(sign_us, 2),
            "relay_total_us": round(open_us + seal_us + sign_us, 1),
            "player_open_verdict_us": round(client_open_us, 2), "player_verify_events_us": round(verify_us, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, default=40)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=3, help="pairs of runs, plain then sealed")
    args = p.parse_args()
    broker = OpenMosquitto()
    broker.start()
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            for sealed in (False, True):
                runs.append(one_run(broker, sealed, args))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        broker.stop()

    def mean(sealed: bool) -> float:
        xs = [r["relay_us_per_play"] for r in runs if r["sealed"] is sealed]
        return round(sum(xs) / len(xs), 1)

    plain, sealed = mean(False), mean(True)
    print(json.dumps({"matches": args.matches, "duration_s": args.duration, "rounds": args.rounds, "runs": runs,
                      "relay_us_per_play": {"plain": plain, "sealed": sealed},
                      "sealed_over_plain": round(sealed / plain, 3) if plain else None,
                      "crypto_per_play": crypto_per_play(),
                      "command": " ".join([".venv/bin/python bench/seal_bench.py", *sys.argv[1:]])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
