"""A server's store id (net/jetstream/cluster.py store_identity): kept across restarts, made anew
for a new store, a damaged file, or a store whose meta group log is gone."""

from __future__ import annotations

import os
import stat

from jetraft.net.jetstream.cluster import STORE_ID_FILE, store_identity


def test_kept_made_and_renewed(tmp_path):
    js = tmp_path / "store" / "jetstream"
    first = store_identity(str(js))
    assert len(first) == 32 and int(first, 16) >= 0
    assert store_identity(str(js)) == first                      # a restart keeps it
    assert stat.S_IMODE(os.stat(js / STORE_ID_FILE).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(js).st_mode) == 0o700
    renewed = store_identity(str(js), renew=True)               # the meta log is gone
    assert renewed != first and store_identity(str(js)) == renewed
    (js / STORE_ID_FILE).write_text("not an id\n")              # damaged: a new one
    damaged = store_identity(str(js))
    assert damaged not in (first, renewed) and store_identity(str(js)) == damaged
