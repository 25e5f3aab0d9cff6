"""tests/zygote.py runs each case as `python SCRIPT ARGS` would, in a process of its own:
its argv, folder, environment, `__main__` (pickling a class of the script), its exit code
(SystemExit's, 1 with the traceback for an exception) and a timeout that ends a hung case
without stopping the next one. Its ranked mode is proven by the batches themselves
(tests/batched.py)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT, run_cmd

SCRIPTS = {
    "exits": '''\
        import os, pickle, sys
        class Kept: pass
        assert type(pickle.loads(pickle.dumps(Kept()))).__module__ == "__main__"
        print(sys.argv, os.getcwd() == sys.path[0], os.environ["CASE"], os.environ["BATCH_SIZE"])
        sys.exit(3)
        ''',
    "raises": '''\
        def step():
            raise ValueError("from the script")
        step()
        ''',
    "hangs": "import time\ntime.sleep(60)\n",
    "ends": "print('after the hang')\n",
}


def test_each_case_runs_as_its_own_process(tmp_path: Path) -> None:
    cases = []
    for name, source in SCRIPTS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "s.py").write_text(textwrap.dedent(source))
        cases.append({"cwd": str(tmp_path / name), "script": "s.py", "args": ["--x", "1"],
                      "env": {"CASE": name, "BATCH_SIZE": "64"}, "out": str(tmp_path / name)})
    (tmp_path / "spec.json").write_text(json.dumps({"timeout": 5, "cases": cases}))
    ran = run_cmd([sys.executable, str(ROOT / "tests/zygote.py"), "single", "spec.json"],
                  cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr

    def kept(name: str, what: str) -> str:
        return (tmp_path / name / f"single.{what}").read_text()

    assert kept("exits", "exit") == "3", kept("exits", "stderr")
    assert kept("exits", "stdout") == "['s.py', '--x', '1'] True exits 64\n"
    assert kept("raises", "exit") == "1"
    assert 'line 2, in step\n    raise ValueError("from the script")' in kept("raises", "stderr")
    assert "zygote" not in kept("raises", "stderr")  # the script's frames only
    assert kept("hangs", "exit") == "timed out after 5 s"
    assert (kept("ends", "exit"), kept("ends", "stdout")) == ("0", "after the hang\n")
