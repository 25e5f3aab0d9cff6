"""The Ray driver of a `--launcher ray` job, started and supervised by distrun's runner.

    python -m distrun.launch.ray_driver --workers=N [--address=A] [--log-dir=D] -- TARGET...

TARGET is what `python` would run (SCRIPT ARGS, or -m MODULE ARGS; with the check,
boot.py in front). Without --address the driver starts a Ray cluster on this machine
(its CPUs, at least one per worker, its GPUs; reachable at 127.0.0.1 only) and stops it
at the end, waiting until none of its processes is left; with one, it joins that
cluster (`auto`, HOST:PORT, ray://HOST:PORT) and leaves it running.

The job is a Ray Train `TorchTrainer` of N workers (one GPU each where the cluster has
GPUs), each running ray_worker.run_rank. The output is sorted by ray_output.py; when the
job ends, the driver waits for the last lines of every rank that ended by itself, and
for a failed job writes each rank's exit record where the runner reads it. Exit code:
0, 1 when a rank (or Ray) failed, 2 when Ray Train cannot be imported, 128+N when
stopped by signal N, 70 on an error of distrun's own (said, with its traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from distrun.errors import EXIT_INTERNAL
from distrun.launch import procs
from distrun.launch.ray_output import RankLines, RayOutput
from distrun.launch.ray_worker import RankFailed, run_rank

INSTALL = "pip install 'distrun[ray]'"
LAST_LINES_SECONDS = 15.0  # for Ray to forward the last lines of the ranks that ended
GONE_SECONDS = 10.0  # for the processes of a local cluster to end after ray.shutdown()
LOCAL_ADDRESS = "127.0.0.1"  # a local cluster is reachable from this machine only
STOPPED = -signal.SIGKILL  # how Ray Train ends the workers of a failed group (ray.kill)


class Stopped(BaseException):
    """SIGTERM or SIGINT: the job is stopped (Ray is still shut down on the way out)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def main(argv: list[str]) -> int:
    options = _options(argv)
    output = RayOutput(options.log_dir, sys.stdout, sys.stderr)
    sys.stdout = RankLines(output, False, sys.stdout)
    sys.stderr = RankLines(output, True, sys.stderr)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    try:
        return _drive(options, output)
    except Stopped as stop:
        return 128 + stop.signum
    except Exception:  # a bug (distrun's, Ray's): said, not left in ray.log with Ray's lines
        import traceback

        output.say(f"internal error:\n{traceback.format_exc().rstrip()}")
        return EXIT_INTERNAL
    finally:
        output.close()


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m distrun.launch.ray_driver")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--address")
    parser.add_argument("--log-dir")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.target[:1] == ["--"]:
        options.target = options.target[1:]
    if not options.target:
        parser.error("nothing to run after --")
    return options


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


def _drive(options: argparse.Namespace, output: RayOutput) -> int:
    # Ray Train gives up on a worker group not started in 60 s: a loaded machine, or a
    # cluster that adds nodes for it, can take longer (the user's own value is kept)
    os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "600")
    local = options.address is None
    if local:
        _own_token()
        # no spot instance to watch on this machine: one Ray process less to start
        os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    try:
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer
    except ImportError as err:
        output.say(f"Ray Train cannot be imported here ({type(err).__name__}: {err}); "
                   f"install it: {INSTALL}")
        return 2
    try:
        _start(ray, options)
    except Exception as err:  # noqa: BLE001 (Ray's errors: a refused address, no room...)
        where = "start a local Ray cluster" if local else f"join the Ray cluster at " \
            f"{options.address}"
        output.say(f"cannot {where}: {type(err).__name__}: {err}")
        _shutdown(ray, local, output)
        return 1
    try:
        gpus = _room(ray, options.workers, output)
        storage = os.path.abspath(os.path.join(options.log_dir, "ray", "results")) \
            if local and options.log_dir else None
        trainer = TorchTrainer(
            run_rank,
            train_loop_config=_worker_config(options.target, LOCAL_ADDRESS if local else None),
            scaling_config=ScalingConfig(
                num_workers=options.workers, use_gpu=gpus > 0,
                resources_per_worker={"GPU": min(1.0, gpus / options.workers)} if gpus
                else None),
            run_config=RunConfig(name=f"distrun-{time.strftime('%Y%m%d-%H%M%S')}",
                                 storage_path=storage))
        try:
            trainer.fit()
        except Exception as err:  # noqa: BLE001 (a rank failed, or Ray did)
            return _failed(err, options.workers, output)
        missing = output.wait_ends(set(range(options.workers)), LAST_LINES_SECONDS)
        if missing:
            output.say(f"the last lines of rank(s) {_ranks(missing)} did not come from "
                       f"Ray within {LAST_LINES_SECONDS:g} s")
        return 0
    finally:
        _shutdown(ray, local, output)


def _own_token() -> None:
    """A local cluster's own authentication token, given to every process of it through
    the environment (unless the user chose how Ray authenticates): Ray would otherwise
    share ~/.ray/auth_token with every cluster of this user, and two clusters starting at
    once on a machine without one each write their own there."""
    if not any(name in os.environ for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN",
                                               "RAY_AUTH_TOKEN_PATH")):
        import secrets

        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)


def _start(ray: Any, options: argparse.Namespace) -> None:
    """A local cluster, or the one at --address. A driver outside a Ray job ships
    distrun's package to the cluster's workers (they import ray_worker from it); inside
    one (`ray job submit`) the job's runtime environment is left as the user made it."""
    import logging

    if options.address is None:
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, options.workers),
                 include_dashboard=False, _node_ip_address=LOCAL_ADDRESS,
                 logging_level=logging.WARNING, log_to_driver=True)
        return
    import distrun

    package = os.path.dirname(os.path.abspath(distrun.__file__))
    in_job = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
    ray.init(address=options.address, logging_level=logging.WARNING, log_to_driver=True,
             runtime_env=None if in_job else {"py_modules": [package]})


def _room(ray: Any, workers: int, output: RayOutput) -> float:
    """The cluster's GPUs (the workers use them where there are any); said, with its
    CPUs, and a warning when the cluster is too small to place every worker now."""
    resources = ray.cluster_resources()
    cpus, gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    output.say(f"{workers} workers on a Ray cluster of {cpus:g} CPUs and {gpus:g} GPUs")
    short = gpus < workers if gpus else cpus < workers
    if short:
        output.say(f"warning: the cluster has no room for {workers} workers now (one "
                   f"{'GPU' if gpus else 'CPU'} each): the job waits until it has (an "
                   "autoscaling cluster adds nodes)")
    return gpus


def _worker_config(target: list[str], master_addr: str | None) -> dict[str, Any]:
    """What every rank is given (ray_worker.run_rank): the target, the job's variables
    (the names the backend listed, and every DISTRUN_*), OMP_NUM_THREADS, this folder,
    and rank 0's address where the driver knows it (a local cluster: 127.0.0.1)."""
    names = set(filter(None, os.environ.get("DISTRUN_RAY_ENV", "").split(",")))
    env = {name: value for name, value in os.environ.items()
           if name in names or (name.startswith("DISTRUN_") and name != "DISTRUN_RAY_ENV")}
    return {"target": target, "env": env, "omp": os.environ.get("OMP_NUM_THREADS", "1"),
            "cwd": os.getcwd(), "master_addr": master_addr}


def _failed(err: Exception, workers: int, output: RayOutput) -> int:
    """The failed ranks recorded (their exit code, host and error), the others as
    stopped by Ray unless they had ended; Ray's own failure said as it is."""
    failed = _failed_ranks(err)
    if not failed:
        output.say(f"the job failed: {type(err).__name__}: {err}")
        return 1
    output.wait_ends(set(failed), LAST_LINES_SECONDS)
    for rank, (code, host, error) in sorted(failed.items()):
        output.record_exit(rank, host or output.host(rank, "?"), code, error=error)
    for rank in sorted(set(range(workers)) - set(failed)):
        ended = output.exit_of(rank)  # failed too, after Ray had its first failure
        if ended is None:
            output.record_exit(rank, output.host(rank, "?"), STOPPED, stopped=True)
        elif ended[0] != 0:
            output.record_exit(rank, ended[1], ended[0])
    return 1


def _failed_ranks(err: Exception) -> dict[int, tuple[int, str, str]]:
    """Rank -> (exit code, host, error) of the ranks Ray Train says failed (its
    WorkerGroupError's `worker_failures`); a rank whose error is not distrun's
    RankFailed (Ray's own, such as a worker process that died) has exit code 1 and no
    host."""
    found: dict[int, tuple[int, str, str]] = {}
    failures = getattr(err, "worker_failures", None)
    if not isinstance(failures, dict):
        return found
    for rank, error in failures.items():
        cause = _rank_failed(error, RankFailed)
        if cause is not None:
            found[int(rank)] = (cause.exit_code, cause.host, cause.error)
        else:
            found[int(rank)] = (1, "", f"{type(error).__name__}: {error}")
    return found


def _rank_failed(error: BaseException, kind: type[Any]) -> Any:
    """The RankFailed in `error` or in what it wraps (Ray wraps a worker's error)."""
    seen: set[int] = set()
    todo: list[object] = [error]
    while todo:
        item = todo.pop()
        if id(item) in seen or item is None:
            continue
        seen.add(id(item))
        if isinstance(item, kind):
            return item
        if isinstance(item, BaseException):
            todo += [item.__cause__, item.__context__, *item.args]
        todo += [getattr(item, name, None) for name in ("_base_exc", "cause", "exc")]
    return None


def _ranks(ranks: set[int]) -> str:
    return ", ".join(str(rank) for rank in sorted(ranks))


def _shutdown(ray: Any, local: bool, output: RayOutput) -> None:
    """Ray shut down; a local cluster's processes waited for (killed when they outlive
    GONE_SECONDS): nothing of it is left when the driver exits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ray.shutdown()
    except Exception as err:  # noqa: BLE001
        output.say(f"warning: Ray did not shut down cleanly ({type(err).__name__}: {err})")
    if not local:
        return
    deadline = time.monotonic() + GONE_SECONDS
    while procs.descendants(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.1)
    procs.kill_all(procs.descendants(os.getpid()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
