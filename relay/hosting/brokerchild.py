"""The embedded broker in a process of its own: ``python -m relay.hosting.brokerchild PARENT_PID``.

How this works
--------------
See relay/hosting/servebroker.py: ``blink serve`` sends the broker's settings (one JSON line on stdin);
this process starts a ``relay.embedded.EmbeddedBroker`` (the access rules, the rate gate and the size
limits are the broker's own) and answers with one JSON line on a private copy of its stdout --
``{"ready": true, "secret": ...}``, the relay's login for this start, or ``{"error": ...}``. It
stops the broker and exits when its stdin reaches EOF or on SIGTERM (its parent stops it), and is
killed by the kernel if the parent dies (``die_with_parent``). SIGINT is ignored: a Ctrl-C is for
``blink serve``, which stops the relay first and the broker after it. Its loop is uvloop's where
that is installed (a dependency wherever it builds): amqtt spends most of its time in the event loop's
own machinery -- a task and a few callbacks for every packet -- and uvloop roughly halves it. Once the
broker serves, what start-up made is frozen out of the garbage collector's way (``gc.freeze``): its
full passes under load then walk only what the connections make. A ``profile`` file in the
settings (the diagnostic ``BLINK_BROKER_PROFILE=FILE`` of ``blink serve``, relay/memdiag.py)
runs the process under cProfile and writes its statistics there when it stops
(``bench/serve_curve.py --profile``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sys
from typing import IO, TypedDict, cast

from relay.hosting.localproc import child_settings


class TLSLine(TypedDict):
    """The TLS listener: certificate and key files, port, bind address."""

    certificate: str
    key: str
    port: int
    host: str


class BrokerChildSettings(TypedDict):
    """The settings line ``relay.hosting.servebroker`` sends this process (JSON)."""

    host: str
    port: int
    prefix: str
    max_payload: int
    config: dict[str, object]  # ``RelayConfig.to_plain``
    tls: TLSLine | None
    profile: str | None  # where cProfile's statistics go (None: not profiled)


async def _serve(settings: BrokerChildSettings, out: IO[str]) -> int:
    from relay.embedded import EmbeddedBroker
    from relay.model import RelayConfig

    broker = EmbeddedBroker(settings["host"], settings["port"], settings["prefix"], settings["max_payload"],
                            RelayConfig.from_plain(settings["config"]))
    tls = settings["tls"]
    if tls is not None:
        broker.serve_tls(tls["certificate"], tls["key"], tls["port"], tls["host"])
    try:
        await broker.start()
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        await broker.stop()
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return 1
    # Everything made so far (amqtt, its plugins, the listeners) lives as long as the process: out of
    # the collector's way, so that its full passes under load walk only what the connections make.
    gc.collect()
    gc.freeze()
    out.write(json.dumps({"ready": True, "secret": broker.relay_address.password}) + "\n")
    out.flush()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def watch_stdin() -> None:
        while await reader.read(4096):
            pass
        done.set()

    watcher = asyncio.create_task(watch_stdin())
    try:
        await done.wait()
    finally:
        watcher.cancel()
        await broker.stop()
    return 0


def main(argv: list[str]) -> int:
    started = child_settings(argv, bad_status=1)
    if isinstance(started, int):
        return started
    line, out = started
    settings = cast(BrokerChildSettings, line)  # as the parent wrote it (the same installation)
    import logging

    logging.basicConfig(level=logging.WARNING)
    profile = settings["profile"]  # bench/serve_curve.py --profile: where the broker's time goes
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return _run(settings, out)
        finally:
            profiler.disable()
            profiler.dump_stats(profile)
    return _run(settings, out)


def _run(settings: BrokerChildSettings, out: IO[str]) -> int:
    try:  # uvloop where it is installed: most of the broker's time goes to the event loop's own machinery
        import uvloop
    except ImportError:
        return asyncio.run(_serve(settings, out))
    return uvloop.run(_serve(settings, out))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
