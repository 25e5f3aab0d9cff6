"""What the hang report's collective wrapper costs per collective.

The probe (distrun/check/probe_collectives.py) wraps torch.distributed's collectives to
keep the last one each rank entered (a counter, the tensor's shape, the script's line, two
writes to a memory-mapped record). Measured in a world of one process (gloo, a HashStore):
N calls of `dist.all_reduce` on a 1-element tensor and of `dist.barrier()`, unwrapped and
wrapped, interleaved rounds, best of each; prints the time per call and the difference.

Run:  .venv/bin/python benchmarks/bench_collectives.py [--calls 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    from distrun.check import probe_state
    from distrun.check.probe_collectives import Collectives, counted

    folder = tempfile.mkdtemp(prefix="bench-collectives-")
    os.environ.update({"DISTRUN_CHECK_DIR": folder, "RANK": "0"})
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    plain = {"all_reduce": dist.all_reduce, "barrier": dist.barrier}
    probe_state.state = probe_state.State(folder, 0, None)
    watch = Collectives(folder, 0)
    wrapped = {name: counted(watch, name, f) for name, f in plain.items()}
    tensor = torch.ones(1)
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for kind, functions in (("plain", plain), ("wrapped", wrapped)):
            for name, function in functions.items():
                call_args = (tensor,) if name == "all_reduce" else ()
                started = time.perf_counter()
                for _ in range(args.calls):
                    function(*call_args)
                per_call = (time.perf_counter() - started) / args.calls
                key = (name, kind)
                best[key] = min(best.get(key, per_call), per_call)
    for name in plain:
        base, with_wrapper = best[(name, "plain")], best[(name, "wrapped")]
        print(f"{name:<10} plain {base * 1e6:7.2f} us   wrapped {with_wrapper * 1e6:7.2f} us   "
              f"wrapper {(with_wrapper - base) * 1e6:+6.2f} us per call")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
