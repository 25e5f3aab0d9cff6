"""What `--force` replaces beside the output: a JSON config (ds_config.json) the
conversion did not merge from. Each key it loses or changes is named in the report, so
that nothing of the user's is dropped without a word (the old file is kept as .orig).
A config the conversion merged from needs no such note: its report names every key it
added, changed or removed (`targets/deepspeed_merge.py`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distrun.config import jsonc
from distrun.convert.report import ConvertResult, Finding
from distrun.errors import InputError
from distrun.files import FileWrite

_SHOWN = 8  # keys named in full; the rest counted


def note_replaced(result: ConvertResult, writes: Sequence[FileWrite]) -> None:
    """A warning on `result` for each JSON file of `writes` that replaces a different
    file, not the one the conversion merged from, losing or changing keys."""
    merged = set(result.bases.values())
    for write in writes:
        path = Path(write.path)
        if not (write.force and path.suffix == ".json" and path.is_file()) \
                or str(path.resolve()) in merged:
            continue
        try:
            old_bytes = path.read_bytes()
            if old_bytes == write.data:
                continue
            old = jsonc.plain(jsonc.parse(old_bytes.decode("utf-8")).root)
        except (OSError, UnicodeDecodeError, jsonc.JsonError):
            old = None
        new = json.loads(write.data)
        if not isinstance(old, dict):
            what = "a file that is no JSON object distrun can read"
        else:
            dropped, changed = _differences(old, new, "")
            if not dropped and not changed:
                continue
            what = "; ".join(part for part in (
                _listed("keys dropped", dropped), _listed("keys changed", changed)) if part)
        result.findings.append(Finding(
            1, "deepspeed.config_replaced", "warning", f"--force replaces {path}, which the "
            f"conversion did not merge from: {what}", f"the old file is kept as {path}.orig: "
            "merge back what you need, or keep your config beside the script (or name it in "
            "its --deepspeed_config option), where the conversion merges from it"))


def merge_needs_force(result: ConvertResult, writes: Sequence[FileWrite]) -> None:
    """InputError (nothing written) when a file of `writes` is the user's config the
    conversion merged into, changed, and may not be replaced: which keys the merge adds
    or changes, and how to write it."""
    merged = set(result.bases.values())
    for write in writes:
        path = Path(write.path)
        if write.force or not path.is_file() or str(path.resolve()) not in merged:
            continue
        try:
            data = path.read_bytes()
            old = jsonc.plain(jsonc.parse(data.decode("utf-8")).root)
        except (OSError, UnicodeDecodeError, jsonc.JsonError):
            continue  # the core read it: the write names what goes wrong
        if data == write.data or not isinstance(old, dict):
            continue
        new = json.loads(write.data)
        added = [key.split(" (")[0] for key in _differences(new, old, "")[0]]
        dropped, changed = _differences(old, new, "")
        what = "; ".join(part for part in (_listed("keys added", added),
                                           _listed("keys changed", changed),
                                           _listed("keys dropped", dropped)) if part)
        raise InputError(f"{path} is the user's DeepSpeed config, and the converted script "
                         f"needs it merged ({what}): nothing written", f"pass --force to write "
                         f"the merged config there (the old one is kept as {path}.orig), or "
                         "-o DIR/ to write the script and its config elsewhere")


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str
                 ) -> tuple[list[str], list[str]]:
    dropped: list[str] = []
    changed: list[str] = []
    for key, value in old.items():
        path = f"{prefix}{key}"
        if key not in new:
            dropped.append(f"{path} (was {json.dumps(value)})")
        elif isinstance(value, dict) and isinstance(new[key], dict):
            more = _differences(value, new[key], f"{path}.")
            dropped += more[0]
            changed += more[1]
        elif value != new[key] or isinstance(value, bool) != isinstance(new[key], bool):
            changed.append(f"{path} ({json.dumps(value)} -> {json.dumps(new[key])})")
    return dropped, changed


def _listed(what: str, keys: list[str]) -> str:
    if not keys:
        return ""
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return f"{what}: {', '.join(keys[:_SHOWN])}{more}"
