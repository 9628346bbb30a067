"""``jetraft context ...``: named connection settings, in the ``nats`` CLI's files.

A context is ``$XDG_CONFIG_HOME/nats/context/NAME.json`` (``~/.config`` without
XDG_CONFIG_HOME), the selected one is named in ``nats/context.txt``: the files and JSON
fields the ``nats`` CLI reads and writes, so a context made by either tool works with the
other. Fields jetraft does not use (``nkey``, ``socks_proxy``, ``color_scheme`` ...) are
kept as they are when a context is updated.

A context holds passwords and tokens: files are written 0600 (replaced atomically, never
left half-written) in a 0700 directory, and ``context info`` shows a password as stars.

    jetraft context add lab --server nats://10.0.0.1:4222 --user app --password s3cret --select
    jetraft context ls
    jetraft context select prod
    jetraft context info
    jetraft context rm lab -f
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import click

from jetraft.cli.admin.groups import AliasedGroup, confirm, force_option
from jetraft.cli.admin.render import LABEL_WIDTH, print_table
from jetraft.cli.admin.session import DEFAULT_URL, context_dir, fail, selected_context

#: The context file's fields in the ``nats`` CLI's order, with its defaults.
FIELDS: dict[str, Any] = {
    "description": "", "url": DEFAULT_URL, "socks_proxy": "", "token": "", "user": "", "password": "",
    "creds": "", "nkey": "", "cert": "", "key": "", "ca": "", "nsc": "", "jetstream_domain": "",
    "jetstream_api_prefix": "", "jetstream_event_prefix": "", "inbox_prefix": "", "user_jwt": "",
    "color_scheme": "", "tls_first": False,
}

#: The ``nats`` CLI's other names for the context subcommands.
CONTEXT_ALIASES = {"save": "add", "switch": "select", "set": "select", "show": "info", "remove": "rm"}


class ContextGroup(AliasedGroup):
    """``context`` answers to the ``nats`` CLI's names of its subcommands too."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, CONTEXT_ALIASES.get(cmd_name, cmd_name))


@click.group("context", cls=ContextGroup)
def context() -> None:
    """Manage connection contexts (the nats CLI's files: ~/.config/nats/context/NAME.json)."""


def check_name(name: str) -> str:
    """``name`` if it can name a context file (not empty, no ``..``, no ``/``), else exit 1."""
    if not name or ".." in name or os.sep in name or "/" in name:
        fail(f"invalid context name {name!r}: use a plain name, without '/' or '..'")
    return name


def context_path(name: str) -> Path:
    return context_dir() / f"{check_name(name)}.json"


def known_contexts() -> list[str]:
    """The names of the saved contexts, sorted (empty files skipped, as the ``nats`` CLI does)."""
    try:
        files = [p for p in context_dir().iterdir() if p.suffix == ".json" and p.is_file()]
    except OSError:
        return []
    return sorted(p.stem for p in files if p.stat().st_size > 0)


def read_context(name: str) -> dict[str, Any]:
    """The context NAME: every field of :data:`FIELDS` (defaults filled in), then any other
    field its file has. Exits 1 when it does not exist or cannot be read."""
    path = context_path(name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"unknown context {name!r}: no file {path} (jetraft context ls lists the contexts)")
        raise
    except (OSError, ValueError) as exc:
        fail(f"cannot read context file {path}: {exc} (fix it, or remove it with jetraft context rm {name})")
        raise
    if not isinstance(data, dict):
        fail(f"context file {path} does not hold a JSON object (fix it, or remove it with jetraft context rm {name})")
    return {**FIELDS, **{k: v for k, v in data.items() if k in FIELDS and v is not None},
            **{k: v for k, v in data.items() if k not in FIELDS}}


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, atomically, its directory made 0700."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_context(name: str, data: dict[str, Any]) -> Path:
    """Write the context NAME (indented JSON, as the ``nats`` CLI writes it). Exits 1 on failure."""
    path = context_path(name)
    try:
        _write_private(path, json.dumps(data, indent=2))
    except OSError as exc:
        fail(f"cannot save context {name} to {path}: {exc}")
    return path


def select_context(name: str) -> None:
    """Name ``name`` in ``nats/context.txt`` (0600), as ``nats context select`` does."""
    path = context_dir().parent / "context.txt"
    try:
        _write_private(path, name)
        context_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot select context {name}: cannot write {path}: {exc}")


def _file_state(path: str) -> str:
    return f"{path} ({'OK' if os.access(path, os.R_OK) and Path(path).is_file() else 'ERROR'})"


def context_page(name: str, data: dict[str, Any]) -> str:
    """``context info``: the ``nats`` CLI's page of one context, secrets as stars."""
    rows: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value:
            rows.append((label, str(value)))

    add("Description", data.get("description"))
    add("Server URLs", data.get("url") or DEFAULT_URL)
    add("SOCKS5 Proxy", data.get("socks_proxy"))
    add("Username", data.get("user"))
    add("Password", "*" * len(data.get("password") or ""))
    add("Token", "*" * len(data.get("token") or ""))
    for label, key in (("Credentials", "creds"), ("NKey", "nkey"), ("Certificate", "cert"),
                       ("Key", "key"), ("CA", "ca")):
        if data.get(key):
            add(label, _file_state(str(data[key])))
    add("TLS First", "true" if data.get("tls_first") else "")
    add("NSC Lookup", data.get("nsc"))
    add("JS API Prefix", data.get("jetstream_api_prefix"))
    add("JS Event Prefix", data.get("jetstream_event_prefix"))
    add("JS Domain", data.get("jetstream_domain"))
    add("Inbox Prefix", data.get("inbox_prefix"))
    add("Path", context_path(name))
    add("Color Scheme", data.get("color_scheme"))
    width = max([LABEL_WIDTH] + [len(label) + 1 for label, _ in rows])
    lines = [f'NATS Configuration Context "{name}"', ""]
    lines += [f"{label:>{width}}: {value}" for label, value in rows]
    return "\n".join(lines) + "\n"


def show(name: str, json_out: bool = False) -> None:
    data = read_context(name)
    click.echo(json.dumps(data, indent=2) if json_out else context_page(name, data))


def require_known(name: str) -> str:
    if not context_path(name).is_file():
        fail(f"unknown context {name!r}: no file {context_path(name)} (jetraft context ls lists the contexts)")
    return name


@context.command("add")
@click.argument("name")
@click.option("--description", help="A friendly description, shown by context ls.")
@click.option("--select", "activate", is_flag=True, help="Select the saved context as the default one.")
@click.option("--js-domain", "--jsdomain", "js_domain", metavar="DOMAIN", help="JetStream domain to use.")
@click.option("--js-api-prefix", metavar="PREFIX", help="Subject prefix of the JetStream API.")
@click.option("--js-event-prefix", metavar="PREFIX", help="Subject prefix of the JetStream advisories.")
@click.option("--inbox-prefix", metavar="PREFIX", help="Custom inbox prefix.")
def context_add(name: str, description: str | None, activate: bool, js_domain: str | None,
                js_api_prefix: str | None, js_event_prefix: str | None, inbox_prefix: str | None) -> None:
    """Create or update the context NAME from the connection flags (--server, --user,
    --password, --creds, --tlscert, --tlskey, --tlsca, --tlsfirst) and these options.

    An existing NAME is updated: the flags given replace its fields, the others stay.
    A new one starts from the context of --context, if given. As with the nats CLI,
    --user without --password is saved as a token. Then shows the context.
    """
    check_name(name)
    raw = dict(click.get_current_context().find_root().obj or {})
    if context_path(name).is_file():
        data = read_context(name)
    elif raw.get("context"):
        data = read_context(check_name(str(raw["context"])))
    else:
        data = dict(FIELDS)
    user, password = raw.get("user"), raw.get("password")
    if user and not password:
        user, token = None, user
    else:
        token = None
    given = {"url": raw.get("server"), "user": user, "password": password, "token": token,
             "creds": raw.get("creds"), "cert": raw.get("tlscert"), "key": raw.get("tlskey"),
             "ca": raw.get("tlsca"), "description": description, "jetstream_domain": js_domain,
             "jetstream_api_prefix": js_api_prefix, "jetstream_event_prefix": js_event_prefix,
             "inbox_prefix": inbox_prefix}
    data.update({k: v for k, v in given.items() if v})
    if raw.get("tlsfirst"):
        data["tls_first"] = True
    save_context(name, data)
    if activate:
        select_context(name)
    show(name)


@context.command("select")
@click.argument("name", required=False)
def context_select(name: str | None) -> None:
    """Select NAME as the default context; without NAME, show the selected one."""
    if not known_contexts():
        fail("no context defined: add one with jetraft context add NAME --server URL")
    if name is None:
        name = selected_context()
        if name is None:
            fail("no context is selected: choose one with jetraft context select NAME "
                 "(jetraft context ls lists them)")
        show(str(name))
        return
    require_known(check_name(name))
    select_context(name)
    show(name)


@context.command("ls")
@click.option("--json", "-j", "json_out", is_flag=True, help="Print the contexts as JSON.")
@click.option("--names", is_flag=True, help="Print only the names.")
def context_ls(json_out: bool, names: bool) -> None:
    """List the contexts: name (the selected one marked *) and description."""
    json_out = json_out or bool((click.get_current_context().find_root().obj or {}).get("json_out"))
    current = selected_context()
    loaded: list[tuple[str, dict[str, Any]]] = []
    for name in known_contexts():
        try:
            data = json.loads(context_path(name).read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            click.echo(f"Could not load context {name}: {exc}", err=True)
            continue
        loaded.append((name, {**FIELDS, **data}))
    if json_out:
        click.echo(json.dumps([data for _, data in loaded], indent=2))
    elif names:
        for name, _ in loaded:
            click.echo(name)
    elif not loaded:
        click.echo("No known contexts")
    else:
        print_table("Known Contexts", ["Name", "Description"],
                    [(f"{name}*" if name == current else name, data.get("description") or "")
                     for name, data in loaded])


@context.command("rm")
@click.argument("name")
@force_option
def context_rm(name: str, force: bool) -> None:
    """Remove the context NAME (asks first, unless -f). The selected context is kept."""
    path = context_path(name)
    require_known(name)
    if selected_context() == name:
        fail(f"context {name!r} is the selected one: select another first (jetraft context select NAME)")
    confirm(force, f'Really delete context "{name}"?')
    try:
        path.unlink()
    except OSError as exc:
        fail(f"cannot remove {path}: {exc}")


@context.command("info")
@click.argument("name", required=False)
@click.option("--json", "-j", "json_out", is_flag=True, help="Print the context as JSON.")
def context_info(name: str | None, json_out: bool) -> None:
    """Show the context NAME, or the selected one (passwords as stars; --json as saved)."""
    json_out = json_out or bool((click.get_current_context().find_root().obj or {}).get("json_out"))
    if name is None:
        name = selected_context()
        if name is None:
            fail("no context is selected and no NAME given: name one, or choose one with "
                 "jetraft context select NAME")
    show(str(name), json_out)
