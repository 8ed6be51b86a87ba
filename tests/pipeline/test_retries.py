"""cfn_provider.pipeline.retries.first_try_then: a plain first try, then tenacity exactly as it would have run."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_none,
)

from cfn_provider.pipeline.retries import first_try_then


class Flaky(Exception):
    pass


class Final(Exception):
    pass


def script(*outcomes):
    """A call that, at each try, raises the next exception of `outcomes` or returns it."""
    tries = []

    async def call():
        tries.append(len(tries) + 1)
        outcome = outcomes[min(len(tries), len(outcomes)) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call, tries


def policy(slept: list[int], attempts: int = 3, reraise: bool = True):
    def before_sleep(state: RetryCallState) -> None:
        slept.append(state.attempt_number)

    return lambda: AsyncRetrying(
        retry=retry_if_exception_type(Flaky),
        stop=stop_after_attempt(attempts),
        wait=wait_none(),
        before_sleep=before_sleep,
        reraise=reraise,
    )


async def tenacity_alone(call, retrying):
    """The reference: the same policy the way the daemon used it before (async for ... with attempt)."""
    async for attempt in retrying():
        with attempt:
            result = await call()
    return result


async def test_a_first_try_that_succeeds_never_builds_the_policy():
    built = []
    call, tries = script("ok")
    assert await first_try_then(call, lambda: built.append(1)) == "ok"
    assert tries == [1] and built == []


@pytest.mark.parametrize(
    "outcomes, attempts",
    [
        ((Flaky("a"), "ok"), 3),  # one failure, then success
        ((Flaky("a"), Flaky("b"), "ok"), 3),
        ((Flaky("a"), Flaky("b"), Flaky("c"), "never"), 3),  # stops after 3: the last error, re-raised
        ((Final("x"), "never"), 3),  # not retryable: raised at once
        ((Flaky("a"), Final("x"), "never"), 3),
    ],
)
async def test_it_runs_exactly_as_tenacity_alone(outcomes, attempts):
    results = []
    for runner in (first_try_then, tenacity_alone):
        slept: list[int] = []
        call, tries = script(*outcomes)
        try:
            outcome = ("returned", await runner(call, policy(slept, attempts)))
        except Exception as exc:  # noqa: BLE001 - compared below
            outcome = ("raised", type(exc).__name__, str(exc))
        results.append((outcome, tries, slept))
    assert results[0] == results[1]


async def test_retries_wait_and_before_sleep_see_attempt_numbers_from_the_first_failure():
    slept: list[int] = []
    call, tries = script(Flaky("a"), Flaky("b"), "ok")
    assert await first_try_then(call, policy(slept)) == "ok"
    assert tries == [1, 2, 3]
    assert slept == [1, 2]  # before_sleep after attempt 1 (the plain try) and after attempt 2


async def test_without_reraise_giving_up_is_tenacitys_retry_error():
    call, tries = script(Flaky("a"))
    with pytest.raises(RetryError):
        await first_try_then(call, policy([], attempts=2, reraise=False))
    assert tries == [1, 2]


async def test_a_cancelled_first_try_propagates_without_retrying():
    built = []
    call, tries = script(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await first_try_then(call, lambda: built.append(1))
    assert tries == [1] and built == []
