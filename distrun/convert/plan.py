"""The edit plan transforms fill in, and the single pass that applies it.

Transforms never modify the tree themselves: they look at `Facts` (the original
tree) and record edits keyed by original nodes: replace a node (as a function of
its already-updated version, so edits nest), insert statements before or after a
statement. `apply` then rewrites the tree once, which keeps every untouched
comment, blank line and format exactly as it was.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.options import ConvertOptions
from distrun.convert.report import Change, Finding, Severity

# A rewrite returns the new node, a RemovalSentinel, or a FlattenSentinel of statements.
Rewrite = Callable[[cst.CSTNode], Any]
Wrapper = Callable[[list[cst.BaseStatement]], cst.BaseStatement]


@dataclass
class Names:
    """Identifiers the converted script introduces, chosen not to clash with the script's."""

    local_rank: str = "LOCAL_RANK"
    rank: str = "RANK"
    world_size: str = "WORLD_SIZE"
    device: str = "DEVICE"
    dist: str = "dist"
    ddp: str = "DDP"
    sampler: str = "DistributedSampler"
    gc: str = "gc"
    os: str = "os"
    contextlib: str = "contextlib"
    accelerator: str = "accelerator"

    @classmethod
    def avoiding(cls, taken: set[str], imports: dict[str, str]) -> Names:
        wanted = {
            "dist": "torch.distributed",
            "ddp": "torch.nn.parallel.DistributedDataParallel",
            "sampler": "torch.utils.data.distributed.DistributedSampler",
            "gc": "gc",
            "os": "os",
            "contextlib": "contextlib",
        }
        chosen = cls()
        for attr in ("local_rank", "rank", "world_size", "device", "dist", "ddp", "sampler",
                     "gc", "os", "contextlib", "accelerator"):
            base = getattr(chosen, attr)
            name = base
            # An existing import of exactly what we need is reused; anything else bound
            # under that name makes us pick another.
            reusable = attr in wanted and imports.get(name) == wanted[attr]
            while (name in taken or name in imports) and not reusable:
                name = f"{name}_"
                reusable = attr in wanted and imports.get(name) == wanted[attr]
            setattr(chosen, attr, name)
        return chosen


@dataclass
class Plan:
    facts: Facts
    names: Names
    options: ConvertOptions = field(default_factory=ConvertOptions)
    replace: dict[cst.CSTNode, list[Rewrite]] = field(default_factory=lambda: defaultdict(list))
    before: dict[cst.CSTNode, list[cst.BaseStatement]] = field(
        default_factory=lambda: defaultdict(list)
    )
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(
        default_factory=lambda: defaultdict(list)
    )
    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # block -> [(first statement, last statement, builder of the compound that holds them)]
    wraps: dict[cst.CSTNode, list[tuple[cst.CSTNode, cst.CSTNode, Wrapper]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    needed_imports: set[str] = field(default_factory=set)
    setup_extra: list[str] = field(default_factory=list)  # code appended to the setup block
    # accelerate: training loaders to prepare, (DataLoader call, name, why); those the model's
    # `accelerator.prepare(...)` takes along are removed from this list by the model transform
    loaders_to_prepare: list[tuple[cst.Call, str | None, str]] = field(default_factory=list)
    eval_loaders: list[tuple[cst.Call, set[str]]] = field(default_factory=list)  # --eval shard
    touched_top_level: list[cst.CSTNode] = field(default_factory=list)

    # -- recording ---------------------------------------------------------------

    def change(self, node: cst.CSTNode, rule: str, message: str) -> None:
        self.changes.append(Change(self.facts.line(node), rule, message))

    def finding(
        self, node: cst.CSTNode | None, rule: str, message: str, fix: str = "",
        severity: Severity = "warning",
    ) -> None:
        line = self.facts.line(node) if node is not None else 1
        self.findings.append(Finding(line, rule, severity, message, fix))

    def rewrite(self, node: cst.CSTNode, fn: Rewrite) -> None:
        self.replace[node].append(fn)
        self._touch(node)

    def insert_before(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> None:
        self.before[stmt].extend(new)
        self._touch(stmt)

    def insert_after(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> None:
        self.after[stmt].extend(new)
        self._touch(stmt)

    def wrap(self, first: cst.CSTNode, last: cst.CSTNode, make: Wrapper) -> None:
        """Put the statements from `first` to `last` (siblings in one block, with whatever
        the plan inserts around them) inside the compound statement `make(statements)`."""
        block = self.facts.parent[first]
        self.wraps[block].append((first, last, make))
        self._touch(first)

    @property
    def accelerate(self) -> bool:
        return self.options.target == "accelerate"

    def unwrap(self, code: str) -> str:
        """The model inside the wrapper the target puts around it."""
        if self.accelerate:
            return f"{self.names.accelerator}.unwrap_model({code})"
        return f"{code}.module"

    def barrier(self) -> str:
        if self.accelerate:
            return f"{self.names.accelerator}.wait_for_everyone()"
        self.needed_imports.add("dist")
        return f"{self.names.dist}.barrier()"

    def _touch(self, node: cst.CSTNode) -> None:
        self.touched_top_level.append(self.facts.top_level_statement(node))

    @property
    def has_edits(self) -> bool:
        return bool(self.replace or self.before or self.after)

    def apply(self) -> cst.Module:
        # Only the paths from the root to edited nodes are walked: edits are sparse.
        hot: set[int] = set()
        for node in [*self.replace, *self.before, *self.after, *self.wraps]:
            hot.add(id(node))
            hot.update(id(a) for a in self.facts.ancestors(node))
        # Statements whose comment lines a rewrite could drop: those rewritten, and those
        # holding a rewritten expression.
        checked = {id(node if isinstance(node, cst.BaseStatement) else
                      self.facts.statement(node)) for node in self.replace}
        module = self.facts.module
        # A form feed in the indentation resets Python's column count, so a block nested
        # with it can come out inconsistent (TabError): blocks the converter adds are
        # indented with what follows the last form feed; the script's own keep theirs.
        pinned = module.default_indent if "\f" in module.default_indent else None
        result = module.visit(_Applier(self, hot, checked, pinned))
        assert isinstance(result, cst.Module)
        if pinned is not None:
            result = result.with_changes(default_indent=pinned.rsplit("\f", 1)[1] or "    ")
        return result


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan, hot: set[int], checked: set[int],
                 pinned: str | None) -> None:
        self.plan = plan
        self.hot = hot
        self.checked = checked
        self.pinned = pinned  # the script's default indent, when every block must keep it
        self.produced: dict[int, list[cst.CSTNode]] = {}
        # block -> comment lines of removed or rewritten statements, waiting for the next
        # statement of that block (or its footer): a rewrite never loses a comment line.
        self.orphans: dict[int, list[cst.EmptyLine]] = defaultdict(list)

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self.pinned is not None or id(node) in self.hot

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[no-untyped-def]
        node: cst.CSTNode = updated_node
        if self.pinned is not None and isinstance(node, cst.IndentedBlock) and node.indent is None:
            node = node.with_changes(indent=self.pinned)
        for fn in self.plan.replace.get(original_node, ()):
            node = fn(node)
        if isinstance(node, cst.FlattenSentinel):  # a rewrite into several statements
            nodes = [*self.plan.before.get(original_node, []), *node.nodes,
                     *self.plan.after.get(original_node, [])]
            flat = cst.FlattenSentinel(nodes)
            if isinstance(original_node, cst.BaseStatement):
                flat = self._keep_comment_lines(original_node, flat)
            self.produced[id(original_node)] = list(flat.nodes)
            return flat
        wraps = self.plan.wraps.get(original_node)
        if wraps and isinstance(node, cst.IndentedBlock):
            node = self._wrap(original_node, node, wraps)
        if isinstance(node, cst.SimpleStatementLine) and not node.body:
            node = cst.RemoveFromParent()  # type: ignore[assignment]  # all its statements went
        elif isinstance(node, cst.SimpleStatementSuite) and not node.body:
            node = node.with_changes(body=[cst.Pass()])
        orphans = self.orphans.pop(id(original_node), [])
        if isinstance(node, cst.IndentedBlock) and not node.body:
            # Every statement of a block was removed: keep it valid.
            node = node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()],
                                                                   leading_lines=orphans)])
        elif isinstance(node, (cst.IndentedBlock, cst.Module)) and orphans:
            node = node.with_changes(footer=[*orphans, *node.footer])
        before = self.plan.before.get(original_node, [])
        after = self.plan.after.get(original_node, [])
        result: cst.CSTNode | cst.FlattenSentinel[cst.CSTNode] = node
        if before or after:
            kept = [node] if isinstance(node, cst.BaseStatement) else []
            result = cst.FlattenSentinel([*before, *kept, *after])
        if isinstance(original_node, cst.BaseStatement):
            result = self._keep_comment_lines(original_node, result)
            self.produced[id(original_node)] = (
                list(result.nodes) if isinstance(result, cst.FlattenSentinel) else [result])
        return result

    def _keep_comment_lines(self, original: cst.BaseStatement, result: Any) -> Any:
        """Comment lines a rewrite of `original` dropped go above the next statement of its
        block; those left by earlier siblings go above `result`."""
        block = id(self.plan.facts.parent.get(original))
        nodes = list(result.nodes) if isinstance(result, cst.FlattenSentinel) else (
            [] if isinstance(result, cst.RemovalSentinel) else [result])
        waiting = self.orphans.pop(block, [])
        if waiting and nodes:
            first = nodes[0]
            nodes[0] = first.with_changes(leading_lines=[*waiting, *first.leading_lines])
            result = cst.FlattenSentinel(nodes) if len(nodes) > 1 or isinstance(
                result, cst.FlattenSentinel) else nodes[0]
            waiting = []
        if id(original) in self.checked:
            kept = Counter(line.comment.value for node in nodes
                           for line in comment_lines(node) if line.comment)
            for line in comment_lines(original):
                if line.comment and kept[line.comment.value] > 0:
                    kept[line.comment.value] -= 1
                elif line.comment:
                    waiting.append(line)
        if waiting:
            self.orphans[block] = waiting
        return result

    def _wrap(self, original: cst.CSTNode, block: cst.IndentedBlock,
              wraps: list[tuple[cst.CSTNode, cst.CSTNode, Wrapper]]) -> cst.IndentedBlock:
        assert isinstance(original, cst.IndentedBlock)
        body = list(block.body)
        order = list(original.body)
        for first, last, make in wraps:
            span = order[order.index(first): order.index(last) + 1]  # type: ignore[arg-type]
            ids = {id(n) for s in span for n in self.produced.get(id(s), [])}
            where = [i for i, stmt in enumerate(body) if id(stmt) in ids]
            if not where:
                continue
            lo, hi = min(where), max(where)
            new = make(body[lo: hi + 1])
            body[lo: hi + 1] = [new]
            for stmt in span:  # a later, larger wrap of the same block finds them in `new`
                self.produced[id(stmt)] = [new]
        return block.with_changes(body=body)


# -- small builders shared by the transforms ---------------------------------------


def comment_lines(node: cst.CSTNode) -> list[cst.EmptyLine]:
    """The lines that hold only a comment, anywhere inside `node`, in source order."""
    if isinstance(node, cst.EmptyLine):
        return [node] if node.comment is not None else []
    return [line for child in node.children for line in comment_lines(child)]


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def statements(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(code).body)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def guard_rank0(stmt: cst.CSTNode, rank: str) -> cst.If:
    """`if RANK == 0:` around a statement, keeping the comments above it outside."""
    assert isinstance(stmt, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    leading = stmt.leading_lines
    inner = stmt.with_changes(leading_lines=())
    return cst.If(
        test=expression(f"{rank} == 0"),
        body=cst.IndentedBlock(body=[inner]),
        leading_lines=leading,
    )


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, spaced as PEP 8 wants it."""
    no_space = cst.SimpleWhitespace("")
    return cst.Arg(value=value, keyword=cst.Name(name), equal=cst.AssignEqual(no_space, no_space))


def with_commas(args: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last gets a comma (keeping the script's own spacing)."""
    fixed = []
    for i, arg in enumerate(args):
        if i < len(args) - 1 and not isinstance(arg.comma, cst.Comma):
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        fixed.append(arg)
    return fixed


def append_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=with_commas([*call.args, keyword_arg(name, value)]))


def remove_small_statement(plan: Plan, small: cst.CSTNode) -> None:
    """Remove one simple statement (`x = f()`): its whole line when it stands alone there,
    only itself on a line it shares (`x = f(); y = 2`), `pass` in a one-line suite."""
    line = plan.facts.parent.get(small)
    alone = isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and len(
        line.body) == 1
    if alone and isinstance(line, cst.SimpleStatementLine):
        plan.rewrite(line, constant(cst.RemoveFromParent()))
    elif alone:
        plan.rewrite(small, constant(cst.Pass()))
    else:
        plan.rewrite(small, constant(cst.RemoveFromParent()))


def constant(node: Any) -> Rewrite:
    """A rewrite that puts `node` in place of whatever was there."""
    return lambda _old: node
