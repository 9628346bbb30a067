"""A check's verdict, shared by every check module (:mod:`~jetraft.validation.checks`, the
campaign's :mod:`~jetraft.validation.queueset` and :mod:`~jetraft.validation.kvcheck`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: ``valid`` of a check whose run held nothing to decide on (or whose search was cut short):
#: not a failure of the run, not a pass either.
UNKNOWN = "unknown"


@dataclass
class CheckResult:
    """One check's verdict, Jepsen-style: ``valid`` is True, False or "unknown"; ``count``
    the offending items (0 when valid); ``examples`` up to a limit of them, each a dict;
    ``details`` the figures for the report; ``doc`` what is checked; ``seconds`` its run
    time."""

    name: str
    valid: bool | str
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    doc: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "count": self.count, "examples": self.examples,
                "details": self.details, "doc": self.doc, "seconds": self.seconds}
