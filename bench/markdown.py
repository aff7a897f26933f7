"""Markdown building blocks for the bench report: numbers, table cells, tables, sections; a side run's files."""

import json
import sys
from pathlib import Path

MISSING = "–"  # a value the run did not measure


def fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    """A number as the report writes it ('1.31x', '26%'), or the dash when it was not measured."""
    return MISSING if value is None else f"{value:{spec}}{suffix}"


def cell(text: str) -> str:
    """Text that may sit in a table cell: a pipe would end the cell."""
    return text.replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def section(heading: str, *paragraphs: str) -> str:
    """'## heading' and its paragraphs, empty ones left out."""
    return "\n\n".join([f"## {heading}", *(p for p in paragraphs if p)])


def write_side_run(out: Path, title: str, engine_line: str, body: str, report: str, data_file: str, data) -> str:
    """A side benchmark's files (python -m bench.quality, bench.concurrency): its records as JSON and a report
    that starts with the command that made it and the engine it ran on. Returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / data_file).write_text(json.dumps(data, indent=1, ensure_ascii=False))
    command = f"python -m {Path(sys.argv[0]).parent.name}.{Path(sys.argv[0]).stem} " + " ".join(sys.argv[1:])
    text = f"# {title}\n\n`{command.strip()}`\n\nEngine: {engine_line}\n\n{body}\n"
    (out / report).write_text(text)
    return text
