"""The projects harness's own minimal extraction of a notebook's code cells, deliberately
independent of distrun's (the original run of a notebook project runs what it gives)."""

from __future__ import annotations

import json

# cell magics whose body is Python (the magic line alone goes)
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})


def notebook_cells(data: bytes) -> str:
    """The harness's own minimal extraction of a notebook (deliberately independent of
    distrun's): the code cells in order; a line that starts a statement with `%` (line
    magic) or `!` (shell) becomes `pass` (the block around it stays valid), while a line
    inside an open bracket, string or backslash continuation is code whatever its first
    character (`% (a, b)` formatting); a cell opened by a `%%` magic is dropped whole
    unless its body is Python (`%%time`...)."""
    notebook = json.loads(data.decode("utf-8"))
    out: list[str] = []
    code_cells = [c for c in notebook["cells"] if c.get("cell_type") == "code"]
    for number, cell in enumerate(code_cells, 1):
        source = cell.get("source", "")
        lines = ("".join(source) if isinstance(source, list) else str(source)).splitlines()
        first = lines[0].strip() if lines else ""
        if first.startswith("%%"):
            magic = first[2:].split(maxsplit=1)[0] if len(first) > 2 else ""
            if magic not in PYTHON_CELL_MAGICS:
                out.append(f"# cell {number}: dropped by the harness ({first})")
                continue
            lines = lines[1:]
        out.append(f"# cell {number}")
        statement: list[str] = []  # the lines of a logical line not yet complete
        for line in lines:
            stripped = line.lstrip()
            if not statement and stripped.startswith(("%", "!")):
                indent = line[: len(line) - len(stripped)]
                out.append(f"{indent}pass  # harness dropped: {stripped}")
                continue
            out.append(line)
            statement.append(line)
            if _complete("\n".join(statement) + "\n"):
                statement = []
        out.append("")
    return "\n".join(out)


def _complete(text: str) -> bool:
    """Whether `text` ends its logical line (no open bracket, string or continuation)."""
    import io
    import tokenize

    try:
        for _ in tokenize.generate_tokens(io.StringIO(text).readline):
            pass
    except tokenize.TokenError:
        return False
    except (SyntaxError, ValueError):
        return True
    return True
