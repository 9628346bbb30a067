"""The suite's one polling helper (tests/polling.py)."""

from __future__ import annotations

import asyncio

import pytest
from polling import apoll, poll


def test_poll_returns_the_first_truthy_answer_and_asks_again_on_not_yet():
    answers = iter([None, OSError("not listening"), 0, {"leader": "n1"}])

    def check():
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got

    assert poll(check, "a leader", timeout=5, interval=0.001) == {"leader": "n1"}


def test_poll_fails_with_what_and_the_last_thing_seen():
    counts = iter(range(1000))
    with pytest.raises(AssertionError, match=r"the stream has 1000 messages: not so after 0.05 s \(last seen: False\)"):
        poll(lambda: next(counts) >= 1000, "the stream has 1000 messages", timeout=0.05, interval=0.01)

    def refused():
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(AssertionError, match=r"monitoring answers: .*ConnectionRefusedError"):
        poll(refused, "monitoring answers", timeout=0.05, interval=0.01)


def test_poll_lets_an_unexpected_exception_through():
    def check():
        raise RuntimeError("a bug in the check")

    with pytest.raises(RuntimeError, match="a bug in the check"):
        poll(check, "anything", timeout=1)


def test_apoll_awaits_a_coroutine_check():
    calls = []

    async def check():
        calls.append(1)
        return len(calls) >= 3 and "ready"

    assert asyncio.run(apoll(check, "ready", timeout=5, interval=0.001)) == "ready"
    assert len(calls) == 3
