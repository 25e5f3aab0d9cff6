"""A manifest checked against a Kubeflow CRD's `openAPIV3Schema`, as strictly as the API
server reads it (the CRDs are in data/kubeflow/, verbatim; see the README there).

A CRD's schema is structural: it leaves `additionalProperties` out, and the API server
drops the fields it does not list, or refuses them under strict field validation
(kubectl's default), unless the schema says `x-kubernetes-preserve-unknown-fields`.
jsonschema would let them through, so `strict` writes `additionalProperties: false` into
every object schema that lists `properties` and says neither: a misspelled key fails.
The top level gets what the API server checks itself: `apiVersion` (GROUP/VERSION) and
`kind` as the CRD names them, and `metadata` as ObjectMeta (a stand-in with the fields a
manifest of ours may hold: name, namespace, labels, annotations, and no other).

jsonschema does not evaluate CEL (`x-kubernetes-validations`): `top_level_rules` lists
the rules of the top-level object, which the tests apply themselves. Nothing here edits
the files; the changes are made to a copy of the schema in memory.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

DATA = Path(__file__).parent / "data" / "kubeflow"
TRAINJOB_CRD = DATA / "trainer.kubeflow.org_trainjobs.yaml"
PYTORCHJOB_CRD = DATA / "kubeflow.org_pytorchjobs.yaml"

Schema = dict[str, Any]
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META: Schema = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": STRING_MAP, "annotations": STRING_MAP},
}


@functools.cache
def crd(path: Path) -> dict[str, Any]:
    """The CustomResourceDefinition in `path` (its one YAML document; read once, not to
    be changed by the caller)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster here
    (doc,) = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader) if d]
    assert doc["kind"] == "CustomResourceDefinition"
    found: dict[str, Any] = doc
    return found


def served_version(definition: dict[str, Any]) -> dict[str, Any]:
    """The version a manifest is written for: the storage version."""
    (version,) = [v for v in definition["spec"]["versions"] if v.get("storage")]
    found: dict[str, Any] = version
    return found


def api_version(definition: dict[str, Any]) -> str:
    return f"{definition['spec']['group']}/{served_version(definition)['name']}"


def strict(schema: Schema) -> Schema:
    """A copy of `schema` with `additionalProperties: false` where the API server would
    not keep an unknown field."""
    node = copy.deepcopy(schema)
    _close(node)
    return node


def _close(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _close(item)
        return
    if not isinstance(node, dict):
        return
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
    for value in node.get("properties", {}).values():
        _close(value)
    for key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
        if isinstance(node.get(key), (dict, list)):
            _close(node[key])


def manifest_schema(path: Path) -> Schema:
    """The strict schema of a whole manifest of the CRD in `path`."""
    definition = crd(path)
    schema = strict(served_version(definition)["schema"]["openAPIV3Schema"])
    schema["properties"].update(
        apiVersion={"const": api_version(definition)},
        kind={"const": definition["spec"]["names"]["kind"]},
        metadata=OBJECT_META)
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind",
                                 "metadata", "spec"})
    return schema


def validator(path: Path) -> Draft202012Validator:
    schema = manifest_schema(path)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def top_level_rules(path: Path) -> list[dict[str, str]]:
    """The CEL rules on the whole object (the TrainJob CRD's: metadata.name's form)."""
    rules: list[dict[str, str]] = served_version(crd(path))["schema"]["openAPIV3Schema"].get(
        "x-kubernetes-validations", [])
    return rules


def problems(check: Draft202012Validator, job: dict[str, Any]) -> list[str]:
    errors = sorted(check.iter_errors(job), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
