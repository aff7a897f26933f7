"""Reading a rendered report back by structure: its sections, its tables, the numbers in a line."""

import re

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")  # a pipe, but not an escaped one inside a cell


def sections(markdown: str) -> dict[str, str]:
    """'## Heading' -> the text under it, in order; the text before the first heading under ''."""
    parts = re.split(r"^## (.+)$", markdown, flags=re.MULTILINE)
    found = {"": parts[0]}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        found[heading.strip()] = body
    return found


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in `text`: a list of rows (header first, the --- line left out) of stripped cells."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in CELL_SEPARATOR.split(line.strip().strip("|"))]
            if not all(set(cell) <= {"-"} and cell for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def numbers(text: str) -> list[float]:
    return [float(n) for n in NUMBER.findall(text)]


def cell_value(cell: str) -> float | None:
    """A table cell as a number ('1.06x' -> 1.06, '23%' -> 0.23); None for the n/a dash; raises if neither."""
    if cell == "–":
        return None
    if cell.endswith("%"):
        return float(cell[:-1]) / 100
    return float(cell.removesuffix("x"))
