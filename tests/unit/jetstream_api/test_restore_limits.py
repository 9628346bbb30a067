"""The account's JetStream limits on a restored stream, without a server: what
``JetStreamAccount.check_restored_limits`` refuses (nats-server stream_backup.go
RestoreStreamV2: the reservations with the backup's bytes, then the account's usage with
them; then jetraft's ``max_streams`` again), ``restore_attach_check`` / ``attach_restored``
against the streams attached meanwhile, and ``restore_limit``'s bound on a restore's spool.
"""

from __future__ import annotations

import json

import pytest

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.snapshot import RestoreResult
from jetraft.jetstream.store import MemoryStore
from jetraft.storage import GroupCommit

T0 = 1_800_000_000_000_000_000
R = "_INBOX.r"


class Events:
    def emit(self, name: str, **fields) -> None:
        pass


def account(**limits) -> JetStreamAccount:
    return JetStreamAccount("A", store_dir=None, sync=GroupCommit(), events=Events(),
                            interest=lambda s: True, server_version="2.15.1", limits=limits)


def config(name: str, **cfg) -> StreamConfig:
    return StreamConfig.from_json({"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory",
                                   **cfg}).checked()


def add_stream(acc: JetStreamAccount, name: str, fill: int = 0, **cfg) -> None:
    """A memory stream ``name`` holding ``fill`` messages of 1,000 bytes."""
    body = json.dumps({"name": name, "subjects": [f"{name.lower()}.>"], "storage": "memory", **cfg}).encode()
    reply = acc.handle_api(f"$JS.API.STREAM.CREATE.{name}", R, None, body, T0)
    assert "error" not in json.loads(reply[0].out.data), reply
    for i in range(fill):
        acc.publish(acc.streams[name], f"{name.lower()}.x", None, None, b"x" * 1000, T0 + i)


def err_code(fn) -> int | None:
    try:
        fn()
    except E.JSApiError as err:
        return err.err_code
    return None


def test_the_reservation_is_the_larger_of_max_bytes_and_the_restored_bytes_times_the_replicas():
    acc = account(max_memory=10_000)
    others = [config("O", max_bytes=4000)]
    check = acc.check_restored_limits
    # 6,000 bytes left by the others' reservations: 3,000 per replica of an R2 stream
    assert err_code(lambda: check(config("S", num_replicas=2), 3000, others, (0, 0))) is None
    assert err_code(lambda: check(config("S", num_replicas=2), 3001, others, (0, 0))) == 10028
    # its own max_bytes when larger than what it restored
    assert err_code(lambda: check(config("S", max_bytes=6001), 10, others, (0, 0))) == 10028
    # a stream of the same name is not one of the others
    assert err_code(lambda: check(config("O"), 9000, others, (0, 0))) is None


def test_the_restored_bytes_count_once_with_what_the_account_stores():
    acc = account(max_memory=10_000, max_storage=20_000)
    mem, file = config("M"), StreamConfig.from_json({"name": "F", "subjects": ["f"]}).checked()
    check = acc.check_restored_limits
    assert err_code(lambda: check(mem, 5000, [], (5000, 0))) is None
    assert err_code(lambda: check(mem, 5001, [], (5000, 0))) == 10028
    # the other storage's bytes do not count
    assert err_code(lambda: check(mem, 5000, [], (5000, 1 << 40))) is None
    assert err_code(lambda: check(file, 15001, [], (1 << 40, 5000))) == 10047
    assert err_code(lambda: check(file, 15000, [], (1 << 40, 5000))) is None


def test_max_streams_is_checked_after_the_bytes_and_only_when_asked():
    acc = account(max_memory=10_000, max_streams=2)
    check = acc.check_restored_limits
    assert err_code(lambda: check(config("S"), 100, [], (0, 0), streams=2)) == 10027
    assert err_code(lambda: check(config("S"), 100, [], (0, 0), streams=1)) is None
    assert err_code(lambda: check(config("S"), 100, [], (0, 0))) is None          # a cluster's
    assert err_code(lambda: check(config("S"), 10_001, [], (0, 0), streams=2)) == 10028


def test_an_account_without_limits_takes_any_restore():
    acc = account()
    assert err_code(lambda: acc.check_restored_limits(
        config("S", num_replicas=3), 1 << 50, [config("O", max_bytes=1 << 50)], (1 << 50, 1 << 50),
        streams=10_000)) is None


def test_attach_counts_the_streams_attached_since_the_restore_started():
    """Two restores started into an empty account of 10,000 bytes of memory and two streams:
    each fits alone; once a stream of 6,000 bytes is there, a restore of 5,000 does not."""
    acc = account(max_memory=10_000, max_streams=2)
    assert err_code(lambda: acc.restore_attach_check(config("R1"), 5000)) is None
    add_stream(acc, "FULL", fill=6)
    used = acc.usage()[0]
    assert 6000 < used < 7000
    assert err_code(lambda: acc.restore_attach_check(config("R1"), 10_000 - used)) is None
    assert err_code(lambda: acc.restore_attach_check(config("R1"), 10_000 - used + 1)) == 10028
    add_stream(acc, "SECOND")
    assert err_code(lambda: acc.restore_attach_check(config("R1"), 1)) == 10027
    # the restore of a stream of a name already there is not a third stream
    assert err_code(lambda: acc.restore_attach_check(config("SECOND"), 1)) is None


def test_a_refused_attach_adds_nothing():
    acc = account(max_memory=10_000)
    add_stream(acc, "FULL", fill=6)
    store = MemoryStore()
    result = RestoreResult(replica={}, first_seq=1, last_seq=5, messages=5, bytes=5000, store=store)
    with pytest.raises(E.JSApiError) as refused:
        acc.attach_restored(config("R1"), result, None, store, T0)
    assert refused.value.to_json() == {"code": 500, "err_code": 10028,
                                       "description": "insufficient memory resources available"}
    assert list(acc.streams) == ["FULL"]
    assert acc.stream_for("r1.x") is None


def test_a_restore_into_a_full_account_has_a_spool_of_one_byte_not_an_unbounded_one():
    measure = account()
    add_stream(measure, "FULL", fill=5)
    acc = account(max_memory=measure.usage()[0])       # five messages fill it
    add_stream(acc, "FULL", fill=5)
    assert acc.usage()[0] == acc.limits.max_memory
    assert acc.restore_limit(config("R1")) == 1
    assert acc.restore_limit(config("R1", max_bytes=500)) == 1
    # without the account's part: the stream's max_bytes, and what the server's limit leaves
    assert acc.restore_limit(config("R1"), account=False) == 0
    assert acc.restore_limit(config("R1", max_bytes=500), account=False) == 500
    used = acc.usage()[0]
    assert acc.restore_limit(config("R1"), account=False, server_limit=used + 300) == 300
    assert acc.restore_limit(config("R1"), account=False, server_limit=used) == 1
