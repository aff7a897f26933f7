"""Markdown building blocks for the bench report: numbers, table cells, tables, sections."""

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
