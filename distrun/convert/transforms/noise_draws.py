"""Noise drawn at every step for a model, made each rank's own (part of the data
transform).

A loop over a sharded DataLoader whose steps also draw values from a module-level
generator and feed them to a training forward pass (a GAN's latent noise: `noise =
torch.randn(batch_size, z_dim)` then `fake = gen(noise)`): every rank starts from the
same generator state (a seed of the script, or torch's fixed default seed), so every rank
would draw the same noise while reading its own data, and a step would see
1/WORLD_SIZE of the distinct noise one process draws. Before the loop the generator is
reseeded from its own next draw plus the rank (as `data.random_draws` does for batches
drawn at random):

    for real, _ in loader:          ->  torch.manual_seed(int(torch.randint(2 ** 62, ())) + RANK)
        noise = torch.randn(bs, z)      for real, _ in loader:
        fake = gen(noise)                   ...

The same for a function or a method of a plain class of the project that draws them
(a diffusion model's `t = diffusion.sample_timesteps(n)`, `x_t, noise =
diffusion.noise_images(x, t)`) called in the loop, its result fed to the forward.

Not exact by nature (random draws differ), the same training in law. Won't: noise drawn in
a Module's method (a layer's own noise: the reparameterisation of a VAE), draws that feed
no training forward pass, generator objects.
"""

from __future__ import annotations

import libcst as cst

from distrun.convert.analysis import Facts
from distrun.convert.context import Context
from distrun.convert.idioms import trains
from distrun.convert.models import find_models
from distrun.convert.transforms.random_draws import VALUES, reseed_before


def reseed_noise(ctx: Context) -> None:
    """Reseed by rank before each training loop whose steps draw a forward's noise."""
    facts = ctx.facts
    models = ctx.models or find_models(facts, ctx.flow)
    forwards = [call for model in models for call in model.forwards]
    found: dict[int, tuple[cst.For | cst.While, list[tuple[str, cst.Call]]]] = {}
    for call in facts.calls:
        name = facts.call_name(call) or ""
        family = next((f for f, names in VALUES.items() if name in names), None)
        loop = next(iter(facts.enclosing_loops(call)), None)
        if loop is None:
            continue
        if family is None and facts.enclosing_class(call) is None:
            drawn = _drawn_by_callee(ctx, call)  # `t = diffusion.sample_timesteps(n)`
            if drawn is not None and _feeds_forward(facts, call, forwards) and trains(
                    facts, loop, flow=ctx.flow):
                found.setdefault(id(loop), (loop, []))[1].append((drawn[0], call))
            continue
        if family is None or facts.enclosing_class(call) is not None:
            continue
        if _feeds_forward(facts, call, forwards) and trains(facts, loop, flow=ctx.flow):
            found.setdefault(id(loop), (loop, []))[1].append((family, call))
    for loop, draws in found.values():
        shown = []
        for family in sorted({f for f, _ in draws}):
            call = min((c for f, c in draws if f == family), key=facts.line)
            if reseed_before(ctx, loop, family):
                shown.append(f"`{facts.code(call.func)}(...)` at line {facts.line(call)}")
        if shown:
            ctx.plan.change(loop, "data.random_draws",
                            f"each step draws values for the model ({', '.join(shown)}) "
                            "from a generator seeded alike on every rank: reseeded by rank "
                            "before the loop, so each rank draws its own (else every rank "
                            "would use the same noise with its own data)")


# What a method of the project may draw a step's values with (a diffusion model's
# timesteps and noise), by generator family.
_METHOD_DRAWS = {
    "torch": (*VALUES["torch"], "torch.randint", "torch.randint_like", "torch.randperm",
              "torch.bernoulli", "torch.multinomial"),
    "numpy": (*VALUES["numpy"], "numpy.random.randint", "numpy.random.choice"),
    "random": (*VALUES["random"], "random.randint", "random.choice", "random.sample"),
}


def _drawn_by_callee(ctx: Context, call: cst.Call) -> tuple[str, cst.Call] | None:
    """(family, draw) when `call` runs a function or method of the project (not of a
    Module or Dataset: those run per sample or as the model) that draws from a
    module-level generator in its own body."""
    found = ctx.flow.callee(call)
    if found is None:
        return None
    func = found[0]
    cls = ctx.facts.enclosing_class(func)
    if cls is not None and any((ctx.facts.qualname(b.value) or "").endswith(
            ("Module", "Dataset")) for b in cls.bases):
        return None
    for inner in ctx.facts.calls_in(func):
        name = ctx.facts.call_name(inner) or ""
        family = next((f for f, names in _METHOD_DRAWS.items() if name in names), None)
        if family is not None and ctx.facts.function(inner) is func:
            return family, inner
    return None


def _feeds_forward(facts: Facts, draw: cst.Call, forwards: list[cst.Call]) -> bool:
    """Is the draw an argument of a training forward pass, or assigned to a name such a
    pass in the same function reads?"""
    if any(facts.inside(draw, fwd) for fwd in forwards):
        return True
    stmt = facts.statement(draw)
    if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], cst.Assign):
        return False
    targets = stmt.body[0].targets
    if len(targets) != 1:
        return False
    names = {n.value for n in _names(targets[0].target)}  # `x_t, noise = f(...)` too
    if not isinstance(targets[0].target, (cst.Name, cst.Tuple)):
        return False
    scope = facts.scope(draw)
    return any(facts.scope(fwd) is scope and any(
        n.value in names for arg in fwd.args for n in _names(arg))
        for fwd in forwards)


def _names(node: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Visit(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name)

    node.visit(Visit())
    return found
