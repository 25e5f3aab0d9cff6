"""The conversion pipeline: the gates, the transforms in order, one rewrite per module.

Gates come first: a script (or project) that is already distributed, or starts its own
processes, or does not train, is returned unchanged with the reason. Otherwise every
transform of `transforms.PIPELINE` (the target's own ones at its stages) whose
condition holds records its edits on one shared context, and the plan is applied to
each module in a single pass; modules other than the entry then get the names their
new code uses.
"""

from __future__ import annotations

from dataclasses import replace

from distrun.convert import imported_modules
from distrun.convert.analysis import Facts, ModuleInfo
from distrun.convert.apply import apply
from distrun.convert.context import Context, Stage, Transform
from distrun.convert.defined import undefined_uses
from distrun.convert.edits import Plan
from distrun.convert.idioms import DATALOADER, is_backward, is_optimizer
from distrun.convert.names import Names
from distrun.convert.options import ConvertOptions, given_flags
from distrun.convert.report import ConvertResult, Finding, Status
from distrun.convert.rules import RULES
from distrun.convert.targets import target_for
from distrun.convert.transforms import PIPELINE, old_launcher, spawned
from distrun.convert.transforms.detect import already_distributed, spawns_processes
from distrun.convert.transforms.old_launcher import local_rank_option
from distrun.convert.transforms.spawned import spawned_worker


def run(modules: list[ModuleInfo], options: ConvertOptions, folder: str | None = None
        ) -> list[ConvertResult]:
    """Convert the modules of a script or project (entry first): one result each.
    `folder`: where the entry lives, for the files the user keeps beside it."""
    facts = Facts.build(modules)
    stopped = _gate(facts)
    pipeline: tuple[Transform | Stage, ...] = PIPELINE
    if stopped is not None and stopped[0] == "already-distributed":
        if spawned_worker(facts) is not None:  # mp.spawn: for a launcher
            stopped, pipeline = None, (spawned.COMPLETE,)
        elif local_rank_option(facts):  # written for the old launcher
            stopped, pipeline = None, (old_launcher.COMPLETE,)
    target = target_for(options)
    flags = given_flags(options)
    if stopped is not None and stopped[0] == "already-distributed" and flags:
        finding = stopped[1]
        stopped = (stopped[0], replace(finding, message=f"{finding.message}; "
                                       f"{', '.join(flags)} not applied"), stopped[2])
    elif stopped is None and pipeline is not PIPELINE and flags:
        return _unchanged(facts, target.launcher, "unsupported", *_completed_only(
            facts, pipeline, flags))
    if stopped is not None:
        return _unchanged(facts, target.launcher, *stopped)
    ctx = Context(facts, Plan(facts), _names(facts), options, target, folder=folder)
    for step in pipeline:
        for transform in target.transforms(step) if isinstance(step, str) else (step,):
            if transform.applies(ctx):
                transform.run(ctx)
    if ctx.refusal is not None:
        return _unchanged(facts, target.launcher, "unsupported", *ctx.refusal)
    results = []
    for info in facts.modules:
        tree = apply(ctx.plan, info)
        source, output = info.module.code, tree.code
        if (not info.is_entry or ctx.entry_is_library) and output != source:
            output = imported_modules.complete(ctx, info, tree).code
        report = ctx.plan.report(info)
        status: Status = "converted" if output != source or info.is_entry else "nothing-to-do"
        results.append(ConvertResult(source, output, status, report.changes, report.findings,
                                     files=ctx.files if info.is_entry else {},
                                     bases=ctx.file_bases if info.is_entry else {},
                                     batch_note=report.batch_note, launcher=target.launcher))
        broken = _undefined(facts, info, output, ctx.names.introduced()) \
            if output != source else None
        if broken is not None:
            return _unchanged(facts, target.launcher, "unsupported", broken, info)
    return _resolved(facts, ctx, results)


def _resolved(facts: Facts, ctx: Context, results: list[ConvertResult]
              ) -> list[ConvertResult]:
    """The results, if no model is left unwrapped and no training data unsharded (the
    blocking findings, `rules.BLOCKING`). Else every module unchanged with those findings
    as errors (exit 4, nothing written); with --partial, the results with those errors,
    the entry's text starting with the list of them."""
    sharded = any(c.rule in _SHARDING for r in results for c in r.changes)
    unresolved = [(info, f) for info, r in zip(facts.modules, results, strict=True)
                  for f in r.findings if _blocks(f, sharded)]
    if not unresolved or ctx.entry_is_library:
        return results
    for result in results:
        result.findings = [replace(f, severity="error") if _blocks(f, sharded) else f
                           for f in result.findings]
    if not ctx.options.partial:
        return [ConvertResult(r.source, r.source, "unsupported" if info.is_entry or any(
                                  f.severity == "error" for f in r.findings)
                              else "nothing-to-do",
                              findings=r.findings,
                              launcher=r.launcher)
                for info, r in zip(facts.modules, results, strict=True)]
    entry = results[0]
    head = ["# distrun: PARTIAL conversion (--partial): what is below trains wrong until",
            "# these are fixed by hand (see the report, `distrun convert --help`):"]
    head += [f"#   {info.path}:{f.line}: {f.message[:150]}" for info, f in unresolved]
    lines = entry.output.splitlines(keepends=True)
    keep = 0  # a `#!` line and an encoding declaration stay first
    while keep < min(2, len(lines)) and (lines[keep].startswith("#!") or (
            lines[keep].startswith("#") and "coding" in lines[keep])):
        keep += 1
    entry.output = "".join(lines[:keep]) + "\n".join(head) + "\n" + "".join(lines[keep:])
    return results


# The changes after which some training data is read in shares.
_SHARDING = frozenset({"data.sampler", "data.share_sampler", "data.sampler_with_replacement",
                       "data.share_batch_sampler", "data.rebuild_loader", "data.rank_batches",
                       "accelerate.prepare_loader",
                       "accelerate.prepare"})


def _blocks(finding: Finding, sharded: bool) -> bool:
    """Does `finding` leave a model unwrapped or the training data unsharded? A loader
    that may or may not feed training does only when no training loader was sharded."""
    if finding.rule == "data.unknown_loader" and sharded:
        return False
    return RULES[finding.rule].blocks and finding.severity != "info"


def _undefined(facts: Facts, info: ModuleInfo, output: str, names: set[str]
               ) -> Finding | None:
    """An error when the converted text of `info` reads a name the conversion introduced
    that no earlier line defines (a converter bug: nothing is written)."""
    uses = undefined_uses(output, names)
    if not uses:
        return None
    use = uses[0]
    where = f"in `{use.function}()`" if use.function else "at the top level"
    defined = info.functions.get(use.function) if use.function else None
    return Finding(
        facts.line(defined) if defined is not None else 1, "verify.undefined_name", "error",
        f"the converted script would read `{use.name}` {where} (its line {use.line}) where "
        "no line before defines it: every rank would stop with a NameError, so nothing was "
        "written", "this is a distrun bug: please report it with the script; convert that "
        "part by hand meanwhile")


def _unchanged(facts: Facts, launcher: str, why: Status, finding: Finding, where: ModuleInfo
               ) -> list[ConvertResult]:
    """Every module as it is; `why` and `finding` on `where` (the entry has `why` too)."""
    return [ConvertResult(m.module.code, m.module.code,
                          why if m is where or m.is_entry else "nothing-to-do",
                          findings=[finding] if m is where else [], launcher=launcher)
            for m in facts.modules]


def _names(facts: Facts) -> Names:
    """Names chosen once for the whole project: they avoid what any module binds, and
    reuse an import only where every module that binds the name imports that."""
    imports: dict[str, str] = {}
    for info in facts.modules:
        for name, qualified in info.imports.items():
            imports[name] = qualified if imports.get(name, qualified) == qualified \
                else "<several>"
    return Names.avoiding(facts.bound_names, imports)


def _completed_only(facts: Facts, pipeline: tuple[Transform | Stage, ...], flags: list[str]
                    ) -> tuple[Finding, ModuleInfo]:
    """A script already distributed (mp.spawn, the old launcher) is only completed for a
    launcher, its own DDP code kept: the options that would change it are refused."""
    spawn = spawned_worker(facts)
    node = spawn[0] if spawn is not None and pipeline == (spawned.COMPLETE,) \
        else local_rank_option(facts)
    how = "starts its DDP workers with mp.spawn" if spawn is not None else \
        "is written for torch.distributed.launch"
    return Finding(
        facts.line(node) if node is not None else 1, "detect.options_not_applied", "error",
        f"the script {how}: distrun only completes it for the launcher and keeps its own "
        f"DDP code, so {', '.join(flags)} cannot apply", "convert it without "
        f"{'this option' if len(flags) == 1 else 'these options'} (its DDP code stays as "
        "written), then make the change by hand"), \
        facts.module_of(node) if node is not None else facts.entry


def _gate(facts: Facts) -> tuple[Status, Finding, ModuleInfo] | None:
    """Why the project must not be converted (status, finding and where), or None."""
    found = already_distributed(facts)
    if found is not None:
        return "already-distributed", Finding(
            facts.line(found), "detect.already_distributed", "info",
            f"already distributed (`{facts.code(found.func)}`): left unchanged"), \
            facts.module_of(found)
    found = spawns_processes(facts)
    if found is not None:
        return "unsupported", Finding(
            facts.line(found), "detect.spawns_processes", "warning",
            f"the script starts its own processes (`{facts.code(found.func)}`): not converted",
            "let torchrun start the processes: call the worker function directly once per "
            "process and convert that script"), facts.module_of(found)
    if not _looks_like_training(facts):
        return "nothing-to-do", Finding(
            1, "detect.no_training", "info", "no PyTorch training found (no optimizer, "
            "DataLoader or backward() on a torch import): nothing to convert"), facts.entry
    return None


def _looks_like_training(facts: Facts) -> bool:
    """Torch is imported and something trains: an optimizer, a DataLoader or a backward()."""
    uses_torch = any(q == "torch" or q.startswith("torch.")
                     for info in facts.modules for q in info.imports.values())
    return uses_torch and any(
        is_backward(call) or is_optimizer(facts, call) or facts.call_name(call) in DATALOADER
        for call in facts.calls)
