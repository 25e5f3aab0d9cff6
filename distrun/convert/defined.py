"""A check of the converted text: every name the conversion introduced is defined before
it is used.

A converted script that reads `ddp_model` where no line makes it fails with a NameError
on every rank, after the launch; a name read at the top of the script before the line
that sets it (a notebook cell that runs before the set-up block) fails the same way.
The pipeline runs this check on every module it rewrote and, when it finds such a use,
writes nothing and says so (a converter bug: loud at convert time, not at run time).

What is checked, with `ast` on the output:
  - a name the conversion introduced (RANK, DEVICE, dist, DDP, ddp_model, a fresh
    name...) that is read somewhere and bound nowhere in the module;
  - at module level, statements run in order: such a name read before the statement
    that binds it, directly or in a function of the module called at module level
    (one call deep);
Branches count as binding on every path (a name bound in either branch of an `if` is
taken as bound after it): the check finds what is certainly wrong, not all that may be.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class UndefinedUse:
    line: int  # in the converted text
    name: str
    function: str | None  # the function it is read in, if any


def undefined_uses(source: str, names: Iterable[str]) -> list[UndefinedUse]:
    """The uses of `names` in `source` that no earlier line defines."""
    wanted = set(names)
    tree = ast.parse(source)
    bound = _bound_names(tree)
    found: dict[tuple[int, str], UndefinedUse] = {}
    star = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
               for n in ast.walk(tree))
    for node, function in _loads(tree, None):
        if node.id in wanted and node.id not in bound and not star:
            found.setdefault((node.lineno, node.id), UndefinedUse(node.lineno, node.id,
                                                                    function))
    functions = {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef,
                                                                  ast.AsyncFunctionDef))}
    module_bound: set[str] = set()
    for stmt in tree.body:
        for use in _module_level_uses(stmt, module_bound, wanted & bound, functions):
            found.setdefault((use.line, use.name), use)
    return sorted(found.values(), key=lambda u: (u.line, u.name))


def _module_level_uses(stmt: ast.stmt, bound: set[str], names: set[str],
                       functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
                       ) -> Iterator[UndefinedUse]:
    """Uses of `names` at module level, in the order statements run; `bound` grows."""
    blocks = _blocks(stmt)
    if blocks is not None:
        head, binds, bodies = blocks
        for node in head:
            yield from _reads_now(node, bound, names, functions)
        for node in binds:
            bound |= _bound_names(node, shallow=True)
        before = set(bound)
        after: set[str] = set()
        for body in bodies:
            inner = set(before)
            for child in body:
                yield from _module_level_uses(child, inner, names, functions)
            after |= inner
        bound |= after
        return
    yield from _reads_now(stmt, bound, names, functions)
    bound |= _bound_names(stmt, shallow=True)


def _reads_now(node: ast.AST, bound: set[str], names: set[str],
               functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
               ) -> Iterator[UndefinedUse]:
    """Names of `names` that running `node` at module level reads while unbound: its
    own reads, and those of the module's functions it calls."""
    for load, _ in _loads(node, None, into_functions=False):
        if load.id in names and load.id not in bound:
            yield UndefinedUse(load.lineno, load.id, None)
    for call in (n for n in _walk_now(node) if isinstance(n, ast.Call)):
        func = functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if func is None:
            continue
        local = _bound_names(func) | {a.arg for a in _arguments(func.args)}
        for load, _ in _loads(func, func.name):
            if load.id in names and load.id not in bound and load.id not in local:
                yield UndefinedUse(load.lineno, load.id, func.name)


def _blocks(stmt: ast.stmt
            ) -> tuple[list[ast.AST], list[ast.AST], list[list[ast.stmt]]] | None:
    """A compound statement's parts that run first, what they bind (a loop's target, a
    `with`'s `as`), and its blocks (alternatives: either may run)."""
    if isinstance(stmt, ast.If):
        return [stmt.test], [], [stmt.body, stmt.orelse]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter], [stmt.target], [stmt.body + stmt.orelse]
    if isinstance(stmt, ast.While):
        return [stmt.test], [], [stmt.body + stmt.orelse]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return ([i.context_expr for i in stmt.items],
                [i.optional_vars for i in stmt.items if i.optional_vars is not None],
                [stmt.body])
    if isinstance(stmt, ast.Try):
        return [], [], [stmt.body + stmt.orelse + stmt.finalbody,
                        *[[*h.body] for h in stmt.handlers]]
    return None


def _walk_now(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node` that run when it runs: not the bodies of functions and
    lambdas (their decorators and defaults run)."""
    if isinstance(node, _SCOPES):
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                yield from _walk_now(decorator)
        yield from _arguments_defaults(node.args)
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_now(child)


def _loads(node: ast.AST, function: str | None, into_functions: bool = True
           ) -> Iterator[tuple[ast.Name, str | None]]:
    """Every name read in `node`, with the function it is read in (`function` at the
    top); without `into_functions`, only what runs when `node` runs."""
    if not into_functions:
        for child in _walk_now(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                yield child, function
        return
    todo: list[tuple[ast.AST, str | None]] = [(node, function)]
    while todo:
        current, owner = todo.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
            yield current, owner
        inner = current.name if isinstance(current, (ast.FunctionDef,
                                                     ast.AsyncFunctionDef)) else owner
        todo.extend((child, inner) for child in ast.iter_child_nodes(current))


def _bound_names(node: ast.AST, shallow: bool = False) -> set[str]:
    """Every name `node` binds (with `shallow`, not inside its functions and classes:
    only what binding it at module level binds, the def's or class's own name)."""
    names: set[str] = set()
    nodes = list(_walk_now(node)) if shallow else list(ast.walk(node))
    if shallow and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    for child in nodes:
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            names.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
            if not shallow and not isinstance(child, ast.ClassDef):
                names |= {a.arg for a in _arguments(child.args)}
        elif isinstance(child, ast.Lambda) and not shallow:
            names |= {a.arg for a in _arguments(child.args)}
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in child.names}
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
        elif isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
            names.add(child.name)
        elif isinstance(child, ast.MatchMapping) and child.rest:
            names.add(child.rest)
    return names


def _arguments(args: ast.arguments) -> list[ast.arg]:
    found = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return found + [a for a in (args.vararg, args.kwarg) if a is not None]


def _arguments_defaults(args: ast.arguments) -> Iterator[ast.AST]:
    for default in [*args.defaults, *args.kw_defaults]:
        if default is not None:
            yield from _walk_now(default)
