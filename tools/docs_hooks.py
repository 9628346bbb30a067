"""mkdocs hook (mkdocs.yml): the validation guide (jetraft.validation.guide.GUIDES, which report.md and
the terminal use) written into docs/validation.md where the marker stands, so that the
manual and the report never explain a check differently. Needs jetraft importable (the
venv that runs mkdocs: make docs)."""

from __future__ import annotations

MARKER = "<!-- jetraft: validation guide -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace :data:`MARKER` by a table of every check: name, meaning, when unknown."""
    if MARKER not in markdown:
        return markdown
    from jetraft.validation.guide import GUIDES

    rows = ["| check | an invalid verdict means | unknown when |", "|---|---|---|"]
    rows += [f"| `{name}` | {_cell(g.meaning)} | {_cell(g.unknown)} |" for name, g in GUIDES.items()]
    return markdown.replace(MARKER, "\n".join(rows))
