"""The Kubernetes exports against the real Kubeflow CRDs: the TrainJob (`--format trainjob`)
against Kubeflow Trainer v2.3.0's, the PyTorchJob (`--format kubernetes`) against the
Training Operator v1.9.4's. Both CRDs are kept verbatim in data/kubeflow/ (the README
there says where from); kubeflow_crd.py closes their objects to unknown fields, so a
misspelled key fails, as do wrong types, missing required fields and a quantity that is
not one. No cluster runs here.

(test_kubernetes_schema.py checks the PyTorchJob against the operator's SDK models too:
they ask for what this CRD leaves open: runPolicy, quantities as strings, a restart
policy out of the four its description lists; the CRD has no enum at all.)
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from distrun.config import trainjob
from tests.config.kubeflow_crd import (
    DATA,
    PYTORCHJOB_CRD,
    TRAINJOB_CRD,
    crd,
    problems,
    served_version,
    strict,
    top_level_rules,
    validator,
)
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "golden"
Job = dict[str, Any]
Mutation = tuple[str, Callable[[Job], None], tuple[Any, ...], str]


@pytest.fixture(scope="module")
def trainjob_check() -> Draft202012Validator:
    return validator(TRAINJOB_CRD)


@pytest.fixture(scope="module")
def pytorchjob_check() -> Draft202012Validator:
    return validator(PYTORCHJOB_CRD)


def golden(name: str) -> Job:
    job: Job = yaml.safe_load((GOLDEN / name).read_text())
    return job


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_crds_are_the_upstream_files_the_readme_names() -> None:
    rows = re.findall(r"^\| (\S+\.yaml) \| (kubeflow/\S+)[^|]* \| (v[\d.]+) \| ([0-9a-f]{40}) "
                      r"\| (\S+) \| ([0-9a-f]{40}) \|$", (DATA / "README.md").read_text(), re.M)
    files = {row[0]: row for row in rows}
    assert set(files) == {TRAINJOB_CRD.name, PYTORCHJOB_CRD.name}
    for name, (_, repo, tag, _commit, path, blob) in files.items():
        assert repo == "kubeflow/trainer" and path.endswith("/" + name)
        assert git_blob_id(DATA / name) == blob, f"{name} is not the file of {tag}: restore it"
    # the manual names the releases checked against (its lines joined)
    cluster = " ".join((ROOT / "docs" / "cluster.md").read_text().split())
    assert f"Kubeflow Trainer {files[TRAINJOB_CRD.name][2]}" in cluster
    assert f"Training Operator {files[PYTORCHJOB_CRD.name][2]}" in cluster


def test_crds_are_the_versions_the_exports_write() -> None:
    (tj,) = crd(TRAINJOB_CRD)["spec"]["versions"]
    assert (crd(TRAINJOB_CRD)["spec"]["group"], tj["name"]) == ("trainer.kubeflow.org",
                                                                "v1alpha1")
    assert served_version(crd(PYTORCHJOB_CRD))["name"] == "v1"


@pytest.mark.parametrize("config", ["single", "three", "multi", "elastic"])
def test_trainjob_golden_passes_the_trainer_crd(config: str,
                                                trainjob_check: Draft202012Validator) -> None:
    job = golden(f"{config}.trainjob.yaml")
    assert problems(trainjob_check, job) == []
    assert job["spec"]["trainer"]["numNodes"] == {"single": 1, "three": 3, "multi": 2,
                                                  "elastic": 4}[config]


@pytest.mark.parametrize("config", ["single", "three", "multi", "elastic"])
def test_pytorchjob_golden_passes_the_operators_crd(
        config: str, pytorchjob_check: Draft202012Validator) -> None:
    assert problems(pytorchjob_check, golden(f"{config}.k8s.yaml")) == []


def test_trainjob_names_follow_the_crds_own_rules() -> None:
    """The CRD's CEL rules on the whole object, which jsonschema does not run: they are
    the two distrun checks (trainjob.NAME, NAME_MAX), and the goldens' names keep them."""
    rules = {rule["rule"] for rule in top_level_rules(TRAINJOB_CRD)}
    pattern = f"^{trainjob.NAME.pattern}$"
    assert rules == {f"self.metadata.name.matches('{pattern}')",
                     f"size(self.metadata.name) <= {trainjob.NAME_MAX}"}
    for config in ("single", "three", "multi", "elastic"):
        name = golden(f"{config}.trainjob.yaml")["metadata"]["name"]
        assert re.fullmatch(pattern, name) and len(name) <= trainjob.NAME_MAX


def test_without_closing_the_objects_a_misspelled_key_would_pass() -> None:
    """Why kubeflow_crd.strict exists: the verbatim schema takes any unknown key."""
    job = golden("three.trainjob.yaml")
    job["spec"]["trainer"]["numNode"] = job["spec"]["trainer"].pop("numNodes")
    as_published = served_version(crd(TRAINJOB_CRD))["schema"]["openAPIV3Schema"]
    assert list(Draft202012Validator(as_published).iter_errors(job)) == []
    assert any(e.validator == "additionalProperties"
               for e in Draft202012Validator(strict(as_published)).iter_errors(job))


def test_strict_leaves_open_what_the_api_server_keeps() -> None:
    schema = {"type": "object", "properties": {
        "kept": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"a": {"type": "string"}}},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "closed": {"type": "object", "properties": {"a": {"type": "string"}}},
        "list": {"type": "array", "items": {"type": "object",
                                            "properties": {"a": {"type": "string"}}}},
    }}
    check = Draft202012Validator(strict(schema))
    assert not list(check.iter_errors({"kept": {"b": 1}, "map": {"b": "c"}}))
    for bad in ({"closed": {"b": "c"}}, {"list": [{"b": "c"}]}, {"other": 1}):
        assert [e.validator for e in check.iter_errors(bad)] == ["additionalProperties"]
    assert "additionalProperties" not in schema  # the caller's schema is left as it was


def _trainer(job: Job) -> Job:
    trainer: Job = job["spec"]["trainer"]
    return trainer


def _rename(obj: Job, old: str, new: str) -> None:
    obj[new] = obj.pop(old)


TRAINER = ("spec", "trainer")
TRAINJOB_MUTATIONS: list[Mutation] = [
    ("misspelled numNodes", lambda j: _rename(_trainer(j), "numNodes", "numNode"),
     TRAINER, "additionalProperties"),
    ("misspelled runtimeRef", lambda j: _rename(j["spec"], "runtimeRef", "runtimeref"),
     ("spec",), "additionalProperties"),
    ("no runtimeRef (required)", lambda j: j["spec"].pop("runtimeRef"), ("spec",),
     "required"),
    ("runtimeRef without a name", lambda j: j["spec"]["runtimeRef"].pop("name"),
     ("spec", "runtimeRef"), "required"),
    ("misspelled resourcesPerNode limits",
     lambda j: _rename(_trainer(j)["resourcesPerNode"], "limits", "limit"),
     (*TRAINER, "resourcesPerNode"), "additionalProperties"),
    ("a quantity that is none", lambda j: _trainer(j)["resourcesPerNode"]["limits"].update(
        memory="lots"), (*TRAINER, "resourcesPerNode", "limits", "memory"), "pattern"),
    ("misspelled env value", lambda j: _rename(_trainer(j)["env"][0], "value", "vaule"),
     (*TRAINER, "env", 0), "additionalProperties"),
    ("numNodes as a string", lambda j: _trainer(j).update(numNodes="3"),
     (*TRAINER, "numNodes"), "type"),
    ("numProcPerNode as a word", lambda j: _trainer(j).update(numProcPerNode="auto"),
     (*TRAINER, "numProcPerNode"), "type"),
    ("command as one string", lambda j: _trainer(j).update(command="distrun launch"),
     (*TRAINER, "command"), "type"),
    ("the v1 nprocPerNode", lambda j: j["spec"].update(nprocPerNode="8"), ("spec",),
     "additionalProperties"),
    ("another kind", lambda j: j.update(kind="PyTorchJob"), ("kind",), "const"),
    ("another API version", lambda j: j.update(apiVersion="kubeflow.org/v1"),
     ("apiVersion",), "const"),
    ("misspelled metadata field", lambda j: _rename(j["metadata"], "namespace", "namespce"),
     ("metadata",), "additionalProperties"),
]


def _container(job: Job) -> Job:
    master: Job = job["spec"]["pytorchReplicaSpecs"]["Master"]
    container: Job = master["template"]["spec"]["containers"][0]
    return container


MASTER = ("spec", "pytorchReplicaSpecs", "Master")
CONTAINER = (*MASTER, "template", "spec", "containers", 0)
PYTORCHJOB_MUTATIONS: list[Mutation] = [
    ("misspelled pytorchReplicaSpecs",
     lambda j: _rename(j["spec"], "pytorchReplicaSpecs", "pytorchReplicaSpec"),
     ("spec",), "additionalProperties"),
    ("misspelled imagePullPolicy",
     lambda j: _rename(_container(j), "imagePullPolicy", "imagePulPolicy"),
     CONTAINER, "additionalProperties"),
    ("nprocPerNode as a number", lambda j: j["spec"].update(nprocPerNode=4),
     ("spec", "nprocPerNode"), "type"),
    ("replicas as a string",
     lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas="1"),
     (*MASTER, "replicas"), "type"),
    ("container without a name (required)", lambda j: _container(j).pop("name"),
     CONTAINER, "required"),
    ("the v2 trainer", lambda j: j["spec"].update(trainer={}), ("spec",),
     "additionalProperties"),
]


def assert_refused(check: Draft202012Validator, job: Job, mutation: Mutation) -> None:
    what, mutate, path, keyword = mutation
    assert problems(check, job) == []
    broken = copy.deepcopy(job)
    mutate(broken)
    errors = list(check.iter_errors(broken))
    assert any(tuple(e.absolute_path) == path and e.validator == keyword for e in errors), \
        f"{what}: {problems(check, broken) or 'accepted'}"


@pytest.mark.parametrize("mutation", TRAINJOB_MUTATIONS, ids=[m[0] for m in TRAINJOB_MUTATIONS])
def test_trainer_crd_refuses_a_broken_trainjob(mutation: Mutation,
                                               trainjob_check: Draft202012Validator) -> None:
    assert_refused(trainjob_check, golden("three.trainjob.yaml"), mutation)


@pytest.mark.parametrize("mutation", PYTORCHJOB_MUTATIONS,
                         ids=[m[0] for m in PYTORCHJOB_MUTATIONS])
def test_operator_crd_refuses_a_broken_pytorchjob(
        mutation: Mutation, pytorchjob_check: Draft202012Validator) -> None:
    assert_refused(pytorchjob_check, golden("multi.k8s.yaml"), mutation)
