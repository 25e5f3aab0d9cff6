"""`distrun convert`'s one entry into the core: a `ConvertRequest` in, a `ConvertOutcome` out.

The command line is read into a `ConvertRequest` (what to convert, what kind of input it
is, where the result goes, the conversion's options). `convert_request` converts a script,
a project or a notebook alike and returns a `ConvertOutcome`: the conversion's result and
what is to be written where (nothing is written yet). `write_outcome` writes it. Neither
prints nor exits: the CLI shows the outcome.

Where the result goes, the same for every input (`-o OUT`):
  (no -o)        beside the input: train_ddp.py, nb_ddp.py, or the project's copy proj_ddp/
  -o FILE        that file; a missing folder on the way is made
  -o DIR/        into DIR (made when missing): DIR/train_ddp.py, or the copy DIR/proj_ddp/;
                 for a script or a notebook, an existing folder DIR without the / too
  -o DIR         for a project: the copy itself (its result is a folder)
  -o x.py        for a project: refused, a project converts to a folder
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from distrun.convert.options import ConvertOptions
from distrun.convert.replaced import merge_needs_force, note_replaced
from distrun.errors import EXIT_FOUND_WORK, EXIT_NOT_CONVERTED, EXIT_OK, InputError
from distrun.files import FileWrite, same_file

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from distrun.convert.project import ProjectResult
    from distrun.convert.report import ConvertResult

InputKind = Literal["script", "project", "notebook"]
OutputMode = Literal["file", "folder", "stdout", "in-place", "diff", "check"]
ReportFormat = Literal["text", "json"]
WRITING: frozenset[OutputMode] = frozenset({"file", "folder", "in-place"})


@dataclass(frozen=True)
class ConvertRequest:
    """What the user asked `distrun convert` to do.

    source: the script, the project's entry script or the notebook, as the user named it
        (reports name files the same way).
    kind: what `source` is, detected once (`detect_input`): "script" (one file),
        "project" (a script importing modules of its own folder, or of `root`: they are
        converted together), "notebook" (.ipynb: its code cells become one script).
    mode: what becomes of the result:
        "file"      a script's or a notebook's result written to a file (see `output`)
        "folder"    a project written as a copy of its folder (see `output`)
        "stdout"    the converted script printed (a script or a notebook only)
        "in-place"  the input's changed files rewritten (not a notebook)
        "diff"      a unified diff printed; nothing written
        "check"     nothing written; the exit code says whether there is work to do
    output: `-o` as given, for "file" and "folder" (None: the default beside the input);
        the module's docstring says where each form leads.
    force: replace an existing output; what it replaces is kept as OUT.orig.
    backup: with "in-place", keep each rewritten file as FILE.orig (--no-backup: False).
    root: the project's top folder (--root), when the script sits deeper in it.
    report_format: "text" (FILE:LINE lines and a summary) or "json".
    options: the conversion itself: the target (ddp, accelerate, deepspeed, fsdp) and its
        settings.
    """

    source: str
    kind: InputKind
    mode: OutputMode
    output: str | None = None
    force: bool = False
    backup: bool = True
    root: str | None = None
    report_format: ReportFormat = "text"
    options: ConvertOptions = field(default_factory=ConvertOptions)

    def __post_init__(self) -> None:
        if self.output is not None and self.mode not in ("file", "folder"):
            raise ValueError(f"an output path goes with the modes file and folder, "
                             f"not {self.mode}")
        if (self.mode == "folder") != (self.kind == "project") and self.mode in ("file",
                                                                                 "folder"):
            raise ValueError(f"a {self.kind} is written with the mode "
                             f"{'folder' if self.kind == 'project' else 'file'}")

    @property
    def streams(self) -> bool:
        """Standard output holds the script or the diff (the report then goes to stderr)."""
        return self.mode in ("stdout", "diff")


@dataclass(frozen=True)
class ProjectCopy:
    """A project to write as a copy of its folder `root` at `out`, with `converted`
    (relative path -> bytes) in place of those files."""

    root: Path
    out: Path
    converted: Mapping[str, bytes]
    force: bool = False


@dataclass(frozen=True)
class ConvertOutcome:
    """What a conversion produced, and what is to be written and shown.

    result: the script's result (a notebook's: its code cells'; a project's: its entry's).
    project: a project's result, every file's (None for a script or a notebook).
    cells: a notebook's script line -> (cell, line in the cell), both from 1.
    stdout: the converted script, for mode "stdout".
    copy: a project's copy to write (before `files`).
    files: the files to write, in order: the result, then what goes beside it.
    written: what the report names as written (None: nothing).
    launch: the script `distrun launch` would run next (a converted script's).
    """

    request: ConvertRequest
    result: ConvertResult
    project: ProjectResult | None = None
    cells: Mapping[int, tuple[int, int]] | None = None
    stdout: str | None = None
    copy: ProjectCopy | None = None
    files: tuple[FileWrite, ...] = ()
    written: str | None = None
    launch: str | None = None

    @property
    def changed(self) -> bool:
        """The conversion changed something (in any file of a project)."""
        return bool(self.project.changed) if self.project is not None else self.result.changed

    @property
    def exit_code(self) -> int:
        """4 when the script was left unconverted; 1 under --check when there is work to
        do; else 0."""
        if self.result.status == "unsupported":
            return EXIT_NOT_CONVERTED
        return EXIT_FOUND_WORK if self.request.mode == "check" and self.changed else EXIT_OK


def detect_input(source: str, root: str | None = None) -> InputKind:
    """What `source` is: a project (a script or a notebook importing modules of its
    folder, of `root`, or of its own package), else a notebook (.ipynb) or a script."""
    from distrun.convert.project import find_modules

    top = Path(root) if root is not None else None
    text = None
    if source.endswith(".ipynb"):
        from distrun.convert.notebook import script_from_notebook

        try:
            text = script_from_notebook(Path(source).read_bytes(), source).text
        except (InputError, OSError):
            return "notebook"  # named properly when it is converted
    if len(find_modules(Path(source), top, text)) > 1:
        return "project"
    return "notebook" if text is not None else "script"


def convert_request(request: ConvertRequest) -> ConvertOutcome:
    """Convert what `request` names; the outcome says what to write and show. Raises
    InputError (exit 2) for an input or an output that cannot be used, ConvertError for a
    file that is not Python."""
    if request.output is not None:
        _refuse_overwriting_the_input(request.output, request)
    if request.kind == "notebook":
        return _notebook(request)
    if request.kind == "project":
        return _project(request)
    return _script(request)


def write_outcome(outcome: ConvertOutcome) -> list[tuple[str, int]]:
    """Write what `outcome` holds: a project's copy, then the files. What the copy left
    out (relative path, bytes). InputError when something may not or cannot be written
    (a file already there without --force: nothing of it is written)."""
    from distrun.files import write_files

    left_out: list[tuple[str, int]] = []
    if outcome.copy is not None:
        from distrun.tree import write_project

        copy = outcome.copy
        left_out = write_project(copy.root, copy.out, copy.converted, force=copy.force).left_out
    write_files(outcome.files)
    return left_out


def _script(request: ConvertRequest) -> ConvertOutcome:
    from distrun.convert import convert_source
    from distrun.files import default_output, read_script

    script = read_script(request.source)
    if script.is_empty:
        raise InputError(f"{request.source}: empty file (no Python code in it): nothing to "
                         "convert", "check that this is the script you meant: it holds no "
                         "code")
    result = convert_source(script.text, request.source, request.options,
                            str(Path(request.source).parent))
    default = default_output(request.source, request.options.target)
    return _one_file(request, result, default, script.encode, like=request.source,
                     original=script.raw)


def _notebook(request: ConvertRequest) -> ConvertOutcome:
    from distrun.convert.notebook import convert_notebook

    path = Path(request.source)
    default = str(path.with_name(f"{path.stem}_{request.options.target}.py"))
    if request.mode == "in-place":
        raise InputError(f"{request.source}: a notebook is not rewritten in place",
                         f"leave --in-place out: the converted script goes to {default}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{request.source}: cannot read: {err.strerror}") from None
    notebook, result = convert_notebook(data, request.source, request.options, str(path.parent))
    return _one_file(request, result, default, str.encode, like=None, cells=notebook.where)


def _one_file(request: ConvertRequest, result: ConvertResult, default: str,
              encode: Callable[[str], bytes], like: str | None,
              cells: Mapping[int, tuple[int, int]] | None = None,
              original: bytes | None = None) -> ConvertOutcome:
    """The outcome of a conversion whose result is one file (a script's, a notebook's)."""
    from distrun.files import output_file

    launch = request.kind == "script" and result.status == "converted"
    if request.mode == "stdout":  # unchanged scripts too: `-o - > x.py` works
        return ConvertOutcome(request, result, cells=cells, stdout=result.output)
    wanted = result.changed or request.output is not None  # an explicit OUT always holds it
    if request.mode not in WRITING or result.status == "unsupported" or not wanted:
        return ConvertOutcome(request, result, cells=cells)
    in_place = request.mode == "in-place"
    path = request.source if in_place else output_file(request.output, default)
    if not in_place:
        _refuse_overwriting_the_input(path, request)
    replace = request.force or in_place
    files = [FileWrite(path, encode(result.output), like=like, force=replace,
                       backup=(in_place and request.backup) or request.force,
                       original=original if in_place else None)]
    beside = [FileWrite(str(Path(path).parent / name), text.encode(), backup=replace,
                        force=replace) for name, text in result.files.items()]
    merge_needs_force(result, beside)
    note_replaced(result, beside)
    written = path + "".join(f" (and {f.path})" for f in beside)
    return ConvertOutcome(request, result, cells=cells, files=(*files, *beside),
                          written=written, launch=path if launch else None)


def _refuse_overwriting_the_input(path: str, request: ConvertRequest) -> None:
    if not same_file(path, request.source):
        return
    if request.kind == "notebook":
        raise InputError(f"{path} is the notebook itself: refusing to overwrite it",
                         "give -o a .py file name, or leave -o out")
    raise InputError(f"{path} is the script itself: refusing to overwrite it",
                     "use --in-place to rewrite it (a .orig backup is kept)")


def _project(request: ConvertRequest) -> ConvertOutcome:
    from distrun.convert.project import convert_project
    from distrun.tree import output_folder

    entry = Path(request.source)
    top = _top(entry, request.root)
    out = None
    if request.mode in ("stdout", "folder"):  # refused before any work when it cannot be
        out = output_folder("-" if request.mode == "stdout" else request.output, top,
                            request.options.target, request.source)
    project = convert_project(request.source, request.options, request.root)
    outcome = ConvertOutcome(request, project.entry.result, project=project)
    shown = project.shown  # reports name files as the user reaches them
    beside = project.entry.result.files
    if request.mode not in WRITING or project.entry.result.status == "unsupported":
        return outcome
    if request.mode == "in-place":
        files = [FileWrite(str(shown / f.source.out_rel),
                           f.source.script.encode(f.result.output),
                           like=str(shown / f.source.rel) if f.source.cells is None else None,
                           backup=request.backup, force=True,
                           original=f.source.script.raw if f.source.cells is None else None)
                 for f in project.written]
        folder = (shown / project.entry.source.rel).parent
        files += [FileWrite(str(folder / name), text.encode(), backup=True, force=True)
                  for name, text in beside.items()]
        note_replaced(project.entry.result, files)
        written = f"{len(project.changed)} file(s) in place" if project.changed else None
        return ConvertOutcome(request, outcome.result, project, files=tuple(files),
                              written=written)
    if project.entry.result.status != "converted" and request.output is None:
        return outcome
    assert out is not None  # mode "folder"
    converted = {f.source.rel: f.source.script.encode(f.result.output)
                 for f in project.written if f.source.written is None}
    folder = (out / project.entry.source.rel).parent
    # a notebook's script is a new file of the copy, beside the notebook
    files = [FileWrite(str(out / f.source.out_rel), f.source.script.encode(f.result.output),
                       force=True) for f in project.written if f.source.written is not None]
    files += [FileWrite(str(folder / name), text.encode(), backup=True, force=True)
              for name, text in beside.items()]
    return ConvertOutcome(request, outcome.result, project,
                          copy=ProjectCopy(project.root, out, converted, request.force),
                          files=tuple(files), written=str(out))


def _top(entry: Path, root: str | None) -> Path:
    """The project's top folder (`project.project_top`), a notebook's cells read for its
    imports."""
    from distrun.convert.project import find_modules, project_top

    if root is not None or not entry.suffix == ".ipynb":
        return project_top(entry, root)
    from distrun.convert.notebook import script_from_notebook

    text = script_from_notebook(entry.read_bytes(), str(entry)).text
    return project_top(entry, root, find_modules(entry, None, text))
