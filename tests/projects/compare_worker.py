"""The compare step of the projects harness (harness.py), in a process of its own run
beside the project's modules (cwd = the original's workdir, which is on sys.path):
`python compare_worker.py JOB_JSON`. It prints one line per checkpoint and ends with
`COMPARE OK` or `COMPARE FAILED`.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _definitions_of(module_name: str) -> Any:
    """MODULE.py of the current folder with only its imports, class and function
    definitions and constant assignments run (`model: {definitions_only: true}`): the
    model class of a notebook's NAME_cells.py without training it again."""
    import ast
    import types

    path = Path(os.getcwd()) / f"{module_name}.py"
    tree = ast.parse(path.read_text(), str(path))
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            kept.append(node)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name)
                                                  for t in node.targets):
            try:
                ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):
                continue
            kept.append(node)
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), module.__dict__)
    return module


def compare(job: dict[str, Any]) -> int:
    """Runs beside the project's modules (cwd = the original's workdir)."""
    import importlib

    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != HERE]
    sys.path.insert(0, os.getcwd())
    import torch

    sys.argv = list(job["argv"])
    failures: list[str] = []

    def state_dict_of(path: str, key: str | None, main_module: str | None = None
                      ) -> dict[str, Any] | None:
        if main_module:  # classes the entry pickled as `__main__.NAME` (run as a script)
            main, found = sys.modules["__main__"], importlib.import_module(main_module)
            for name, value in vars(found).items():
                if isinstance(value, type) and not hasattr(main, name):
                    setattr(main, name, value)
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 (the message is the result)
            failures.append(f"{path}: torch.load in a plain process failed: "
                            f"{type(e).__name__}: {str(e).splitlines()[0]}")
            return None
        for part in (key.split(".") if key else []):
            if not isinstance(obj, dict) or part not in obj:
                keys = sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__
                failures.append(f"{path}: no key {part!r} (has {keys})")
                return None
            obj = obj[part]
        if isinstance(obj, torch.nn.Module):
            obj = obj.state_dict()
        return dict(obj)

    def one(pattern: str, base: str) -> str | None:
        found = sorted(glob.glob(os.path.join(base, pattern)))
        if len(found) != 1:
            failures.append(f"{pattern}: {len(found)} files in {base} (want 1): {found}")
            return None
        return found[0]

    for ckpt in job["checkpoints"]:
        orig_path, conv_path = one(ckpt["path"], job["orig"]), one(ckpt["path"], job["conv"])
        if not orig_path or not conv_path:
            continue
        key = ckpt.get("key")
        main_module = ckpt.get("main_module")
        expected = state_dict_of(orig_path, key, main_module)
        got = state_dict_of(conv_path, key, main_module)
        if expected is None or got is None:
            continue
        for drop in ckpt.get("drop_keys", []):
            expected.pop(drop, None)
            got.pop(drop, None)
        label = ckpt["path"] + (f"[{key}]" if key else "")
        # a `module.` prefix the original did not have (a DDP wrapper saved); a script
        # that saved a DataParallel model had it, and its converted run must keep it
        prefixed = [k for k in got if k.startswith("module.") and k not in expected]
        if prefixed:
            failures.append(f"{label}: `module.` prefix in {len(prefixed)} keys, "
                            f"e.g. {prefixed[0]}")
        if sorted(expected) != sorted(got):
            missing = sorted(set(expected) - set(got))[:3]
            extra = sorted(set(got) - set(expected))[:3]
            failures.append(f"{label}: keys differ: missing {missing}, unexpected {extra}")
            continue
        shapes = [k for k in expected if tuple(expected[k].shape) != tuple(got[k].shape)]
        if shapes:
            failures.append(f"{label}: shapes differ for {shapes[:3]}")
            continue
        spec = ckpt.get("model")
        if spec:
            module_name, _, attr = spec["callable"].partition(":")
            if spec.get("definitions_only"):
                factory = _definitions_of(module_name)
            else:
                factory = importlib.import_module(module_name)
            for part in attr.split("."):
                factory = getattr(factory, part)
            model = factory(*spec.get("args", []), **spec.get("kwargs", {}))
            try:
                model.load_state_dict(got)
            except Exception as e:  # noqa: BLE001 (the message is the result)
                failures.append(f"{label}: load_state_dict into {spec['callable']} failed: "
                                f"{str(e).splitlines()[0]}")
                continue
            print(f"{label}: loads into {spec['callable']}")
        else:
            print(f"{label}: keys and shapes equal to the original's ({len(got)} tensors)")
        nonfinite = [k for k, v in got.items()
                     if v.is_floating_point() and not torch.isfinite(v).all()]
        if nonfinite:
            failures.append(f"{label}: non-finite values in {nonfinite[:3]}")
        if ckpt.get("exact", job["exact"]):  # a checkpoint's own `exact: false` (reason given)
            worst, worst_key = 0.0, ""
            for k in expected:
                a, b = expected[k], got[k]
                if not a.is_floating_point():
                    if not torch.equal(a, b):
                        failures.append(f"{label}: {k} differs")
                    continue
                diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
                if diff > worst:
                    worst, worst_key = diff, k
                if not torch.allclose(b, a, atol=job["tolerance"], rtol=job["tolerance"]):
                    failures.append(f"{label}: {k} differs by up to {diff:.3g}")
            print(f"{label}: largest difference {worst:.3g} ({worst_key or '-'})")
    for failure in failures:
        print("FAIL " + failure)
    print("COMPARE OK" if not failures else "COMPARE FAILED")
    return 0


if __name__ == "__main__":
    sys.exit(compare(json.loads(sys.argv[1])))
