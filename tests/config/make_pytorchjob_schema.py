"""Generate tests/config/data/pytorchjob.schema.json: a JSON Schema for a Kubeflow
`PyTorchJob` (kubeflow.org/v1), the manifest `distrun config export --format kubernetes`
writes.

The schema is derived from the Kubeflow training operator's published OpenAPI spec, in
the form its Python SDK ships it: every model class of `kubeflow-training`
(`kubeflow.training.models`) and of the `kubernetes` client (`kubernetes.client.models`,
for the core types: V1PodTemplateSpec, V1Container, ...) is generated from the OpenAPI
definitions and carries `openapi_types` (attribute -> type) and `attribute_map`
(attribute -> JSON field). This script walks them from `KubeflowOrgV1PyTorchJob` down
and writes one `$defs` entry per model:

- every object has `additionalProperties: false`, so an unknown or misspelled field fails;
- str, int, float, bool, datetime, date and object (any value: the client's type for
  IntOrString and free-form fields) become JSON Schema types; `list[X]` an array and
  `dict(str, X)` a map;
- a field is required where its generated setter refuses None
  (`if self.local_vars_configuration.client_side_validation and x is None: raise`);
- `allowed_values` checks become `enum`, `re.search(...)` checks become `pattern`;
- where the generator dropped the enum but the field's description lists the values
  ("One of Always, OnFailure, Never and ExitCode."), that list becomes the `enum` too,
  marked with a `$comment` (see DOC_ENUM).

The top level adds what a manifest for this kind needs: `apiVersion: kubeflow.org/v1`,
`kind: PyTorchJob`, and `apiVersion`, `kind`, `metadata` and `spec` present.

The tests only read the JSON file; this script is for maintainers. To regenerate (for a
new kubeflow-training release), in a throwaway virtual environment:

    python -m venv /tmp/kfgen
    /tmp/kfgen/bin/pip install 'kubeflow-training==1.9.*'   # pulls the kubernetes client
    /tmp/kfgen/bin/python tests/config/make_pytorchjob_schema.py

then run `pytest tests/config` and commit the JSON file (its `$comment` names the
package versions; docs/cluster.md names the kubeflow-training version).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "data" / "pytorchjob.schema.json"
ROOT_MODEL = "KubeflowOrgV1PyTorchJob"

PRIMITIVES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "object": {},
}

# Types the SDK names that neither package ships as a model. resource.Quantity is a string
# in the Kubernetes OpenAPI spec, and the kubernetes client's own models type it as str
# (V1ResourceRequirements.limits is dict(str, str)).
SCALARS = {"Quantity": "str"}

# "One of Always, OnFailure, Never and ExitCode." in a field's description: a closed list
# of CamelCase values, ending the sentence. Only applied to string fields.
DOC_ENUM = re.compile(
    r"\bOne of ((?:[A-Z][A-Za-z]*)(?:(?:, (?:and |or )?| and | or )[A-Z][A-Za-z]*)+)\.(?:\s|$)")


# The SDK names a few Kubernetes types by their OpenAPI definition and leaves them to the
# kubernetes client, which names them by API version only: k8s.io.api.autoscaling.v2.MetricSpec
# is K8sIoApiAutoscalingV2MetricSpec in kubeflow-training and V2MetricSpec in kubernetes.
K8S_DEFINITION = re.compile(r"K8sIoApi[A-Z][a-z]+(V\d+(?:(?:alpha|beta)\d+)?[A-Z]\w*)")


def model_name(name: str) -> str:
    """The name under which the packages ship the model `name`."""
    if m := K8S_DEFINITION.fullmatch(name):
        import kubeflow.training.models as kubeflow_models

        if not hasattr(kubeflow_models, name):
            return m.group(1)
    return name


def model_class(name: str) -> type:
    import kubeflow.training.models as kubeflow_models
    import kubernetes.client.models as kubernetes_models

    for module in (kubeflow_models, kubernetes_models):
        cls = getattr(module, name, None)
        if cls is not None and hasattr(cls, "openapi_types"):
            return cls
    raise SystemExit(f"no model class {name!r} in kubeflow.training or kubernetes.client")


class Generator:
    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self.doc_enums: list[str] = []

    def type_schema(self, t: str) -> dict[str, Any]:
        t = t.strip()
        if m := re.fullmatch(r"list\[(.+)\]", t):
            return {"type": "array", "items": self.type_schema(m.group(1))}
        if m := re.fullmatch(r"dict\((\w+), (.+)\)", t):
            if m.group(1) != "str":
                raise SystemExit(f"map with {m.group(1)} keys: {t}")
            return {"type": "object", "additionalProperties": self.type_schema(m.group(2))}
        if t in PRIMITIVES or t in SCALARS:
            return dict(PRIMITIVES[SCALARS.get(t, t)])
        if not re.fullmatch(r"\w+", t):
            raise SystemExit(f"cannot read the type {t!r}")
        name = model_name(t)
        self.model(name)
        return {"$ref": f"#/$defs/{name}"}

    def model(self, name: str) -> None:
        if name in self.defs:
            return
        self.defs[name] = {}  # placeholder: a model that refers to itself stops here
        cls = model_class(name)
        checks = setter_checks(cls)
        properties: dict[str, Any] = {}
        required = []
        for attr, t in cls.openapi_types.items():
            field = cls.attribute_map[attr]
            schema = self.type_schema(t)
            check = checks.get(attr, {})
            if check.get("required"):
                required.append(field)
            values = check.get("enum")
            if values is None and t == "str":
                values = doc_enum(getattr(cls, attr).__doc__ or "")
                if values is not None:
                    schema["$comment"] = "enum from the field's description"
                    self.doc_enums.append(f"{name}.{field}: {values}")
            if values is not None:
                target = schema["items"] if schema.get("type") == "array" else schema
                target["enum"] = values
            if "pattern" in check:
                schema["pattern"] = check["pattern"]
            properties[field] = schema
        definition: dict[str, Any] = {"type": "object", "properties": properties,
                                      "additionalProperties": False}
        if required:
            definition["required"] = required
        self.defs[name] = definition


def setter_checks(cls: type) -> dict[str, dict[str, Any]]:
    """What each generated setter enforces: {attr: {required, enum, pattern}}."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    checks: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(isinstance(d, ast.Attribute) and d.attr == "setter"
                   for d in node.decorator_list):
            continue
        attr = node.name
        found: dict[str, Any] = {}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "allowed_values"
                    for t in inner.targets):
                found["enum"] = ast.literal_eval(inner.value)
            if isinstance(inner, ast.If):
                test = ast.unparse(inner.test)
                if "client_side_validation" not in test:
                    continue
                if re.search(rf"\b{attr} is None\b", test):
                    found["required"] = True
                for call in ast.walk(inner.test):
                    if (isinstance(call, ast.Call) and ast.unparse(call.func) == "re.search"
                            and isinstance(call.args[0], ast.Constant)):
                        found["pattern"] = call.args[0].value
        checks[attr] = found
    return checks


def doc_enum(doc: str) -> list[str] | None:
    text = " ".join(doc.split())
    m = DOC_ENUM.search(text)
    if not m:
        return None
    return re.split(r", (?:and |or )?| and | or ", m.group(1))


def build() -> tuple[dict[str, Any], list[str]]:
    from kubeflow.training.constants import constants

    gen = Generator()
    gen.model(ROOT_MODEL)
    versions = {p: version(p) for p in ("kubeflow-training", "kubernetes")}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": (
            f"Generated by tests/config/make_pytorchjob_schema.py from kubeflow-training "
            f"{versions['kubeflow-training']} (the Kubeflow training operator's OpenAPI "
            f"models) and kubernetes {versions['kubernetes']} (core types). Do not edit: "
            f"regenerate."),
        "title": f"{constants.PYTORCHJOB_KIND} ({constants.API_VERSION})",
        "$ref": f"#/$defs/{ROOT_MODEL}",
        "properties": {
            "apiVersion": {"const": constants.API_VERSION},
            "kind": {"const": constants.PYTORCHJOB_KIND},
        },
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "$defs": dict(sorted(gen.defs.items())),
    }
    return schema, gen.doc_enums


def main() -> int:
    schema, doc_enums = build()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(schema['$defs'])} models)",
          file=sys.stderr)
    for line in doc_enums:
        print(f"  enum from a description: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
