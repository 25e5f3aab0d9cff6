"""What each rewrite must leave alone (pyupgrade-style no-op cases), and the scripts
the converter must not touch at all."""

from __future__ import annotations

import textwrap

import pytest

from distrun.convert import convert_source

TRAINING = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)  # data drawn alike on every rank
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def convert_with(extra: str) -> tuple[str, set[tuple[int, str]]]:
    source = textwrap.dedent(TRAINING) + textwrap.dedent(extra)
    result = convert_source(source, "t.py")
    return result.output, {(c.line, c.rule.split(".")[0]) for c in result.changes}


def line_of(source: str, needle: str) -> int:
    full = textwrap.dedent(TRAINING) + textwrap.dedent(source)
    return next(i for i, line in enumerate(full.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("rule", "snippet"),
    [
        ("device", 'note = "cuda"  # just a word\n'),
        ("device", 'message = f"runs on {torch.cuda.device_count()} GPUs"\n'),
        ("device", 'cpu_copy = torch.zeros(1).to("cpu")\n'),
        ("device", "gpus = torch.cuda.is_available()\n"),
        ("device", "count = 0\n"),
        ("model", "model.train()\n"),
        ("model", "model.eval()\n"),
        ("model", "params = sum(p.numel() for p in model.parameters())\n"),
        ("model", "inner = model.module\n"),
        ("model", "with model.no_sync():\n    pass\n"),
        ("checkpoint", 'state = torch.load("w.pt", map_location="cpu")\n'),
        ("output", "def print_summary():\n    return 1\n"),
        ("output", "text = 'print(x)'\n"),
        ("directories", 'os.makedirs("out", exist_ok=True)\n'),
        ("directories", 'found = os.path.isdir("out")\n'),
        ("directories", 'folder.mkdir()  # not known to be a pathlib.Path\n'),
        ("loss", "mean = nn.functional.mse_loss(model(torch.zeros(1, 2)), torch.zeros(1, 1))\n"),
        ("download", 'dataset = datasets.MNIST("data", download=False)\n'),
        ("rank0_values", "start = time.time()  # a timer, not the name of a run\n"),
        ("rank0_values", 'run_name = "fixed"\n'),
        ("output", 'logging.error("disk full")\n'),
        ("output", 'content = open("notes.txt").read()\n'),
    ],
)
def test_rewrite_leaves_alone(rule: str, snippet: str) -> None:
    output, changes = convert_with(snippet)
    first = snippet.splitlines()[0]
    assert first in output
    assert (line_of(snippet, first), rule) not in changes


def test_map_location_is_not_added_twice() -> None:
    output, _ = convert_with('state = torch.load("w.pt", map_location="cpu")\n')
    assert output.count("map_location") == 1


def test_references_before_the_wrap_are_not_redirected() -> None:
    source = TRAINING.replace(
        "model = nn.Linear(2, 1)\n",
        "model = nn.Linear(2, 1)\nmodel.load_state_dict(model.state_dict())\n",
    )
    output = convert_source(textwrap.dedent(source)).output
    assert "model.load_state_dict(model.state_dict())" in output


def test_eval_loader_is_not_sharded() -> None:
    output, _ = convert_with(
        "test_loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)\n"
    )
    assert "test_loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)" in output


def test_an_eval_loader_with_its_own_batch_sampler_is_left_whole() -> None:
    """Only training loaders get their batch sampler shared out; an evaluation loader
    keeps it (every rank evaluates the full set), and with no training loader of that
    kind the helper is not defined at all."""
    output, _ = convert_with(
        "val_loader = DataLoader(loader.dataset, batch_sampler=BatchSampler(\n"
        "    SequentialSampler(loader.dataset), 4, drop_last=False))\n")
    assert "batch_sampler=BatchSampler(\n    SequentialSampler(loader.dataset)" in output
    assert "RankShareBatchSampler" not in output


def test_loader_with_its_own_sampler_is_left_with_a_warning() -> None:
    source = TRAINING.replace(
        "batch_size=4, shuffle=True)", "batch_size=4, sampler=my_sampler)"
    )
    result = convert_source(textwrap.dedent(source), "t.py")
    assert "sampler=my_sampler)" in result.output
    assert "DistributedSampler(" not in result.output
    assert any(f.rule == "data.own_sampler" and "already has a sampler" in f.message
               for f in result.findings)


ALREADY_DISTRIBUTED = """\
import torch
import torch.distributed as dist

# a hand-written DDP script: must stay byte-identical
dist.init_process_group("gloo")
print("rank", dist.get_rank())   # every rank prints, on purpose
"""


@pytest.mark.parametrize(
    "source",
    [
        ALREADY_DISTRIBUTED,
        "from accelerate import Accelerator\naccelerator = Accelerator()\n",
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
        "m = DistributedDataParallel(torch.nn.Linear(1, 1))\n",
    ],
)
def test_already_distributed_is_byte_identical(source: str) -> None:
    result = convert_source(source)
    assert result.output == source
    assert result.status == "already-distributed"
    assert not result.changes


def test_script_that_spawns_processes_is_not_converted() -> None:
    source = (
        "import torch.multiprocessing as mp\nimport torch\n\n"
        "def work(rank):\n    print(rank)\n\n"
        "if __name__ == '__main__':\n    mp.spawn(work, nprocs=2)\n"
    )
    result = convert_source(source, "s.py")
    assert result.output == source
    assert result.status == "unsupported"
    assert result.findings[0].line == 8


def test_non_torch_python_is_nothing_to_do() -> None:
    source = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n"
    result = convert_source(source)
    assert result.output == source
    assert result.status == "nothing-to-do"


def test_no_dataloader_is_reported() -> None:
    source = (
        "import torch\nx = torch.randn(8, 2)\nmodel = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(3):\n    loss = model(x[step::3]).sum()\n    loss.backward()\n"
        "    opt.step()\n"
    )
    result = convert_source(source, "m.py")
    assert any(f.rule == "data.no_loader" and "no DataLoader" in f.message for f in result.findings)


MODERN_AMP = """
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        with torch.autocast("cuda", enabled=False):
            loss = (model(x) - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.mark.parametrize("amp", ["keep", "fp16"])
def test_modern_amp_is_left_alone(amp: str) -> None:
    from distrun.convert import ConvertOptions

    result = convert_source(MODERN_AMP, "m.py", ConvertOptions(amp=amp))  # type: ignore[arg-type]
    assert not [c for c in result.changes if c.rule.startswith("amp.")]
    assert result.output.count("torch.autocast(") == 1
    assert 'scaler = torch.amp.GradScaler("cuda")' in result.output
    said = [f for f in result.findings if f.rule == "amp.already"]
    assert len(said) == (amp == "fp16") and all(f.severity == "info" for f in said)


def test_modern_fp16_amp_becomes_bf16_when_asked() -> None:
    """--amp bf16 on a script in fp16 (autocast on "cuda", a GradScaler): was a silent
    no-op (issue 25, class 10)."""
    from distrun.convert import ConvertOptions

    result = convert_source(MODERN_AMP, "m.py", ConvertOptions(amp="bf16"))
    assert 'torch.autocast("cuda", enabled=False, dtype=torch.bfloat16)' in result.output
    assert "GradScaler" not in result.output and "scaler." not in result.output
    assert {c.rule for c in result.changes} >= {"amp.dtype", "amp.remove_scaler"}


def test_without_options_no_lr_scaling_and_no_syncbn() -> None:
    output, changes = convert_with("")
    assert "lr=0.1)" in output and "WORLD_SIZE)" not in output.split("lr=")[1][:20]
    assert "SyncBatchNorm" not in output
    assert not {rule for _, rule in changes} & {"scale-lr", "sync-bn", "amp"}


def test_scale_lr_reports_an_optimizer_with_its_default_rate() -> None:
    """--scale-lr on an optimizer at its default rate used to leave it unscaled (with a
    warning); the default is now written out and scaled (issue 25, class 10)."""
    from distrun.convert import ConvertOptions

    source = textwrap.dedent(TRAINING).replace("torch.optim.SGD(model.parameters(), lr=0.1)",
                                               "torch.optim.Adam(model.parameters())")
    result = convert_source(source, "t.py", ConvertOptions(scale_lr=True))
    assert "torch.optim.Adam(model.parameters(), lr=0.001 * WORLD_SIZE)" in result.output
    assert any(c.rule == "scale_lr.default_lr" and "default learning rate" in c.message
               for c in result.changes)


def test_a_list_of_parameters_no_optimizer_is_given_is_no_model() -> None:
    """Issue 25 class 11: lists filled from `.parameters()` in a loop are followed only
    into an optimizer; a copy kept for something else makes no second model."""
    output, changes = convert_with("""
        frozen = nn.Linear(2, 2)
        kept = []
        for p in frozen.parameters():
            kept.append(p.detach().clone())
        out = frozen(torch.zeros(1, 2))
        """)
    assert "ddp_frozen" not in output
    assert "DDP(frozen" not in output


def test_a_model_passed_by_keyword_to_a_function_that_does_not_train_stays_plain() -> None:
    """A `**kwargs` helper given the model by keyword that only reads it: the model is
    followed there, but nothing is wrapped or handed on."""
    output, _ = convert_with("""
        def count(**kwargs):
            return sum(p.numel() for p in kwargs["net"].parameters())
        print(count(net=model))
        """)
    assert "count(net=model)" in output
    assert output.count("DDP(") == 1


def test_a_loader_drawn_from_only_without_gradients_is_not_sharded() -> None:
    """An `iter()` kept and drawn from with `next()` makes its loader a training loader
    only where the batch goes into a backward pass: a probe under no_grad does not."""
    source = textwrap.dedent(TRAINING) + textwrap.dedent("""
        probe_loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
        probe = iter(probe_loader)
        with torch.no_grad():
            (px,) = next(probe)
            out = model(px)
        """)
    output = convert_source(source, "t.py").output
    assert "probe_loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)\n" \
        in output
    assert "probe_loader.sampler" not in output
