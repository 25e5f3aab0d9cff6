"""What to launch: the user's request (as typed), and the resolved spec backends read.

`LaunchRequest` holds the options as given (None = not given). `resolve` (in
resolve.py) fills the gaps from the cluster environment and the defaults, checks
everything, and returns a `LaunchSpec` with no open choices left. Backends turn a
spec into a `Command`; only the runner starts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distrun.launch_rules import DEFAULT_MASTER_PORT


@dataclass(frozen=True)
class TaskRank:
    """The one rank a `distrun launch` runs when the scheduler started it once per rank
    (SLURM's one task per GPU: `srun --ntasks-per-node=K distrun launch ...`): its place in
    the job, as the scheduler gave it (slurm_tasks.py)."""

    rank: int  # RANK: SLURM_PROCID
    local_rank: int  # LOCAL_RANK: SLURM_LOCALID
    world_size: int  # WORLD_SIZE: the step's tasks
    local_world_size: int  # LOCAL_WORLD_SIZE: the step's tasks on this node


@dataclass
class LaunchRequest:
    script: str | None = None
    script_args: tuple[str, ...] = ()
    module: bool = False
    nproc_per_node: str | None = None  # N | auto | gpu | cpu
    nnodes: str | None = None  # N | MIN:MAX
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: dict[str, str] = field(default_factory=dict)
    max_restarts: int | None = None
    log_dir: str | None = None
    launcher: str | None = None
    mixed_precision: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    slurm_tasks: str | None = None  # per-node | per-gpu | None: told by the job (--slurm-tasks)
    task: TaskRank | None = None  # filled in by resolve, one task per rank (never typed)
    address: str | None = None  # --launcher ray: the Ray cluster to join (None: a local one)
    # setting (as the config names it: nnodes, rdzv.endpoint) -> "FILE:LINE", for the values
    # a config file gave (and no flag replaced): errors about them name the key, not a flag
    origin: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchSpec:
    """A launch with every value decided. `notes` say what was detected, and from where."""

    script: str
    script_args: tuple[str, ...] = ()
    module: bool = False
    nproc_per_node: int | str = 1  # a word (auto/gpu/cpu) only in exports for another machine
    min_nodes: int = 1
    max_nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT
    rdzv_backend: str = "static"
    rdzv_endpoint: str | None = None
    rdzv_id: str = "none"
    rdzv_is_host: bool = False  # this node owns the c10d endpoint's address
    rdzv_conf: tuple[tuple[str, str], ...] = ()  # torchrun --rdzv-conf, as given
    local_addr: str | None = None  # c10d: the address other nodes reach this node at
    max_restarts: int = 0
    log_dir: str | None = None
    launcher: str = "torchrun"
    mixed_precision: str = "no"
    env: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None
    cpu: bool = False  # no GPU on this node: the processes compute on the CPU (gloo)
    task: TaskRank | None = None  # SLURM started this distrun once per rank: run that rank
    notes: tuple[str, ...] = ()
    keep_logs: bool = True  # False: a log folder distrun made, removed after a clean run
    ray_address: str | None = None  # --launcher ray: the cluster to join; None: start one

    @property
    def ranks_here(self) -> int:
        """The ranks this distrun supervises (and numbers 0..n-1 in its output and
        logs): this node's processes, or every rank of the job where one driver runs
        them all (--launcher ray)."""
        nproc = self.nproc_per_node if isinstance(self.nproc_per_node, int) else 1
        return nproc * self.max_nodes if self.launcher == "ray" else nproc

    @property
    def meets_other_nodes(self) -> bool:
        """Whether this node's processes meet other nodes' (a rendezvous, node 0's
        address): not where one driver runs every rank (--launcher ray)."""
        return self.max_nodes > 1 and self.launcher != "ray"

    @property
    def nnodes(self) -> str:
        if self.min_nodes == self.max_nodes:
            return str(self.min_nodes)
        return f"{self.min_nodes}:{self.max_nodes}"

    @property
    def elastic(self) -> bool:
        return self.min_nodes != self.max_nodes


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str]
