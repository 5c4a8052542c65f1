"""The broker's lockstep rules, without Ray: its methods are plain (async) Python."""

from __future__ import annotations

import asyncio

import pytest

from sweeps.common.errors import ProtocolError
from sweeps.contracts.protocol import (
    Assignment,
    Decision,
    Failed,
    Finished,
    NextTrial,
    Report,
    Restarted,
    Stop,
    TrialResult,
    next_key,
    step_key,
)
from sweeps.execution.broker import Broker


def run(coro):
    return asyncio.run(coro)


def _assignment(number: int, seq: int) -> Assignment:
    return Assignment(trial_number=number, seed=0, params={}, config={}, seq=seq)


def test_all_ranks_get_the_same_assignment_and_one_event():
    async def go():
        b = Broker()
        a0 = asyncio.create_task(b.next_trial("L", 1))
        a1 = asyncio.create_task(b.next_trial("L", 1, ask=False))
        await asyncio.sleep(0.01)
        events = await b.poll(0.01)
        assert events == [NextTrial("L", 1)]
        b.answer(next_key("L", 1), _assignment(7, 1))
        assert (await a0) == (await a1) == _assignment(7, 1)
        assert b.lane_state("L")["current"].trial_number == 7

    run(go())


def test_report_decision_shared_and_only_rank0_posts():
    async def go():
        b = Broker()
        r0 = asyncio.create_task(b.report("L", 1, 1, {"acc": 0.5}, True))
        r1 = asyncio.create_task(b.report("L", 1, 1, None, False))
        await asyncio.sleep(0.01)
        events = await b.poll(0.01)
        assert events == [Report("L", 1, 1, {"acc": 0.5})]
        b.answer(step_key("L", 1, 1), Decision.PRUNE)
        assert await r0 == await r1 == (Decision.PRUNE, True)

    run(go())


def test_restart_is_counted_once_per_generation_and_gives_up_after_max_failures():
    async def go():
        b = Broker(max_failures=1)
        for rank in (0, 1):
            b.attach("L", rank, 2)
        t = asyncio.create_task(b.next_trial("L", 1))
        await asyncio.sleep(0)
        b.answer(next_key("L", 1), _assignment(3, 1))
        await t
        b.checkpointed("L", 1, 2, "/ckpt/trial3-step2")
        # first restart: both ranks re-attach; the trial is resumed from the recorded checkpoint
        s0, s1 = b.attach("L", 0, 2), b.attach("L", 1, 2)
        assert s0["current"].trial_number == 3 and s1["current"].trial_number == 3
        assert s0["checkpoint"] == "/ckpt/trial3-step2"
        kinds = [type(e) for e in await b.poll(0.01)]
        assert kinds.count(Restarted) == 1
        # second restart exceeds max_failures=1: the trial is failed, the lane moves on
        s0 = b.attach("L", 0, 2)
        assert s0["current"] is None
        assert [type(e) for e in await b.poll(0.01)] == [Failed]

    run(go())


def test_fail_returns_true_only_when_every_rank_failed():
    async def go():
        b = Broker()
        both = await asyncio.gather(b.fail("L", 1, 0, 2, "boom"), b.fail("L", 1, 1, 2, "boom"))
        assert both == [True, True]
        alone = await b.fail("L", 2, 0, 2, "boom", wait_s=0.1)
        assert alone is False
        events = await b.poll(0.01)
        assert events == [Failed("L", 1, "boom"), Failed("L", 2, "boom")]

    run(go())


def test_finish_and_next_is_one_round_trip():
    async def go():
        b = Broker()
        result = TrialResult(state="complete", metrics={"acc": 1.0})
        nxt = asyncio.create_task(b.finish_and_next("L", 1, result))
        await asyncio.sleep(0.01)
        assert await b.poll(0.01) == [Finished("L", 1, result), NextTrial("L", 2)]
        b.answer(next_key("L", 2), Stop("budget reached"))
        assert await nxt == Stop("budget reached")

    run(go())


def test_a_wrong_answer_fails_loudly_instead_of_hanging_a_rank():
    b = Broker()
    with pytest.raises(ProtocolError):
        b.answer(next_key("L", 1), {"stop": True})
    with pytest.raises(ProtocolError):
        b.answer(step_key("L", 1, 1), "prune")
    with pytest.raises(ProtocolError):
        b.answer(("nonsense", 1), 1)


def test_a_service_broker_keeps_a_finished_sweeps_lane_warm_for_the_next_sweep():
    async def go():
        b = Broker(owner=None, idle_s=60)
        b.register("L", "sweep1", "builtin/1x1cpu")
        nxt = asyncio.create_task(b.next_trial("L", 5))
        await asyncio.sleep(0.01)
        assert await b.poll(0.01, owner="sweep1") == [NextTrial("L", 5)]
        b.answer(next_key("L", 5), Stop("budget reached", keep_warm=True))
        await asyncio.sleep(0.01)
        assert not nxt.done(), "the workers keep waiting: the lane is idle, not stopped"
        assert b.lane_state("L")["idle"]
        assert b.claim("sweep2", "user-code/2x1cpu", 1) == [], "another shape or code"
        assert b.claim("sweep2", "builtin/1x1cpu", 1) == ["L"]
        assert await b.poll(0.01, owner="sweep2") == [NextTrial("L", 5)], "re-asked of sweep2"
        b.answer(next_key("L", 5), _assignment(0, 5))
        assert (await nxt).trial_number == 0

    run(go())


def test_the_last_trial_of_a_sweep_on_a_service_is_finished_before_its_lane_goes_idle():
    # Rank 1 is done before rank 0 (which packs the result): had it asked for the next trial,
    # the Stop that leaves the lane warm would have dropped rank 0's Finished (seen in e2e).
    async def go():
        b = Broker(owner=None, idle_s=60)
        b.register("L", "sweep1", "builtin/2x1cpu")
        first = [asyncio.create_task(b.next_trial("L", 1, ask=r == 0)) for r in (0, 1)]
        await asyncio.sleep(0.01)
        assert await b.poll(0.01, owner="sweep1") == [NextTrial("L", 1)]
        b.answer(next_key("L", 1), _assignment(0, 1))
        await asyncio.gather(*first)
        rank1 = asyncio.create_task(b.next_trial("L", 2, ask=False))
        await asyncio.sleep(0.01)
        assert await b.poll(0.01, owner="sweep1") == [], "rank 1 waits; it does not ask"
        rank0 = asyncio.create_task(b.finish_and_next("L", 1, TrialResult(state="complete")))
        await asyncio.sleep(0.01)
        events = await b.poll(0.01, owner="sweep1")
        assert [type(e) for e in events] == [Finished, NextTrial]
        b.answer(next_key("L", 2), Stop("budget reached", keep_warm=True))
        await asyncio.sleep(0.01)
        assert not rank0.done() and not rank1.done() and b.lane_state("L")["idle"]

    run(go())


def test_idle_lanes_give_their_resources_back_to_a_sweep_of_another_shape():
    async def go():
        b = Broker(owner=None, idle_s=60)
        b.register("L", "sweep1", "a")
        nxt = asyncio.create_task(b.next_trial("L", 1))
        await asyncio.sleep(0.01)
        b.answer(next_key("L", 1), Stop("done", keep_warm=True))
        assert b.release_idle(keep_key="b") == 1
        assert isinstance(await nxt, Stop), "the lane's workers return: its fit() ends"

    run(go())


def test_lanes_of_a_driver_that_went_silent_are_cancelled_then_idle():
    async def go():
        b = Broker(owner=None, idle_s=60, orphan_after_s=0.5)
        b.register("L", "dead", "a")
        rep = asyncio.create_task(b.report("L", 1, 3, {"acc": 0.5}, False))
        await b.poll(0.01, owner="dead")  # starts the janitor; then the driver goes silent
        decision, _ = await asyncio.wait_for(rep, 5)
        assert decision is Decision.CANCEL
        nxt = asyncio.create_task(b.next_trial("L", 2))
        await asyncio.sleep(0.05)
        assert b.lane_state("L")["idle"] and not nxt.done()
        assert b.claim("resumed", "a", 2) == ["L"]

    run(go())
