"""The relay stepper's wake: set before or during a wait ends it, a timeout ends it unset, and a
cancel while waiting is the waiter's (the stepper must stop when the relay stops)."""

from __future__ import annotations

import asyncio

import pytest

from relay.runtime import _Wake


def test_a_wake_set_before_the_wait_ends_it_at_once() -> None:
    async def run() -> bool:
        wake = _Wake()
        wake.set()
        return await wake.wait(60.0)

    assert asyncio.run(asyncio.wait_for(run(), 30)) is True


def test_a_wake_set_during_the_wait_ends_it() -> None:
    async def run() -> tuple[bool, bool]:
        wake = _Wake()
        asyncio.get_running_loop().call_soon(wake.set)
        woken = await wake.wait(60.0)
        wake.clear()
        return woken, wake.is_set()

    assert asyncio.run(asyncio.wait_for(run(), 30)) == (True, False)


def test_a_wait_with_nothing_set_ends_at_its_timeout_unset() -> None:
    async def run() -> tuple[bool, bool]:
        wake = _Wake()
        woken = await wake.wait(0.01)
        wake.set()  # after the wait: nothing is waiting, nothing breaks
        return woken, wake.is_set()

    assert asyncio.run(asyncio.wait_for(run(), 30)) == (False, True)


def test_a_cancel_while_waiting_is_the_waiters() -> None:
    async def run() -> None:
        wake = _Wake()
        task = asyncio.create_task(wake.wait(60.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        wake.set()  # the cancelled wait's future is gone: setting later is harmless
        assert await wake.wait(60.0) is True

    asyncio.run(asyncio.wait_for(run(), 30))
