"""The server configuration blocks of the seed documents, for the configuration tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).resolve().parent / "seeds"

#: Where the seed documents' placeholder hosts go in the tests.
HOSTS = {"host_a": "127.0.0.1", "host_b": "127.0.0.2", "host_c": "127.0.0.3"}


@dataclass(frozen=True)
class SeedBlock:
    """One server configuration block of a seed document, verbatim."""

    document: str  # file name
    index: int  # 1-based, in document order: block k is server nk-c1 on host_{a,b,c}[k-1]
    text: str

    @property
    def host(self) -> str:
        return ("host_a", "host_b", "host_c")[self.index - 1]

    def adjusted(self, store_dir: str) -> str:
        """The block with placeholder hosts and the store directory replaced."""
        text = self.text.replace("/nats/storage", store_dir)
        for placeholder, address in HOSTS.items():
            text = text.replace(placeholder, address)
        return text


def server_blocks(document: str) -> list[str]:
    """The server configuration blocks of a seed document: the fenced blocks that
    set ``server_name``, or, in a plain-text document, each run of lines from a
    ``server_name`` line until braces balance and a prose line (capitalised) begins."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", document, re.DOTALL | re.MULTILINE)
    blocks = [block for block in fenced if re.search(r"^server_name", block, re.MULTILINE)]
    if blocks:
        return blocks
    blocks, current, depth = [], None, 0
    for line in document.splitlines(keepends=True):
        if current is None and line.startswith("server_name"):
            current, depth = [], 0
        if current is None:
            continue
        if depth == 0 and re.match(r"[A-Z]", line):
            blocks.append("".join(current))
            current = None
            continue
        current.append(line)
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
    if current is not None:
        blocks.append("".join(current))
    return blocks


def all_seed_blocks() -> list[SeedBlock]:
    return [
        SeedBlock(path.name, i, text)
        for path in sorted(SEEDS.glob("*.txt"))
        for i, text in enumerate(server_blocks(path.read_text(encoding="utf-8")), start=1)
    ]
