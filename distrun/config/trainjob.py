"""The Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1) that `config export
--format trainjob` writes, and what of distrun.yaml it cannot carry.

Fields as in the TrainJob CRD of Kubeflow Trainer v2.3.0 (kubeflow/trainer, tag v2.3.0,
manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml; the tests validate against it):
`spec.runtimeRef` names a ClusterTrainingRuntime (`kubernetes.runtime`, default
torch-distributed); `spec.trainer` holds the image, the command, the environment,
`numNodes`, `numProcPerNode` (an integer in v2.3.0: the torch runtime's default, `auto`,
is the field left out) and `resourcesPerNode`.

The runtime's torch plugin (pkg/runtime/framework/plugins/torch/torch.go) runs each node as
a pod of an Indexed Job and sets, in the trainer container, PET_NNODES (numNodes),
PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's completion index), PET_MASTER_ADDR
(`NAME-node-0-0.NAME`, node 0's pod) and PET_MASTER_PORT (29500, the port it opens on the
pod); its webhook refuses those five names in `spec.trainer.env`. Each pod runs `distrun
launch`, which reads them (distrun/launch/cluster.py). There is no elastic size, restart
policy, image pull policy or working directory in a v1alpha1 TrainJob: `not_carried` says
what the file sets that is lost, in the manifest and (through the CLI) on stderr.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from distrun.config.export_common import (
    comment_block,
    comments,
    env_list,
    launch_args,
    pod_resources,
    require_image,
    target,
    template,
)
from distrun.config.load import Config, node_range
from distrun.errors import InputError

RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                "PET_MASTER_PORT")
RUNTIME_PORT = 29500  # constants.ContainerTrainerPort
# The CRD's own rules on metadata.name (x-kubernetes-validations: RFC 1035 label, <= 63).
NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 63


def render(config: Config, r: dict[str, Any]) -> str:
    require_image(config, r)
    k = r["kubernetes"]
    if not NAME.fullmatch(k["name"]) or len(k["name"]) > NAME_MAX:
        raise InputError(f"{config.path}: kubernetes.name {k['name']!r}: a TrainJob's name "
                         f"is a DNS label (RFC 1035): a lowercase letter first, then "
                         f"lowercase letters, digits and '-', at most {NAME_MAX} characters",
                         "set kubernetes.name, e.g. train-ddp")
    trainer: dict[str, Any] = {
        "image": k["image"],
        "command": ["distrun", "launch", *launch_args(r, with_env=False, with_port=False),
                    *target(r)],
        "numNodes": node_range(r["nnodes"])[1],
    }
    if isinstance(r["nproc_per_node"], int):
        trainer["numProcPerNode"] = r["nproc_per_node"]
    resources = pod_resources(k)
    if resources:
        trainer["resourcesPerNode"] = resources
    env = {name: value for name, value in r["env"].items() if name not in RESERVED_ENV}
    if env:
        trainer["env"] = env_list(env)
    job = yaml.safe_load(template("trainjob.yaml"))
    job["metadata"].update(name=k["name"], namespace=k["namespace"])
    job["spec"]["runtimeRef"]["name"] = k["runtime"]
    job["spec"]["trainer"] = trainer
    lost = comment_block("Not carried (a TrainJob has no field for it, or the runtime sets "
                         "it):", not_carried(config, r))
    return comments(template("trainjob.yaml")) + lost + yaml.safe_dump(job, sort_keys=False)


def not_carried(config: Config, r: dict[str, Any]) -> list[str]:
    """What the file sets that a v1alpha1 TrainJob cannot carry, one sentence each."""
    set_k = config.values.get("kubernetes", {})
    low, high = node_range(r["nnodes"])
    lost = []
    if low != high:
        lost.append(f"nnodes {low}:{high}: a TrainJob has a fixed number of nodes (Kubeflow "
                    f"Trainer v2.3.0's torch runtime has no elastic jobs): numNodes {high}")
    if r["rdzv"]["endpoint"]:
        lost.append(f"rdzv.endpoint {r['rdzv']['endpoint']}: the nodes meet at node 0's pod "
                    "(PET_MASTER_ADDR, which the runtime sets)")
    if r["master_port"]:
        lost.append(f"master_port {r['master_port']}: the runtime sets PET_MASTER_PORT "
                    f"({RUNTIME_PORT}), the port it opens on the nodes' pods")
    reserved = sorted(name for name in r["env"] if name in RESERVED_ENV)
    if reserved:
        lost.append(f"env {', '.join(reserved)}: the runtime sets "
                    f"{'it' if len(reserved) == 1 else 'them'} (its webhook refuses "
                    "them in spec.trainer.env)")
    if "image_pull_policy" in set_k:
        lost.append(f"kubernetes.image_pull_policy {set_k['image_pull_policy']}: "
                    "spec.trainer has no imagePullPolicy (the runtime's container decides; "
                    "Kubernetes' default: Always for a :latest or untagged image, else "
                    "IfNotPresent)")
    if "restart_policy" in set_k:
        lost.append(f"kubernetes.restart_policy {set_k['restart_policy']}: a TrainJob has "
                    "no restart policy (the runtime's JobSet decides); to restart the workers "
                    "inside a pod: max_restarts (`distrun launch --max-restarts`)")
    if set_k.get("working_dir"):
        lost.append(f"kubernetes.working_dir {set_k['working_dir']}: neither spec.trainer "
                    "nor spec.runtimePatches sets a working directory: the image's WORKDIR "
                    "applies (set it there, or give the script's full path)")
    return lost
