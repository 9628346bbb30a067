"""Click plumbing shared by the command modules: aliases, global options anywhere on
the line, ``--json`` and ``-f/--force`` as every command takes them."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from jetraft.cli.admin.session import CliError, Options, fail, resolve_options

#: Global options that take a value, and the global flags (for :func:`hoist_global_options`).
GLOBAL_VALUED = frozenset({"-s", "--server", "--user", "--password", "--creds", "--context",
                           "--context-file", "--timeout", "--tlscert", "--tlskey", "--tlsca"})
GLOBAL_FLAGS = frozenset({"--json", "--tlsfirst", "--no-tlsfirst"})

#: Short names the ``nats`` CLI accepts for its commands.
ALIASES = {
    "str": "stream", "s": "stream", "con": "consumer", "c": "consumer", "obs": "consumer",
    "list": "ls", "delete": "rm", "del": "rm", "create": "add", "new": "add",
    "publish": "pub", "subscribe": "sub", "stepdown": "step-down", "sd": "step-down",
    "cluster": "raft", "pr": "peer-remove", "ctx": "context",
}


class AliasedGroup(click.Group):
    """A group that also answers to the ``nats`` CLI's short command names."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in ALIASES:
            command = super().get_command(ctx, ALIASES[cmd_name])
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command is not None else name), command, rest


class RootGroup(AliasedGroup):
    """The ``jetraft`` group itself: a usage error anywhere below it (a bad flag value, a
    missing argument, an unknown command) is one ``nats: error: <what>, try --help`` line
    on stderr and exit status 1, as natscli (fisk) reports them, in place of click's usage
    block and status 2. A group given no command still prints its help."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            _one_line(exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            _one_line(exc)
            raise


def _one_line(exc: click.UsageError) -> None:
    """Exit with ``exc`` as one ``nats: error:`` line; return for a group's help."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return
    fail(f"{exc.format_message().rstrip('.')}, try --help")


def hoist_global_options(args: list[str], valued: frozenset[str], flags: frozenset[str]) -> list[str]:
    """Move global options found after the command to the front, so that
    ``jetraft stream info X -s URL`` works as ``jetraft -s URL stream info X`` does.

    Stops at ``--``; ``--opt=value`` and ``-sURL`` forms are recognised.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if arg in flags:
            front.append(arg)
        elif arg in valued and i + 1 < len(args):
            front += [arg, args[i + 1]]
            i += 1
        elif (name in valued and "=" in arg) or (arg.startswith("-s") and len(arg) > 2 and not arg.startswith("--")):
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json`` on a command (the global ``--json`` works too)."""
    return click.option("--json", "json_out", is_flag=True, help="Print JSON.")(fn)


def force_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``-f/--force``: do not ask for confirmation."""
    return click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")(fn)


def confirm(force: bool, question: str) -> None:
    """Ask ``question`` unless ``force``; refusing (or no terminal to ask on) exits 1."""
    if force:
        return
    if not sys.stdin.isatty():
        fail("not confirmed: no terminal to ask on (use -f to skip the question)")
    try:
        ok = click.confirm(question, default=False)
    except click.Abort:
        ok = False
    if not ok:
        fail("not confirmed (use -f to skip the question)")


def options(json_out: bool = False) -> Options:
    """The resolved global options of the running command; a bad context exits 1."""
    raw = dict(click.get_current_context().find_root().obj or {})
    try:
        return resolve_options(
            server=raw.get("server"), user=raw.get("user"), password=raw.get("password"),
            creds=raw.get("creds"), context=raw.get("context"), context_file=raw.get("context_file"),
            timeout=raw.get("timeout"), json_out=bool(raw.get("json_out")) or json_out,
            tlscert=raw.get("tlscert"), tlskey=raw.get("tlskey"), tlsca=raw.get("tlsca"),
            tlsfirst=raw.get("tlsfirst"),
        )
    except CliError as exc:
        fail(str(exc))
        raise AssertionError("unreachable") from exc


def parsed(parse: Callable[[str], Any], what: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback converting an option's text with ``parse`` (None passes through)."""

    def convert(_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(f"{exc} ({what})", param=param) from None

    return convert


def split_csv(values: tuple[str, ...] | None) -> list[str]:
    """``("a,b", "c")`` -> ``["a", "b", "c"]``: repeated and comma-separated values."""
    return [v.strip() for item in values or () for v in item.split(",") if v.strip()]


def pass_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Hand the command ``opts`` (resolved global options) in place of its ``json_out``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, json_out: bool = False, **kwargs: Any) -> Any:
        return fn(*args, opts=options(json_out), **kwargs)

    return wrapper
