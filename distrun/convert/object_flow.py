"""Where objects go: which names, attributes and parameters denote the same object.

A small alias analysis over the whole project, blind to order (what any assignment
makes equal stays equal). Its unit is a `Place`: a name in the function or module that
binds it, or an attribute of the instances of a class (`self.model` in any method of
`Trainer` or of the classes it derives from). Two places are joined when:

  x = y, x = y.to(dev), x = y.cuda(), x = nn.DataParallel(y)     (the same object)
  f(y) / Trainer(y) / obj.method(y) / super().__init__(y)         (argument -> parameter)
  Trainer(model=y) ... kwargs["model"], self.__dict__.update(kwargs)   (keywords.py)
  return y  ...  x = f()   and   return a, b  ...  x, z = f()     (through returns)
  t = Trainer(...) ... t.model                                    (an instance's attribute)

`component(place)` is every place that may hold the same object. The model transform
uses it to find every forward call of a model, wherever the model went.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from distrun.convert.analysis import Facts, dotted, positional
from distrun.convert.bindings import function_locals, self_name
from distrun.convert.idioms import DATA_PARALLEL, method_name
from distrun.convert.keywords import (
    forwarded,
    keyword_read,
    keywords_passed,
    spread_onto_self,
)

RETURN = "<return>"
_CONSTANTS = frozenset({"None", "True", "False", "NotImplemented", "Ellipsis"})
_SAME_OBJECT = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train",
                          "eval", "requires_grad_", "share_memory", "type", "xpu", "mps"})  # ->self
_WRAPPERS = DATA_PARALLEL | {"torch.nn.parallel.DistributedDataParallel",
                             "torch.nn.parallel.distributed.DistributedDataParallel"}
_ROUNDS = 4
_RETURNS_ARGS = frozenset({"apex.amp.initialize"})  # calls returning their arguments, in order


@dataclass(frozen=True)
class Place:
    scope: cst.CSTNode  # FunctionDef (locals, parameters, returns), Module, or ClassDef
    code: str  # "model", "self.model", "trainer.model", "<return>", "<return>.1"

    def __repr__(self) -> str:
        name = getattr(getattr(self.scope, "name", None), "value", "<module>")
        return f"Place({name}:{self.code})"


class Flow:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self._up: dict[Place, Place] = {}
        self._locals = function_locals(facts)
        self._instances: dict[Place, set[cst.ClassDef]] = {}
        self._members: dict[Place, set[Place]] | None = None
        self._bindings: dict[Place, list[cst.BaseExpression]] = {}
        self._sites: dict[int, list[tuple[cst.Call, bool]]] | None = None
        self._spreads: dict[int, cst.Call | None] = {}  # keywords.spread_onto_self
        for _ in range(_ROUNDS):
            before = len(self._up)
            self._join_all()
            self._instances = self._find_instances()
            self._join_instance_attributes()
            if len(self._up) == before:
                break

    # -- questions -------------------------------------------------------------------

    def place_of(self, expr: cst.CSTNode) -> Place | None:
        """The place a name or attribute chain (`model`, `self.net`, `t.model`) reads."""
        code = dotted(expr) if isinstance(expr, cst.BaseExpression) else None
        if code is None or code in _CONSTANTS:
            return None  # `self.model = None` and `self.loss = None` hold no common object
        head, dot, rest = code.partition(".")
        func = self.facts.function(expr)
        if func is not None and head == self_name(self.facts, func):
            cls = self.facts.enclosing_class(func)
            if cls is not None:
                return Place(self.family(cls), f"self{dot}{rest}")
        return Place(self._binding_scope(head, expr), code)

    def root(self, place: Place) -> Place:
        while place in self._up:
            place = self._up[place]
        return place

    def same(self, a: Place | None, b: Place | None) -> bool:
        return a is not None and b is not None and self.root(a) == self.root(b)

    def component(self, place: Place) -> set[Place]:
        if self._members is None:
            members: dict[Place, set[Place]] = {}
            for p in self._up:
                members.setdefault(self.root(p), set()).add(p)
            for root, group in members.items():
                group.add(root)
            self._members = members
        root = self.root(place)
        return self._members.get(root, {root})

    def places(self) -> set[Place]:
        return {*self._up, *self._up.values()}

    def bindings(self, place: Place) -> list[cst.BaseExpression]:
        """The assignment targets that set exactly this place (or the call that copies
        a method's `**kwargs` onto `self`: see `keywords.spread_onto_self`)."""
        return self._bindings.get(place, [])

    def placeholder(self, target: cst.BaseExpression) -> bool:
        """Does this assignment target get a value no model can be (`self.model = None`
        in `__init__`, a number, a string), a placeholder until the model is built?"""
        assign = self.facts.parent.get(self.facts.parent.get(target, target))
        value = assign.value if isinstance(assign, (cst.Assign, cst.AnnAssign)) else None
        return isinstance(value, (cst.BaseNumber, cst.BaseString)) or (
            isinstance(value, cst.Name) and value.value in _CONSTANTS)

    def call_sites(self, func: cst.FunctionDef) -> list[tuple[cst.Call, bool]]:
        """Every call of `func` in the project, also as a method of an instance."""
        if self._sites is None:
            sites: dict[int, list[tuple[cst.Call, bool]]] = {}
            for call in self.facts.calls:
                found = self.callee(call)
                if found is not None:
                    sites.setdefault(id(found[0]), []).append((call, found[1]))
            self._sites = sites
        return list(self._sites.get(id(func), []))

    def instances(self, place: Place) -> set[cst.ClassDef]:
        """The project's classes whose instances may be held at `place`."""
        return self._instances.get(self.root(place), set())

    def family(self, cls: cst.ClassDef) -> cst.ClassDef:
        """The top-most of the project's classes `cls` derives from (attributes set by
        any class of the family are one place)."""
        seen = {id(cls)}
        while True:
            base = self.base_class(cls)
            if base is None or id(base) in seen:
                return cls
            seen.add(id(base))
            cls = base

    def base_class(self, cls: cst.ClassDef) -> cst.ClassDef | None:
        for base in cls.bases:
            found = self._class_named(base.value)
            if found is not None:
                return found
        return None

    def method(self, cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        """`name` defined in `cls` or in the project's classes it derives from."""
        seen: set[int] = set()
        current: cst.ClassDef | None = cls
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            found = self.facts.method(current, name)
            if found is not None:
                return found
            current = self.base_class(current)
        return None

    def forward_of(self, call: cst.Call) -> cst.FunctionDef | None:
        """The `forward` a call of a module object of the project runs (`maml(x, y)`), or
        the `__call__` of a callable object (the Annotated Transformer's loss_compute)."""
        if not isinstance(call.func, (cst.Name, cst.Attribute)):
            return None
        place = self.place_of(call.func)
        for cls in sorted(self.instances(place) if place is not None else (),
                          key=lambda c: (self.facts.line(c), c.name.value)):
            method = self.method(cls, "forward") or self.method(cls, "__call__")
            if method is not None:
                return method
        return None

    def callee(self, call: cst.Call) -> tuple[cst.FunctionDef, bool] | None:
        """The project's function or method `call` runs: also `obj.method()` on an
        instance of the project's classes and `super().method()`."""
        found = self.facts.callee(call)
        if found is not None:
            return found
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        if isinstance(func.value, cst.Call) and dotted(func.value.func) == "super":
            cls = self.facts.enclosing_class(call)
            base = self.base_class(cls) if cls is not None else None
            method = self.method(base, func.attr.value) if base is not None else None
            return (method, True) if method is not None else None
        if isinstance(func.value, cst.Call):  # `Trainer(...).fit()`
            made = self.facts.local_definition(func.value)
            method = self.method(made, func.attr.value) if isinstance(made, cst.ClassDef) \
                else None
            return (method, True) if method is not None else None
        place = self.place_of(func.value)
        own = self.facts.enclosing_class(call)
        # the caller's own class first, then the others in the order of the source (a set
        # of nodes iterates in the order of their addresses: a run-dependent choice)
        for cls in sorted(self.instances(place) if place is not None else (), key=lambda c: (
                c is not own, self.facts.modules.index(self.facts.module_of(c)),
                self.facts.line(c))):
            method = self.method(cls, func.attr.value)
            if method is not None:
                return method, True
        return None

    # -- building ----------------------------------------------------------------------

    def _join(self, a: Place | None, b: Place | None) -> None:
        if a is None or b is None:
            return
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self._up[ra] = rb

    def _join_all(self) -> None:
        facts = self.facts
        for assign in facts.assigns:
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) \
                else [assign.target]
            assert assign.value is not None
            for target in targets:
                self._join_assignment(target, assign.value)
        for call in facts.calls:
            found = self.callee(call)
            if found is None:
                continue
            func, is_method = found
            params = facts.params(func, is_method)
            for i, arg in enumerate(positional(call)):
                if i < len(params):
                    self._join(Place(func, params[i]), self._value_place(arg.value))
            outer = facts.function(call)  # `super().__init__(**kwargs)`
            for param in forwarded(facts, call, func, is_method):
                assert outer is not None
                self._join(Place(func, param), Place(outer, param))
            if id(func) not in self._spreads:
                self._spreads[id(func)] = spread_onto_self(facts, func)
            spread = self._spreads[id(func)]
            cls = facts.enclosing_class(func)
            for key, value in keywords_passed(facts, call):
                self._join(Place(func, key), self._value_place(value))
                if spread is not None and cls is not None:  # `self.__dict__.update(kwargs)`
                    attr = Place(self.family(cls), f"self.{key}")
                    self._join(attr, self._value_place(value))
                    if spread not in self._bindings.setdefault(attr, []):
                        self._bindings[attr].append(spread)  # where `self.<key>` is set
            if is_method and isinstance(call.func, cst.Attribute):
                cls = facts.enclosing_class(func)
                if cls is not None and not isinstance(call.func.value, cst.Call):
                    self._join(Place(self.family(cls), "self"), self.place_of(call.func.value))
        for ret in facts.returns:
            home = facts.function(ret)
            if home is None or ret.value is None:
                continue
            if isinstance(ret.value, cst.Tuple):
                for i, element in enumerate(ret.value.elements):
                    self._join(Place(home, f"{RETURN}.{i}"), self._value_place(element.value))
            else:
                self._join(Place(home, RETURN), self._value_place(ret.value))

    def _join_assignment(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(elements):
                for t, v in zip(elements, value.elements, strict=True):
                    self._join_assignment(t, v.value)
            elif isinstance(value, cst.Call) and self.facts.call_name(value) in _RETURNS_ARGS:
                for t, arg in zip(elements, positional(value), strict=False):
                    self._join(self._bind(t), self._value_place(arg.value))
            elif isinstance(value, cst.Call) and (found := self.callee(value)) is not None:
                for i, t in enumerate(elements):
                    self._join(self._bind(t), Place(found[0], f"{RETURN}.{i}"))
            else:
                for t in elements:
                    self._bind(t)
            return
        if isinstance(value, cst.IfExp):  # `raw = model.module if wrapped else model`
            place = self._bind(target)
            self._join(place, self._value_place(value.body))
            self._join(place, self._value_place(value.orelse))
            return
        self._join(self._bind(target), self._value_place(value))

    def _bind(self, target: cst.BaseExpression) -> Place | None:
        """The place an assignment target sets (remembered for `bindings`)."""
        place = self.place_of(target)
        if place is not None:
            bound = self._bindings.setdefault(place, [])
            if target not in bound:
                bound.append(target)
        return place

    def _value_place(self, value: cst.BaseExpression) -> Place | None:
        """The place whose object `value` is: a name or attribute (through `.to(...)`,
        `.cuda()`, DataParallel...), or what a function of the project returns."""
        value = self.strip(value)
        key = keyword_read(self.facts, value)
        if key is not None:  # `kwargs["model"]`: what the callers pass as `model=`
            func = self.facts.function(value)
            assert func is not None
            return Place(func, key)
        if isinstance(value, cst.Call):
            if isinstance(self.facts.local_definition(value), cst.ClassDef):
                return None  # a new instance: see _find_instances
            found = self.callee(value)
            return Place(found[0], RETURN) if found is not None else None
        return self.place_of(value)

    def strip(self, value: cst.BaseExpression) -> cst.BaseExpression:
        """`m.to(dev).train()`, `nn.DataParallel(m)` -> `m` (the same module)."""
        while isinstance(value, cst.Call):
            if method_name(value) in _SAME_OBJECT and isinstance(value.func, cst.Attribute):
                value = value.func.value
            elif self.facts.call_name(value) in _WRAPPERS | _RETURNS_ARGS and positional(value):
                value = positional(value)[0].value
            else:
                break
        return value

    def _find_instances(self) -> dict[Place, set[cst.ClassDef]]:
        """Where new instances of the project's classes go: `x = Cls(...)`, `return
        Cls(...)` (what calls of the function return), `f(Cls(...))` (f's parameter)."""
        found: dict[Place, set[cst.ClassDef]] = {}
        for call in self.facts.calls:
            cls = self.facts.local_definition(call)
            if isinstance(cls, cst.ClassDef):
                for place in self._instance_places(call):
                    found.setdefault(self.root(place), set()).add(cls)
        for cls in self.facts.classes():  # `self` in a class's methods: its instances
            found.setdefault(self.root(Place(self.family(cls), "self")), set()).add(cls)
        for call in self.facts.calls:  # `v_net = copy.deepcopy(net)`: of net's classes
            src = self.place_of(call.args[0].value) if call.args and self.facts.call_name(
                call) == "copy.deepcopy" else None
            classes = found.get(self.root(src), set()) if src is not None else set()
            for place in self._instance_places(call) if classes else []:
                found.setdefault(self.root(place), set()).update(classes)
        return found

    def _instance_places(self, made: cst.Call) -> list[Place]:
        node: cst.CSTNode = made
        for up in self.facts.ancestors(made):  # `Cls(...).to(dev)`, `nn.DataParallel(Cls())`
            if isinstance(up, cst.Call) and self.strip(up) is made:
                node = up
            elif not isinstance(up, (cst.Attribute, cst.Arg)):
                break
        parent = self.facts.parent.get(node)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) \
                else [parent.target]
            return [p for t in targets if (p := self.place_of(t)) is not None]
        home = self.facts.function(node)
        if isinstance(parent, cst.Return) and home is not None:
            return [Place(home, RETURN)]
        site = self.facts.parent.get(parent) if isinstance(parent, cst.Arg) else None
        found = self.callee(site) if isinstance(site, cst.Call) else None
        if found is None:
            return []
        assert isinstance(site, cst.Call) and isinstance(parent, cst.Arg)
        if parent.keyword is not None:
            return [Place(found[0], parent.keyword.value)]
        params = self.facts.params(*found)
        at = next((i for i, a in enumerate(positional(site)) if a is parent), len(params))
        return [Place(found[0], params[at])] if at < len(params) else []

    def _join_instance_attributes(self) -> None:
        """`t.model` where `t` holds a Trainer: the Trainer's `self.model`."""
        for node in self.facts.attributes:
            place = self.place_of(node)
            if place is None or "." not in place.code:
                continue
            prefix, _, attr = place.code.rpartition(".")
            for cls in self.instances(Place(place.scope, prefix)):
                self._join(place, Place(self.family(cls), f"self.{attr}"))

    def _binding_scope(self, name: str, node: cst.CSTNode) -> cst.CSTNode:
        for anc in self.facts.ancestors(node):
            if isinstance(anc, cst.FunctionDef) and name in self._locals.get(anc, set()):
                return anc
        return self.facts.module_of(node).module

    def _class_named(self, expr: cst.BaseExpression) -> cst.ClassDef | None:
        name = dotted(expr)
        if name is None:
            return None
        info = self.facts.module_of(expr)
        if name in info.classes:
            return info.classes[name]
        qualified = self.facts.qualname(expr)
        found = self.facts.definition(qualified) if qualified and "." in qualified else None
        if found is None:
            for star in info.star_imports:
                found = self.facts.definition(f"{star}.{name}")
                if found is not None:
                    break
        return found if isinstance(found, cst.ClassDef) else None
