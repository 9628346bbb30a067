"""The operator's manual (docs/, mkdocs.yml) and README.md: the site builds with --strict
(every link to a page or an anchor resolves), the validation guide is written into it, and
README.md's links reach existing pages and headings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from markdown_it import MarkdownIt

from jetraft.validation.guide import GUIDES

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"

pytestmark = pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed (make setup)")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config),
                           "-d", str(site)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def headings(markdown: str) -> set[str]:
    """The anchors mkdocs gives the headings of ``markdown`` (toc's slugify of their text)."""
    tokens = MarkdownIt().parse(markdown)
    return {slugify(tokens[i + 1].children and "".join(c.content for c in tokens[i + 1].children), "-")
            for i, t in enumerate(tokens) if t.type == "heading_open"}


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or heading does not exist."""
    broken = []
    for token in MarkdownIt().parse(page.read_text()):
        for child in token.children or []:
            href = child.attrGet("href") if child.type == "link_open" else None
            if not href or "://" in href or href.startswith("mailto:"):
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{href}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
            elif anchor and target.suffix == ".md" and anchor not in headings(target.read_text()):
                broken.append(f"{href}: no heading #{anchor} in {target.name}")
    return broken


def test_the_manual_builds_strict_with_the_validation_guide_in_it(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = (tmp_path / "site" / "validation" / "index.html").read_text()
    assert "jetraft: validation guide" not in page
    for name, guide in GUIDES.items():
        assert f"<code>{name}</code>" in page and guide.meaning[:60] in page, name


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "docs_hooks.py", copy / "tools" / "docs_hooks.py")
    with (copy / "docs" / "index.md").open("a") as f:
        f.write("\nSee [nowhere](cluster.md#no-such-heading).\n")
    result = build(copy / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-heading" in result.stdout + result.stderr


def test_every_link_of_the_readme_reaches_a_page_and_its_heading():
    assert broken_links(ROOT / "README.md") == []


def test_a_broken_readme_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its `part`\n")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](docs/a.md#its-part) [page](docs/a.md) [gone](docs/b.md) "
                      "[anchor](docs/a.md#nothing) [web](https://example.org/x)\n")
    found = broken_links(readme)
    assert [f.split(":")[0] for f in found] == ["docs/b.md", "docs/a.md#nothing"], found
