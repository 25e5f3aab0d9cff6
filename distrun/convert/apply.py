"""Applying the plan: one pass over the tree that performs every recorded edit.

Only the paths from the root to edited nodes are walked, so untouched code keeps its
comments, blank lines and format exactly. A comment line that a rewrite would drop
(the statement it sat above was removed or replaced) moves above the next statement
of its block: no conversion loses a comment line.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import libcst as cst

from distrun.convert.analysis import ModuleInfo
from distrun.convert.build import code_of, comment_lines, statement
from distrun.convert.edits import Plan, Wrapper


def apply(plan: Plan, info: ModuleInfo) -> cst.Module:
    """The module of `info` with every edit of `plan` made to it."""
    hot: set[int] = set()
    hoisted = [expr for pending in plan.hoists.values() for expr, _, _ in pending]
    for node in [*plan.replace, *plan.before, *plan.after, *plan.wraps, *plan.hoists, *hoisted]:
        hot.add(id(node))
        hot.update(id(a) for a in plan.facts.ancestors(node))
    # Statements whose comment lines a rewrite could drop: those rewritten, and those
    # holding a rewritten expression.
    checked = {id(node if isinstance(node, cst.BaseStatement) else
                  plan.facts.statement(node)) for node in plan.replace}
    module = info.module
    # A form feed in the indentation resets Python's column count, so a block nested
    # with it can come out inconsistent (TabError): blocks the converter adds are
    # indented with what follows the last form feed; the script's own keep theirs.
    pinned = module.default_indent if "\f" in module.default_indent else None
    result = module.visit(_Applier(plan, hot, checked, pinned))
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
        # hoisted expression -> its name, and (once left) the expression as rewritten
        self.hoisted = {id(expr): name for pending in plan.hoists.values()
                        for expr, name, _ in pending}
        self.taken: dict[int, cst.CSTNode] = {}
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
        if id(original_node) in self.hoisted:  # computed before its statement: its name
            self.taken[id(original_node)] = node
            return cst.Name(self.hoisted[id(original_node)])
        if isinstance(node, cst.FlattenSentinel):  # a rewrite into several statements
            nodes = [*self._before(original_node), *node.nodes,
                     *self.plan.after.get(original_node, [])]
            flat = cst.FlattenSentinel(nodes)
            if isinstance(original_node, cst.BaseStatement):
                flat = self._keep_comment_lines(original_node, flat)
            self.produced[id(original_node)] = list(flat.nodes)
            return flat
        wraps = self.plan.wraps.get(original_node)
        if wraps and isinstance(node, (cst.IndentedBlock, cst.Module)):
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
        before = self._before(original_node)
        after = self.plan.after.get(original_node, [])
        result: cst.CSTNode | cst.FlattenSentinel[cst.CSTNode] = node
        if before or after:
            kept: list[cst.CSTNode] = [node] if isinstance(node, cst.BaseStatement) else []
            if before and kept and id(original_node) in self.plan.leads:
                lines = getattr(node, "leading_lines", ())
                before = [before[0].with_changes(leading_lines=lines), *before[1:]]
                kept = [node.with_changes(leading_lines=())]
            result = cst.FlattenSentinel([*before, *kept, *after])
        if isinstance(original_node, cst.BaseStatement):
            result = self._keep_comment_lines(original_node, result)
            self.produced[id(original_node)] = (
                list(result.nodes) if isinstance(result, cst.FlattenSentinel) else [result])
        return result

    def _before(self, original: cst.CSTNode) -> list[cst.BaseStatement]:
        """What goes before the statement `original`: the plan's statements, then the
        expressions hoisted out of it (left already, as the statement's children)."""
        hoisted = [statement(f"{name} = {code_of(self.taken.pop(id(expr)))}"
                             f"{'  # ' + comment if comment else ''}\n")
                   for expr, name, comment in self.plan.hoists.get(original, ())]
        return [*self.plan.before.get(original, []), *hoisted]

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

    def _wrap(self, original: cst.CSTNode, block: cst.IndentedBlock | cst.Module,
              wraps: list[tuple[cst.CSTNode, cst.CSTNode, Wrapper]],
              ) -> cst.IndentedBlock | cst.Module:
        assert isinstance(original, (cst.IndentedBlock, cst.Module))
        body: list[Any] = list(block.body)
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
