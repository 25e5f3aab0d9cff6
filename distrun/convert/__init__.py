"""Single-GPU script -> DistributedDataParallel script, by syntax-tree rewriting (LibCST).

`convert_source(text)` returns a `ConvertResult`: the new text, every change and
every finding with its line. `convert_project(entry)` (in `project.py`) converts a
script together with the local modules it imports. Neither prints, exits or writes.
`convert_request` (in `request.py`) is the command line's one entry: a script, a project
or a notebook, and where its result goes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from distrun.convert.options import ConvertOptions
from distrun.convert.report import Change, ConvertResult, Finding
from distrun.errors import ConvertError

__all__ = ["Change", "ConvertOptions", "ConvertResult", "Finding", "convert_source"]

T = TypeVar("T")
DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION_LIMIT = 40_000  # Python's compiler accepts about 3,000 levels of nesting


def convert_source(source: str, filename: str = "<string>",
                   options: ConvertOptions | None = None, folder: str | None = None
                   ) -> ConvertResult:
    """Convert the text of a script. `folder`: where the script lives, when the files the
    user keeps beside it count (a DeepSpeed config); None: none is read. Raises
    ConvertError if it is not valid Python, or nests too deeply to convert even with a
    deep stack."""
    return with_deep_stack(lambda: _convert(source, filename, options or ConvertOptions(),
                                            folder), filename)


def _convert(source: str, filename: str, options: ConvertOptions, folder: str | None
             ) -> ConvertResult:
    from distrun.convert.analysis import ModuleInfo
    from distrun.convert.pipeline import run

    module = parse(source, filename)
    result = run([ModuleInfo("__main__", filename, module)], options, folder)[0]
    if result.status != "converted" and result.output != source:
        # LibCST does not give every text back verbatim (a last line of spaces alone,
        # `A\n\n ` -> `A\n `): a file left unconverted is the user's own text
        return dataclasses.replace(result, source=source, output=source)
    return result


def parse(source: str, filename: str) -> Any:
    """The LibCST tree of `source`; ConvertError (naming `filename`) if it is not Python 3
    that this interpreter and LibCST read."""
    import libcst as cst

    from distrun.convert.validate import check_python

    check_python(source, filename)
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as err:
        raise ConvertError(f"{filename}: the parser cannot read this file ({err})",
                           "this Python syntax is not supported by LibCST yet") from None


def with_deep_stack(work: Callable[[], T], filename: str) -> T:
    """`work()`; when it runs out of stack (valid Python can nest deeper than the default
    recursion limit lets LibCST walk: a generated sum of a thousand terms), once more on
    a thread with a deep stack."""
    try:
        return work()
    except RecursionError:
        pass
    import sys
    import threading

    outcome: list[T | BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as err:  # handed to the caller's thread
            outcome.append(err)

    old_stack, old_limit = threading.stack_size(), sys.getrecursionlimit()
    try:
        threading.stack_size(DEEP_STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, DEEP_RECURSION_LIMIT))
        thread = threading.Thread(target=run, name="distrun-convert-deep")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    result = outcome[0] if outcome else RuntimeError("the conversion thread did not finish")
    if isinstance(result, RecursionError):
        raise ConvertError(f"{filename}: nested too deeply to convert",
                           "split the deepest expression (a very long sum or chain of "
                           "calls) into several statements") from None
    if isinstance(result, BaseException):
        raise result
    return result
