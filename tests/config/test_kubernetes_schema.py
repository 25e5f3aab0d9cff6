"""The Kubernetes export against the Kubeflow training operator's schema for a PyTorchJob.

No cluster runs here, so the manifests are checked against data/pytorchjob.schema.json,
a JSON Schema generated from the operator's published OpenAPI models (the kubeflow-training
SDK, and the kubernetes client for the core types) by make_pytorchjob_schema.py. Objects
take no unknown fields there, so a misspelled key fails, as do wrong types, missing
required fields and values outside an enum.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.conftest import ROOT, distrun

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
SCHEMA_FILE = HERE / "data" / "pytorchjob.schema.json"
SINGLE = "script: train.py\nkubernetes:\n  image: registry.example/train:2.1\n"

Job = dict[str, Any]
Validator = Draft202012Validator


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`distrun config export --format kubernetes` of the golden configs and of a minimal
    single-node config, as the CLI prints them."""
    single = tmp_path_factory.mktemp("single")
    (single / "distrun.yaml").write_text(SINGLE)
    out = {}
    for name, cwd, file in (("multi", GOLDEN, "multi.yaml"), ("elastic", GOLDEN, "elastic.yaml"),
                            ("single", single, "distrun.yaml")):
        run = distrun("config", "export", "--format", "kubernetes", file, cwd=cwd)
        assert run.returncode == 0, run.stderr
        out[name] = run.stdout
    return out


def problems(validator: Validator, job: Job) -> list[str]:
    errors = sorted(validator.iter_errors(job), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


@pytest.mark.parametrize("name", ["multi", "elastic", "single"])
def test_export_passes_the_operators_schema(name: str, exported: dict[str, str],
                                            validator: Validator) -> None:
    job = yaml.safe_load(exported[name])
    assert problems(validator, job) == []
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"single": {"Master"}, "multi": {"Master", "Worker"},
                             "elastic": {"Worker"}}[name]


@pytest.mark.parametrize("name", ["multi", "elastic"])
def test_golden_manifest_passes_the_operators_schema(name: str, validator: Validator) -> None:
    job = yaml.safe_load((GOLDEN / f"{name}.k8s.yaml").read_text())
    assert problems(validator, job) == []


def _master(job: Job) -> Job:
    spec: Job = job["spec"]["pytorchReplicaSpecs"]["Master"]
    return spec


def _container(job: Job) -> Job:
    container: Job = _master(job)["template"]["spec"]["containers"][0]
    return container


def _rename(obj: Job, old: str, new: str) -> None:
    obj[new] = obj.pop(old)


MASTER = ("spec", "pytorchReplicaSpecs", "Master")
CONTAINER = (*MASTER, "template", "spec", "containers", 0)

# (what is wrong, the change, where the schema must object, the keyword that objects)
MUTATIONS: list[tuple[str, Callable[[Job], None], tuple[Any, ...], str]] = [
    ("misspelled pytorchReplicaSpecs",
     lambda j: _rename(j["spec"], "pytorchReplicaSpecs", "pytorchReplicaSpec"),
     ("spec",), "additionalProperties"),
    ("no pytorchReplicaSpecs (required)", lambda j: j["spec"].pop("pytorchReplicaSpecs"),
     ("spec",), "required"),
    ("replicas as a string", lambda j: _master(j).update(replicas="1"),
     (*MASTER, "replicas"), "type"),
    ("unknown restartPolicy", lambda j: _master(j).update(restartPolicy="Sometimes"),
     (*MASTER, "restartPolicy"), "enum"),
    ("container without a name (required)", lambda j: _container(j).pop("name"),
     CONTAINER, "required"),
    ("misspelled imagePullPolicy", lambda j: _rename(_container(j), "imagePullPolicy",
                                                     "imagePulPolicy"),
     CONTAINER, "additionalProperties"),
    ("unknown imagePullPolicy", lambda j: _container(j).update(imagePullPolicy="Sometimes"),
     (*CONTAINER, "imagePullPolicy"), "enum"),
    ("command as one string", lambda j: _container(j).update(command="distrun launch"),
     (*CONTAINER, "command"), "type"),
    ("env entry without a name", lambda j: _container(j)["env"][0].pop("name"),
     (*CONTAINER, "env", 0), "required"),
    ("GPU limit as a number", lambda j: _container(j)["resources"]["limits"].update(
        {"nvidia.com/gpu": 4}), (*CONTAINER, "resources", "limits", "nvidia.com/gpu"), "type"),
    ("nprocPerNode as a number", lambda j: j["spec"].update(nprocPerNode=4),
     ("spec", "nprocPerNode"), "type"),
    ("a field at the top level", lambda j: j.update(specs={}), (), "additionalProperties"),
    ("another kind", lambda j: j.update(kind="TFJob"), ("kind",), "const"),
    ("another API version", lambda j: j.update(apiVersion="kubeflow.org/v2"),
     ("apiVersion",), "const"),
    ("no metadata", lambda j: j.pop("metadata"), (), "required"),
    ("misspelled metadata field", lambda j: _rename(j["metadata"], "namespace", "namespce"),
     ("metadata",), "additionalProperties"),
]


@pytest.mark.parametrize(("what", "mutate", "path", "keyword"), MUTATIONS,
                         ids=[m[0] for m in MUTATIONS])
def test_schema_rejects_a_broken_manifest(what: str, mutate: Callable[[Job], None],
                                          path: tuple[Any, ...], keyword: str,
                                          exported: dict[str, str], validator: Validator) -> None:
    job = yaml.safe_load(exported["multi"])
    assert problems(validator, job) == []
    broken = copy.deepcopy(job)
    mutate(broken)
    errors = list(validator.iter_errors(broken))
    assert errors, f"{what}: accepted"
    assert any(tuple(e.absolute_path) == path and e.validator == keyword for e in errors), \
        problems(validator, broken)


def test_elastic_policy_fields_are_checked(exported: dict[str, str], validator: Validator) -> None:
    job = yaml.safe_load(exported["elastic"])
    job["spec"]["elasticPolicy"]["maxReplica"] = job["spec"]["elasticPolicy"].pop("maxReplicas")
    assert any(e.validator == "additionalProperties" for e in validator.iter_errors(job))


def test_schema_names_its_sources_and_the_docs_the_same_version(schema: dict[str, Any]
                                                                 ) -> None:
    found = re.search(r"kubeflow-training (\d+\.\d+\.\d+)", schema["$comment"])
    assert found and re.search(r"kubernetes \d+\.\d+\.\d+", schema["$comment"])
    assert f"kubeflow-training {found.group(1)}" in (ROOT / "docs" / "cluster.md").read_text()
    assert schema["properties"]["kind"] == {"const": "PyTorchJob"}
    # one definition per model, referenced where used; the file stays small
    assert len(schema["$defs"]) > 50 and SCHEMA_FILE.stat().st_size < 200_000
