"""Property tests of `convert_source` (hypothesis + hypothesmith).

Inputs: (a) random valid Python programs from hypothesmith, as they are and with a
small training loop appended; (b) random training scripts assembled from the patterns
the converter knows (devices, loaders, models, optimizers, loops, prints, saves,
evaluation, mixed precision, gradient accumulation), with random names, orderings,
layouts and comments. Every option set is drawn too.

What must hold for every input: no exception but a documented `DistrunError`; the
output compiles; converting the output again changes nothing; every comment line of
the input is still in the output. A training script must also come out converted.

Runs are deterministic (`derandomize=True`, no example database), so CI sees the same
examples every time; the number of examples keeps the file well under a minute.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from collections import Counter

import hypothesmith
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from distrun.convert import ConvertOptions, ConvertResult, convert_source
from distrun.errors import DistrunError
from tests.hardening.sweep import TRAINING_TAIL

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # random code is odd code
SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)

OPTIONS = st.builds(
    ConvertOptions,
    target=st.sampled_from(["ddp", "accelerate"]),
    amp=st.sampled_from(["keep", "fp16", "bf16", "none"]),
    sync_bn=st.booleans(),
    scale_lr=st.booleans(),
    grad_accum_no_sync=st.booleans(),
    eval_shard=st.booleans(),
)


# --------------------------------------------------------------------------- the checks


def comment_lines(source: str) -> Counter[str]:
    """Every comment that stands alone on its line, as the tokenizer sees it."""
    found: Counter[str] = Counter()
    code_rows: set[int] = set()
    comments: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.append((token.start[0], token.string))
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT, tokenize.ENDMARKER):
            code_rows.update(range(token.start[0], token.end[0] + 1))
    for row, text in comments:
        if row not in code_rows:
            found[text.rstrip()] += 1
    return found


def convert_and_check(source: str, options: ConvertOptions) -> ConvertResult | None:
    """The properties every input must have; None when the converter refused it."""
    compile(source, "<input>", "exec", dont_inherit=True)  # the generators make valid code
    try:
        result = convert_source(source, "input.py", options)
    except DistrunError as err:  # a documented refusal is allowed, with a message
        assert err.message.strip()
        return None
    compile(result.output, "<output>", "exec", dont_inherit=True)
    if result.status != "converted":
        assert result.output == source, f"status {result.status} but the text changed"
    again = convert_source(result.output, "input.py", options)
    assert again.output == result.output, "converting the output changed it again"
    lost = comment_lines(source) - comment_lines(result.output)
    assert not lost, f"comment lines lost: {sorted(lost)}"
    return result


# --------------------------------------------------------------------------- (a) hypothesmith


def check_alone_and_with_a_training_loop(source: str, options: ConvertOptions) -> None:
    """The random program as it is (mostly "nothing to do"), then with a training loop
    appended, so that every rewrite meets the random code."""
    convert_and_check(source, options)
    grafted = source + ("" if source.endswith("\n") or not source else "\n") + TRAINING_TAIL
    try:
        compile(grafted, "<input>", "exec", dont_inherit=True)
    except SyntaxError:  # the random code ends where no statement may follow
        return
    result = convert_and_check(grafted, options)
    assert result is None or result.status in ("converted", "already-distributed",
                                               "unsupported")


@settings(SETTINGS, max_examples=25)
@given(source=hypothesmith.from_grammar(), options=OPTIONS)
def test_random_programs_from_the_grammar(source: str, options: ConvertOptions) -> None:
    check_alone_and_with_a_training_loop(source, options)


@settings(SETTINGS, max_examples=25)
@given(source=hypothesmith.from_node(), options=OPTIONS)
# Found by this test: a form feed in the indentation made the blocks the converter adds
# inconsistent with the script's (TabError in the output).
@example(source="class C:# type: ignore\n\t \t\t \t\x0c\x0c\tpass\n",
         options=ConvertOptions(target="accelerate", amp="none", grad_accum_no_sync=True,
                                eval_shard=True))
@example(source="def f():\n\x0c  if 1:\n\x0c    x = 1\n", options=ConvertOptions())
def test_random_syntax_trees(source: str, options: ConvertOptions) -> None:
    check_alone_and_with_a_training_loop(source, options)


# --------------------------------------------------------------------------- (b) training scripts

RESERVED = {
    "torch", "nn", "F", "DataLoader", "TensorDataset", "print", "range", "len", "enumerate",
    "main", "train", "evaluate", "self", "sum", "float", "int", "dict", "list",
}
# Names the converter itself introduces: a script may already use them for its own ends.
TRICKY = ["dist", "DDP", "RANK", "WORLD_SIZE", "LOCAL_RANK", "DEVICE", "gc", "sampler",
          "DistributedSampler", "accelerator", "scaler", "contextlib", "module"]
IDENTIFIERS = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True),
    st.sampled_from(TRICKY),
).filter(lambda name: not keyword.iskeyword(name) and name not in RESERVED)
COMMENT_TEXT = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\x00\x0c"),
    max_size=30,
)
ROLES = ("model", "opt", "loader", "data", "x", "y", "out", "loss", "epoch", "dev",
         "test_loader", "total", "sched", "step", "kw", "scaler")


@st.composite
def training_scripts(draw: st.DrawFn) -> str:
    """A single-GPU training script built from the patterns the converter rewrites."""
    names = dict(zip(ROLES, draw(st.lists(IDENTIFIERS, min_size=len(ROLES),
                                          max_size=len(ROLES), unique=True)), strict=True))
    n = names
    in_functions = draw(st.booleans())
    device_style = draw(st.sampled_from(["guarded", "cuda", "cuda0", "none"]))
    move = draw(st.sampled_from(["to", "cuda", "separate", "none"])) \
        if device_style != "none" else draw(st.sampled_from(["cuda", "none"]))
    loader_style = draw(st.sampled_from(["keyword", "positional", "kwargs"]))
    shuffle = draw(st.booleans())
    evaluate = draw(st.booleans())
    amp = draw(st.sampled_from(["none", "cuda_amp", "autocast"]))
    accumulate = draw(st.booleans())
    save = draw(st.sampled_from(["state_dict", "dict", "model", "none"]))
    use_enumerate = accumulate or draw(st.booleans())
    log_inside = draw(st.booleans())

    nn_import = draw(st.sampled_from(["import torch.nn as nn", "from torch import nn"]))
    head = ["import torch", nn_import, "from torch.utils.data import DataLoader, TensorDataset"]
    if draw(st.booleans()):
        head.append("torch.manual_seed(0)")

    setup: list[str] = []
    if device_style == "guarded":
        setup.append(f'{n["dev"]} = torch.device("cuda" if torch.cuda.is_available() else "cpu")')
    elif device_style == "cuda":
        setup.append(f'{n["dev"]} = "cuda"')
    elif device_style == "cuda0":
        setup.append(f'{n["dev"]} = torch.device("cuda:0")')
    data_lines = [f'{n["data"]} = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))']
    if loader_style == "keyword":
        data_lines.append(f'{n["loader"]} = DataLoader({n["data"]}, batch_size=16, '
                          f'shuffle={shuffle})')
    elif loader_style == "positional":
        data_lines.append(f'{n["loader"]} = DataLoader({n["data"]}, 16, {shuffle})')
    else:
        data_lines += [f'{n["kw"]} = {{"batch_size": 16, "shuffle": {shuffle}}}',
                       f'{n["loader"]} = DataLoader({n["data"]}, **{n["kw"]})']
    if evaluate:
        data_lines.append(f'{n["test_loader"]} = DataLoader({n["data"]}, batch_size=8, '
                          'shuffle=False)')
    layers = draw(st.sampled_from(["nn.Linear(4, 1)",
                                   "nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))",
                                   "nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), "
                                   "nn.Linear(8, 1))"]))
    model_lines = [f'{n["model"]} = {layers}' + {
        "to": f'.to({n["dev"]})', "cuda": ".cuda()"}.get(move, "")]
    if move == "separate":
        model_lines.append(f'{n["model"]}.to({n["dev"]})')
    parallel = draw(st.sampled_from(["none", "block", "one-line"]))
    if parallel == "block":
        model_lines += ["if torch.cuda.device_count() > 1:",
                        f'    {n["model"]} = nn.DataParallel({n["model"]})']
    elif parallel == "one-line":
        model_lines.append(f'if torch.cuda.device_count() > 1: {n["model"]} = '
                           f'nn.DataParallel({n["model"]})')
    if draw(st.booleans()):
        model_lines.insert(0, "torch.cuda.set_device(0)")
    optimizer = draw(st.sampled_from(["torch.optim.SGD({}.parameters(), lr=0.1)",
                                      "torch.optim.Adam({}.parameters(), lr=1e-3)",
                                      "torch.optim.SGD(params={}.parameters(), lr=0.1, "
                                      "momentum=0.9)"]))
    model_lines.append(f'{n["opt"]} = ' + optimizer.format(n["model"]))
    scheduler = draw(st.booleans())
    if scheduler:
        model_lines.append(f'{n["sched"]} = torch.optim.lr_scheduler.StepLR({n["opt"]}, 1)')
    if amp == "cuda_amp":
        model_lines.append(f'{n["scaler"]} = torch.cuda.amp.GradScaler()')
    parts = [data_lines, model_lines]
    if draw(st.booleans()):
        parts.reverse()
    setup += parts[0] + parts[1]
    setup = share_lines(draw, setup)

    to_dev = device_style != "none" and draw(st.booleans())
    body = [f'for {n["x"]}, {n["y"]} in {n["loader"]}:' if not use_enumerate else
            f'for {n["step"]}, ({n["x"]}, {n["y"]}) in enumerate({n["loader"]}):']
    if to_dev:
        body.append(f'    {n["x"]}, {n["y"]} = {n["x"]}.to({n["dev"]}), {n["y"]}.to({n["dev"]})')
    forward = [f'{n["out"]} = {n["model"]}({n["x"]})',
               f'{n["loss"]} = nn.functional.mse_loss({n["out"]}, {n["y"]})']
    if amp == "none":
        body += ["    " + line for line in forward]
    else:
        head_line = ("    with torch.cuda.amp.autocast():" if amp == "cuda_amp" else
                     '    with torch.autocast("cpu", dtype=torch.bfloat16):')
        if draw(st.booleans()):
            body += [head_line, *("        " + line for line in forward)]
        else:  # a one-line suite
            body.append(f"{head_line} {'; '.join(forward)}")
    backward = (f'{n["scaler"]}.scale({n["loss"]}).backward()' if amp == "cuda_amp"
                else f'{n["loss"]}.backward()')
    stepping = ([f'{n["scaler"]}.step({n["opt"]})', f'{n["scaler"]}.update()']
                if amp == "cuda_amp" else [f'{n["opt"]}.step()'])
    if accumulate:
        body += [f"    {backward}", f'    if ({n["step"]} + 1) % 2 == 0:']
        body += ["        " + line for line in [*stepping, f'{n["opt"]}.zero_grad()']]
    else:
        body += [f'    {n["opt"]}.zero_grad()', f"    {backward}"]
        body += ["    " + line for line in stepping]
    if log_inside:
        body.append(f'    print({n["loss"]}.item())')
    epoch = [f'for {n["epoch"]} in range(2):']
    if draw(st.booleans()):
        epoch.append(f'    {n["model"]}.train()')
    epoch += ["    " + line for line in body]
    if scheduler:
        epoch.append(f'    {n["sched"]}.step()')
    epoch.append(f'    print(f"epoch {{{n["epoch"]}}} loss {{{n["loss"]}.item():.4f}}")')
    if evaluate:
        epoch += [f'    {n["model"]}.eval()', f'    {n["total"]} = 0.0',
                  "    with torch.no_grad():",
                  f'        for {n["x"]}, {n["y"]} in {n["test_loader"]}:',
                  f'            {n["total"]} += nn.functional.mse_loss({n["model"]}({n["x"]}), '
                  f'{n["y"]}, reduction="sum").item()',
                  f'    print({n["total"]} / len({n["test_loader"]}.dataset))']
    saves = {
        "state_dict": [f'torch.save({n["model"]}.state_dict(), "model.pt")'],
        "dict": [f'torch.save({{"model": {n["model"]}.state_dict(), '
                 f'"optimizer": {n["opt"]}.state_dict()}}, "checkpoint.pt")'],
        "model": [f'torch.save({n["model"]}, "whole.pt")'],
        "none": [],
    }[save]

    if in_functions:
        args = ", ".join([n["model"], n["loader"], n["opt"]]
                         + ([n["dev"]] if device_style != "none" else [])
                         + ([n["test_loader"]] if evaluate else [])
                         + ([n["sched"]] if scheduler else [])
                         + ([n["scaler"]] if amp == "cuda_amp" else []))
        lines = [*head, "", "", f"def train({args}):",
                 *("    " + line for line in epoch), "", "", "def main():",
                 *("    " + line for line in setup), f"    train({args})",
                 *("    " + line for line in saves), "", "",
                 'if __name__ == "__main__":', "    main()"]
    else:
        lines = [*head, "", *setup, "", *epoch, *saves]
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    return sprinkle_comments(draw, [reindent(line, unit) for line in lines])


def share_lines(draw: st.DrawFn, lines: list[str]) -> list[str]:
    """Some neighbouring simple statements joined on one line: `a = 1; b = 2`."""
    out: list[str] = []
    for line in lines:
        simple = not line.startswith((" ", "if ", "for ", "with ")) and not line.endswith(":")
        previous = out[-1] if out else ""
        if (simple and previous and not previous.startswith((" ", "if ", "for ", "with "))
                and not previous.endswith(":") and draw(st.integers(0, 4)) == 0):
            out[-1] = f"{previous}; {line}"
        else:
            out.append(line)
    return out


def reindent(line: str, unit: str) -> str:
    stripped = line.lstrip(" ")
    return unit * ((len(line) - len(stripped)) // 4) + stripped


def sprinkle_comments(draw: st.DrawFn, lines: list[str]) -> str:
    """Comment lines (at any indentation: Python ignores it), end-of-line comments,
    and blank lines, inserted at random places."""
    out: list[str] = []
    for line in lines:
        while draw(st.integers(0, 9)) == 0:
            if draw(st.booleans()):
                out.append("")
            else:
                indent = " " * draw(st.integers(0, 12))
                out.append(f"{indent}# {draw(COMMENT_TEXT)}".rstrip())
        if line.strip() and draw(st.integers(0, 7)) == 0:
            line += f"  # {draw(COMMENT_TEXT)}".rstrip()
        out.append(line)
    return "\n".join(out) + "\n"


@settings(SETTINGS, max_examples=30)
@given(source=training_scripts(), options=OPTIONS)
def test_random_training_scripts(source: str, options: ConvertOptions) -> None:
    result = convert_and_check(source, options)
    assert result is not None, source
    if result.status == "unsupported":  # an option the script makes impossible: refused,
        assert any(f.severity == "error" and f.fix for f in result.findings)  # with the fix
        result = convert_and_check(source, ConvertOptions(target=options.target))
        assert result is not None
    assert result.status == "converted", source


def test_the_comment_check_can_fail() -> None:
    """The comment property really looks: dropping a comment line is noticed."""
    source = "x = 1\n    # kept?\ny = [1,  # end of line\n     2]\n# last\n"
    assert comment_lines(source) == Counter({"# kept?": 1, "# last": 1})
    assert comment_lines(source) - comment_lines(source.replace("# last\n", "")) == Counter(
        {"# last": 1})


def test_a_file_left_unconverted_is_given_back_verbatim() -> None:
    """Found by test_random_programs_from_the_grammar: LibCST gives `A\\n\\n ` back as
    `A\\n `; a file the converter leaves alone is the user's text, byte for byte."""
    for source in ("A\n\n ", "x = 1\n\n\t"):
        result = convert_source(source, "input.py")
        assert result.status != "converted" and result.output == source, repr(result.output)
