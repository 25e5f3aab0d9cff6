"""The launch config file: every key, its type, its default.

`KEYS` is the single description of `distrun.yaml`; validation, `config show`,
`config schema` (JSON Schema) and `distrun launch --config` all read it. The launch
settings' defaults, choices and limits come from distrun.launch_rules (which `distrun
launch` judges by too); `rule` names the rule that checks a value beyond its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distrun import launch_rules as rules
from distrun.launch_rules import DEFAULT_MASTER_PORT, DEFAULTS, NPROC_WORDS, SLURM_TASKS

__all__ = ["DEEPSPEED_BUILT", "KEYS", "NPROC_WORDS", "Key", "defaults", "json_schema"]
DEEPSPEED_OFFLOAD = ("none", "cpu")
# A pyxis mount: SRC, SRC:DST or SRC:DST:FLAGS (flags such as ro, rprivate, joined by +);
# commas separate mounts on srun's line, so none in an entry
MOUNT = r"^[^,:]+(:[^,:]+(:[a-z]+(\+[a-z]+)*)?)?$"
# The `deepspeed:` keys have no default of their own (left out: the config file decides);
# a config built without a file takes these (clipping written out: DeepSpeed's is 1.0).
DEEPSPEED_BUILT: dict[str, Any] = {"zero_stage": 2, "offload_optimizer": "none",
                                   "gradient_clipping": 0.0, "gradient_accumulation_steps": 1}


@dataclass(frozen=True)
class Key:
    kind: str  # str | int | number | bool | list | map | nnodes | nproc | section
    help: str
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    keys: dict[str, Key] = field(default_factory=dict)  # for kind == "section"
    pattern: str | None = None  # the value's form (a list's: each item's)
    form: str | None = None  # that form in words, for the message when a value breaks it
    rule: str | None = None  # host | port | endpoint: the launch rule checking the value


KEYS: dict[str, Key] = {
    "launcher": Key("str", "Launcher that runs the job.", DEFAULTS["launcher"],
                    choices=rules.LAUNCHERS),
    "script": Key("str", "The training script (or module, with module: true)."),
    "script_args": Key("list", "Arguments passed to the script.", []),
    "module": Key("bool", "Run `script` as a module, like python -m.", False),
    "nnodes": Key("nnodes", "Number of nodes, or MIN:MAX for an elastic job.",
                  DEFAULTS["nnodes"], maximum=rules.MAX_NODES),
    "nproc_per_node": Key("nproc", "Processes per node: a number, or auto, gpu, cpu.",
                          DEFAULTS["nproc_per_node"], maximum=rules.MAX_NPROC),
    "node_rank": Key("int", "This node's rank (static rendezvous).", DEFAULTS["node_rank"],
                     minimum=0),
    "master_addr": Key("str", "Address of node 0 (static rendezvous).", rule="host"),
    "master_port": Key("int", "Port on node 0 (default: free port on one node, "
                       f"{DEFAULT_MASTER_PORT} on several).", minimum=rules.PORT_MIN,
                       maximum=rules.PORT_MAX, rule="port"),
    "rdzv": Key("section", "Rendezvous (c10d: the same command on every node).", keys={
        "backend": Key("str", "Rendezvous backend.", DEFAULTS["rdzv.backend"],
                       choices=rules.RDZV_BACKENDS),
        "endpoint": Key("str", "HOST:PORT of the c10d rendezvous.", rule="endpoint"),
        "id": Key("str", "Job id shared by every node.", DEFAULTS["rdzv.id"]),
        "conf": Key("map", "c10d rendezvous settings (torchrun --rdzv-conf), e.g. "
                    "join_timeout: 900, last_call_timeout: 5.", {}),
    }),
    "max_restarts": Key("int", "Restarts of the worker group before failing.",
                        DEFAULTS["max_restarts"], minimum=0),
    "mixed_precision": Key("str", "Mixed precision (passed to accelerate, exported to the "
                           "script).", DEFAULTS["mixed_precision"],
                           choices=rules.MIXED_PRECISION),
    "env": Key("map", "Environment variables for the workers.", {}),
    "timeout": Key("number", "Stop a job that prints nothing for this many seconds.",
                   minimum=rules.TIMEOUT_MIN),
    "log_dir": Key("str", "Keep every rank's output in this folder."),
    "slurm": Key("section", "Only for `config export --format slurm`.", keys={
        "job_name": Key("str", "#SBATCH --job-name.", "distrun"),
        "partition": Key("str", "#SBATCH --partition."),
        "account": Key("str", "#SBATCH --account."),
        "qos": Key("str", "#SBATCH --qos."),
        "time": Key("str", "#SBATCH --time (minutes, HH:MM:SS or D-HH:MM:SS).", "01:00:00",
                    pattern=r"^(\d+-)?\d+(:\d{2}){0,2}$"),
        "gpus_per_node": Key("int", "#SBATCH --gpus-per-node (0: none).", 0, minimum=0),
        "cpus_per_task": Key("int", "#SBATCH --cpus-per-task (a task: a node's processes, "
                             "or one rank with tasks: per-gpu).", minimum=1),
        "mem": Key("str", "#SBATCH --mem, e.g. 64G."),
        "constraint": Key("str", "#SBATCH --constraint."),
        "output": Key("str", "#SBATCH --output.", "distrun-%j.out"),
        "setup": Key("list", "Shell lines run before srun (modules, venv activation).", []),
        "extra": Key("list", "More #SBATCH options, e.g. '--exclusive'.", []),
        "tasks": Key("str", "per-node: one task per node, whose distrun starts the node's "
                     "processes; per-gpu: --ntasks-per-node=nproc_per_node, each task one "
                     "rank (SLURM_PROCID).", SLURM_TASKS[0], choices=SLURM_TASKS),
        "container_image": Key("str", "pyxis: srun --container-image, an enroot image "
                               "(nvcr.io#nvidia/pytorch:24.05-py3) or a .sqsh file, with "
                               "distrun in it.", pattern=r"^[^\s,]+$",
                               form="one image name, no spaces or commas"),
        "container_mounts": Key("list", "pyxis: srun --container-mounts, each "
                                "SRC[:DST[:FLAGS]] (FLAGS joined by +, e.g. ro+rprivate).",
                                [], pattern=MOUNT, form="SRC[:DST[:FLAGS]], no commas"),
        "container_workdir": Key("str", "pyxis: srun --container-workdir, the folder the "
                                 "job starts in, inside the container (default: the "
                                 "image's).", pattern=r"^[^\s,]+$",
                                 form="one path, no spaces or commas"),
    }),
    "kubernetes": Key("section", "Only for `config export --format kubernetes` (a "
                      "PyTorchJob) and `--format trainjob` (a TrainJob).", keys={
        "name": Key("str", "Job name (PyTorchJob or TrainJob).", "distrun-job",
                    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        "namespace": Key("str", "Namespace.", "default"),
        "image": Key("str", "Container image with PyTorch, distrun and the script."),
        "image_pull_policy": Key("str", "imagePullPolicy (PyTorchJob only).", "IfNotPresent",
                                 choices=("Always", "IfNotPresent", "Never")),
        "gpus_per_node": Key("int", "nvidia.com/gpu per pod (0: none).", 0, minimum=0),
        "cpu": Key("str", "CPU request and limit per pod, e.g. '8'."),
        "memory": Key("str", "Memory request and limit per pod, e.g. 64Gi."),
        "restart_policy": Key("str", "Pod restart policy (PyTorchJob only).", "OnFailure",
                              choices=("OnFailure", "Never", "Always", "ExitCode")),
        "working_dir": Key("str", "Working directory in the container (PyTorchJob only)."),
        "runtime": Key("str", "TrainJob: the ClusterTrainingRuntime it runs on.",
                       "torch-distributed", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
    }),
    "deepspeed": Key("section", "DeepSpeed: the config file the job reads ($DS_CONFIG), and "
                     "the one `config export --format deepspeed` builds without a file.", keys={
        "config": Key("str", "DeepSpeed config (JSON), relative to this file; the workers get "
                      "its absolute path as DS_CONFIG (default: ds_config.json beside the "
                      "script, where `convert --to deepspeed` writes it)."),
        "zero_stage": Key("int", "ZeRO stage (default: the config file's; "
                          f"{DEEPSPEED_BUILT['zero_stage']} in a built config).", minimum=0,
                          maximum=3),
        "offload_optimizer": Key("str", "ZeRO-Offload of the optimizer state (default: the "
                                 "config file's; none in a built config).",
                                 choices=DEEPSPEED_OFFLOAD),
        "micro_batch": Key("int", "Batch per process, train_micro_batch_size_per_gpu (needed "
                           "to build a config; default: the config file's).", minimum=1),
        "gradient_clipping": Key("number", "Gradient clipping max_norm, 0.0 for none "
                                 "(default: the config file's; 0.0 in a built config, not "
                                 "DeepSpeed's 1.0).", minimum=0),
    }),
}


def defaults(keys: dict[str, Key] | None = None) -> dict[str, Any]:
    """Every key with its default (sections as nested dicts)."""
    out: dict[str, Any] = {}
    for name, key in (keys or KEYS).items():
        if key.kind == "section":
            out[name] = defaults(key.keys)
        else:
            value = key.default
            out[name] = list(value) if isinstance(value, list) else (
                dict(value) if isinstance(value, dict) else value)
    return out


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of distrun.yaml, for editors."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "distrun launch config",
        **_object_schema(KEYS),
    }


def _object_schema(keys: dict[str, Key]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {name: _key_schema(key) for name, key in keys.items()},
    }


def _key_schema(key: Key) -> dict[str, Any]:
    if key.kind == "section":
        return {"description": key.help, **_object_schema(key.keys)}
    schema: dict[str, Any]
    if key.kind == "nnodes":
        schema = {"oneOf": [{"type": "integer", "minimum": 1},
                            {"type": "string", "pattern": r"^\d+(:\d+)?$"}]}
    elif key.kind == "nproc":
        schema = {"oneOf": [{"type": "integer", "minimum": 1},
                            {"type": "string", "enum": list(NPROC_WORDS)}]}
    elif key.kind == "list":
        schema = {"type": "array", "items": {"type": "string"}}
    elif key.kind == "map":
        schema = {"type": "object",
                  "additionalProperties": {"type": ["string", "number", "boolean"]}}
    else:
        schema = {"type": {"str": "string", "int": "integer", "number": "number",
                           "bool": "boolean"}[key.kind]}
    if key.choices:
        schema["enum"] = list(key.choices)
    if key.minimum is not None:
        schema["minimum"] = key.minimum
    if key.maximum is not None:
        schema["maximum"] = key.maximum
    if key.pattern and key.kind == "list":
        schema["items"]["pattern"] = key.pattern
    elif key.pattern:
        schema["pattern"] = key.pattern
    if key.default is not None:
        schema["default"] = key.default
    schema["description"] = key.help
    return schema
