"""The Fetch decoder's turns are fair per client address (issue 37): many connections from one
address share that address's turns, so a client on another address waits for one turn, not for
all of theirs (`sidecar.proxy.turns`)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from sidecar.codec import Decoder
from sidecar.proxy.addresses import Address
from sidecar.proxy.fetch import FetchDecoding
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.topics import TopicView
from sidecar.proxy.turns import FairTurns
from tests.unit.test_forward_fetch_memory import LIMIT, MIB, _large_partition, _response


def test_turns_go_round_robin_over_client_addresses() -> None:
    async def run() -> list[str]:
        turns = FairTurns()
        order: list[str] = []
        release = asyncio.Event()

        async def job(client: str, name: str, first: bool = False) -> None:
            async with turns.turn(client):
                order.append(name)
                if first:
                    await release.wait()

        holder = asyncio.create_task(job("10.0.0.1", "a0", first=True))
        await asyncio.sleep(0)
        names = ["a1", "a2", "a3", "a4"]
        tasks = [asyncio.create_task(job("10.0.0.1", n)) for n in names]
        tasks += [asyncio.create_task(job("10.0.0.2", n)) for n in ("b1", "b2")]
        tasks.append(asyncio.create_task(job("10.0.0.3", "c1")))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(holder, *tasks)
        return order

    assert asyncio.run(run()) == ["a0", "b1", "c1", "a1", "b2", "a2", "a3", "a4"]


def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    async def run() -> list[str]:
        turns = FairTurns()
        order: list[str] = []
        release = asyncio.Event()

        async def job(client: str, name: str, wait: bool = False) -> None:
            async with turns.turn(client):
                order.append(name)
                if wait:
                    await release.wait()

        holder = asyncio.create_task(job("a", "a0", wait=True))
        await asyncio.sleep(0)
        gone = asyncio.create_task(job("b", "b1"))
        after = asyncio.create_task(job("c", "c1"))
        await asyncio.sleep(0)
        gone.cancel()
        release.set()
        await asyncio.gather(holder, after)
        again = asyncio.create_task(job("b", "b2"))
        await asyncio.wait_for(again, 5)
        return order

    assert asyncio.run(run()) == ["a0", "c1", "b2"]


def test_many_connections_from_one_address_do_not_hold_off_another_client() -> None:
    """Eight Fetch answers of one address, each decoding 7 MiB, asked before one answer of
    another client's: that one is decoded second, not ninth."""
    fetch = FetchDecoding(
        Decoder(max_output_size=2 * MIB),
        topics=TopicView("_zdict_dictionaries"),
        metrics=FetchMetrics(CollectorRegistry()),
        max_bytes=LIMIT,
        max_unread_bytes=LIMIT,
        decode_budget=LIMIT,
    )
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
