"""The Flight Recorder's settings (check/flight.py): what a checked launch sets, and that
a user's own values win. The recorder's dumps themselves are read from real ranks in
tests/launch/test_hangs.py (gloo) and tests/gpu/test_cuda.py (NCCL)."""

from __future__ import annotations

import pickle
from pathlib import Path

from distrun.check.flight import PREFIX, last_entry, recorder_env


def test_a_checked_launch_turns_the_recorder_on_and_dumps_into_its_folder(
        tmp_path: Path) -> None:
    env = recorder_env(tmp_path, {})
    # torch 2.13 here: the name of PyTorch >= 2.7 (the old one warns in every rank)
    assert env == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                   "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / PREFIX),
                   "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / PREFIX)}


def test_the_user_s_own_recorder_settings_are_kept(tmp_path: Path) -> None:
    env = recorder_env(tmp_path, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0",
                                  "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
                                  "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/fr_"})
    assert env == {}


def test_a_dump_s_last_collective_is_said_with_its_group_s_progress(tmp_path: Path) -> None:
    """NCCL's entries carry their own state; gloo's stay "scheduled", and the process
    group's counters say whether the last one completed."""
    entry = {"profiling_name": "gloo:all_reduce", "collective_seq_id": 9, "state": "scheduled",
             "process_group": ("0", "default_pg"), "input_sizes": [[4]],
             "input_dtypes": ["Float"]}
    dump = tmp_path / f"{PREFIX}0"
    dump.write_bytes(pickle.dumps({"entries": [entry], "pg_status": {
        "0": {"last_enqueued_collective": 9, "last_completed_collective": 8}}}))
    assert last_entry(dump) == "all_reduce #9, sizes [[4]] Float: not completed (1 recorded)"
    nccl = {**entry, "profiling_name": "nccl:broadcast", "state": "started"}
    dump.write_bytes(pickle.dumps({"entries": [nccl]}))
    assert last_entry(dump) == "broadcast #9, sizes [[4]] Float: started (1 recorded)"
    dump.write_bytes(b"not a pickle")
    assert last_entry(dump) is None
