"""msgpack decoding within a budget, for bytes that come from outside (a restore's data, a
peer's snapshot or catch-up frame).

msgpack's own limits (``max_str_len``, ``max_bin_len``, ``max_array_len``, ``max_map_len``,
``max_buffer_size``) bound each value and the bytes read, not what the values cost once
built: an empty array is one byte on the wire and about 64 bytes as a Python list, so a few
MB of them take hundreds of MB. A :class:`Budget` counts what the decoder builds, through
msgpack's ``list_hook`` and ``object_pairs_hook`` (called once per array and per map as it
is completed, innermost first), and stops the decoding with :class:`DecodeBudgetExceeded`
as soon as the count passes the budget: what was built is then at most the budget plus the
values of the containers still open (at most their lengths, each bounded by
``max_container``).

Cost of a value: 1 per element of an array or map entry (key and value), plus
:data:`CONTAINER_COST` per array or map (its own object). Strings and binaries are elements
of their container; their bytes are bounded by ``max_str`` / ``max_bin`` and by the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = ["CONTAINER_COST", "Budget", "DecodeBudgetExceeded", "Limits", "unpackb", "unpacker"]

#: Units one array or map costs besides its elements (its object is several pointers big).
CONTAINER_COST = 8


class DecodeBudgetExceeded(ValueError):
    """The input holds more values than the budget allows; the text gives the budget."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of one decoding. ``max_units``: the budget of one top-level value (see the
    module docstring); ``max_container``: elements of one array or entries of one map;
    ``max_str``/``max_bin``: bytes of one string/binary; ``max_buffer``: bytes of one
    top-level value as encoded."""

    max_units: int
    max_container: int
    max_str: int
    max_bin: int
    max_buffer: int


class Budget:
    """The running count of one decoding; :meth:`reset` before each top-level value that
    has a budget of its own. ``what`` names the input in the error."""

    def __init__(self, limits: Limits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.used = 0

    def reset(self) -> None:
        self.used = 0

    def _spend(self, n: int) -> None:
        self.used += n + CONTAINER_COST
        if self.used > self.limits.max_units:
            raise DecodeBudgetExceeded(
                f"{self.what} holds more than {self.limits.max_units:,} values (the limit)")

    def list_hook(self, items: list) -> list:
        self._spend(len(items))
        return items

    def pairs_hook(self, pairs: list) -> dict:
        self._spend(2 * len(pairs))
        return dict(pairs)


def unpacker(file_like: Any, limits: Limits, what: str) -> tuple[msgpack.Unpacker, Budget]:
    """An ``msgpack.Unpacker`` over ``file_like`` (None: fed with ``feed``) that decodes
    strings as UTF-8, needs str map keys and keeps to ``limits``; with its :class:`Budget`
    (call ``reset`` between top-level values). Decoding raises
    :class:`DecodeBudgetExceeded`, or msgpack's ``ValueError``/``UnpackException`` for
    input over a per-value limit or malformed."""
    budget = Budget(limits, what)
    up = msgpack.Unpacker(file_like, raw=False, strict_map_key=True, use_list=True,
                          list_hook=budget.list_hook, object_pairs_hook=budget.pairs_hook,
                          max_buffer_size=limits.max_buffer, max_str_len=limits.max_str,
                          max_bin_len=limits.max_bin, max_array_len=limits.max_container,
                          max_map_len=limits.max_container, max_ext_len=0)
    return up, budget


def unpackb(data: bytes, limits: Limits, what: str) -> Any:
    """Decode one msgpack value ``data`` within ``limits``. Raises
    :class:`DecodeBudgetExceeded`, ``ValueError`` (msgpack's errors included: malformed,
    over a limit, extra bytes after the value)."""
    if len(data) > limits.max_buffer:
        raise ValueError(f"{what} is {len(data):,} bytes, over the limit of {limits.max_buffer:,}")
    budget = Budget(limits, what)
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                               list_hook=budget.list_hook, object_pairs_hook=budget.pairs_hook,
                               max_str_len=limits.max_str, max_bin_len=limits.max_bin,
                               max_array_len=limits.max_container,
                               max_map_len=limits.max_container, max_ext_len=0)
    except DecodeBudgetExceeded:
        raise
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise ValueError(f"{what} is malformed: {exc}") from None
