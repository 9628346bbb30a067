"""The events a Server writes about itself: server_starting names its cluster and tags."""

from __future__ import annotations

import io
import json

import pytest
import trio

from jetraft.config import config_from_text
from jetraft.events import EVENTS, EventLog
from jetraft.server import Server


async def starting_event(text: str) -> dict:
    """Serve ``text`` (listeners on 127.0.0.1, random ports), stop, and return the
    server_starting line."""
    out = io.StringIO()
    server = Server(config_from_text(text), events=EventLog("s1", stream=out))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            server.shutdown()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["event"] == "server_starting", lines[0]
    return lines[0]


@pytest.mark.parametrize("text,cluster,tags", [
    ("host: 127.0.0.1\nport: -1\n", None, []),
    ("host: 127.0.0.1\nport: -1\nserver_tags: ['az:b', 'SSD']\n"
     "cluster { name: C1, host: 127.0.0.1, port: -1 }\n", "C1", ["az:b", "ssd"]),
])
async def test_server_starting_names_the_cluster_and_the_server_tags(text, cluster, tags):
    event = await starting_event(text)
    assert (event["cluster"], event["tags"]) == (cluster, tags)
    assert set(EVENTS["server_starting"].fields) == event.keys() - {"ts", "v", "server_name", "level", "event"}
