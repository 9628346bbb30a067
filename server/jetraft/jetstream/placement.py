"""Replica placement: which servers get a new stream's RAFT group.

Pure and sans-IO: the caller (the meta leader) passes what it knows of the servers as
:class:`PeerInfo` rows and gets server names back; nothing here reads a clock, and the
only randomness is a ``random.Random(seed)``. The result goes into a meta entry
(:mod:`jetraft.jetstream.meta`), so followers never run placement themselves.

Behaviour follows nats-server ``server/jetstream_cluster.go`` ``selectPeerGroup``
(with ``createGroupForStream`` and ``reassignStreamPeers`` as callers) and
``selectPeerError``; tags behave as nats-server's ``jwt.TagList`` (``server/opts.go``
``server_tags``, ``jetstream.unique_tag``). A peer is considered in this order, the
first failing rule discarding it:

1. ``jetstream`` is false -> never a candidate (it is not in the meta group);
2. ``placement_cluster`` set and the peer's ``cluster`` differs -> skipped, no reason;
3. never heard from (``online`` false and ``offline_since_ns`` is ``None``) -> reason
   "peer offline" (nats-server: no STATSZ yet, ``nodeInfo.selectable()`` false);
4. in ``exclude`` or in ``existing`` -> skipped (existing peers are kept, in front);
5. server tag ``!jetstream`` -> reason "exclude tag set";
6. ``placement_tags``: each tag must be on the peer (a ``!tag`` must not be), compared
   lowercased; the first failing tag is reported as given: "tags not matched ['t']",
   "tags excluded ['t']";
7. ``unique_tag`` (a prefix such as ``"az:"``, lowercased): the peer's first tag with
   that prefix must not be held by a chosen or existing peer already, and a peer without
   any such tag is not eligible -> reason "server tag not unique". Uniqueness is off when
   a placement tag starts with the prefix (nats-server compares that case-sensitively:
   ``"AZ:X"`` does not turn it off, ``"az:x"`` does).

A server that went away (``online`` false, ``offline_since_ns`` set; nats-server's
``nodeInfo.offline`` after its shutdown event) stays a candidate, ranked after every
online one, as in nats-server; but a quorum (``replicas // 2 + 1``) of the group,
counting ``existing`` peers, must be online, or the error says "peer offline".

Choice among candidates: shuffled with ``random.Random(seed)``, then stably sorted by
(offline, ``load[name]``) -- online and less loaded first (nats-server sorts by free
storage, then assigned streams, then HA assets; jetraft has one ``load`` number). The
sort happens before unique tags are claimed, so within one zone the least loaded online
server is the one chosen (nats-server claims in shuffle order; the set of errors is the
same either way).

When too few peers qualify, :class:`PlacementError` carries nats-server's description,
``"no suitable peers for placement"`` followed by ``", <reason>"`` for each reason seen,
in this order: peer offline, exclude tag set, insufficient storage, server tag not
unique, miscellaneous issue, jetstream not enabled in cluster, tags not matched [...],
tags excluded [...] (e.g. R5 over zones 2/2/1 with ``unique_tag: "az:"``:
``"no suitable peers for placement, server tag not unique"``, confirmed on nats-server
2.15.1). nats-server lists the tags of the two brackets in Go map order (random);
jetraft lists them in ``placement_tags`` order. On the wire it is error 10005 with code
400: :func:`placement_error_body`.

Not modelled: storage reservations ("insufficient storage", ``max_bytes``), the
``max_ha_assets`` limit ("miscellaneous issue"), super-clusters (alternate clusters).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jetraft.jetstream import errors as E
from jetraft.jetstream.errors import JSApiError

__all__ = [
    "EXCLUDE_PLACEMENT_TAG",
    "MAX_REPLICAS",
    "NO_SUITABLE_PEERS",
    "PeerInfo",
    "PlacementError",
    "placement_error_body",
    "select_peers",
]

#: StreamMaxReplicas (server/stream.go).
MAX_REPLICAS = 5
#: jsExcludePlacement (server/jetstream_cluster.go): a server with this tag gets no replicas.
EXCLUDE_PLACEMENT_TAG = "!jetstream"
#: The start of every selectPeerError description.
NO_SUITABLE_PEERS = "no suitable peers for placement"


@dataclass(frozen=True)
class PeerInfo:
    """What the meta leader knows of one server, for placement.

    ``name`` is the server name (the RAFT peer id); ``tags`` its ``server_tags`` as
    configured (compared lowercased and stripped); ``online`` whether it is reachable
    now; ``jetstream`` whether it runs JetStream (a member of the meta group);
    ``cluster`` its cluster name; ``offline_since_ns`` when it was last seen going away
    (ns since the epoch) -- ``None`` with ``online`` false means never heard from, which
    makes the peer unselectable (see the module docstring).
    """

    name: str
    tags: tuple[str, ...] = ()
    online: bool = True
    jetstream: bool = True
    cluster: str = ""
    offline_since_ns: int | None = None

    @property
    def selectable(self) -> bool:
        """True when placement may use it: online, or known and gone away (nats-server ``selectable()``)."""
        return self.online or self.offline_since_ns is not None

    def norm_tags(self) -> tuple[str, ...]:
        """The tags as nats-server's ``jwt.TagList`` holds them: stripped, lowercased, unique, in order."""
        return tuple(dict.fromkeys(t for t in (_norm(t) for t in self.tags) if t))


class PlacementError(Exception):
    """No placement satisfies the request (nats-server ``selectPeerError``).

    The flags and tag lists say why; ``description`` (also ``str(err)``) is the text
    nats-server puts in error 10005, e.g. ``"no suitable peers for placement, server tag
    not unique"``; ``reason`` is what follows ``"no suitable peers for placement, "``
    (``""`` when nothing was recorded, e.g. no peer in the requested cluster).
    """

    def __init__(
        self,
        *,
        offline: bool = False,
        exclude_tag: bool = False,
        no_storage: bool = False,
        unique_tag: bool = False,
        misc: bool = False,
        no_js_cluster: bool = False,
        no_match_tags: Iterable[str] = (),
        exclude_tags: Iterable[str] = (),
    ) -> None:
        self.offline = offline
        self.exclude_tag = exclude_tag
        self.no_storage = no_storage
        self.unique_tag = unique_tag
        self.misc = misc
        self.no_js_cluster = no_js_cluster
        self.no_match_tags = tuple(dict.fromkeys(no_match_tags))
        self.exclude_tags = tuple(dict.fromkeys(exclude_tags))
        parts = [NO_SUITABLE_PEERS]
        for flag, text in (
            (offline, "peer offline"),
            (exclude_tag, "exclude tag set"),
            (no_storage, "insufficient storage"),
            (unique_tag, "server tag not unique"),
            (misc, "miscellaneous issue"),
            (no_js_cluster, "jetstream not enabled in cluster"),
        ):
            if flag:
                parts.append(text)
        for tags, text in ((self.no_match_tags, "tags not matched"), (self.exclude_tags, "tags excluded")):
            if tags:
                parts.append(text + " [" + ", ".join(f"'{t}'" for t in tags) + "]")
        self.description = ", ".join(parts)
        self.reason = ", ".join(parts[1:])
        super().__init__(self.description)

    def to_api_error(self) -> JSApiError:
        """Error 10005 (code 400) ``JSClusterNoPeersErrF`` with :attr:`description`."""
        return E.cluster_no_peers(self.description)


def placement_error_body(err: PlacementError) -> dict[str, Any]:
    """The ``"error"`` object of a STREAM.CREATE reply for ``err``.

    ``{"code": 400, "err_code": 10005, "description": "no suitable peers for placement, ..."}``
    (nats-server ``jsClusteredStreamRequest``: ``NewJSClusterNoPeersError(err)``).
    """
    return err.to_api_error().to_json()


def _norm(tag: str) -> str:
    return tag.strip().lower()


def select_peers(
    peers: list[PeerInfo],
    replicas: int,
    *,
    unique_tag: str | None = None,
    placement_tags: tuple[str, ...] = (),
    placement_cluster: str | None = None,
    exclude: tuple[str, ...] = (),
    existing: tuple[str, ...] = (),
    seed: int | None = None,
    load: Mapping[str, int] | None = None,
) -> list[str]:
    """Choose ``replicas`` server names for a RAFT group (nats-server ``selectPeerGroup``).

    ``peers``: every server known to the meta group (duplicates by name: the first
    counts). ``unique_tag``: the ``jetstream.unique_tag`` prefix, or ``None``.
    ``placement_tags``: the stream's ``placement.tags`` (``"!t"`` excludes ``t``).
    ``placement_cluster``: the stream's ``placement.cluster``; ``None`` accepts any.
    ``exclude``: never chosen (e.g. the peer being removed, removed servers).
    ``existing``: peers that stay, returned first and in order; their unique tag values
    are taken, so the new picks avoid them; when there are ``replicas`` or more of them,
    the first ``replicas`` are returned unchecked. ``seed``: shuffles candidates
    deterministically (``None``: fresh randomness). ``load``: groups already assigned per
    server name (``MetaState.load()``); fewer is preferred.

    Returns ``list(existing) + new picks``, ``replicas`` long. Raises ``ValueError`` when
    ``replicas`` is not 1..5 and :class:`PlacementError` when too few peers qualify or a
    quorum of the group would be offline. See the module docstring for the rules.
    """
    if type(replicas) is not int or not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas must be 1..{MAX_REPLICAS}, got {replicas!r}")
    existing_list = list(dict.fromkeys(existing))
    if len(existing_list) >= replicas:
        return existing_list[:replicas]

    wanted = [(t[1:], True) if t.startswith("!") else (t, False) for t in placement_tags]
    prefix = _norm(unique_tag or "")
    if prefix and any(t.startswith(prefix) for t, _ in wanted):
        prefix = ""  # explicitly placed on one value of the unique tag

    by_name: dict[str, PeerInfo] = {}
    for p in peers:
        by_name.setdefault(p.name, p)
    members = [p for p in by_name.values() if p.jetstream]

    taken: set[str] = set()

    def unique_value(p: PeerInfo) -> str | None:
        return next((t for t in p.norm_tags() if t.startswith(prefix)), None)

    if prefix:
        for name in existing_list:
            if name in by_name and (value := unique_value(by_name[name])) is not None:
                taken.add(value)

    rng = random.Random(seed)
    order = list(members)
    rng.shuffle(order)
    loads = load or {}
    order.sort(key=lambda p: (not p.online, loads.get(p.name, 0)))

    flags = dict.fromkeys(("offline", "exclude_tag", "unique_tag"), False)
    missing: set[str] = set()
    excluded_tags: set[str] = set()
    skip = set(exclude) | set(existing_list)
    chosen: list[PeerInfo] = []
    for p in order:
        if placement_cluster is not None and p.cluster != placement_cluster:
            continue
        if not p.selectable:
            flags["offline"] = True
            continue
        if p.name in skip:
            continue
        tags = set(p.norm_tags())
        if EXCLUDE_PLACEMENT_TAG in tags:
            flags["exclude_tag"] = True
            continue
        failed = _first_failing_tag(wanted, tags)
        if failed is not None:
            tag, negated = failed
            (excluded_tags if negated else missing).add(tag)
            continue
        if prefix:
            value = unique_value(p)
            if value is None or value in taken:
                flags["unique_tag"] = True
                continue
            taken.add(value)
        chosen.append(p)

    need = replicas - len(existing_list)
    online = sum(1 for p in chosen if p.online)
    missing_nodes = len(chosen) < need
    missing_quorum = online + len(existing_list) < replicas // 2 + 1
    if missing_nodes or missing_quorum:
        if not members:
            raise PlacementError(no_js_cluster=True, **flags)
        if not missing_nodes:
            flags["offline"] = True
        raise PlacementError(
            no_match_tags=[t for t, neg in wanted if not neg and t in missing],
            exclude_tags=[t for t, neg in wanted if neg and t in excluded_tags],
            **flags,
        )
    return existing_list + [p.name for p in chosen[:need]]


def _first_failing_tag(wanted: list[tuple[str, bool]], tags: set[str]) -> tuple[str, bool] | None:
    """The first placement tag the peer's ``tags`` fail: ``(tag as given, negated)``, or None."""
    for tag, negated in wanted:
        if (_norm(tag) in tags) == negated:
            return tag, negated
    return None
