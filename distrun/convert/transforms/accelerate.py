"""accelerate only: the loaders the model's `prepare` did not take, and the backward pass.

  train_loader = DataLoader(...)  ->  train_loader = accelerator.prepare(DataLoader(...))
      (loaders built before the optimizer, in its scope, are prepared with the model and
       the optimizer instead: see the model transform)
  loss.backward()                 ->  accelerator.backward(loss)   (it scales the loss
                                                                    when mixed precision
                                                                    needs it)

Won't: rewrite `scaler.scale(loss).backward()` or apex's scaled loss (left as they are).
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import dotted
from distrun.convert.build import code_of, expression
from distrun.convert.context import Context, Transform
from distrun.convert.idioms import is_backward


def prepare_remaining_loaders(ctx: Context) -> None:
    acc = ctx.names.accelerator
    for loader in ctx.loaders_to_prepare:
        ctx.plan.rewrite(loader.call, lambda n: expression(f"{acc}.prepare({code_of(n)})"))
        ctx.plan.change(loader.call, "data", f"DataLoader prepared by accelerate "
                        f"({loader.why}): each process reads its own batches, shuffled alike; "
                        "the global batch is batch_size x WORLD_SIZE")
        ctx.plan.shards_batches(loader.call)


def backward_through_accelerator(ctx: Context) -> None:
    facts, acc = ctx.facts, ctx.names.accelerator
    scaled = {dotted(item.asname.name) for c in facts.calls
              if facts.call_name(c) == "apex.amp.scale_loss"
              and isinstance(item := facts.parent.get(c), cst.WithItem) and item.asname}
    for call in facts.calls:
        if not is_backward(call):
            continue
        assert isinstance(call.func, cst.Attribute)
        loss = call.func.value
        if isinstance(loss, cst.Call) or dotted(loss) in {None, *scaled}:
            continue  # scaler.scale(loss).backward() and apex's scaled loss stay as they are

        def rewrite(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            rest = "".join(", " + code_of(a).rstrip(", ") for a in node.args)
            return expression(f"{acc}.backward({code_of(node.func.value)}{rest})")

        ctx.plan.rewrite(call, rewrite)
        ctx.plan.change(call, "backward", f"`{facts.code(loss)}.backward()` -> "
                        f"`{acc}.backward({facts.code(loss)})`")


PREPARE_LOADERS = Transform("accelerate-loaders", prepare_remaining_loaders,
                            lambda options: options.target == "accelerate")
# --amp none leaves backward() as it is: no scaling is needed without mixed precision.
BACKWARD = Transform("accelerate-backward", backward_through_accelerator,
                     lambda options: options.target == "accelerate" and options.amp != "none")
