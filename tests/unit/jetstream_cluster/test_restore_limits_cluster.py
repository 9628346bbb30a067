"""The account's ``max_file`` on a clustered restore, as the controller of the server that
restores it checks it before the stream is put in place (``ClusterController.
restore_limits_check``; nats-server stream_backup.go RestoreStreamV2 on the stream's leader):
the restored bytes times the stream's replicas against what the account's stream assignments
reserve, then once more with what the account stores over the cluster (this server's bytes
and the others' usage reports). Scripted in the World of ``controller_world`` (server n1).
"""

from __future__ import annotations

import pytest
from controller_world import T0, World

from jetraft.jetstream import errors as E
from jetraft.jetstream.meta import StreamAssignment, encode_assign_stream, encode_remove_stream, group_name
from jetraft.jetstream.model import AccountLimits
from jetraft.jetstream.usage import encode_usage

KEY = ("$G", "S")
CAP = 1_000_000


def world(tmp_path, replicas: int = 3, **limits) -> World:
    """n1, meta leader of n1..n3, restores S (``replicas`` replicas, file storage, no
    max_bytes) into an account of ``limits`` (default: max_file 1,000,000 bytes)."""
    w = World({"n1": (), "n2": (), "n3": ()})
    w.meta_leader("n1", peers=("n1", "n2", "n3"))
    acc = w.accounts["$G"]
    acc.base = str(tmp_path / "$G")
    acc.limits = AccountLimits(**(limits or {"max_storage": CAP}))
    peers = ("n1", "n2", "n3")[:replicas]
    config = {"name": "S", "subjects": ["s.>"], "num_replicas": replicas, "storage": "file"}
    sa = StreamAssignment("$G", "S", config, group_name("S", "$G", "S", T0, replicas=replicas), peers,
                          T0, preferred="n1", restore="data", restored_by="n1")
    for change in w.c.meta.apply(encode_assign_stream(sa)):
        w.run(w.c.meta_change(change, T0))
    return w


def refusal(w: World, restored: int) -> int | None:
    try:
        w.c.restore_limits_check(KEY, restored, T0)
    except E.JSApiError as err:
        return err.err_code
    return None


def test_the_restored_bytes_count_once_per_replica_against_max_file(tmp_path):
    w = world(tmp_path)
    assert refusal(w, CAP // 3) is None
    assert refusal(w, CAP // 3 + 1) == 10047
    one = world(tmp_path / "one", replicas=1)
    assert refusal(one, CAP) is None
    assert refusal(one, CAP + 1) == 10047


def test_what_the_other_servers_report_counts_with_the_restored_bytes(tmp_path):
    w = world(tmp_path)
    w.c.usage_received("n2", encode_usage({"$G": (5_000_000, 500_000)}))   # memory does not count
    w.c.usage_received("n3", encode_usage({"$G": (0, 300_000)}))
    assert refusal(w, 200_000) is None
    assert refusal(w, 200_001) == 10047
    # a server that is not a member of the meta group does not count
    w.c.usage_received("n4", encode_usage({"$G": (0, 10 * CAP)}))
    assert refusal(w, 200_000) is None


def test_what_the_other_assignments_reserve_counts(tmp_path):
    w = world(tmp_path)
    w.assign("O", storage="file", max_bytes=400_000, peers=("n2",))
    assert refusal(w, 200_000) is None          # 600,000 + 400,000
    assert refusal(w, 200_001) == 10047


@pytest.mark.parametrize("limits", [{}, {"max_memory": 10, "max_streams": 1}])
def test_an_account_without_max_file_takes_any_restore(tmp_path, limits):
    w = world(tmp_path, **(limits or {"max_consumers": 5}))
    w.c.usage_received("n2", encode_usage({"$G": (10 * CAP, 10 * CAP)}))
    assert refusal(w, 10 * CAP) is None


def test_a_restore_whose_stream_was_deleted_meanwhile_is_refused(tmp_path):
    w = world(tmp_path)
    for change in w.c.meta.apply(encode_remove_stream(*KEY)):
        w.run(w.c.meta_change(change, T0))
    assert refusal(w, 1) == 10062
