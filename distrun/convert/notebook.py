"""A Jupyter notebook as a script: its code cells in order, each after a `# %%` marker
(the cell format VS Code, PyCharm and Jupytext read), what is not Python commented out.

  %matplotlib inline / %time x = f()    line magics        ->  `# ` + the line
  !pip install timm                     shell commands     ->  `# ` + the line
  %%bash / %%writefile ...              a cell that is not Python -> every line commented
  %%time / %%capture ...                a cell magic around Python -> the magic line only
  obj?  / ?obj                          help               ->  `# ` + the line

Each commented line is named (cell and line) so the user can run it by hand.
`convert_notebook` converts that script and names every line of its report, and of a
syntax error, by cell and line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from distrun.errors import ConvertError, InputError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from distrun.convert.options import ConvertOptions
    from distrun.convert.report import ConvertResult

_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python",
                                 "python3", "markdown"})
_HELP = re.compile(r"^\s*(\?\?|\?)?[\w.]+(\?\?|\?)\s*$|^\s*\?\??[\w.]+\s*$")


@dataclass
class Script:
    text: str
    # line of the script -> (cell number, line in the cell), both from 1
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    # (cell, line in the cell, what it was, the line) of every line commented out
    commented: list[tuple[int, int, str, str]] = field(default_factory=list)


def script_from_notebook(data: bytes, name: str) -> Script:
    """The code cells of the notebook `data` as one script. InputError if it is not a
    notebook (JSON with a list of cells, nbformat 4)."""
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        where = f":{err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        raise InputError(f"{name}{where}: not a Jupyter notebook (not valid JSON: {err})",
                         "save it again from Jupyter, or give the .py script") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise InputError(f"{name}: not a Jupyter notebook of format 4 (no list of cells)",
                         "open and save it with a current Jupyter, or give the .py script")
    script = Script("")
    lines: list[str] = []
    number = 0
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        lines.append(f"# %% [cell {number}]")
        lines.extend(_cell_lines(script, number, text, len(lines)))
        lines.append("")
    script.text = "\n".join(lines).rstrip("\n") + "\n"
    return script


def convert_notebook(data: bytes, name: str, options: ConvertOptions,
                     folder: str | None = None) -> tuple[Script, ConvertResult]:
    """The notebook `data` (named `name`) as a script, and that script converted, with a
    finding for each line commented out. InputError if it is no notebook or has no code;
    a ConvertError at a line of the script is named by the cell and its line."""
    from distrun.convert import convert_source

    notebook = script_from_notebook(data, name)
    if not notebook.text.strip():
        raise InputError(f"{name}: no code cells: nothing to convert")
    try:
        result = convert_source(notebook.text, name, options, folder)
    except ConvertError as err:  # named by the cell and its line, not the script's line
        raise at_cell(err, name, notebook.where) from None
    note_commented(notebook, result)
    return notebook, result


def at_cell(err: ConvertError, name: str, where: Mapping[int, tuple[int, int]]
            ) -> ConvertError:
    """`err` (at a line of a notebook's script) named by the cell and its line."""
    found = where.get(err.line) if err.line is not None else None
    if found is None or err.column is None or err.detail is None:
        return err
    return ConvertError.at(f"{name}:cell {found[0]}", found[1], err.column, err.detail,
                           err.hint)


def note_commented(notebook: Script, result: ConvertResult) -> None:
    """A finding in `result` for each line of the notebook commented out."""
    from distrun.convert.report import Finding

    for number, line, what, text in notebook.commented:
        at = next(k for k, v in notebook.where.items() if v == (number, line))
        shell = what == "shell command"
        result.findings.append(Finding(
            at, "notebook.magic", "warning" if shell else "info", f"{what}, not Python: `{text}` "
            "commented out" if "kept" not in what else f"{what} (`{text}`)",
            "run it yourself before launching" if shell else ""))


def _after(line: str, depth: int) -> tuple[int, bool]:
    """Open brackets after `line` (strings and comments skipped; a string spanning lines
    is not followed), and whether it ends with a backslash."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\":
                i += 1
            elif line.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif char == "#":
            break
        elif char in "\"'":
            quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else char
            i += len(quote) - 1
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        i += 1
    return depth, line.rstrip().endswith("\\")


def _cell_lines(script: Script, number: int, text: str, offset: int) -> list[str]:
    body = text.splitlines()
    first = body[0].strip() if body else ""
    magic = first[2:].split(maxsplit=1)[0] if first.startswith("%%") and len(first) > 2 else None
    out: list[str] = []
    open_brackets, continued = 0, False
    for i, line in enumerate(body, 1):
        script.where[offset + len(out) + 1] = (number, i)
        stripped = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        inside = open_brackets > 0 or continued  # `% (a, b)` string formatting goes on
        open_brackets, continued = _after(line, open_brackets)
        if inside and (magic is None or magic in _PYTHON_CELL_MAGICS or i == 1):
            out.append(line)
            continue
        timed = re.match(r"%(time|timeit)\s+(.+)$", stripped)
        what = None
        if magic is not None and i == 1:
            what = f"cell magic %%{magic}"
        elif magic is not None and magic not in _PYTHON_CELL_MAGICS:
            what = f"a line of a %%{magic} cell (not Python)"
        elif timed is not None:  # the statement stays; only the timing goes
            script.commented.append((number, i, f"%{timed[1]} dropped, its statement kept",
                                     stripped))
            out.append(f"{indent}{timed[2]}")
            continue
        elif stripped.startswith("%"):
            what = "IPython magic"
        elif stripped.startswith("!") or re.match(r"^[\w, ]+=\s*!", stripped):
            what = "shell command"
        elif stripped and "?" in stripped and _HELP.match(stripped):
            what = "IPython help"
        if what is None:
            out.append(line)
            continue
        script.commented.append((number, i, what, stripped))
        out.append(f"{indent}# {stripped}")
    return out
