"""What a cluster relay pays for an action of a shard it does not serve, against one it serves.

How this works
--------------
Every cluster relay subscribes to every shard's actions (``relay/runtime.py``: on NATS a SUBSCRIBE
during an election stalls the connection, so a takeover must need none) and drops those of shards it
does not serve. Here reads of ``--per-read`` action PUBLISHes (topics of ``--shards`` shards, round
robin; a 40-byte payload, like a BLINK play) are fed to ``mqttkit.packets.Parser`` with the topic
filter the relay sets (its served shards: ``--served``), and what it delivers goes through
``Relay._on_messages`` (relay/runtime.py) as in the relay (stamp, queue). Reported: ns per message when none is
served (all dropped by the filter), when all are served (parsed, a ``Message`` each, queued) and with
no filter at all (what a relay without the filter would do per dropped message: parse, decode, then
look the topic up), in the same run.

    .venv/bin/python bench/act_filter_bench.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mqttkit.packets import Parser, pack_publish  # noqa: E402
from relay.cluster import shards  # noqa: E402

PREFIX = "blink/v1"


def reads(per_read: int, total: int, n_shards: int) -> list[bytes]:
    out = []
    k = 0
    for _ in range(total // per_read):
        buf = bytearray()
        for _ in range(per_read):
            shard = k % n_shards
            pack_publish(buf, f"{PREFIX}/m/{shard}/M{k % 997:04d}/act/c{k % 5003:05d}", b"p" * 40)
            k += 1
        out.append(bytes(buf))
    return out


def run(data: list[bytes], per_read: int, served: list[str], mode: str) -> float:
    parser = Parser(1 << 20)
    inbox: list[tuple[str, bytes, int]] = []
    if mode != "none":
        parser.drop_under = f"{PREFIX}/m/".encode()
        parser.keep_under = tuple(f"{PREFIX}/m/{s}/".encode() for s in served)
    head = f"{PREFIX}/m/"
    served_set = set(served)
    t0 = time.perf_counter()
    for chunk in data:
        messages = parser.feed(chunk)
        t = time.time_ns()
        for msg in messages:
            topic = msg.topic
            assert topic is not None
            if mode == "none" and topic.startswith(head) and shards.shard_of_act_topic(topic, PREFIX) not in served_set:
                continue
            inbox.append((topic, msg.payload, t))
        inbox.clear()
    return (time.perf_counter() - t0) / (len(data) * per_read) * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--per-read", type=int, default=20)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    data = reads(args.per_read, args.messages, args.shards)
    names = [str(s) for s in range(args.shards)]
    cases = {"filtered, none served (all dropped)": ([], "filter"),
             "filtered, all served (all delivered)": (names, "filter"),
             "no filter, none served (decoded, then dropped)": ([], "none")}
    best = {k: min(run(data, args.per_read, served, mode) for _ in range(args.rounds)) for k, (served, mode) in cases.items()}
    for k, v in best.items():
        print(f"{k:<48} {v:8.0f} ns/message")
    drop, old = best["filtered, none served (all dropped)"], best["no filter, none served (decoded, then dropped)"]
    print(f"a dropped action costs {drop / old:.2f}x what it did without the filter (best of {args.rounds} rounds, "
          f"{args.per_read} messages a read)")


if __name__ == "__main__":
    main()
