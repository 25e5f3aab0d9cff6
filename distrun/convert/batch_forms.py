"""The forms of a loss over the whole batch, as code writes them (what the batch_loss
transform looks for):

  the batch with itself   z @ z.T, torch.mm(z, z.t()), z.matmul(z.transpose(0, 1)),
                          torch.einsum("ic,jc->ij", z, z), torch.cdist(z, z), torch.pdist(z),
                          F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2),
                          sim(z[:, None], z[None, :])
  two batches             a @ b.T and the same forms (CLIP's logits, a view against another)
  batch statistics        z.std(0), z.var(dim=0), z - z.mean(0) (centring over the batch)
  a ratio of whole sums   (2 * (p * t).sum() + s) / (p.sum() + t.sum() + s) (a soft Dice,
                          IoU, Tversky over the flattened batch), (l * mask).sum() /
                          mask.sum() (a masked mean): sums over every element, the batch's
                          rows included, in both terms (in a loss function only)
  a name that says so     NT-Xent, InfoNCE, SupCon, SimCLR, MoCo, a CLIP loss, Barlow Twins,
                          VICReg, n-pair

Only transposes of the first two dimensions count (`x @ x.transpose(-2, -1)` on a batch
of sequences compares the tokens of each sample, not the samples).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import Facts, dotted, keyword, positional, string_value
from distrun.convert.build import code_of
from distrun.convert.syntax import walk

# A name that says the loss takes its negatives (or its statistics) from the batch.
IN_BATCH_NAME = re.compile(r"nt_?xent|info_?nce|sup_?con|simclr|moco|clip_?loss|barlow|"
                           r"vicreg|n_?pair_?loss|multiple_?negatives", re.IGNORECASE)
# A function or class whose name says it computes a loss: where the forms are looked for
# outside the training code itself.
LOSS_NAME = re.compile(r"loss|criterion|contrast|nce|xent|triplet|simclr|sup_?con|moco|"
                       r"barlow|vicreg", re.IGNORECASE)

ITSELF = "a similarity of the batch with itself"
TWO = "a similarity of two batches"
STATISTICS = "a statistic over the batch"
RATIO = "a ratio of sums over the whole batch"

_EINSUM = re.compile(r"\s*(\w)(\w)\s*,\s*(\w)(\w)\s*->\s*(\w)(\w)\s*")
_SWAP = ({"0", "1"},)
_WEIGHT = re.compile(r"^self\.|weight|^[wW]$|\.W$|centroid|center|proto|codebook",
                     re.IGNORECASE)


@dataclass(frozen=True)
class Form:
    node: cst.CSTNode
    kind: str


def form_of(facts: Facts, node: cst.CSTNode) -> Form | None:
    """The whole-batch form `node` is, if any."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return _product(node, node.left, node.right)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        func = facts.function(node)
        if func is not None and _whole_sum(facts, node.left, func, 0) and _whole_sum(
                facts, node.right, func, 0):
            return Form(node, RATIO)
        return None
    if not isinstance(node, cst.Call):
        return None
    name = facts.call_name(node) or ""
    args = [a.value for a in positional(node)]
    method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
    if name in ("torch.mm", "torch.matmul") and len(args) == 2:
        return _product(node, args[0], args[1])
    if method in ("mm", "matmul") and len(args) == 1 and isinstance(node.func, cst.Attribute) \
            and not name.startswith("torch."):
        return _product(node, node.func.value, args[0])
    if name == "torch.einsum" and len(args) == 3:
        return _einsum(node, args)
    if name == "torch.cdist" and len(args) >= 2:
        return Form(node, ITSELF if _same(args[0], args[1]) else TWO)
    if name == "torch.pdist" and args:
        return Form(node, ITSELF)
    if len(args) >= 2:
        pair = _pairwise(args[0], args[1])
        if pair is not None:
            return Form(node, ITSELF if _same(*pair) else TWO)
    return _statistic(facts, node, name, method, args)


def _product(node: cst.CSTNode, left: cst.BaseExpression, right: cst.BaseExpression
             ) -> Form | None:
    """`left @ right` where `right` is a transposed batch."""
    base = _transposed(right)
    if base is None:
        return None
    if _same(left, base):
        return Form(node, ITSELF)
    if _WEIGHT.search(code_of(left)) or _WEIGHT.search(code_of(base)):
        return None  # a layer written by hand: `x @ self.weight.T`
    return Form(node, TWO)


def _transposed(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x.T`, `x.t()`, `x.transpose(0, 1)`, `x.permute(1, 0)`, `torch.t(x)` -> `x`."""
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT"):
        return expr.value
    if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
        return None
    args = [code_of(a.value) for a in positional(expr)]
    attr, owner = expr.func.attr.value, expr.func.value
    if code_of(owner) == "torch" and expr.args:  # torch.t(x), torch.transpose(x, 0, 1)
        first = expr.args[0].value
        if attr == "t" or (attr == "transpose" and set(args[1:]) in _SWAP):
            return first
        return None
    if attr == "t" and not args:
        return owner
    if attr in ("transpose", "permute") and set(args) in _SWAP and len(args) == 2:
        return owner
    return None


def _pairwise(a: cst.BaseExpression, b: cst.BaseExpression
              ) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """`x.unsqueeze(1), y.unsqueeze(0)` (or `x[:, None], y[None, :]`): every row of `x`
    against every row of `y`."""
    ka, kb = _expanded(a), _expanded(b)
    if ka is None or kb is None or ka[1] == kb[1]:
        return None
    return ka[0], kb[0]


def _expanded(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, int] | None:
    """`x.unsqueeze(d)` / `x[:, None]` / `x[None]` -> (x, d) for d in 0, 1."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value == "unsqueeze" and len(expr.args) == 1:
        dim = code_of(expr.args[0].value)
        return (expr.func.value, int(dim)) if dim in ("0", "1") else None
    if isinstance(expr, cst.Subscript) and expr.slice:
        first = expr.slice[0].slice
        if isinstance(first, cst.Index) and code_of(first.value) == "None":
            return expr.value, 0
        second = expr.slice[1].slice if len(expr.slice) > 1 else None
        if isinstance(first, cst.Slice) and isinstance(second, cst.Index) \
                and code_of(second.value) == "None":
            return expr.value, 1
    return None


def _einsum(node: cst.Call, args: list[cst.BaseExpression]) -> Form | None:
    """`torch.einsum("ic,jc->ij", a, b)`: every row of `a` against every row of `b`."""
    spec = string_value(args[0])
    found = _EINSUM.fullmatch(spec) if spec is not None else None
    if found is None:
        return None
    i, c, j, c2, out_i, out_j = found.groups()
    if c != c2 or i == j or (out_i, out_j) != (i, j):
        return None
    return Form(node, ITSELF if _same(args[1], args[2]) else TWO)


def _statistic(facts: Facts, node: cst.Call, name: str, method: str | None,
               args: list[cst.BaseExpression]) -> Form | None:
    """`z.std(0)`, `torch.var(z, dim=0)`, `z - z.mean(0)`: a statistic over the rows."""
    over_rows = (args[-1:] and code_of(args[-1]) == "0") if name.startswith("torch.") \
        else (args[:1] and code_of(args[0]) == "0")
    dim = keyword(node, "dim")
    if not over_rows and not (dim is not None and code_of(dim.value) == "0"):
        return None
    kind = name.rsplit(".", 1)[-1] if name.startswith("torch.") else method
    if name.startswith("torch.") and name not in ("torch.std", "torch.var", "torch.mean"):
        return None
    if kind in ("std", "var"):
        return Form(node, STATISTICS)
    parent = facts.parent.get(node)
    if kind == "mean" and isinstance(parent, cst.BinaryOperation) \
            and isinstance(parent.operator, cst.Subtract) and parent.right is node:
        return Form(node, STATISTICS)  # centring; a mean alone averages as DDP does
    return None


def _whole_sum(facts: Facts, expr: cst.BaseExpression, func: cst.FunctionDef, depth: int
               ) -> bool:
    """Does `expr` hold a sum over every element (`x.sum()`, `torch.sum(x)`, no dim), also
    through a name `func` binds to one (`intersection = (p * t).sum()`)?"""
    for node in walk(expr):
        if isinstance(node, cst.Call) and not any(a.keyword is not None for a in node.args):
            name = facts.call_name(node) or ""
            summed = node.func.value if isinstance(node.func, cst.Attribute) and \
                node.func.attr.value == "sum" and not node.args and not name.startswith(
                    "torch.") else node.args[0].value if name == "torch.sum" and len(
                        node.args) == 1 else None
            if summed is not None and not any(  # (a sum of the module's own weights: no)
                    isinstance(n, cst.Attribute) and dotted(n.value) == "self"
                    for n in walk(summed)):
                return True
        if isinstance(node, cst.Name) and depth < 3:
            if any(_whole_sum(facts, assign.value, func, depth + 1)
                   for assign in facts.assigned(func, node.value)):
                return True
    return False


def _same(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    return code_of(a) == code_of(b)
