"""``Nats-Required-Api-Level`` (nats-server 2.11, ADR-44), side by side on jetraft and
nats-server 2.15.1, on one server and on three: a ``$JS.API`` request asking for a level
above the server's (or one that is not a number) is answered 10185 (412) "JetStream minimum
api level required" for its response type and nothing is done; one at or below it is
served (nats-server jetstream_versioning.go errorOnRequiredApiLevel).
"""

from __future__ import annotations

import json

from compat_support import run
from js_support import asked_again, js_session

REFUSED = {"code": 412, "err_code": 10185, "description": "JetStream minimum api level required"}


async def ask(s, subject: str, body: dict | None, level: str) -> dict:
    msg = await s.nc.request(subject, json.dumps(body).encode() if body is not None else b"", timeout=5,
                             headers={"Nats-Required-Api-Level": level})
    return json.loads(msg.data)


async def scenario(url: str, replicas: int) -> None:
    async with js_session(url) as s:
        for level in ("99", "x", "6"):
            info = await ask(s, "$JS.API.INFO", None, level)
            assert info == {"type": "io.nats.jetstream.api.v1.account_info_response", "error": REFUSED}, info
            created = await ask(s, "$JS.API.STREAM.CREATE.L", {"name": "L", "subjects": ["l"],
                                                               "num_replicas": replicas}, level)
            assert created == {"type": "io.nats.jetstream.api.v1.stream_create_response", "error": REFUSED}
        missing = await s.api("$JS.API.STREAM.INFO.L")
        assert missing["error"]["err_code"] == 10059, missing
        for level in ("0", "1", "4"):
            info = await asked_again(lambda level=level: ask(s, "$JS.API.INFO", None, level), "INFO")
            assert "error" not in info, info
        created = await asked_again(lambda: ask(s, "$JS.API.STREAM.CREATE.L", {
            "name": "L", "subjects": ["l"], "num_replicas": replicas}, "1"), "L created")
        assert "error" not in created, created
        names = await asked_again(lambda: ask(s, "$JS.API.CONSUMER.NAMES.L", None, "99"), "names")
        assert names["type"] == "io.nats.jetstream.api.v1.consumer_names_response"
        assert names["error"] == REFUSED


def test_a_request_above_the_servers_api_level_is_refused_on_one_server(js_server):
    run(lambda: scenario(js_server.url, 1))


def test_a_request_above_the_servers_api_level_is_refused_in_a_cluster(formed_cluster, server_kind):
    with formed_cluster(server_kind, "level", 3, jetstream=True) as c:
        run(lambda: scenario(c.servers[list(c.servers)[2]].url, 3), timeout=120)
