"""The one way the suite waits for a condition: ask again, to a deadline (tenacity).

A test never sleeps to synchronise: it polls what a user would see until it holds, and a
condition that never holds fails with what was last seen.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryError, Retrying, retry_if_exception_type, retry_if_result
from tenacity import stop_after_delay, wait_fixed

T = TypeVar("T")

#: Exceptions a check may raise while the condition does not hold yet (a server still
#: starting, a monitoring endpoint not answering, an assertion inside the check).
NOT_YET: tuple[type[BaseException], ...] = (AssertionError, OSError, ValueError, KeyError)


def _failure(what: str, timeout: float, err: RetryError) -> AssertionError:
    last = err.last_attempt
    seen = repr(last.exception()) if last.failed else repr(last.result())
    return AssertionError(f"{what}: not so after {timeout:g} s (last seen: {seen[:2000]})")


def poll(check: Callable[[], T], what: str, timeout: float = 15.0, *, interval: float = 0.05,
         retry_on: tuple[type[BaseException], ...] = NOT_YET) -> T:
    """Call ``check()`` every ``interval`` seconds until it returns something truthy, and
    return that. A check raising one of ``retry_on`` counts as not yet. Raises
    AssertionError naming ``what`` and the last result or exception after ``timeout``
    seconds."""
    __tracebackhide__ = True
    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                        retry=retry_if_result(lambda r: not r) | retry_if_exception_type(retry_on))
    try:
        return retrying(check)
    except RetryError as err:
        raise _failure(what, timeout, err) from None


async def apoll(check: Callable[[], Awaitable[T] | T], what: str, timeout: float = 15.0, *,
                interval: float = 0.05, retry_on: tuple[type[BaseException], ...] = NOT_YET) -> T:
    """:func:`poll` for async tests: ``check`` may be a coroutine function or a plain one;
    waits with the running event loop's sleep (asyncio or trio)."""
    __tracebackhide__ = True

    async def once() -> Any:
        got = check()
        return await got if inspect.isawaitable(got) else got

    retrying = AsyncRetrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                             retry=retry_if_result(lambda r: not r) | retry_if_exception_type(retry_on))
    try:
        return await retrying(once)
    except RetryError as err:
        raise _failure(what, timeout, err) from None
