"""One launch's checks, from start to end: what the script's text shows before the start,
what the instrumented workers show while the job runs (with `--check`), and the ranks'
repeated output at the end.

The CLI makes a `Session` after the launch is resolved, lets it change the command (with
`--check`), polls it while the job runs, and asks it for the verdict at the end. The
session returns findings; the CLI prints them.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from distrun.check import static
from distrun.check.rules import ALWAYS, CHECKED, Finding
from distrun.check.verdict import Checker, duplicate_output
from distrun.launch.spec import Command, LaunchSpec

BOOT = str(Path(__file__).with_name("boot.py"))


@dataclass
class Session:
    spec: LaunchSpec
    check: bool = False
    steps: int | None = None  # end the job after this many optimizer steps
    findings: list[Finding] = field(default_factory=list)
    folder: Path | None = None
    checker: Checker | None = None

    @classmethod
    def start(cls, spec: LaunchSpec, options: list[str], check: bool = False,
              steps: int | None = None) -> Session:
        """The checks of the script's text (a syntax error is exit 2 here, before
        anything starts)."""
        session = cls(spec, check or steps is not None, steps)
        source = ""
        if not spec.module:
            static.parse_script(spec.script)
            source = Path(spec.script).read_text(errors="replace")
        found = [static.options_after_script(spec.script, spec.script_args, options, source)]
        if not spec.module and session.world > 1:
            found.append(static.no_process_group(spec.script))
        session.findings = [f for f in found if f is not None]
        return session

    @property
    def world(self) -> int:
        nproc = self.spec.nproc_per_node
        return (nproc if isinstance(nproc, int) else 1) * self.spec.max_nodes

    @property
    def local(self) -> int:
        nproc = self.spec.nproc_per_node
        return nproc if isinstance(nproc, int) else 1

    def instrument(self, command: Command) -> Command:
        """`command` with each worker started through the probe's boot script."""
        if not self.check:
            return command
        self.folder = Path(tempfile.mkdtemp(prefix="distrun-check-"))
        self.checker = Checker(self.folder, self.local)
        target = [*(["-m"] if self.spec.module else []), self.spec.script,
                  *self.spec.script_args]
        head = command.argv[:len(command.argv) - len(target)]
        env = {**command.env, "DISTRUN_CHECK_DIR": str(self.folder)}
        if self.steps is not None:
            env["DISTRUN_CHECK_STEPS"] = str(self.steps)
        return Command(argv=[*head, BOOT, *target], env=env)

    def poll(self) -> list[Finding]:
        """Findings the running job has shown since the last poll."""
        if self.checker is None:
            return []
        found = [f for f in self.checker.poll() if f.rule not in self.rules_found]
        self.findings += found
        return found

    @property
    def rules_found(self) -> set[str]:
        return {f.rule for f in self.findings}

    def finish(self, printed: dict[str, tuple[str, set[int]]]) -> list[Finding]:
        """The findings only the end shows (the rest were returned by `poll`)."""
        found = self.poll()
        if self.checker is not None and any(r.group for r in self.checker.ranks.values()):
            # the script's text showed no set-up, but the ranks had a process group
            self.findings = [f for f in self.findings if f.rule != "no-process-group"]
        if "no-process-group" not in self.rules_found:
            duplicate = duplicate_output(printed, self.local)
            if duplicate is not None:
                found.append(duplicate)
                self.findings.append(duplicate)
        return found

    def close(self) -> None:
        """Remove the facts' folder (the findings are kept)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    @property
    def comparable(self) -> bool:
        """Whether this node has ranks to compare (the facts of other nodes stay there)."""
        return self.local >= 2

    @property
    def checks_run(self) -> list[str]:
        return [*ALWAYS, *(CHECKED if self.check and self.comparable else [])]

    @property
    def ranks_checked(self) -> int:
        """Local ranks whose probe reported (fewer than `local`: some ran unchecked)."""
        return len(self.checker.ranks) if self.checker is not None else 0

    @property
    def sharded_params(self) -> int:
        return self.checker.sharded if self.checker is not None else 0

    @property
    def optimizer_steps(self) -> int:
        return self.checker.steps if self.checker is not None else 0
