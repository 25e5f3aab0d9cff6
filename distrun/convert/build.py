"""Building code: small constructors of LibCST nodes that every transform uses.

Transforms write the code they add as Python text (`statement("x = 1\\n")`) and let
LibCST parse it, so what is inserted reads like what a person would write; these
helpers also render a node back to text and assemble call arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import libcst as cst

# A rewrite returns the new node, a RemovalSentinel, or a FlattenSentinel of statements.
Rewrite = Callable[[cst.CSTNode], Any]

_EMPTY = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    """The source text of `node` (a node of any tree, original or rewritten)."""
    return _EMPTY.code_for_node(node)


def statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def statements(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(code).body)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def constant(node: Any) -> Rewrite:
    """A rewrite that puts `node` in place of whatever was there."""
    return lambda _old: node


def comment_lines(node: cst.CSTNode) -> list[cst.EmptyLine]:
    """The lines that hold only a comment, anywhere inside `node`, in source order."""
    if isinstance(node, cst.EmptyLine):
        return [node] if node.comment is not None else []
    return [line for child in node.children for line in comment_lines(child)]


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


def with_block(head: str, body: Sequence[cst.BaseStatement]) -> cst.With:
    """`with HEAD:` holding `body`; the comments above its first statement go above it."""
    first = body[0]
    leading = getattr(first, "leading_lines", ())
    inner = [first.with_changes(leading_lines=()), *body[1:]]
    node = cst.ensure_type(statement(f"with {head}:\n    pass\n"), cst.With)
    return node.with_changes(body=cst.IndentedBlock(body=inner), leading_lines=leading)


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


def keep_leading_lines(new: list[cst.BaseStatement]) -> Rewrite:
    """Several statements in place of one, the comments above the old one kept."""
    def rewrite(old: cst.CSTNode) -> cst.FlattenSentinel[cst.BaseStatement]:
        leading = getattr(old, "leading_lines", ())
        return cst.FlattenSentinel([new[0].with_changes(leading_lines=leading), *new[1:]])

    return rewrite
