"""``jetraft kv ...``: add, edit, info, put, get, create, update, del, history, ls, watch.

The Key-Value store of natscli's ``nats kv`` (cli/kv_command.go), through nats-py's
:class:`nats.js.kv.KeyValue`: a bucket ``B`` is the stream ``KV_B`` on ``$KV.B.>``, a key
``K`` its subject ``$KV.B.K``, a revision a stream sequence. Names, flags, argument order and
text layouts are natscli's. ``--json`` prints the bucket's stream info (``add``, ``edit``, ``info``;
``ls`` a list of them, or of names with ``-n``), ``{"bucket", "key", "revision"}`` after a
write (``put``, ``create``, ``update``), the entries (``get``, ``history``; ``watch`` one
JSON object a line) or the keys (``ls BUCKET``).

Bucket names are letters, digits, ``-`` and ``_``; keys letters, digits and ``-/_=.``,
not starting or ending with ``.`` (nats-py's rules, the server's subjects). A missing
bucket, a missing or deleted key, a bad name and a missing confirmation (no terminal and
no ``-f``) are each one ``nats: error:`` line saying what to do, exit status 1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import click
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option, json_option, parsed, pass_options
from jetraft.cli.admin.kv_read import bucket_entries, bucket_keys
from jetraft.cli.admin.messages import until_stopped
from jetraft.cli.admin.render import Page, cluster_rows, print_table, title_case
from jetraft.cli.admin.session import CliError, Options, Session, fail, run
from jetraft.cli.admin.units import (
    format_bytes,
    format_count,
    format_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_size,
    since,
)

#: Bucket names nats-py and natscli accept (they become the stream name KV_B / OBJ_B).
BUCKET_RE = re.compile(r"[a-zA-Z0-9_-]+")
#: Keys nats-py accepts (they become the last tokens of $KV.B.K); not starting or ending with '.'.
KEY_RE = re.compile(r"[-/_=.a-zA-Z0-9]+")
#: Keys of ``kv watch`` and ``kv ls`` filters may also hold the wildcards '*' and '>'.
KEY_FILTER_RE = re.compile(r"[-/_=.a-zA-Z0-9*>]+")
#: ``--storage`` names, with natscli's one-letter forms.
STORAGE = {"file": api.StorageType.FILE, "f": api.StorageType.FILE,
           "memory": api.StorageType.MEMORY, "m": api.StorageType.MEMORY}
#: What natscli prints for a KV-Operation header value (strForOp).
OPERATIONS = {None: "PUT", "": "PUT", KV_DEL: "DELETE", KV_PURGE: "PURGE"}


class KvAliases(AliasedGroup):
    """``kv`` also answers to natscli's aliases of its subcommands (``rm`` for ``del``,
    ``view``/``status`` for ``info``, ``new`` for ``add``)."""

    LOCAL = {"rm": "del", "view": "info", "status": "info", "new": "add"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.LOCAL.get(cmd_name, cmd_name))


def check_bucket(name: str) -> str:
    """``name`` if it is a valid bucket name, else one error line with the rule and exit 1."""
    if not BUCKET_RE.fullmatch(name or ""):
        fail(f"invalid bucket name {name!r}: bucket names may contain only letters, digits, '-' and '_'")
    return name


def check_key(key: str, *, wildcards: bool = False) -> str:
    """``key`` if it is a valid key (or key filter with ``wildcards``), else one error line, exit 1."""
    pattern = KEY_FILTER_RE if wildcards else KEY_RE
    if not pattern.fullmatch(key or "") or key.startswith(".") or key.endswith("."):
        allowed = "letters, digits, '-', '/', '_', '=' and '.'" + (", '*' and '>'" if wildcards else "")
        fail(f"invalid key {key!r}: keys may contain only {allowed}, and cannot start or end with '.'")
    return key


def bucket_argument(fn):
    """The BUCKET argument, checked by :func:`check_bucket`."""
    return click.argument("bucket", callback=lambda _c, _p, v: check_bucket(v))(fn)


def key_argument(fn):
    """The KEY argument, checked by :func:`check_key`."""
    return click.argument("key", callback=lambda _c, _p, v: check_key(v))(fn)


def printable(value: bytes) -> str:
    """natscli's Base64IfNotPrintable: the value as text when it is UTF-8 made of printable
    characters and white space, else its standard base64."""
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return base64.b64encode(value).decode()
    if all(ch.isprintable() or ch.isspace() for ch in text):
        return text
    return base64.b64encode(value).decode()


def shortened(value: bytes) -> str:
    """A value as history tables show it: :func:`printable`, cut to ``first15...last15``
    when longer than 40 characters."""
    text = printable(value)
    return f"{text[:15]}...{text[-15:]}" if len(text) > 40 else text


def bucket_advice(exc: nats.js.errors.APIError, kind: str, bucket: str) -> CliError | None:
    """A JetStream API error on a bucket's stream with what to do about it, for the errors
    whose description does not say (``kind`` is ``kv`` or ``object``); None for the others."""
    text = f"{exc.description} (err_code {exc.err_code})"
    advice = {
        10054: f"the value is larger than the bucket's Maximum Value Size (jetraft {kind} info {bucket})",
        10058: f"bucket {bucket} already exists with other settings (jetraft {kind} info {bucket})",
        10061: f"this server keeps the replicas bucket {bucket} was added with: add a new bucket "
               "with the --replicas wanted",
        10074: "a single server keeps one replica: use --replicas 1, or a cluster",
        10077: f"bucket {bucket} is full (its Maximum Bucket Size, jetraft {kind} info {bucket}): "
               "remove data or add a larger bucket",
    }.get(exc.err_code or 0)
    return CliError(f"{text}: {advice}") if advice else None


@contextlib.contextmanager
def kv_errors(bucket: str, key: str | None = None):
    """Turn nats-py's Key-Value exceptions into one CliError line saying what to do."""
    try:
        yield
    except nats.js.errors.BucketNotFoundError:
        raise CliError(f"bucket {bucket} not found: check the name (jetraft kv ls), "
                       f"or add it (jetraft kv add {bucket})") from None
    except nats.js.errors.BadBucketError:
        raise CliError(f"stream KV_{bucket} exists but is not a Key-Value bucket (it keeps no history per "
                       "subject): use another bucket name") from None
    except nats.js.errors.InvalidBucketNameError:
        raise CliError(f"invalid bucket name {bucket!r}: bucket names may contain only letters, digits, "
                       "'-' and '_'") from None
    except nats.js.errors.InvalidKeyError:
        raise CliError(f"invalid key {key!r}: keys may contain only letters, digits, '-', '/', '_', '=' "
                       "and '.', and cannot start or end with '.'") from None
    except nats.js.errors.KeyWrongLastSequenceError as exc:
        raise CliError(f"{bucket} > {key} was changed meanwhile ({exc.description or 'wrong last sequence'}): "
                       f"read the latest revision with jetraft kv get {bucket} {key}") from None
    except nats.js.errors.KeyHistoryTooLargeError:
        raise CliError("--history is at most 64") from None
    except (nats.js.errors.KeyDeletedError, nats.js.errors.KeyNotFoundError) as exc:
        if getattr(exc, "op", None) in (KV_DEL, KV_PURGE):
            entry = getattr(exc, "entry", None)
            at = f" at revision {entry.revision}" if entry is not None and entry.revision else ""
            raise CliError(f"key {key} in bucket {bucket} was deleted{at}: put a new value "
                           f"(jetraft kv put {bucket} {key} VALUE), or see jetraft kv history {bucket} {key}") from None
        raise CliError(f"key {key} not found in bucket {bucket}: list the keys with "
                       f"jetraft kv ls {bucket}") from None
    except nats.js.errors.NoKeysError:
        raise CliError(f"key {key} not found in bucket {bucket}: list the keys with "
                       f"jetraft kv ls {bucket}") from None
    except nats.js.errors.APIError as exc:
        advised = bucket_advice(exc, "kv", bucket)
        if advised is None:
            raise
        raise advised from None


async def load_bucket(session: Session, bucket: str) -> KeyValue:
    """The bucket (nats-py ``js.key_value``: $JS.API.STREAM.INFO.KV_B). Raises CliError when
    it does not exist."""
    with kv_errors(bucket):
        return await session.js.key_value(bucket)


def kv_page(info: api.StreamInfo, bucket: str) -> str:
    """``kv info`` as natscli's showStatus lays it out: Configuration (with the republish
    rule when there is one), Cluster Information."""
    cfg, state = info.config, info.state
    page = Page(f"Information for Key-Value Store Bucket {bucket} created {format_time(info.created)}")
    rows = page.section("Configuration")
    marker_ttl = cfg.subject_delete_marker_ttl or 0
    rows.append(("Bucket Name", bucket))
    rows.append(("History Kept", format_count(cfg.max_msgs_per_subject)))
    rows.append(("Values Stored", format_count(state.messages)))
    rows.append(("Compressed", str(getattr(cfg.compression, "value", cfg.compression) == "s2").lower()))
    rows.append(("Per-Key TTL Supported", str(marker_ttl > 0).lower()))
    if marker_ttl > 0:
        rows.append(("Limit Marker TTL", format_duration(marker_ttl)))
    rows.append(("Backing Store Kind", "JetStream"))
    if cfg.description:
        rows.append(("Description", cfg.description))
    rows.append(("Bucket Size", format_bytes(state.bytes)))
    rows.append(("Maximum Bucket Size", format_limit(cfg.max_bytes, format_bytes)))
    rows.append(("Maximum Value Size", format_limit(cfg.max_msg_size, format_bytes)))
    rows.append(("Maximum Age", format_limit(cfg.max_age, format_duration)))
    rows.append(("JetStream Stream", cfg.name or f"KV_{bucket}"))
    rows.append(("Storage", title_case(cfg.storage)))
    if cfg.republish is not None:
        label = "Republishing Headers" if cfg.republish.headers_only else "Republishing"
        rows.append((label, f"{cfg.republish.src or ''} to {cfg.republish.dest or ''}"))
    cluster_rows(page.section("Cluster Information"), info.cluster)
    return page.render()


def entry_json(entry: KeyValue.Entry, created: Any = None) -> dict:
    """A Key-Value entry as JSON: bucket, key, revision, operation (PUT/DELETE/PURGE),
    created (RFC 3339, or null when unknown), value (text, or base64 when not printable)."""
    value = entry.value or b""
    when = created or entry.created
    return {"bucket": entry.bucket, "key": entry.key, "revision": entry.revision,
            "operation": OPERATIONS.get(entry.operation, str(entry.operation)),
            "created": when.isoformat() if when else None, "value": printable(value), "length": len(value)}


async def read_value(session: Session, value: str | None) -> bytes:
    """VALUE, or standard input when it is omitted and stdin is not a terminal (natscli's
    valOrReadVal). Reads at most the server's max_payload bytes; more is an error."""
    if value is not None:
        return value.encode()
    stdin = sys.stdin.buffer
    if stdin.isatty():
        return b""
    limit = int(session.nc.max_payload or 1024 * 1024)
    data = stdin.read(limit + 1)
    if len(data) > limit:
        raise CliError(f"the value on standard input is larger than the server's max_payload ({limit} bytes): "
                       "store large data with jetraft object put")
    return data


@click.group(cls=KvAliases)
def kv() -> None:
    """Key-Value store: buckets of keys with a history of values (natscli's 'nats kv')."""


@kv.command("add")
@bucket_argument
@click.option("--history", type=click.IntRange(1, 64), default=1, show_default=True,
              help="How many historic values to keep per key.")
@click.option("--ttl", default="0", callback=parsed(parse_duration, "e.g. 1h, 7d"),
              help="How long to keep values (0: for ever).")
@click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True,
              help="How many replicas of the data to store.")
@click.option("--max-value-size", default="-1", callback=parsed(parse_size, "e.g. 1KB"),
              help="Maximum size of one value (-1: unlimited).")
@click.option("--max-bucket-size", default="-1", callback=parsed(parse_size, "e.g. 1GB"),
              help="Maximum size of the bucket (-1: unlimited).")
@click.option("--description", help="A description of the bucket.")
@click.option("--storage", type=click.Choice(sorted(STORAGE)), default="file", show_default=True,
              help="Storage backend.")
@json_option
@pass_options
def kv_add(opts: Options, bucket: str, history: int, ttl: float, replicas: int, max_value_size: int,
           max_bucket_size: int, description: str | None, storage: str) -> None:
    """Add a bucket (the stream KV_BUCKET, through nats-py's create_key_value); prints its info
    as 'kv info' does. TTL in Go duration form, sizes in bytes (suffixes K, M, G)."""
    config = api.KeyValueConfig(
        bucket=bucket, description=description, history=history, ttl=ttl or None,
        max_value_size=max_value_size, max_bytes=max_bucket_size, storage=STORAGE[storage],
        replicas=replicas,
    )

    async def body(session: Session) -> None:
        with kv_errors(bucket):
            store = await session.js.create_key_value(config)
            status = await store.status()
        session.show(status.stream_info, lambda info: kv_page(info, bucket))

    run(opts, body)


@kv.command("info")
@bucket_argument
@json_option
@pass_options
def kv_info(opts: Options, bucket: str) -> None:
    """Show a bucket: configuration, size, cluster (aliases: view, status)."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        status = await store.status()
        session.show(status.stream_info, lambda info: kv_page(info, bucket))

    run(opts, body)


#: The longest duplicate window nats.go gives a bucket (prepareKeyValueConfig), in nanoseconds.
KV_DUPLICATE_WINDOW_NS = 2 * 60 * 10**9
#: The largest --max-value-size: natscli parses it as a 32-bit size (ParseStringAsBytes(s, 32)).
MAX_VALUE_SIZE = 2**31 - 1


def metadata_pairs(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str] | None:
    """``--metadata KEY=VALUE`` (repeatable) as a dict; None when not given."""
    if not values:
        return None
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param=param)
        pairs[key] = value
    return pairs


def value_size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``--max-value-size`` in bytes (-1: unlimited), at most 2 GiB - 1 as natscli allows."""
    size = parsed(parse_size, "e.g. 1KB")(ctx, param, value)
    if size is not None and size > MAX_VALUE_SIZE:
        raise click.BadParameter(f"{value} is larger than {MAX_VALUE_SIZE} bytes", param=param)
    return size


def edited_config(bucket: str, old: dict[str, Any], *, description: str | None, history: int | None,
                  ttl: float | None, marker_ttl: float | None, replicas: int | None,
                  max_value_size: int | None, max_bucket_size: int | None, tags: tuple[str, ...],
                  cluster: str | None, compress: bool | None, metadata: dict[str, str] | None,
                  republish: dict[str, Any] | None, no_mirror: bool, sources: tuple[str, ...]) -> dict[str, Any]:
    """The StreamConfig JSON of bucket ``bucket`` after ``kv edit``: ``old`` (the stream's
    config as $JS.API.STREAM.INFO returns it) with the given settings changed (None or
    empty: not given) and every other field kept.

    The mapping is natscli's editAction through nats.go's prepareKeyValueConfig:
    ``history`` -> max_msgs_per_subject; ``ttl`` (seconds) -> max_age and a duplicate
    window of min(ttl, 2m) (2m for 0: for ever); sizes in bytes, 0 or -1 unlimited ->
    max_msg_size/max_bytes (-1); ``marker_ttl`` (seconds) -> subject_delete_marker_ttl
    and allow_msg_ttl; ``tags``/``cluster`` -> a new placement; ``compress`` -> compression
    s2/none; ``metadata`` replaces the map; ``republish`` ({src, dest, headers_only}) the
    republish; ``no_mirror`` drops a mirror and serves ``$KV.B.>`` again; each of ``sources``
    (a bucket, or a stream ``KV_X``) is added with the transform ``$KV.X.>`` -> ``$KV.B.>``.
    Durations go out in nanoseconds, as the API takes them."""
    new = dict(old)
    if description is not None:
        new["description"] = description
    if history is not None:
        new["max_msgs_per_subject"] = history
    if ttl is not None:
        ttl_ns = int(ttl * 1e9)
        new["max_age"] = ttl_ns
        new["duplicate_window"] = ttl_ns if 0 < ttl_ns < KV_DUPLICATE_WINDOW_NS else KV_DUPLICATE_WINDOW_NS
    if max_value_size is not None:
        new["max_msg_size"] = max_value_size if max_value_size > 0 else -1
    if max_bucket_size is not None:
        new["max_bytes"] = max_bucket_size if max_bucket_size > 0 else -1
    if replicas is not None:
        new["num_replicas"] = replicas
    if metadata is not None:
        new["metadata"] = metadata
    if tags or cluster is not None:
        placement: dict[str, Any] = {"cluster": cluster or ""}
        if tags:
            placement["tags"] = list(tags)
        new["placement"] = placement
    if republish is not None:
        new["republish"] = republish
    if sources:
        added = []
        for name in sources:
            origin = name.removeprefix("KV_")
            added.append({"name": f"KV_{origin}",
                          "subject_transforms": [{"src": f"$KV.{origin}.>", "dest": f"$KV.{bucket}.>"}]})
        new["sources"] = list(old.get("sources") or []) + added
    if compress is not None:
        new["compression"] = "s2" if compress else "none"
    if marker_ttl is not None:
        marker_ns = int(marker_ttl * 1e9)
        new["subject_delete_marker_ttl"] = marker_ns
        if marker_ns > 0:
            new["allow_msg_ttl"] = True
    if no_mirror and new.get("mirror") is not None:
        new.pop("mirror")
        new["mirror_direct"] = False
        new["subjects"] = [f"$KV.{bucket}.>"]
    return new


@kv.command("edit")
@bucket_argument
@click.option("--description", help="A description for the bucket.")
@click.option("--history", type=click.IntRange(1, 64), help="How many historic values to keep per key (1 to 64).")
@click.option("--ttl", metavar="DURATION", callback=parsed(parse_duration, "e.g. 1h, 7d"),
              help="How long to keep values (0: for ever).")
@click.option("--marker-ttl", metavar="DURATION", callback=parsed(parse_duration, "e.g. 1h"),
              help="Enables per-key TTLs and limit markers, kept this long.")
@click.option("--replicas", type=click.IntRange(1, 5), help="How many replicas of the data to store.")
@click.option("--max-value-size", metavar="BYTES", callback=value_size,
              help="Maximum size of any single value (-1: unlimited).")
@click.option("--max-bucket-size", metavar="BYTES", callback=parsed(parse_size, "e.g. 1GB"),
              help="Maximum size of the bucket (-1: unlimited).")
@click.option("--tags", multiple=True, help="Place the bucket on servers that have these tags (repeatable).")
@click.option("--cluster", help="Place the bucket on a specific cluster.")
@click.option("--compress/--no-compress", default=None, help="Compress the bucket data (s2).")
@click.option("--metadata", multiple=True, metavar="KEY=VALUE", callback=metadata_pairs,
              help="Replace the bucket's metadata with these pairs (repeatable).")
@click.option("--republish-source", metavar="SRC", help="Republish messages to --republish-destination.")
@click.option("--republish-destination", metavar="DEST",
              help="Republish destination for messages in --republish-source.")
@click.option("--republish-headers", is_flag=True, help="Republish only message headers, no bodies.")
@click.option("--no-mirror", is_flag=True, help="Removes mirror configuration from a bucket.")
@click.option("--source", "sources", multiple=True, metavar="BUCKET",
              help="Source from a different bucket (repeatable).")
@json_option
@pass_options
def kv_edit(opts: Options, bucket: str, description: str | None, history: int | None, ttl: float | None,
            marker_ttl: float | None, replicas: int | None, max_value_size: int | None,
            max_bucket_size: int | None, tags: tuple[str, ...], cluster: str | None, compress: bool | None,
            metadata: dict[str, str] | None, republish_source: str | None, republish_destination: str | None,
            republish_headers: bool, no_mirror: bool, sources: tuple[str, ...]) -> None:
    """Change a bucket's settings (natscli kv edit): $JS.API.STREAM.UPDATE.KV_BUCKET with
    the stream's current config and the given flags applied, every other setting kept;
    prints the bucket's info as 'kv info' does. TTL in Go duration form, sizes in bytes
    (suffixes K, M, G). A setting the server refuses (on jetraft: marker TTL, a replica
    count change) is its one-line error, exit status 1;
    so is a bad flag value."""
    republish = None
    if republish_destination is not None:
        republish = {"src": republish_source or "", "dest": republish_destination,
                     "headers_only": republish_headers}
    elif republish_source is not None or republish_headers:
        fail("--republish-source and --republish-headers need --republish-destination, try --help")
    for name in sources:
        check_bucket(name.removeprefix("KV_"))

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        current = await session.request_json(session.api_subject(f"STREAM.INFO.KV_{bucket}"))
        new = edited_config(
            bucket, dict(current.get("config") or {}), description=description, history=history, ttl=ttl,
            marker_ttl=marker_ttl, replicas=replicas, max_value_size=max_value_size,
            max_bucket_size=max_bucket_size, tags=tags, cluster=cluster, compress=compress, metadata=metadata,
            republish=republish, no_mirror=no_mirror, sources=sources)
        with kv_errors(bucket):
            await session.request_json(session.api_subject(f"STREAM.UPDATE.KV_{bucket}"), new)
        status = await store.status()
        session.show(status.stream_info, lambda info: kv_page(info, bucket))

    run(opts, body)


@kv.command("put")
@bucket_argument
@key_argument
@click.argument("value", required=False)
@json_option
@pass_options
def kv_put(opts: Options, bucket: str, key: str, value: str | None) -> None:
    """Put VALUE into KEY (standard input when VALUE is omitted). Prints VALUE, as natscli
    does; with --json the new revision."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        data = await read_value(session, value)
        with kv_errors(bucket, key):
            revision = await store.put(key, data)
        if session.opts.json:
            session.output_json({"bucket": bucket, "key": key, "revision": revision})
        else:
            session.echo(value or "")

    run(opts, body)


@kv.command("create")
@bucket_argument
@key_argument
@click.argument("value", required=False)
@json_option
@pass_options
def kv_create(opts: Options, bucket: str, key: str, value: str | None) -> None:
    """Put VALUE into KEY only if KEY is new or its last operation was a delete."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        data = await read_value(session, value)
        with kv_errors(bucket, key):
            try:
                revision = await store.create(key, data)
            except nats.js.errors.KeyWrongLastSequenceError:
                raise CliError(f"key {key} already exists in bucket {bucket}: overwrite it with jetraft kv put "
                               f"{bucket} {key}, or use jetraft kv update with its revision") from None
        if session.opts.json:
            session.output_json({"bucket": bucket, "key": key, "revision": revision})
        else:
            session.echo(value or "")

    run(opts, body)


@kv.command("update")
@bucket_argument
@key_argument
@click.argument("value")
@click.argument("revision", type=click.IntRange(min=0))
@json_option
@pass_options
def kv_update(opts: Options, bucket: str, key: str, value: str, revision: int) -> None:
    """Put VALUE into KEY only if REVISION is the key's latest revision."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        with kv_errors(bucket, key):
            try:
                new = await store.update(key, value.encode(), last=revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                raise CliError(f"revision {revision} is not the latest revision of {bucket} > {key}: read the "
                               f"latest with jetraft kv get {bucket} {key}, or see jetraft kv history") from None
        if session.opts.json:
            session.output_json({"bucket": bucket, "key": key, "revision": new})
        else:
            session.echo(value)

    run(opts, body)


async def stored_time(session: Session, stream: str, revision: int | None):
    """When revision ``revision`` of a bucket was stored ($JS.API.STREAM.MSG.GET), or None."""
    if not revision:
        return None
    try:
        return (await session.jsm.get_msg(stream, seq=revision)).time
    except (nats.js.errors.Error, nats.errors.Error):
        return None


@kv.command("get")
@bucket_argument
@key_argument
@click.option("--revision", type=click.IntRange(min=1), help="Get this revision instead of the latest.")
@click.option("--raw", is_flag=True, help="Print only the value, as stored.")
@json_option
@pass_options
def kv_get(opts: Options, bucket: str, key: str, revision: int | None, raw: bool) -> None:
    """Print a key's value: 'BUCKET > KEY revision: N created @ TIME', then the value
    (base64 when not printable; the first 120 characters of a longer one). --raw prints
    only the value's bytes."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        with kv_errors(bucket, key):
            entry = await store.get(key, revision=revision)
        value = entry.value or b""
        if raw:
            out = sys.stdout.buffer
            out.write(value)
            out.flush()
            return
        created = await stored_time(session, f"KV_{bucket}", entry.revision)
        if session.opts.json:
            session.output_json(entry_json(entry, created))
            return
        session.echo(f"{bucket} > {key} revision: {entry.revision} created @ {format_time(created)}")
        session.echo()
        shown = printable(value)
        if len(shown) > 120:
            session.echo(f"Showing first 120 bytes of {len(shown):,}, use --raw for full data\n")
            shown = shown[:120]
        session.echo(shown)
        session.echo()

    run(opts, body)


@kv.command("del")
@bucket_argument
@click.argument("key", required=False, callback=lambda _c, _p, v: None if v is None else check_key(v))
@force_option
@pass_options
def kv_del(opts: Options, bucket: str, key: str | None, force: bool) -> None:
    """Delete KEY (a delete marker; history is kept), or without KEY the whole bucket
    (alias: rm). Asks first unless -f."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        if key is None:
            confirm(force, f"Delete bucket {bucket}?")
            with kv_errors(bucket):
                await session.js.delete_key_value(bucket)
            return
        confirm(force, f"Delete key {bucket} > {key}?")
        with kv_errors(bucket, key):
            await store.delete(key)

    run(opts, body)


@kv.command("purge")
@bucket_argument
@key_argument
@force_option
@pass_options
def kv_purge(opts: Options, bucket: str, key: str, force: bool) -> None:
    """Remove KEY and its history: one purge marker stays (natscli kv purge). Asks first
    unless -f."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        confirm(force, f"Purge key {bucket} > {key}?")
        with kv_errors(bucket, key):
            await store.purge(key)

    run(opts, body)


@kv.command("revert")
@bucket_argument
@key_argument
@click.argument("revision", type=click.IntRange(min=1))
@force_option
@pass_options
def kv_revert(opts: Options, bucket: str, key: str, revision: int, force: bool) -> None:
    """Put the value KEY had at REVISION back as its latest value (natscli kv revert).
    A revision that is a delete or purge, or that the bucket no longer holds, is an error.
    Asks first unless -f."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        with kv_errors(bucket, key):
            old = await store.get(key, revision=revision)
        if old.operation in (KV_DEL, KV_PURGE):
            raise CliError(f"revision {revision} of {bucket} > {key} is a {OPERATIONS.get(old.operation, 'delete')}, "
                           f"not a value: see jetraft kv history {bucket} {key}")
        confirm(force, f"Revert {bucket} > {key} to revision {revision}?")
        with kv_errors(bucket, key):
            new = await store.put(key, old.value or b"")
        if session.opts.json:
            session.output_json({"bucket": bucket, "key": key, "revision": new, "reverted_to": revision})
            return
        session.echo(f"{bucket} > {key} revision {new}: the value of revision {revision}")

    run(opts, body)


@kv.command("compact")
@bucket_argument
@force_option
@pass_options
def kv_compact(opts: Options, bucket: str, force: bool) -> None:
    """Reclaim the space of deleted and purged keys (natscli kv compact, nats-py
    purge_deletes): their earlier values go; a marker older than 30 minutes goes too, a
    younger one stays so that watchers still see the delete. Asks first unless -f."""

    async def body(session: Session) -> None:
        store = await load_bucket(session, bucket)
        confirm(force, f"Purge all historic values and audit trails for deleted keys in bucket {bucket}?")
        with kv_errors(bucket):
            await store.purge_deletes()

    run(opts, body)


@kv.command("history")
@bucket_argument
@key_argument
@json_option
@pass_options
def kv_history(opts: Options, bucket: str, key: str) -> None:
    """Every revision kept of KEY: a table of Key, Revision, Op, Created, Length, Value."""

    async def body(session: Session) -> None:
        await load_bucket(session, bucket)
        with kv_errors(bucket, key):
            entries = await bucket_entries(session, bucket, key, history=True)
            if not entries:
                raise nats.js.errors.NoKeysError
        if session.opts.json:
            session.output_json([entry_json(e) for e in entries])
            return
        rows = [(e.key, e.revision, OPERATIONS.get(e.operation, str(e.operation)), format_time(e.created),
                 format_count(len(e.value or b"")), shortened(e.value or b"")) for e in entries]
        print_table(f"History for {bucket} > {key}", ["Key", "Revision", "Op", "Created", "Length", "Value"],
                    rows, right=(1, 4))

    run(opts, body)


async def bucket_streams(session: Session, prefix: str) -> list[dict]:
    """The streams named ``prefix`` + bucket whose subjects are a bucket's (``$KV.B.>`` for
    ``KV_``; ``$O.B.C.>`` for ``OBJ_``), as the raw JSON of $JS.API.STREAM.LIST (page by
    page), which keeps each stream's ``state.last_ts``."""
    found: list[dict] = []
    offset = 0
    while True:
        page = await session.request_json(session.api_subject("STREAM.LIST"), {"offset": offset})
        streams = page.get("streams") or []
        offset += len(streams)
        for info in streams:
            name = str(info.get("config", {}).get("name", ""))
            bucket = name.removeprefix(prefix)
            subjects = info.get("config", {}).get("subjects") or []
            wanted = f"$KV.{bucket}.>" if prefix == "KV_" else f"$O.{bucket}.C.>"
            if name.startswith(prefix) and wanted in subjects:
                found.append(info)
        if not streams or offset >= int(page.get("total") or 0):
            return found


@kv.command("ls")
@click.argument("bucket", required=False, callback=lambda _c, _p, v: None if v is None else check_bucket(v))
@click.option("-n", "--names", is_flag=True, help="Print only the bucket names, one a line.")
@json_option
@pass_options
def kv_ls(opts: Options, bucket: str | None, names: bool) -> None:
    """Without BUCKET, the buckets (a table of Bucket, Description, Created, Size, Values,
    Last Update, smallest first); with BUCKET, its keys, one a line (alias: list)."""

    async def body(session: Session) -> None:
        if bucket is not None:
            await load_bucket(session, bucket)
            with kv_errors(bucket):
                keys = await bucket_keys(session, bucket)
            if session.opts.json:
                session.output_json(keys)
            elif not keys:
                session.echo("No keys found in bucket")
            else:
                session.echo("\n".join(keys))
            return
        found = sorted(await bucket_streams(session, "KV_"), key=lambda s: s.get("state", {}).get("bytes", 0))
        bucket_names = [s["config"]["name"].removeprefix("KV_") for s in found]
        if session.opts.json:
            session.output_json(bucket_names if names else found)
        elif names:
            for name in bucket_names:
                session.echo(name)
        elif not found:
            session.echo("No Key-Value buckets found")
        else:
            rows = [(name, s["config"].get("description") or "", format_time(s.get("created")),
                     format_bytes(s["state"].get("bytes")), format_count(s["state"].get("messages")),
                     since(s["state"].get("last_ts")))
                    for name, s in zip(bucket_names, found)]
            print_table("Key-Value Buckets", ["Bucket", "Description", "Created", "Size", "Values", "Last Update"],
                        rows, right=(3, 4))

    run(opts, body)


def watch_line(entry: KeyValue.Entry) -> str:
    """natscli's watch line: ``[TIME] PUT B > K: VALUE`` or ``[TIME] DELETE B > K``."""
    op = OPERATIONS.get(entry.operation, str(entry.operation))
    head = f"[{format_time(entry.created)}] {op} {entry.bucket} > {entry.key}"
    if op == "PUT":
        return f"{head}: {(entry.value or b'').decode(errors='replace')}"
    return head


async def watched(session: Session, store: KeyValue, key: str) -> AsyncIterator[KeyValue.Entry]:
    """The latest value of every key matching ``key``, then every change, until Ctrl-C."""
    watcher = await store.watch(key)
    ended = object()
    try:
        while True:
            entry = await until_stopped(session, anext(watcher, ended))
            if session.stop.is_set() or entry is ended:
                return
            if entry is not None:  # None: the values stored before the watch have all been seen
                yield entry
    finally:
        with contextlib.suppress(nats.errors.Error):
            await watcher.stop()


@kv.command("watch")
@bucket_argument
@click.argument("key", default=">", callback=lambda _c, _p, v: check_key(v, wildcards=True))
@json_option
@pass_options
def kv_watch(opts: Options, bucket: str, key: str) -> None:
    """Print the latest value of each key matching KEY (default '>': all), then every
    update as it happens, one line each, until Ctrl-C (which ends it with status 0)."""

    async def body(session: Session) -> None:
        session.handles_interrupt = True
        store = await load_bucket(session, bucket)
        async for entry in watched(session, store, key):
            session.echo(json.dumps(entry_json(entry)) if session.opts.json else watch_line(entry))

    run(opts, body)
