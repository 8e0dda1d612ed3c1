"""The Fetch decoder's turns are fair per client address (issue 37): many connections from one
address share that address's turns, so a client on another address waits for one turn, not for
all of theirs (`sidecar.proxy.turns`)."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecar.proxy.addresses import Address
from sidecar.proxy.turns import FairTurns
from tests.unit.test_forward_fetch_memory import LIMIT, _large_partition, _response, fetch_decoding


class _Jobs:
    """Jobs taking turns, the order they got them in; the first job holds its turn until
    `release` is set."""

    def __init__(self) -> None:
        self.turns = FairTurns()
        self.order: list[str] = []
        self.release = asyncio.Event()

    async def job(self, client: str, name: str, hold: bool = False) -> None:
        async with self.turns.turn(client):
            self.order.append(name)
            if hold:
                await self.release.wait()


def test_turns_go_round_robin_over_client_addresses() -> None:
    async def run() -> list[str]:
        jobs = _Jobs()
        holder = asyncio.create_task(jobs.job("10.0.0.1", "a0", hold=True))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(jobs.job("10.0.0.1", f"a{i}")) for i in range(1, 5)]
        tasks += [asyncio.create_task(jobs.job("10.0.0.2", n)) for n in ("b1", "b2")]
        tasks.append(asyncio.create_task(jobs.job("10.0.0.3", "c1")))
        await asyncio.sleep(0)
        jobs.release.set()
        await asyncio.gather(holder, *tasks)
        return jobs.order

    assert asyncio.run(run()) == ["a0", "b1", "c1", "a1", "b2", "a2", "a3", "a4"]


def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    async def run() -> list[str]:
        jobs = _Jobs()
        holder = asyncio.create_task(jobs.job("a", "a0", hold=True))
        await asyncio.sleep(0)
        gone = asyncio.create_task(jobs.job("b", "b1"))
        after = asyncio.create_task(jobs.job("c", "c1"))
        await asyncio.sleep(0)
        gone.cancel()
        jobs.release.set()
        await asyncio.gather(holder, after)
        await asyncio.wait_for(jobs.job("b", "b2"), 5)
        return jobs.order

    assert asyncio.run(run()) == ["a0", "c1", "b2"]


def test_many_connections_from_one_address_do_not_hold_off_another_client() -> None:
    """Eight Fetch answers of one address, each decoding 7 MiB, asked before one answer of
    another client's: that one is decoded second, not ninth."""
    fetch = fetch_decoding()
    frame = _response([_large_partition()])

    async def locate(nodes: Any) -> dict[int, Address | None]:
        return {}

    async def run() -> list[str]:
        done: list[str] = []

        async def one(client: str, name: str) -> None:
            await fetch.rewrite(
                4,
                frame,
                client_id=name,
                free=lambda: LIMIT,
                hold=lambda _size: None,
                locate=locate,
                client=client,
            )
            done.append(name)

        tasks = [asyncio.create_task(one("10.0.0.1", f"attacker-{i}")) for i in range(8)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(one("10.0.0.2", "consumer")))
        await asyncio.gather(*tasks)
        return done

    try:
        done = asyncio.run(run())
    finally:
        fetch.close()
    assert done.index("consumer") == 1, done
