"""Fuzz target: the NATS configuration parser (jetraft.config: lexer, parser, typed config).

Input: the bytes of a configuration file (read as jetraft-server reads one: UTF-8, invalid
bytes replaced). It is parsed as ``<sandbox>/main.conf``, with a fixed environment (ENV) and,
next to it, files an ``include`` can name (INCLUDES); an include of any path outside the
sandbox fails as an unreadable file would (OSError), so a run never reads the machine's
files or blocks on a device.

Invariants (jetraft.config's docstrings): ``parse_text`` and ``config_from_text`` raise
ConfigError and nothing else, for any input; a ConfigError names a file, a line and a
column; what ``parse_text`` returns, written back with ``dumps`` (which may refuse a value
with TypeError/ValueError, as documented), parses to an equal value.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import atheris

from fuzz_support import main

with atheris.instrument_imports() if __name__ == "__main__" else contextlib.nullcontext():
    from jetraft.config import ConfigError, ServerConfig, config_from_text, dumps, parse_text
    from jetraft.config import parser as config_parser

ENV = {"PORT": "4222", "NAME": "n1", "SIZE": "1GB", "MAP": "{a: 1, b: [2, 3]}", "LOOP": "$LOOP",
       "BAD": "{", "HASH": "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sW3mYvF/NQu"}
INCLUDES = {
    "inc.conf": "port: 4223\nauthorization { user: a, password: b }\n",
    "cycle.conf": "include cycle.conf\n",
    "bad.conf": "a: [1, 2\n",
    "sub/leaf.conf": "jetstream { max_mem: 1G }\n",
}

#: The directory of the include files, and the only one the parser may read (None until
#: the first input); tests/unit/test_fuzz_targets.py sets it back to None when it gives the
#: parser its own file reader back.
sandbox: str | None = None


def _setup() -> str:
    global sandbox
    if sandbox is None:
        sandbox = os.path.realpath(tempfile.mkdtemp(prefix="jetraft-fuzz-config-"))
        for name, text in INCLUDES.items():
            path = os.path.join(sandbox, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        real_read = config_parser.read_config_file

        def sandboxed_read(path: str) -> str:
            if os.path.commonpath([os.path.realpath(path), sandbox]) != sandbox:
                raise PermissionError(13, "outside the fuzzing sandbox", path)
            return real_read(path)

        config_parser.read_config_file = sandboxed_read
    return sandbox


def _check_error(err: ConfigError) -> None:
    assert type(err.message) is str and err.message, err
    assert type(err.file) is str and type(err.line) is int and type(err.column) is int, err
    assert str(err).startswith(f"{err.file}:{err.line}:{err.column}: "), err


def TestOneInput(data: bytes) -> None:
    sandbox = _setup()
    text = data.decode("utf-8", "replace")
    filename = os.path.join(sandbox, "main.conf")
    try:
        value = parse_text(text, filename, ENV)
    except ConfigError as err:
        _check_error(err)
        value = None
    if value is not None:
        assert type(value) is dict, value
        try:
            written = dumps(value)
        except (TypeError, ValueError):
            written = None
        if written is not None:
            try:
                again = parse_text(written, filename, {})
            except ConfigError as err:
                raise AssertionError(f"dumps wrote text that does not parse: {err}\n{written}") from None
            assert again == value, (written, again, value)
    try:
        config = config_from_text(text, filename, ENV)
    except ConfigError as err:
        _check_error(err)
        return
    assert isinstance(config, ServerConfig), config


if __name__ == "__main__":
    main(TestOneInput)
