"""The broker's lockstep rules, without Ray: its methods are plain (async) Python."""

from __future__ import annotations

import asyncio

from sweeps.execution.broker import Broker


def run(coro):
    return asyncio.run(coro)


def test_all_ranks_get_the_same_assignment_and_one_event():
    async def go():
        b = Broker()
        a0 = asyncio.create_task(b.next_trial("L", 1))
        a1 = asyncio.create_task(b.next_trial("L", 1))
        await asyncio.sleep(0.01)
        events = await b.poll(0.01)
        assert [e["kind"] for e in events] == ["next"]
        b.answer(("next", "L", 1), {"trial_number": 7, "seq": 1})
        assert (await a0) == (await a1) == {"trial_number": 7, "seq": 1}
        assert b.lane_state("L")["current"]["trial_number"] == 7

    run(go())


def test_report_decision_shared_and_only_rank0_posts():
    async def go():
        b = Broker()
        r0 = asyncio.create_task(b.report("L", 1, 1, {"acc": 0.5}, True))
        r1 = asyncio.create_task(b.report("L", 1, 1, None, False))
        await asyncio.sleep(0.01)
        events = await b.poll(0.01)
        assert len(events) == 1 and events[0]["metrics"] == {"acc": 0.5}
        b.answer(("step", "L", 1, 1), "prune")
        assert await r0 == await r1 == ("prune", True)

    run(go())


def test_restart_is_counted_once_per_generation_and_gives_up_after_max_failures():
    async def go():
        b = Broker(max_failures=1)
        for rank in (0, 1):
            b.attach("L", rank, 2)
        t = asyncio.create_task(b.next_trial("L", 1))
        await asyncio.sleep(0)
        b.answer(("next", "L", 1), {"trial_number": 3, "seq": 1})
        await t
        # first restart: both ranks re-attach; the trial is resumed
        s0, s1 = b.attach("L", 0, 2), b.attach("L", 1, 2)
        assert s0["current"]["trial_number"] == 3 and s1["current"]["trial_number"] == 3
        kinds = [e["kind"] for e in await b.poll(0.01)]
        assert kinds.count("restart") == 1
        # second restart exceeds max_failures=1: the trial is failed, the lane moves on
        s0 = b.attach("L", 0, 2)
        assert s0["current"] is None
        assert [e["kind"] for e in await b.poll(0.01)] == ["failed"]

    run(go())


def test_fail_returns_true_only_when_every_rank_failed():
    async def go():
        b = Broker()
        both = await asyncio.gather(b.fail("L", 1, 0, 2, "boom"), b.fail("L", 1, 1, 2, "boom"))
        assert both == [True, True]
        alone = await b.fail("L", 2, 0, 2, "boom", wait_s=0.1)
        assert alone is False
        events = await b.poll(0.01)
        assert [e["kind"] for e in events] == ["failed", "failed"]

    run(go())
