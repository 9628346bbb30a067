"""Each account's JetStream storage across a cluster, for the account limits ``max_mem`` and
``max_file`` (nats-server jetstream.go jsAccount ``usage``: a ``local`` and a ``total`` per
tier, the total kept from the other servers' usage updates).

Every server stores bytes for the streams it holds a replica of; an account's usage is the
sum over the servers, so an R3 stream counts three times (nats-server's un-tiered limits
count it so too, and multiply a stream's ``max_bytes`` by its replicas when reserving).
Each server sends the stored bytes of its accounts that have such a limit to the others
when they changed, at most every :data:`USAGE_CHANGE_NS`, and at least every
:data:`USAGE_REPORT_NS` (route APP frame ``"jsusage"``, msgpack ``{account: [memory bytes,
file bytes]}``), as nats-server sends its usage updates (on a change, at most every 250 ms,
and every 1.5 s: jetstream.go sendClusterUsageUpdate). A stream's leader adds what the
others last said to its own before it proposes a publish: until a report arrives it counts
what it had (fewer bytes after a publish elsewhere, more after a delete). A server's last report counts until a newer
one comes, also while its route is down (its replicas still hold the bytes), and stops
counting once it is no longer a member of the meta group (removed from the cluster).

Pure: no I/O; the caller sends and receives the frames.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgpack

__all__ = ["USAGE_CHANGE_NS", "USAGE_REPORT_NS", "AccountUsage", "decode_usage", "encode_usage"]

#: Nanoseconds (monotonic) between this server's usage reports when nothing changed.
USAGE_REPORT_NS = 1_000_000_000
#: The fewest nanoseconds between two reports of a change.
USAGE_CHANGE_NS = 250_000_000
#: The largest byte count a report may carry (nats-server's int64).
_MAX_BYTES = (1 << 63) - 1


def encode_usage(usage: Mapping[str, tuple[int, int]]) -> bytes:
    """``{account: (memory bytes, file bytes)}`` as a ``"jsusage"`` frame body."""
    return msgpack.packb({name: [mem, file] for name, (mem, file) in usage.items()})


def decode_usage(body: bytes, accounts: Iterable[str]) -> dict[str, tuple[int, int]]:
    """A ``"jsusage"`` frame body, keeping only the ``accounts`` this server serves (an
    account another server has and this one not cannot be limited here). Raises ValueError
    for anything but a map of account names to two byte counts of 0 to 2**63-1."""
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types for bad input
        raise ValueError(f"undecodable usage report: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a usage report is a map of accounts")
    wanted = set(accounts)
    out: dict[str, tuple[int, int]] = {}
    for name, pair in data.items():
        if not isinstance(name, str) or not isinstance(pair, list) or len(pair) != 2 or not all(
                type(b) is int and 0 <= b <= _MAX_BYTES for b in pair):
            raise ValueError(f"bad usage entry {name!r}")
        if name in wanted:
            out[name] = (pair[0], pair[1])
    return out


class AccountUsage:
    """The other servers' last usage reports, and when this server last sent its own."""

    def __init__(self) -> None:
        #: server name -> {account: (memory bytes, file bytes)}, its last report
        self.remote: dict[str, dict[str, tuple[int, int]]] = {}
        self._sent_ns: int | None = None
        self._sent: dict[str, tuple[int, int]] = {}

    def due(self, now_mono_ns: int, usage: dict[str, tuple[int, int]]) -> bool:
        """Whether ``usage`` (this server's bytes by account) is to be reported now: it
        changed since the last report and that is USAGE_CHANGE_NS old, or the last report is
        USAGE_REPORT_NS old. When it is, it is counted as sent."""
        if self._sent_ns is not None:
            since = now_mono_ns - self._sent_ns
            if since < USAGE_CHANGE_NS or (usage == self._sent and since < USAGE_REPORT_NS):
                return False
        self._sent_ns, self._sent = now_mono_ns, dict(usage)
        return True

    def received(self, server: str, usage: dict[str, tuple[int, int]]) -> None:
        """Server ``server``'s report: it replaces that server's last one."""
        self.remote[server] = usage

    def others(self, account: str, members: Iterable[str]) -> tuple[int, int]:
        """(memory, file) bytes of ``account`` that the ``members`` of the cluster (this
        server aside) last reported."""
        mem = file = 0
        for server in members:
            m, f = self.remote.get(server, {}).get(account, (0, 0))
            mem += m
            file += f
        return mem, file
