"""The HTTP port's request budget (http/budget.py): one token bucket for every connection,
waiting connections resumed in arrival order as tokens come back."""

from __future__ import annotations

import asyncio

from pynamesrv.http.budget import RequestBudget
from waiting import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Conn:
    def __init__(self, name: str, budget: RequestBudget, order: list[str]) -> None:
        self.name, self.budget, self.order = name, budget, order

    def resume_from_budget(self) -> None:
        self.order.append(self.name)
        self.budget.spend(1)


async def test_a_burst_is_allowed_then_connections_wait_their_turn_in_order() -> None:
    clock = Clock()
    budget = RequestBudget(rate=1000.0, burst=2, clock=clock)
    assert budget.allows()
    budget.spend(2)
    assert not budget.allows()  # many connections add up: one bucket for all
    order: list[str] = []
    for name in ("a", "b", "c"):
        budget.wait(Conn(name, budget, order))
    assert budget.waiting == 3 and budget.deferred == 3
    assert not budget.allows()  # nobody jumps the queue, even with a token back
    clock.now = 1.0  # a second later: the tokens are back, at most the burst
    await wait_for(lambda: order == ["a", "b"], "two connections resumed")
    assert budget.waiting == 1
    clock.now = 1.002  # a token or two more (float steps)
    await wait_for(lambda: order == ["a", "b", "c"], "the third resumed")
    assert budget.waiting == 0
    budget.close()


async def test_a_resumed_connection_that_reads_no_request_still_costs_a_turn() -> None:
    clock = Clock()
    budget = RequestBudget(rate=1000.0, burst=1, clock=clock)
    budget.spend(1)
    resumed: list[int] = []

    class Quiet:
        def resume_from_budget(self) -> None:
            resumed.append(1)

    budget.wait(Quiet())
    budget.wait(Quiet())
    clock.now = 0.0015  # one token and a half: one turn, not two
    await asyncio.sleep(0.01)
    assert resumed == [1]
    budget.close()
