"""The Kubeflow `PyTorchJob` (kubeflow.org/v1) that `config export --format kubernetes`
writes, for the Kubeflow Training Operator v1 (kept on its release-1.9 branch; Kubeflow
Trainer v2's TrainJob replaced it: trainjob.py).

Master and Workers (Workers with an `elasticPolicy` for an elastic job); each pod runs
`distrun launch`, which reads the node count, its rank and the master address that the
operator sets (distrun/launch/cluster.py). Fields as in the operator's v1.9 CRD.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from distrun.config.export_common import (
    comments,
    env_list,
    launch_args,
    pod_resources,
    require_image,
    target,
    template,
)
from distrun.config.load import Config, node_range

# What `config export --format kubernetes` says on stderr, once.
SUCCESSOR = ("--format kubernetes writes a PyTorchJob for the Kubeflow Training Operator v1 "
             "(maintained on its release-1.9 branch only); Kubeflow Trainer v2 replaced it "
             "with TrainJob: --format trainjob")


def render(config: Config, r: dict[str, Any]) -> str:
    require_image(config, r)
    k = r["kubernetes"]
    low, high = node_range(r["nnodes"])
    job = yaml.safe_load(template("pytorchjob.yaml"))
    job["metadata"].update(name=k["name"], namespace=k["namespace"])
    job["spec"]["nprocPerNode"] = str(r["nproc_per_node"])
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    container = master["template"]["spec"]["containers"][0]
    container.update(image=k["image"], imagePullPolicy=k["image_pull_policy"],
                     command=["distrun", "launch", *launch_args(r, with_env=False),
                              *target(r)])
    if k["working_dir"]:
        container["workingDir"] = k["working_dir"]
    if r["env"]:
        container["env"] = env_list(r["env"])
    resources = pod_resources(k)
    if resources:
        container["resources"] = resources
    master["restartPolicy"] = k["restart_policy"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    if low != high:
        worker = specs.pop("Master")
        worker["replicas"] = high
        specs["Worker"] = worker
        job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": low,
                                        "maxReplicas": high,
                                        "maxRestarts": r["max_restarts"] or 3}
    elif high > 1:
        worker = copy.deepcopy(master)
        worker["replicas"] = high - 1
        specs["Worker"] = worker
    return comments(template("pytorchjob.yaml")) + yaml.safe_dump(job, sort_keys=False)
