"""Single-GPU script -> DistributedDataParallel script, by syntax-tree rewriting (LibCST).

`convert_source(text)` returns a `ConvertResult`: the new text, every change and
every finding with its line. It never prints, never exits, never writes files.
"""

from __future__ import annotations

from distrun.convert.options import ConvertOptions
from distrun.convert.report import Change, ConvertResult, Finding
from distrun.errors import ConvertError

__all__ = ["Change", "ConvertOptions", "ConvertResult", "Finding", "convert_source"]


def convert_source(source: str, filename: str = "<string>",
                   options: ConvertOptions | None = None) -> ConvertResult:
    """Convert the text of a script. Raises ConvertError if it is not valid Python, or
    nests too deeply to convert even with a deep stack."""
    try:
        return _convert(source, filename, options or ConvertOptions())
    except RecursionError:
        pass
    # Valid Python can nest deeper than the default recursion limit lets LibCST walk (a
    # generated sum of a thousand terms): once more, on a thread with a deep stack.
    return _on_a_deep_stack(source, filename, options or ConvertOptions())


def _convert(source: str, filename: str, options: ConvertOptions) -> ConvertResult:
    import libcst as cst

    from distrun.convert.pipeline import run
    from distrun.convert.validate import check_python

    check_python(source, filename)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as err:
        raise ConvertError(f"{filename}: the parser cannot read this file ({err})",
                           "this Python syntax is not supported by LibCST yet") from None
    return run(source, module, options)


DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION_LIMIT = 40_000  # Python's compiler accepts about 3,000 levels of nesting


def _on_a_deep_stack(source: str, filename: str, options: ConvertOptions) -> ConvertResult:
    import sys
    import threading

    outcome: list[ConvertResult | BaseException] = []

    def work() -> None:
        try:
            outcome.append(_convert(source, filename, options))
        except BaseException as err:  # handed to the caller's thread
            outcome.append(err)

    old_stack, old_limit = threading.stack_size(), sys.getrecursionlimit()
    try:
        threading.stack_size(DEEP_STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, DEEP_RECURSION_LIMIT))
        thread = threading.Thread(target=work, name="distrun-convert-deep")
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
