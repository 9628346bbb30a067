"""``jetraft object ...``: add, edit, info, put, get, ls, rm, seal, watch.

The Object store of natscli's ``nats object`` (cli/object_command.go), through nats-py's
:class:`nats.js.object_store.ObjectStore`: a bucket ``B`` is the stream ``OBJ_B``; an
object is a metadata message on ``$O.B.M.<base64 name>`` and its data in chunks (128 KiB
by default) on ``$O.B.C.<nuid>``, checked against a SHA-256 digest when read back.

Files are streamed: ``put`` hands nats-py the open file, which reads one chunk at a time;
``get`` writes each chunk as it arrives to a temporary file beside the target, renamed
over it once the digest matched, so a failed download never leaves half a file. ``get``
refuses to replace an existing file unless ``-f`` (or a yes on a terminal). Without
``--output`` the file is the stored name's last part, in the current directory and nowhere
else; a stored name that gives no safe file name there (empty, ``.``, ``..``, control
characters, or metadata that names another object) is refused with one line asking for
``--output`` (:func:`default_file_name`), as the metadata is whatever was published to the
bucket's ``$O.B.M.`` subject. Names, flags and layouts are natscli's; ``--json`` prints the
stream info (bucket) or the object info. Text output shows control characters of stored
names and descriptions escaped (:func:`shown`), never raw on a terminal.

``seal`` makes a bucket read-only for good (the stream's ``sealed``; nats-py
``ObjectStore.seal``); ``edit`` changes a bucket's description, TTL, size limit, replicas,
placement, metadata or compression with $JS.API.STREAM.UPDATE, keeping every setting not
given; ``watch`` prints each object's latest metadata, then every put and delete, until
Ctrl-C (exit status 0).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import os
import re
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

import click
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.object_store import ObjectStore

from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option, json_option, parsed, pass_options
from jetraft.cli.admin.kv import STORAGE, bucket_advice, bucket_streams, check_bucket
from jetraft.cli.admin.messages import until_stopped
from jetraft.cli.admin.render import LABEL_WIDTH, Page, cluster_rows, print_table, title_case
from jetraft.cli.admin.session import CliError, Options, Session, run
from jetraft.cli.admin.units import (
    format_bytes,
    format_duration,
    format_limit,
    format_time,
    parse_duration,
    parse_size,
    since,
)


#: How many watched updates wait to be printed before the subscription is held back.
WATCH_QUEUE = 256
#: nats-server's JSStreamSealedErr: "invalid operation on sealed stream".
SEALED_ERR_CODE = 10109


class ObjectAliases(AliasedGroup):
    """``object`` also answers to natscli's aliases (``del`` for ``rm``, ``show``/``i`` for ``info``)."""

    LOCAL = {"show": "info", "i": "info"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.LOCAL.get(cmd_name, cmd_name))


def bucket_argument(fn):
    """The BUCKET argument, checked by :func:`jetraft.cli.admin.kv.check_bucket`."""
    return click.argument("bucket", callback=lambda _c, _p, v: check_bucket(v))(fn)


@contextlib.contextmanager
def object_errors(bucket: str, name: str | None = None):
    """Turn nats-py's Object store exceptions into one CliError line saying what to do."""
    try:
        yield
    except nats.js.errors.BucketNotFoundError:
        raise CliError(f"object store bucket {bucket} not found: check the name (jetraft object ls), "
                       f"or add it (jetraft object add {bucket})") from None
    except nats.js.errors.InvalidBucketNameError:
        raise CliError(f"invalid bucket name {bucket!r}: bucket names may contain only letters, digits, "
                       "'-' and '_'") from None
    except nats.js.errors.ObjectDeletedError:
        raise CliError(f"object {name} in bucket {bucket} was deleted: list the objects with "
                       f"jetraft object ls {bucket}") from None
    except nats.js.errors.ObjectNotFoundError:
        raise CliError(f"object {name} not found in bucket {bucket}: list the objects with "
                       f"jetraft object ls {bucket}") from None
    except nats.js.errors.DigestMismatchError:
        raise CliError(f"object {bucket} > {name} does not match its SHA-256 digest (its chunks are damaged "
                       "or were replaced while reading): get it again, or put it again") from None
    except nats.js.errors.BadObjectMetaError:
        raise CliError(f"the metadata of object {bucket} > {name} cannot be read: put the object again") from None
    except nats.js.errors.LinkIsABucketError:
        raise CliError(f"object {bucket} > {name} is a link to a whole bucket, not to one object") from None
    except nats.js.errors.APIError as exc:
        if exc.err_code == SEALED_ERR_CODE:
            raise CliError(f"{exc.description} (err_code {exc.err_code}): bucket {bucket} is sealed, its "
                           f"objects can be read but not changed (jetraft object info {bucket})") from None
        advised = bucket_advice(exc, "object", bucket)
        if advised is None:
            raise
        raise advised from None


async def load_store(session: Session, bucket: str) -> ObjectStore:
    """The bucket (nats-py ``js.object_store``: $JS.API.STREAM.INFO.OBJ_B). Raises CliError
    when it does not exist."""
    with object_errors(bucket):
        return await session.js.object_store(bucket)


async def object_info(store: ObjectStore, bucket: str, name: str) -> api.ObjectInfo:
    """The object's info; CliError when there is none or it was deleted (said apart)."""
    with object_errors(bucket, name):
        info = await store.get_info(name, show_deleted=True)
        if info.deleted:
            raise nats.js.errors.ObjectDeletedError
    return info


def shown(text: str | None) -> str:
    """Stored text for a terminal: control characters (and lone surrogates, which cannot be
    printed) as ``\\xNN``/``\\uNNNN`` escapes, so metadata cannot move the cursor, retitle
    the window or forge lines; other text unchanged."""
    if not text:
        return text or ""
    return "".join(ascii(c)[1:-1] if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)


#: Both separators: a name stored by a Windows client may use either.
NAME_SEPARATORS = re.compile(r"[/\\]")
#: The longest file name (in bytes) Linux and macOS file systems take.
NAME_MAX = 255


def default_file_name(info: api.ObjectInfo, bucket: str, name: str) -> str:
    """The file ``object get`` writes without --output: the last part of the object's stored
    name (natscli's filepath.Base), to be created in the current directory only.

    The stored name comes from metadata anyone allowed to publish to the bucket can write,
    so it is checked, and a CliError asking for --output names what is wrong: it must be the
    name asked for (the metadata subject is derived from the name, so any other is forged),
    hold no control character, and leave a last part that is neither empty, ``.`` nor ``..``.
    """
    stored = info.name if isinstance(info.name, str) else ""
    advice = f"give --output FILE to say where to write object {bucket} > {shown(name)}"
    if stored != name:
        raise CliError(f"the metadata of object {bucket} > {shown(name)} names another object, "
                       f"'{shown(stored)}' (it was not written by an object store client): {advice}")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in stored):
        raise CliError(f"object name '{shown(stored)}' holds control characters, which make no file name: "
                       f"{advice}")
    base = NAME_SEPARATORS.split(stored)[-1]
    if base in ("", ".", ".."):
        raise CliError(f"object name '{shown(stored)}' ends in {('nothing' if not base else repr(base))}, "
                       f"which makes no file name: {advice}")
    if len(base.encode()) > NAME_MAX:
        raise CliError(f"object name '{shown(stored[:40])}...' ends in {len(base.encode()):,} bytes, too long "
                       f"for a file name (at most {NAME_MAX}): {advice}")
    return base


def bucket_page(info: api.StreamInfo, bucket: str) -> str:
    """``object info BUCKET`` as natscli's showBucketInfo lays it out."""
    cfg, state = info.config, info.state
    page = Page(f"Information for Object Store Bucket {bucket} created {format_time(info.created)}")
    rows = page.section("Configuration")
    rows.append(("Bucket Name", bucket))
    if cfg.description:
        rows.append(("Description", cfg.description))
    rows.append(("Replicas", str(cfg.num_replicas or 1)))
    rows.append(("TTL", format_limit(cfg.max_age, format_duration)))
    rows.append(("Sealed", str(bool(cfg.sealed)).lower()))
    rows.append(("Size", format_bytes(state.bytes)))
    rows.append(("Maximum Bucket Size", format_limit(cfg.max_bytes, format_bytes)))
    rows.append(("Storage", title_case(cfg.storage)))
    rows.append(("Backing Store Kind", "JetStream"))
    rows.append(("JetStream Stream", cfg.name or f"OBJ_{bucket}"))
    for key, value in sorted((cfg.metadata or {}).items()):
        if not key.startswith("_nats"):          # the server's own keys (jsm.go FilterServerMetadata)
            rows.append(("Metadata", f"{key}: {value}"))
    cluster_rows(page.section("Cluster Information"), info.cluster)
    return page.render()


def digest_hex(digest: str | None) -> str:
    """``SHA-256=<base64url>`` -> ``SHA-256 <hex>``, as natscli shows a digest."""
    kind, _, encoded = (digest or "").partition("=")
    if not encoded:
        return digest or ""
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except ValueError:
        return digest or ""
    return f"{kind} {raw.hex()}"


def object_page(info: api.ObjectInfo) -> str:
    """``object info BUCKET NAME`` as natscli's showObjectInfo lays it out."""
    rows: list[tuple[str, str]] = []
    if info.description:
        rows.append(("Description", shown(info.description)))
    rows.append(("Size", format_bytes(info.size)))
    rows.append(("Modification Time", format_time(info.mtime) if info.mtime else "unknown"))
    rows.append(("Chunks", f"{info.chunks or 0:,}"))
    rows.append(("Digest", digest_hex(info.digest)))
    if info.deleted:
        rows.append(("Deleted", "true"))
    for key, value in (info.headers or {}).items():
        for item in value if isinstance(value, list) else [value]:
            rows.append(("Headers", f"{shown(key)}: {shown(str(item))}"))
    width = max([LABEL_WIDTH] + [len(label) + 1 for label, _ in rows])
    lines = [f"Object information for {shown(info.bucket)} > {shown(info.name)}", ""]
    lines += [f"{label:>{width}}: {value}" for label, value in rows]
    return "\n".join(lines) + "\n"


@click.group("object", cls=ObjectAliases)
def object_() -> None:
    """Object store: buckets of files of any size, stored in chunks (natscli's 'nats object'; alias: obj)."""


def object_alias(name: str) -> click.Group:
    """The ``object`` group under another name (natscli's ``obj``), hidden from the help."""
    alias = copy.copy(object_)
    alias.name, alias.hidden = name, True
    return alias


@object_.command("add")
@bucket_argument
@click.option("--ttl", default="0", callback=parsed(parse_duration, "e.g. 1h, 7d"),
              help="How long to keep objects (0: for ever).")
@click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True,
              help="How many replicas of the data to store.")
@click.option("--max-bucket-size", default="-1", callback=parsed(parse_size, "e.g. 1GB"),
              help="Maximum size of the bucket (-1: unlimited).")
@click.option("--description", help="A description of the bucket.")
@click.option("--storage", type=click.Choice(sorted(STORAGE)), default="file", show_default=True,
              help="Storage backend.")
@json_option
@pass_options
def object_add(opts: Options, bucket: str, ttl: float, replicas: int, max_bucket_size: int,
               description: str | None, storage: str) -> None:
    """Add a bucket (the stream OBJ_BUCKET, through nats-py's create_object_store); prints
    its info as 'object info BUCKET' does."""
    config = api.ObjectStoreConfig(bucket=bucket, description=description, ttl=ttl or None,
                                   max_bytes=max_bucket_size, storage=STORAGE[storage], replicas=replicas)

    async def body(session: Session) -> None:
        with object_errors(bucket):
            store = await session.js.create_object_store(bucket, config=config)
            status = await store.status()
        session.show(status.stream_info, lambda info: bucket_page(info, bucket))

    run(opts, body)


@object_.command("info")
@bucket_argument
@click.argument("name", required=False)
@json_option
@pass_options
def object_info_cmd(opts: Options, bucket: str, name: str | None) -> None:
    """Show a bucket, or with NAME one object: size, time, chunks, digest (aliases: show, i)."""

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        if name is None:
            status = await store.status()
            session.show(status.stream_info, lambda info: bucket_page(info, bucket))
            return
        session.show(await object_info(store, bucket, name), object_page)

    run(opts, body)


@object_.command("put")
@bucket_argument
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--name", help="The object's name (default: FILE as given; required for standard input).")
@click.option("--description", help="A description of the object.")
@force_option
@json_option
@pass_options
def object_put(opts: Options, bucket: str, file: str | None, name: str | None, description: str | None,
               force: bool) -> None:
    """Store FILE (standard input without FILE) in chunks, read one at a time; prints the
    object's info. Replacing an existing object asks first unless -f."""
    if file is None and not name:
        raise click.UsageError("--name is required when reading from standard input")
    object_name = name or os.path.normpath(file or "")

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        try:
            existing = await store.get_info(object_name)
        except nats.js.errors.NotFoundError:
            existing = None
        if existing is not None and not force:
            if not sys.stdin.isatty():
                raise CliError(f"object {bucket} > {object_name} exists: give -f to replace it, or --name "
                               "to store under another name")
            session.echo(object_page(existing))
            confirm(force, f"Replace existing file {bucket} > {object_name}")
        meta = api.ObjectMeta(name=object_name, description=description)
        with contextlib.ExitStack() as stack:
            source = (stack.enter_context(open(file, "rb")) if file is not None  # noqa: SIM115
                      else sys.stdin.buffer)
            with object_errors(bucket, object_name):
                info = await store.put(object_name, source, meta=meta)
        if session.opts.json:
            session.output_json(info)
        else:
            session.echo(object_page(info))

    run(opts, body)


@object_.command("get")
@bucket_argument
@click.argument("name")
@click.option("-O", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write to this file (default: the object name's last part, in the current directory).")
@force_option
@pass_options
def object_get(opts: Options, bucket: str, name: str, output: str | None, force: bool) -> None:
    """Write an object to a file, chunk by chunk; the digest is checked before the file
    takes its name. Prints 'Wrote: SIZE to PATH in TIME'. An existing file is replaced
    only with -f (or a yes on a terminal)."""

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        info = await object_info(store, bucket, name)
        if output:
            target = Path(output).absolute()
        else:
            target = Path.cwd() / default_file_name(info, bucket, name)
        if target.is_dir():
            raise CliError(f"{target} is a directory: give --output a file path")
        if target.exists() and not force:
            if not sys.stdin.isatty():
                raise CliError(f"{target} exists: give -f to replace it, or --output to write elsewhere")
            confirm(force, f"Replace existing target file {target}")
        start = time.monotonic()
        try:
            prefix = os.fsdecode(os.fsencode(target.name)[:200])     # the temporary name fits NAME_MAX too
            fd, temp = tempfile.mkstemp(prefix=f".{prefix}.", dir=target.parent)
        except OSError as exc:
            raise CliError(f"cannot write in {target.parent}: {exc.strerror or exc} "
                           "(give --output a path in a writable directory)") from None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # as a file created the ordinary way, not mkstemp's 0600
        try:
            with os.fdopen(fd, "wb") as sink:
                with object_errors(bucket, name):
                    await store.get(name, writeinto=sink)
                written = sink.tell()
            if written != (info.size or 0):
                raise CliError(f"wrote {format_bytes(written)}, expected {format_bytes(info.size)}: "
                               "the object changed while reading; get it again")
            try:
                os.replace(temp, target)
            except OSError as exc:
                raise CliError(f"cannot write {target}: {exc.strerror or exc} "
                               "(give --output a path in a writable directory)") from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        elapsed = time.monotonic() - start
        rate = f" average {format_bytes(written / elapsed)}/s" if elapsed > 2 else ""
        session.echo(f"Wrote: {format_bytes(written)} to {target} in {format_duration(round(elapsed, 2))}{rate}")

    run(opts, body)


@object_.command("ls")
@click.argument("bucket", required=False, callback=lambda _c, _p, v: None if v is None else check_bucket(v))
@click.option("-n", "--names", is_flag=True, help="Print only the names, one a line.")
@json_option
@pass_options
def object_ls(opts: Options, bucket: str | None, names: bool) -> None:
    """Without BUCKET, the buckets (Bucket, Description, Created, Size, Last Update); with
    BUCKET, its objects (Name, Size, Time), deleted ones left out."""

    async def body(session: Session) -> None:
        if bucket is not None:
            store = await load_store(session, bucket)
            try:
                contents = await store.list(ignore_deletes=True)
            except nats.js.errors.NotFoundError:
                contents = []
            contents = [c for c in contents if not c.deleted]
            if session.opts.json:
                session.output_json([c.name for c in contents] if names else contents)
            elif names:
                for c in contents:
                    session.echo(shown(c.name))
            elif not contents:
                session.echo("No entries found")
            else:
                rows = [(shown(c.name), format_bytes(c.size), format_time(c.mtime)) for c in contents]
                print_table("Bucket Contents", ["Name", "Size", "Time"], rows, right=(1,))
            return
        found = sorted(await bucket_streams(session, "OBJ_"), key=lambda s: s.get("state", {}).get("bytes", 0))
        bucket_names = [s["config"]["name"].removeprefix("OBJ_") for s in found]
        if session.opts.json:
            session.output_json(bucket_names if names else found)
        elif names:
            for n in bucket_names:
                session.echo(n)
        elif not found:
            session.echo("No Object Store buckets found")
        else:
            rows = [(n, s["config"].get("description") or "", format_time(s.get("created")),
                     format_bytes(s["state"].get("bytes")), since(s["state"].get("last_ts")))
                    for n, s in zip(bucket_names, found)]
            print_table("Object Store Buckets", ["Bucket", "Description", "Created", "Size", "Last Update"],
                        rows, right=(3,))

    run(opts, body)


@object_.command("rm")
@bucket_argument
@click.argument("name", required=False)
@force_option
@pass_options
def object_rm(opts: Options, bucket: str, name: str | None, force: bool) -> None:
    """Delete object NAME (its chunks are purged), or without NAME the whole bucket
    (alias: del). Asks first unless -f; after an object, prints 'Removed BUCKET > NAME'
    and the bucket's info."""

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        if name is None:
            confirm(force, f"Delete bucket {bucket} and all its files?")
            with object_errors(bucket):
                await session.js.delete_object_store(bucket)
            return
        info = await object_info(store, bucket, name)
        confirm(force, f"Delete {format_bytes(info.size)} byte file {bucket} > {name}?")
        with object_errors(bucket, name):
            await store.delete(name)
        session.echo(f"Removed {bucket} > {name}")
        status = await store.status()
        session.echo(bucket_page(status.stream_info, bucket))

    run(opts, body)


@object_.command("seal")
@bucket_argument
@force_option
@json_option
@pass_options
def object_seal(opts: Options, bucket: str, force: bool) -> None:
    """Seal a bucket for good: no object can be put or removed any more, and it cannot be
    unsealed (nats-py ObjectStore.seal: the stream's 'sealed'). Asks first unless -f;
    prints 'BUCKET has been sealed' and the bucket's info."""

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        confirm(force, f"Really seal Bucket {bucket}, sealed buckets can not be unsealed or modified")
        with object_errors(bucket):
            await store.seal()
            status = await store.status()
        if session.opts.json:
            session.output_json(status.stream_info)
            return
        session.echo(f"{bucket} has been sealed")
        session.echo(bucket_page(status.stream_info, bucket))

    run(opts, body)


def watch_line(info: api.ObjectInfo, when: object) -> str:
    """natscli's object watch line: ``[TIME] PUT B > N: SIZE bytes in N chunks`` (natscli
    prints the IEC size and the word bytes both) or ``[TIME] DEL B > N``; TIME is when the
    server stored the metadata."""
    head = f"[{format_time(when)}]"
    if info.deleted:
        return f"{head} DEL {shown(info.bucket)} > {shown(info.name)}"
    return (f"{head} PUT {shown(info.bucket)} > {shown(info.name)}: {format_bytes(info.size)} bytes in "
            f"{info.chunks or 0:,} chunks")


@object_.command("watch")
@bucket_argument
@json_option
@pass_options
def object_watch(opts: Options, bucket: str) -> None:
    """Print the latest metadata of each object in the bucket, deleted ones included, then
    every put and delete as it happens, one line each, until Ctrl-C (which ends it with
    status 0). With --json, one object info a line, 'mtime' the time the server stored it."""

    async def body(session: Session) -> None:
        session.handles_interrupt = True
        await load_store(session, bucket)
        # The ordered consumer of nats-py's ObjectStore.watch(include_history=True), read
        # here because it keeps each message's stored time, which natscli shows. The queue
        # is bounded: a full one holds back the subscription (nats-py's pending limits).
        updates: asyncio.Queue[tuple[api.ObjectInfo, Any]] = asyncio.Queue(maxsize=WATCH_QUEUE)

        async def on_msg(msg) -> None:
            try:
                info = api.ObjectInfo.from_response(json.loads(msg.data))
            except (ValueError, TypeError, KeyError):
                return              # not object metadata: skipped, as nats.go's watcher does
            await updates.put((info, msg.metadata.timestamp))

        sub = await session.js.subscribe(f"$O.{bucket}.M.>", stream=f"OBJ_{bucket}", cb=on_msg,
                                         ordered_consumer=True, deliver_policy=api.DeliverPolicy.ALL)
        try:
            while True:
                update = await until_stopped(session, updates.get())
                if update is None or session.stop.is_set():
                    return
                info, when = update
                if session.opts.json:
                    session.echo(json.dumps({**info.as_dict(), "mtime": when.isoformat()}, default=str))
                else:
                    session.echo(watch_line(info, when))
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    run(opts, body)


def parse_metadata(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str] | None:
    """``--metadata KEY:VALUE`` (or ``KEY=VALUE``), repeatable, as natscli's fisk string map
    reads it; None when not given."""
    if not values:
        return None
    out: dict[str, str] = {}
    for item in values:
        parts = re.split(r"[:=]", item, maxsplit=1)
        if len(parts) != 2 or not parts[0]:
            raise click.BadParameter(f"expected KEY=VALUE got {item!r}", param=param)
        out[parts[0]] = parts[1]
    return out


@object_.command("edit")
@bucket_argument
@click.option("--ttl", callback=parsed(parse_duration, "e.g. 1h, 7d"),
              help="How long to keep objects (0: for ever).")
@click.option("--replicas", type=click.IntRange(1, 5), help="How many replicas of the data to store.")
@click.option("--max-bucket-size", callback=parsed(parse_size, "e.g. 1GB"),
              help="Maximum size of the bucket (-1: unlimited).")
@click.option("--description", help="A description of the bucket.")
@click.option("--tags", multiple=True, help="Place the bucket on servers with this tag (repeatable).")
@click.option("--cluster", help="Place the bucket in this cluster.")
@click.option("--metadata", multiple=True, metavar="META", callback=parse_metadata,
              help="Metadata KEY:VALUE, repeatable; replaces the bucket's metadata.")
@click.option("--compress/--no-compress", default=None, help="Compress the bucket's data (s2).")
@json_option
@pass_options
def object_edit(opts: Options, bucket: str, ttl: float | None, replicas: int | None, max_bucket_size: int | None,
                description: str | None, tags: tuple[str, ...], cluster: str | None,
                metadata: dict[str, str] | None, compress: bool | None) -> None:
    """Change a bucket's settings: only those given change, the others are kept (natscli
    object edit; $JS.API.STREAM.UPDATE of the stream OBJ_BUCKET). Prints the bucket's info
    as 'object info BUCKET' does. TTL in Go duration form, sizes in bytes (suffixes K, M, G)."""

    async def body(session: Session) -> None:
        store = await load_store(session, bucket)
        stream = f"OBJ_{bucket}"
        with object_errors(bucket):
            current = await session.request_json(session.api_subject(f"STREAM.INFO.{stream}"))
        config = dict(current.get("config") or {})
        if description is not None:
            config["description"] = description
        if ttl is not None:
            config["max_age"] = int(round(ttl * 1e9))
            config.pop("duplicate_window", None)     # the server's default for the new age, as nats.go sends none
        if replicas is not None:
            config["num_replicas"] = replicas
        if max_bucket_size is not None:
            config["max_bytes"] = max_bucket_size
        if tags or cluster is not None:
            placement = dict(config.get("placement") or {})
            if cluster is not None:
                placement["cluster"] = cluster
            if tags:
                placement["tags"] = list(tags)
            config["placement"] = placement
        if metadata is not None:
            config["metadata"] = metadata
        if compress is not None:
            config["compression"] = "s2" if compress else "none"
        with object_errors(bucket):
            await session.request_json(session.api_subject(f"STREAM.UPDATE.{stream}"), config)
            status = await store.status()
        session.show(status.stream_info, lambda info: bucket_page(info, bucket))

    run(opts, body)
