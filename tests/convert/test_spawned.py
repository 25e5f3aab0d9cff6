"""mp.spawn scripts: what is left alone or refused (the rewrite is in
fixtures/spawned/, its equivalence in tests/e2e/test_spawned_equivalence.py)."""

from __future__ import annotations

import textwrap

from distrun.convert import ConvertOptions, convert_source

WORKER = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.zeros(1, 2)).sum().backward()
    optimizer.step()
"""


def test_a_spawn_whose_result_is_kept_is_refused_with_the_line() -> None:
    source = WORKER + "\n\nif __name__ == '__main__':\n    ctx = mp.spawn(main, args=(2,), " \
        "nprocs=2, join=False)\n    ctx.join()\n"
    result = convert_source(source, "t.py")
    assert result.status == "unsupported" and result.output == source
    [finding] = result.findings
    assert (finding.rule, finding.line) == ("spawned.not_a_statement", 15)


def test_hogwild_processes_without_a_process_group_stay_refused() -> None:
    source = textwrap.dedent("""\
        import torch
        import torch.multiprocessing as mp


        def train(model):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.zeros(1, 2)).sum().backward()
            optimizer.step()


        if __name__ == "__main__":
            model = torch.nn.Linear(2, 1)
            model.share_memory()
            workers = [mp.Process(target=train, args=(model,)) for _ in range(2)]
        """)
    result = convert_source(source, "t.py")
    assert result.status == "unsupported" and result.output == source
    assert [f.rule for f in result.findings] == ["detect.spawns_processes"]


def test_a_world_size_given_by_name_becomes_the_launchers() -> None:
    source = WORKER + "\n\nif __name__ == '__main__':\n    n = torch.cuda.device_count()\n" \
        "    mp.spawn(main, args=(n,), nprocs=n)\n"
    result = convert_source(source, "t.py", ConvertOptions(partial=True))  # no sampler
    assert result.status == "converted"
    assert "    main(RANK, WORLD_SIZE)\n" in result.output
    assert "mp.spawn" not in result.output
