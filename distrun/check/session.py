"""One launch's checks, from start to end: what the script's text shows before the start,
what the instrumented workers show while the job runs (with `--check`), and the ranks'
repeated output at the end.

The CLI makes a `Session` after the launch is resolved, lets it change the command (with
`--check`), polls it while the job runs, and asks it for the verdict at the end. The
session returns findings; the CLI prints them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from distrun.check import static
from distrun.check.flight import PREFIX, dumps_in, recorder_env
from distrun.check.rules import ALWAYS, CHECKED, Finding
from distrun.check.verdict import Checker, duplicate_output
from distrun.launch.spec import Command, LaunchSpec

BOOT = str(Path(__file__).with_name("boot.py"))

# The default check watches a job's first WINDOW optimizer steps, then the probe removes
# its hooks. 8: the parameters are fingerprinted at steps 1, 2, 4 and 8, so a divergence
# that a missed all-reduce starts shows by step 1 and a slow one (a parameter DDP does not
# see, trained only every few steps) has four chances; the first loader's first batches,
# its sampler and its split are all seen by then; and 8 steps are a few seconds of any
# real job, whose own start-up (data, model, rendezvous) takes longer.
WINDOW = 8
Mode = str  # "off" (--no-check), "window" (the default), "full" (--check)


@dataclass
class Session:
    spec: LaunchSpec
    mode: Mode = "off"
    steps: int | None = None  # end the job after this many optimizer steps
    findings: list[Finding] = field(default_factory=list)
    folder: Path | None = None
    checker: Checker | None = None
    notes: list[str] = field(default_factory=list)  # why a default check did not run
    dumps: Path | None = None  # the Flight Recorder's dumps (check/flight.py)

    @classmethod
    def start(cls, spec: LaunchSpec, options: list[str], check: bool = False,
              steps: int | None = None, no_check: bool = False,
              flags: frozenset[str] = frozenset(), typed: list[str] | None = None
              ) -> Session:
        """The checks of the script's text (a syntax error is exit 2 here, before
        anything starts), and how the workers are checked: to the end (`check` or
        `steps`), not at all (`no_check`), else the first WINDOW steps of a job of more
        than one process."""
        session = cls(spec, steps=steps)
        if check or steps is not None:
            session.mode = "full"
        elif not no_check and session.world > 1:
            session.mode = "window"
        source = ""
        if not spec.module:
            static.parse_script(spec.script)
            source = Path(spec.script).read_text(errors="replace")
        found = [static.options_after_script(spec.script, spec.script_args, options, source,
                                             flags, typed)]
        if not spec.module and session.world > 1:
            found.append(static.no_process_group(spec.script))
            found.append(static.spawn_under_launcher(spec.script))
        session.findings = [f for f in found if f is not None]
        return session

    @property
    def check(self) -> bool:
        """`--check`: checked to the end, a finding is exit code 3."""
        return self.mode == "full"

    @property
    def instrumented(self) -> bool:
        return self.mode != "off"

    @property
    def world(self) -> int:
        if self.spec.task is not None:  # one rank of a SLURM job of one task per rank
            return self.spec.task.world_size
        nproc = self.spec.nproc_per_node
        return (nproc if isinstance(nproc, int) else 1) * self.spec.max_nodes

    @property
    def local(self) -> int:
        """The ranks whose facts come here (every rank, where one driver runs them all)."""
        return self.spec.ranks_here

    def instrument(self, command: Command) -> Command:
        """`command` with each worker started through the probe's boot script."""
        if self.mode == "window":
            why = self._cannot_probe()
            if why is not None:
                self.notes.append(f"check: not run ({why}); the job runs unchecked")
                self.mode = "off"
        if not self.instrumented:
            return command
        self.folder = Path(tempfile.mkdtemp(prefix="distrun-check-"))
        self.checker = Checker(self.folder, self.local)
        target = [*(["-m"] if self.spec.module else []), self.spec.script,
                  *self.spec.script_args]
        head = command.argv[:len(command.argv) - len(target)]
        # in the user's log folder; a temporary one of their own where distrun made the
        # log folder (removed after a clean run, dumps a hang report said were kept too)
        self.dumps = _dump_folder(self.spec.log_dir if self.spec.keep_logs else None)
        env = {**command.env, "DISTRUN_CHECK_DIR": str(self.folder),
               "DISTRUN_FR_PREFIX": str(self.dumps / PREFIX),
               **recorder_env(self.dumps, {**os.environ, **command.env})}
        if self.steps is not None:
            env["DISTRUN_CHECK_STEPS"] = str(self.steps)
        if self.mode == "window":
            env["DISTRUN_CHECK_WINDOW"] = str(WINDOW)
        return Command(argv=[*head, BOOT, *target], env=env)

    def _cannot_probe(self) -> str | None:
        """Why the default check cannot start the workers through the probe, if it
        cannot: a module this interpreter does not find, a command that does not run the
        script with this interpreter. `--check` asked for it, so it fails loudly instead."""
        if self.spec.module:
            import importlib.util

            try:
                found = importlib.util.find_spec(self.spec.script) is not None
            except (ImportError, ValueError):
                found = False
            if not found and not (Path.cwd() / (self.spec.script.replace(".", "/") + ".py")
                                  ).is_file():
                return f"-m {self.spec.script}: not a module this Python finds"
        return None

    def where_ranks_wait(self) -> list[str]:
        """Where each rank of this node is (a hung or quiet job): its stack and its last
        collective, with a diagnosis (check/waits.py)."""
        from distrun.check.waits import where_ranks_wait

        return where_ranks_wait(self.folder, list(range(self.local)), self.dumps)

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

    def finish(self, printed: dict[str, tuple[str, set[int]]],
               job_ok: bool = True) -> list[Finding]:
        """The findings only the end shows (the rest were returned by `poll`)."""
        found = self.poll()
        idle = self.checker.no_training() if self.checker is not None and job_ok else None
        if idle is not None and "no-training" not in self.rules_found:
            found.append(idle)
            self.findings.append(idle)
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
        """Remove the facts' folder (the findings are kept), and the Flight Recorder's
        folder unless a rank or distrun left dumps there (`kept_dumps` then names it)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        if self.dumps is not None and not dumps_in(self.dumps):
            shutil.rmtree(self.dumps, ignore_errors=True)  # an empty folder
            self.dumps = None

    @property
    def kept_dumps(self) -> Path | None:
        """The folder of the Flight Recorder's dumps, once closed, when there are some."""
        return self.dumps if self.folder is None and dumps_in(self.dumps) else None

    @property
    def comparable(self) -> bool:
        """Whether this node has ranks to compare (the facts of other nodes stay there)."""
        return self.local >= 2

    @property
    def checks_run(self) -> list[str]:
        if not self.instrumented:
            return list(ALWAYS)
        return [*ALWAYS, *(CHECKED if self.comparable else ["no-training",
                                                           "sharded-checkpoint"])]

    @property
    def window(self) -> int | None:
        """The steps the default check watched, when its window ended before the job."""
        return self.checker.window if self.checker is not None else None

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

    @property
    def hand_steps(self) -> bool:
        """The steps counted are those of parameters updated by hand (no optimizer)."""
        return self.checker is not None and self.checker.hand


def _dump_folder(log_dir: str | None) -> Path:
    """Where the Flight Recorder's dumps go: `flight-recorder/` in the job's log folder,
    else (no log folder kept, a folder that cannot be made) a temporary folder."""
    if log_dir:
        folder = Path(log_dir) / "flight-recorder"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return folder
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="distrun-flight-recorder-"))
