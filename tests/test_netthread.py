"""The window's network thread (client/netthread.py): connections read, ping and stamp off the
owner's loop; messages reach the model on the owner's thread, in order; sends keep their order."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from protocol import messages as m
from client import new_client_id
from client.netthread import NetThread, ThreadedConnection
from client import Player
from tests.helpers import eventually, wait_until

pytestmark = pytest.mark.integration  # each test plays against a relay (LocalServer, ChildServer)

SCENARIO_S = 180.0


def test_pongs_are_read_and_stamped_on_the_network_thread_while_the_owner_is_busy() -> None:
    from relay.hosting import ChildServer

    async def scenario() -> None:
        async with ChildServer() as server:  # the relay must answer while this thread is held
            net = NetThread()
            p = Player(server.address, "you", ping_interval_s=0.1, net=net)
            try:
                await p.__aenter__()
                assert isinstance(p.conn, ThreadedConnection)
                await eventually(lambda: p.model.clock.rtt_ns is not None, changed=p.wait_change,
                                 what="the first round trip")
                owner = threading.get_ident()
                handled_on: set[int] = set()
                forward = p.conn.on_message

                def spy(msg: Any, recv_ns: int) -> None:
                    handled_on.add(threading.get_ident())
                    forward(msg, recv_ns)

                p.conn.on_message = spy
                net.drain()
                # Hold this thread (and its loop) as a long frame would: pings still go out and
                # pongs are read and stamped meanwhile, on the network thread.
                busy_from_ns = time.time_ns()
                pongs = wait_until(lambda: [x for x in net.pending() if isinstance(x[0], m.Pong) and x[0].t0 > busy_from_ns],
                                   what="a pong read while the owner's thread is busy")
                released_ns = time.time_ns()
                assert all(busy_from_ns < recv_ns <= released_ns for _msg, recv_ns in pongs)
                # the ping went out and its pong came back while this thread was held
                assert not any(s.at_ns == pongs[0][1] for s in p.model.clock.samples)  # not applied yet
                net.drain()
                assert handled_on == {owner}  # the model is only touched by the owner's thread
                # The sample's t3 is the network thread's stamp, not the time it was handled.
                assert any(s.at_ns == pongs[0][1] for s in p.model.clock.samples)
            finally:
                await p.close()
                await net.close()
            assert not net.running

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_sends_from_the_owner_keep_their_order_and_arrivals_are_handled_in_order() -> None:
    from relay.hosting import LocalServer

    async def scenario() -> None:
        async with LocalServer(None, seed=3) as server:
            net = NetThread()
            pongs: list[int] = []
            owner = threading.get_ident()
            threads: set[int] = set()

            def on_message(msg: Any, recv_ns: int) -> None:
                threads.add(threading.get_ident())
                if isinstance(msg, m.Pong):
                    pongs.append(msg.t0)

            conn = ThreadedConnection(net, server.address, new_client_id("a"), on_message=on_message,
                                      ping_interval_s=0)
            try:
                await conn.__aenter__()
                # requests posted one after the other without waiting: the relay answers each ping
                # in the order it read them, so the pongs' order is the order the sends went out
                # (15: the embedded broker's gate lets a burst of 20 requests through, then rate-limits)
                for i in range(15):
                    await conn.request(m.Ping(t0=i))
                await eventually(lambda: len(pongs) >= 15, what="15 pongs")
                assert pongs == list(range(15))
                assert threads == {owner}
                await conn.close()
            finally:
                await net.close()

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_a_session_without_a_frame_loop_plays_through_the_network_thread() -> None:
    from client.window import Session, SessionConfig

    async def scenario() -> None:
        session = Session(SessionConfig(game="takeaway", seed=4))
        assert session.net is not None
        await session.start()
        try:
            await session.play_bot(0.05)
            assert isinstance(session.player.conn, ThreadedConnection)
            # nobody drains but the wake-ups the network thread schedules on this loop
            await eventually(lambda: session.model.state() is not None and session.model.state().claims,
                             changed=session.player.wait_change, what="a Blink claimed against the bot")
            assert session.net.delivered > 0
        finally:
            await session.close()
        assert not session.net.running

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
