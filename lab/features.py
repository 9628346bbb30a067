"""The zone drills' TTL and counter workloads: lab/drills.py runs them beside its publisher,
from before each fault until the cluster has healed, on two R3 streams of the drill's own
(one replica per zone), and writes their ledgers beside the drill's:

- :class:`TtlWorkload` publishes a message with ``Nats-TTL: 2s`` (:data:`TTL_S`) every
  :data:`TTL_INTERVAL_S` to ``<STREAM>_TTL`` (``allow_msg_ttl``), and looks for each
  acknowledged one (``$JS.API.STREAM.MSG.GET``, by its sequence: the stream leader's answer)
  every :data:`OBSERVE_INTERVAL_S` from its acknowledgement until :data:`OBSERVE_AFTER_S`
  after its TTL has passed. Ledger ``<drill>.ttl.jsonl``: one line per message, its gets in
  ``observations`` (jetraft.validation.schema.TTL_LEDGER).
- :class:`CounterWorkload` adds a small increment (``Nats-Incr``, 1 to 5) to one subject of
  ``<STREAM>_COUNTER`` (``allow_msg_counter``) every :data:`COUNTER_PAUSE_S`, each with a
  ``Nats-Msg-Id`` of its own; an attempt whose outcome is unknown (a timeout, a lost
  connection) is sent again with the same id, up to :data:`MAX_ATTEMPTS` times (the stream's
  duplicate window, 120 s, keeps it from counting twice). Once healed, the counter's value
  is read back (``$JS.API.STREAM.MSG.GET`` ``last_by_subj``). Ledger
  ``<drill>.counter.jsonl``: one line per attempt, then the value read
  (jetraft.validation.schema.COUNTER_LEDGER).

Times are nanoseconds since the epoch on the controller's clock, except ``stored_ns``: the
message's timestamp as the stream stored it (its leader's clock). The checks are
jetraft.validation.feature_checks's ``ttl`` and ``counter`` (``jetraft-validate``); each
drill's summary (drills.json) carries the same verdicts, computed here.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nats.js.api import StreamConfig

from lab.workloads import outcome

#: The TTL of each message (seconds), one published every TTL_INTERVAL_S seconds, each
#: looked for every OBSERVE_INTERVAL_S seconds until OBSERVE_AFTER_S seconds after its TTL
#: passed; a get or a publish waits GET_TIMEOUT_S seconds for its answer.
TTL_S = 2
TTL_INTERVAL_S = 0.5
OBSERVE_INTERVAL_S = 0.5
OBSERVE_AFTER_S = 4.0
GET_TIMEOUT_S = 1.0
#: Bounds: messages with a TTL per drill, gets per message.
MAX_TTL_MESSAGES = 600
MAX_OBSERVATIONS = 20
#: A message served this many seconds after its expiry outlived its TTL (the validation's
#: TTL_GRACE_S).
TTL_GRACE_S = 1.0

#: Seconds between two increments; attempts per increment (the first and its retries with
#: the same Nats-Msg-Id), seconds between them; increments per drill (a bound).
COUNTER_PAUSE_S = 0.05
MAX_ATTEMPTS = 5
RETRY_PAUSE_S = 0.2
MAX_INCREMENTS = 5_000
#: The counter stream's duplicate window (seconds): longer than an increment's retries.
DUPLICATE_WINDOW_S = 120.0
#: nats-server's (and jetraft's) "no message found" (STREAM.MSG.GET).
NO_MESSAGE = 10037


def ttl_stream(name: str, subject: str) -> StreamConfig:
    """The drill's R3 stream of TTL'd messages."""
    return StreamConfig(name=name, subjects=[subject], num_replicas=3, allow_msg_ttl=True)


def counter_stream(name: str, subject: str) -> StreamConfig:
    """The drill's R3 counter stream."""
    return StreamConfig(name=name, subjects=[subject], num_replicas=3, allow_msg_counter=True,
                        duplicate_window=DUPLICATE_WINDOW_S)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def rfc3339_ns(text: str) -> int:
    """``2027-01-01T00:00:01.123456789Z`` (a stored message's ``time``; any number of
    fraction digits, ``Z`` or ``+00:00``) -> nanoseconds since the epoch. ValueError when it
    is not such a time."""
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1]
    elif text.endswith("+00:00"):
        text = text[:-6]
    else:
        raise ValueError(f"not a UTC RFC 3339 time: {text!r}")
    whole, _, frac = text.partition(".")
    if frac and not frac.isdigit():
        raise ValueError(f"not a UTC RFC 3339 time: {text!r}")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((frac + "000000000")[:9])


async def msg_get(nc, stream: str, request: dict[str, Any]) -> dict[str, Any]:
    """``$JS.API.STREAM.MSG.GET.<stream>`` with ``request``: the decoded answer (``message``
    or ``error``). Raises what the request raises (a timeout, no responders)."""
    msg = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps(request).encode(),
                           timeout=GET_TIMEOUT_S)
    return json.loads(msg.data)


# --------------------------------------------------------------------------- ttl


@dataclass
class TtlMessage:
    """One publish with a TTL: ``ttl_ns`` (its TTL), ``sent_ns`` / ``acked_ns`` (ns since
    the epoch), the ``stream_seq`` acknowledged or the ``error``; ``stored_ns`` the message's
    stored timestamp (from the first get that found it); ``observations``: each get,
    ``{"ns": sent, "answered_ns": ..., "found": true | false | null, "error": ...}``."""

    msg_id: str
    ttl_ns: int
    sent_ns: int
    acked_ns: int | None = None
    stream_seq: int | None = None
    error: str | None = None
    stored_ns: int | None = None
    observations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def expires_ns(self) -> int | None:
        """When the stream expires it: its stored time (else its acknowledgement) + TTL."""
        base = self.stored_ns if self.stored_ns is not None else self.acked_ns
        return None if base is None else base + self.ttl_ns

    def late_gets(self, grace_s: float = TTL_GRACE_S) -> list[dict[str, Any]]:
        """The gets that found it, sent more than ``grace_s`` seconds after its expiry."""
        expires = self.expires_ns
        if expires is None:
            return []
        return [o for o in self.observations if o["found"] and o["ns"] > expires + int(grace_s * 1e9)]


class TtlWorkload:
    """Messages with a TTL published to ``stream`` (subject ``subject``) through the drill's
    client (``nc``, ``js``), and looked for until their TTL has passed (module docstring)."""

    def __init__(self, nc, js, stream: str, subject: str, run_id: str, *, ttl_s: int = TTL_S,
                 interval_s: float = TTL_INTERVAL_S, observe_interval_s: float = OBSERVE_INTERVAL_S,
                 observe_after_s: float = OBSERVE_AFTER_S):
        self.nc, self.js, self.stream, self.subject, self.run_id = nc, js, stream, subject, run_id
        self.ttl_s, self.interval_s = ttl_s, interval_s
        self.observe_interval_s, self.observe_after_ns = observe_interval_s, int(observe_after_s * 1e9)
        self.messages: list[TtlMessage] = []
        self._stop = asyncio.Event()
        self._publisher: asyncio.Task | None = None
        self._observer: asyncio.Task | None = None

    def start(self) -> None:
        self._publisher = asyncio.create_task(self._publish())
        self._observer = asyncio.create_task(self._observe())

    def stop_publishing(self) -> None:
        """Publish no more (the gets go on: :meth:`stop` waits for them)."""
        self._stop.set()

    async def stop(self) -> None:
        """Stop publishing, then wait until every acknowledged message has been looked for
        until OBSERVE_AFTER_S after its TTL (at most TTL + OBSERVE_AFTER_S + a get's timeout
        and a round's pause after the last acknowledgement)."""
        self._stop.set()
        for task in (self._publisher, self._observer):
            if task is not None:
                await task

    def cancel(self) -> None:
        """Stop at once (a drill that failed)."""
        for task in (self._publisher, self._observer):
            if task is not None and not task.done():
                task.cancel()

    async def _publish(self) -> None:
        while not self._stop.is_set() and len(self.messages) < MAX_TTL_MESSAGES:
            m = TtlMessage(f"{self.run_id}-ttl-{len(self.messages) + 1}", self.ttl_s * 1_000_000_000,
                           time.time_ns())
            self.messages.append(m)
            try:
                ack = await self.js.publish(self.subject, m.msg_id.encode(), timeout=GET_TIMEOUT_S,
                                            headers={"Nats-TTL": f"{self.ttl_s}s", "Nats-Msg-Id": m.msg_id})
                m.acked_ns, m.stream_seq = time.time_ns(), ack.seq
            except Exception as exc:          # recorded, never fatal
                m.error = _error(exc)
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass

    def _open(self, now_ns: int) -> list[TtlMessage]:
        """The acknowledged messages still to be looked for at ``now_ns``."""
        return [m for m in self.messages if m.acked_ns is not None
                and now_ns <= m.acked_ns + m.ttl_ns + self.observe_after_ns
                and len(m.observations) < MAX_OBSERVATIONS]

    async def _observe(self) -> None:
        while True:
            open_ = self._open(time.time_ns())
            if not open_ and self._stop.is_set() and self._publisher is not None and self._publisher.done():
                return
            if open_:
                await asyncio.gather(*(self._get(m) for m in open_))
            await asyncio.sleep(self.observe_interval_s)

    async def _get(self, m: TtlMessage) -> None:
        seen: dict[str, Any] = {"ns": time.time_ns(), "answered_ns": None, "found": None, "error": None}
        m.observations.append(seen)
        try:
            answer = await msg_get(self.nc, self.stream, {"seq": m.stream_seq})
        except Exception as exc:
            seen["error"] = _error(exc)
            return
        seen["answered_ns"] = time.time_ns()
        message, error = answer.get("message"), answer.get("error") or {}
        if message is not None:
            seen["found"] = True
            if m.stored_ns is None and message.get("time"):
                try:
                    m.stored_ns = rfc3339_ns(message["time"])
                except ValueError:
                    pass
        elif error.get("err_code") == NO_MESSAGE:
            seen["found"] = False
        else:
            seen["error"] = f"{error.get('code')} {error.get('err_code')}: {error.get('description')}"

    def lines(self, drill: str) -> list[dict[str, Any]]:
        """The ledger's lines (jetraft.validation.schema.TTL_LEDGER)."""
        return [{"drill": drill, "stream": self.stream, "subject": self.subject, **asdict(m)}
                for m in self.messages]

    def outlived(self) -> list[str]:
        """Ids of the messages served more than TTL_GRACE_S after their expiry."""
        return [m.msg_id for m in self.messages if m.late_gets()]


# --------------------------------------------------------------------------- counter


class CounterWorkload:
    """Increments of one subject of a counter stream (module docstring): ``attempts`` holds
    each attempt's ledger fields, ``final`` the value read back (:meth:`read_final`)."""

    def __init__(self, nc, js, stream: str, subject: str, run_id: str, *,
                 pause_s: float = COUNTER_PAUSE_S, attempts: int = MAX_ATTEMPTS,
                 retry_pause_s: float = RETRY_PAUSE_S):
        self.nc, self.js, self.stream, self.subject, self.run_id = nc, js, stream, subject, run_id
        self.pause_s, self.max_attempts, self.retry_pause_s = pause_s, attempts, retry_pause_s
        self.attempts: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None
        self._rng = random.Random(run_id)
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._increments = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop after the increment in hand (its retries included)."""
        self._stop.set()
        if self._task is not None:
            await self._task

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _loop(self) -> None:
        while not self._stop.is_set() and self._increments < MAX_INCREMENTS:
            self._increments += 1
            await self.increment(f"{self.run_id}-c{self._increments}", self._rng.randint(1, 5))
            await asyncio.sleep(self.pause_s)

    async def increment(self, msg_id: str, incr: int) -> str:
        """Publish ``incr`` with ``msg_id`` until acknowledged, refused (``fail``), or
        ``max_attempts`` attempts of unknown outcome; each attempt recorded. Returns the
        last attempt's outcome (``ok``, ``fail`` or ``info``)."""
        kind = "info"
        for n in range(1, self.max_attempts + 1):
            row: dict[str, Any] = {"kind": "increment", "msg_id": msg_id, "incr": incr, "attempt": n,
                                   "sent_ns": time.time_ns(), "acked_ns": None, "stream_seq": None,
                                   "val": None, "duplicate": None, "outcome": None, "error": None}
            self.attempts.append(row)
            try:
                ack = await self.js.publish(self.subject, b"", timeout=GET_TIMEOUT_S,
                                            headers={"Nats-Incr": str(incr), "Nats-Msg-Id": msg_id})
                row.update(acked_ns=time.time_ns(), stream_seq=ack.seq, val=ack.val,
                           duplicate=bool(ack.duplicate), outcome="ok")
                return "ok"
            except Exception as exc:          # recorded, never fatal
                kind = outcome(exc)
                row.update(outcome=kind, error=_error(exc))
                if kind == "fail":
                    return kind
                await asyncio.sleep(self.retry_pause_s)
        return kind

    async def read_final(self) -> dict[str, Any]:
        """Read the counter's value (``last_by_subj``) and keep it as :attr:`final`: ``val``
        (a decimal string; "0" when the subject holds no message), ``stream_seq`` of the
        message read. Raises what the request raises, or RuntimeError for an error answer
        other than "no message found"."""
        sent = time.time_ns()
        answer = await msg_get(self.nc, self.stream, {"last_by_subj": self.subject})
        row: dict[str, Any] = {"kind": "final", "msg_id": None, "incr": None, "attempt": None, "sent_ns": sent,
                               "acked_ns": time.time_ns(), "stream_seq": None, "val": None, "duplicate": None,
                               "outcome": "ok", "error": None}
        message, error = answer.get("message"), answer.get("error") or {}
        if message is not None:
            body = json.loads(base64.b64decode(message.get("data") or b"") or b"{}")
            row.update(stream_seq=message.get("seq"), val=body.get("val"))
        elif error.get("err_code") == NO_MESSAGE:
            row["val"] = "0"
        else:
            raise RuntimeError(f"the counter {self.stream} {self.subject}: {error}")
        self.final = row
        return row

    def final_value(self) -> int | None:
        """The value read back as an integer (None: not read, or not an integer)."""
        try:
            return int(self.final["val"]) if self.final is not None else None
        except (TypeError, ValueError):
            return None

    def lines(self, drill: str) -> list[dict[str, Any]]:
        """The ledger's lines (jetraft.validation.schema.COUNTER_LEDGER): every attempt, then
        the value read back (when it was)."""
        rows = self.attempts + ([self.final] if self.final is not None else [])
        return [{"drill": drill, "stream": self.stream, "subject": self.subject, **row} for row in rows]

    def expected(self) -> tuple[int, int, int, int]:
        """(low, high, acknowledged ids, ids of unknown outcome): the range the final value
        must be in, as the validation's ``counter`` check reckons it (by Nats-Msg-Id: one
        acknowledged attempt counts its increment once; an id with an attempt of unknown
        outcome and none acknowledged may have counted or not)."""
        by_id: dict[str, list[dict[str, Any]]] = {}
        for row in self.attempts:
            by_id.setdefault(row["msg_id"], []).append(row)
        low = high = acked = unknown = 0
        for rows in by_id.values():
            incr = rows[0]["incr"]
            if any(r["outcome"] == "ok" for r in rows):
                low, high, acked = low + incr, high + incr, acked + 1
            elif any(r["outcome"] == "info" for r in rows):
                low, high, unknown = low + min(0, incr), high + max(0, incr), unknown + 1
        return low, high, acked, unknown


def write_ledger(path: Path, lines: list[dict[str, Any]]) -> str:
    """Write ``lines`` as JSON lines to ``path``; its path as a string."""
    with path.open("w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return str(path)
