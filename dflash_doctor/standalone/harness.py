"""Child side of the behaviour sandbox: run as ``python -I -S harness.py``.

Stdlib only; the tool imports it only for ``SAFE_BUILTIN_NAMES``. Reads JSON
requests on stdin, one a line, and prints one JSON answer line for each on
stdout, until stdin ends (session.py is the other side). Each request runs in
fresh globals; the boundary goes up once, when the first request has arrived:

    request  {"id": str, "globals": {name: spec}, "program": [{"name", "source"}],
              "data": {name: json}, "calls": [call], "call_timeout_s": float}
    call     {"id": str, "expr": str, "bind": {name: spec}}
    step     {"id": the request's, "step": n}   before each step: 0 the stubs, then
                                                each program statement, then each call
    answer   {"id": the request's, "results": {id: outcome}}
    outcome  {"value": json} | {"error": {"type", "message"}} | {"gap": str}
             | {"missing_key": str} | {"timeout": true}
             | {"gap": str, "needs": [module, name or null]}   a definition of the
                                      tree looked up by its module's name, not sent yet

The program holds functions taken out of an engine's tree. It runs with a small
set of builtins (no open, no eval, no real import) under CPU, memory and file
size limits. The built-ins the harness serves itself (getattr, hasattr,
setattr, __import__) present themselves as the real ones (``disguised``). Each
step has a timer here, which the tree's code can block: the deadline that
holds is the parent's, which kills the child when a step it announced runs
past it. Stubs are described by ``spec``:

    plain JSON               itself, with dict values read as specs
    {"$data": name}          a deep copy of request data (never read as specs)
    {"$obj": label, "data": name}     attributes from request data; a missing
                                      attribute raises AttributeError (a config);
                                      those its "__unknown__" key names are gaps;
                                      the methods its "itself" lists return it
    {"$obj": label, "attrs": {..}}    attributes from specs; a missing one is a gap
    {"$class": label, "body": src, "attrs": {..}}  an instance of a class whose
                                      methods are ``src``; missing attributes are gaps
                                      (with "loose": true, stand-ins: deployment state)
    {"$gap": label}          anything done with it is a gap: running the code cannot know
    {"$returns": spec}       a function returning the spec (any arguments)
    {"$noop": label}         every attribute is a function doing nothing (a logger)
    {"$unset_env": label}    an ``os`` whose environment is empty (anything else is a gap)
    {"$standin": path, "assume": {path: value}, "record": [path]}
                             a permissive stand-in for a name outside the extracted code
    {"$holder": path, "assume": {path: value}, "count": n}
                             a target model while its capture hook runs: sets and calls recorded
    {"$records": true}       a function taking the calls recorded so far
    {"$module_class": true}  ``f(name, body)``: a class with that body on a Module base
    {"$tree_modules": {module: {name: program name | null} | null}, "package": name}
                             what was sent of the tree's modules (importlib.import_module)
    {"$omitted": true}       ``f(why)``: a class attribute whose reading is a gap
    {"$foreign_base": true}  ``f(label)``: a base class from outside the copied code
    {"$copied_meta": true}   the metaclass of classes copied by name (CopiedMeta)
    {"$lazy_method": true}   ``f(module, "Class.method")``: a method not sent yet

A gap is raised as a BaseException, so no ``except Exception`` in the
inspected code can swallow it and take another path.

One file past ~400 lines on purpose: the child is sent as one self-contained
text (sandbox.BOOTSTRAP loads it by name, locally and over ssh), and the stubs
and the request loop share its state (RECORDS, COMPILED, the timer); a split
would be a third module text to ship and a second import path in the parent.
"""

import functools
import itertools
import json
import signal
import sys
from abc import ABCMeta

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations are strings: this runs on Pythons whose typing lacks these
    from collections.abc import Callable, Iterable, Sequence
    from inspect import Signature
    from types import CodeType, ModuleType
    from typing import Any, NoReturn

    JSON = dict[str, Any]  # a request, a call or an outcome: JSON to or from the parent
    Namespace = dict[str, Any]  # the globals the program runs in

SAFE_BUILTIN_NAMES = (
    "abs all any bool callable dict divmod enumerate filter float frozenset getattr hasattr "
    "int isinstance issubclass iter len list map max min next range repr reversed round set "
    "setattr slice sorted str sum tuple type zip property staticmethod classmethod object "
    "Exception ValueError TypeError KeyError IndexError AttributeError NotImplementedError "
    "RuntimeError AssertionError ZeroDivisionError StopIteration LookupError ArithmeticError"
).split()


class ProbeGap(BaseException):
    """The code touched something running it here cannot know. Each one raised
    during a call is remembered: tree code that catches it (a bare ``except``)
    would take a branch chosen by the stand-in, so the call's answer is the gap."""

    def __init__(self, *args: object) -> None:
        BaseException.__init__(self, *args)
        RAISED.append(self)


RAISED: "list[ProbeGap]" = []  # the gaps raised during the current call


class NeedsDefinition(ProbeGap):
    """The code looked up a module of the tree (``name`` None) or a name in it by the
    module's name (``importlib.import_module``) that the parent has not sent yet: the
    parent adds it and runs the call again."""

    def __init__(self, module: str, name: "str | None" = None) -> None:
        ProbeGap.__init__(self, "%s%s, looked up by name" % (module, "" if name is None else "." + name))
        self.needs = [module, name]


# What the parent has sent of the tree's modules: module -> {name: program name, or None
# when the module does not define it}, None when there is no such module, or why it
# could not be read.
TREE_MODULES: "JSON" = {}
TREE_PACKAGE: "list[str | None]" = [None]
NAMESPACE: "list[Namespace]" = [{}]  # the current request's globals (a module's names are program names)


class TreeModule:
    """A module of the tree, imported by its name: each name read from it is the
    copied definition the parent sent."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> object:
        module = object.__getattribute__(self, "_name")
        if attr.startswith("__"):
            raise ProbeGap("%s.%s (a dunder of a module)" % (module, attr))
        entries = TREE_MODULES.get(module) or {}
        if attr not in entries:
            raise NeedsDefinition(module, attr)
        if entries[attr] is None:
            raise AttributeError("module %r has no attribute %r" % (module, attr))
        return NAMESPACE[0][entries[attr]]


def import_module(name: object, package: object = None) -> TreeModule:
    """``importlib.import_module`` for modules of the tree (anything else is a gap)."""
    if package is not None or not isinstance(name, str) or name.startswith("."):
        raise ProbeGap("a relative import by name")
    if not all(part.isidentifier() for part in name.split(".")):
        raise ModuleNotFoundError("No module named %r" % name)  # as Python: no module has such a name
    if TREE_PACKAGE[0] is None or name.split(".")[0] != TREE_PACKAGE[0]:
        raise ProbeGap("the module %s, imported by name" % name)
    if name not in TREE_MODULES:
        raise NeedsDefinition(name)
    if TREE_MODULES[name] is None:
        raise ModuleNotFoundError("No module named %r" % name)
    if isinstance(TREE_MODULES[name], str):  # it could not be read (not sent by the collector)
        raise ProbeGap(TREE_MODULES[name])
    return TreeModule(name)


def lazy_method(module: str, qualname: str) -> object:
    """A method of a copied class that the parent has not sent: reaching it asks for the class's methods."""

    class Lazy(object):
        def __get__(self, instance: object, owner: object = None) -> "NoReturn":
            raise NeedsDefinition(module, qualname)

        def __call__(self, *args: object, **kwargs: object) -> "NoReturn":
            raise NeedsDefinition(module, qualname)

    return Lazy()


def omitted(why: str) -> object:
    """A class attribute that could not be copied: reading it is a gap."""

    class Omitted(object):
        def __get__(self, instance: object, owner: object = None) -> "NoReturn":
            raise ProbeGap(why)

    return Omitted()


def signature_of(inspect: "ModuleType") -> "Callable[[Callable[..., Any]], Signature]":
    def signature(function: "Callable[..., Any]") -> "Signature":
        """``inspect.signature`` of copied code; of anything else, a gap."""
        if isinstance(function, (Gap, StandIn)):
            raise ProbeGap("the signature of %r" % (function,))
        return inspect.signature(function)

    return signature


# Branches an unknown value decides: the call is run once per way the branches can go
# (False first), and answers only when every way gives the same outcome.
MAX_PATHS = 8
FORCED: "list[bool]" = []  # the choices this run of the call must take, in order
CALLING = [False]  # whether a call runs (decisions are explored) or definitions are made
TAKEN: "list[tuple[str, bool]]" = []  # (label, choice) of every branch an unknown value decided in this run


def decide(label: str) -> bool:
    """The truth of an unknown value that decides a branch, for this run of the call
    (while the program's definitions are made, such a branch is a gap)."""
    if not CALLING[0]:
        raise ProbeGap("%s decides a branch" % label)
    for taken_label, choice in TAKEN:  # the same unknown value reads the same within one run
        if taken_label == label:
            return choice
    index = len(TAKEN)
    if index >= 2 * MAX_PATHS:
        raise ProbeGap("%s decides too many branches" % label)
    choice = FORCED[index] if index < len(FORCED) else False
    TAKEN.append((label, choice))
    return choice


class CallTimeout(BaseException):
    pass


class MissingConfigKey(AttributeError):
    def __init__(self, label: str, key: str) -> None:
        AttributeError.__init__(self, "%r object has no attribute %r" % (label, key))
        self.key = key


def _raise_gap(self: object, *args: object, **kwargs: object) -> "NoReturn":
    raise ProbeGap(object.__getattribute__(self, "_label"))


class Gap:
    """Stands for something running the code cannot know: any use of it is a gap."""

    def __init__(self, label: str) -> None:
        object.__setattr__(self, "_label", label)

    __getattr__ = _raise_gap


def _gap_truth(self: object) -> bool:
    return decide(object.__getattribute__(self, "_label"))


class CopiedMeta(ABCMeta):
    """The class of a class copied from the tree by name. Building one runs its
    ``__init__``; where that reads what running the code cannot know, the result is
    the record of which class was built (as for a class imported inside the code),
    which can be returned but not used."""

    def __call__(cls, *args: object, **kwargs: object) -> object:
        raised = len(RAISED)
        try:
            return ABCMeta.__call__(cls, *args, **kwargs)
        except NeedsDefinition:
            raise  # a definition not sent yet: the parent sends it and the constructor runs again
        except ProbeGap:
            del RAISED[raised:]  # the constructor's own unknowns: the answer is the class built
            return Constructed(cls.__dict__.get("_qualified_name") or cls.__name__)


class ForeignMeta(CopiedMeta):
    """The class of a base from outside the copied code: an attribute that the copied
    classes of its subclasses do not define may be the foreign base's, so it is a gap."""

    def __getattr__(cls, name: str) -> "NoReturn":
        if name.startswith("__"):
            raise AttributeError(name)
        raise ProbeGap("%s.%s (perhaps from its base %s, outside the copied code)" % (cls.__name__, name, cls._foreign))


def foreign_base(label: str) -> type:
    """A base class from outside the copied code (``nn.Module``): it knows nothing."""

    class Foreign(metaclass=ForeignMeta):
        _foreign = label

        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ProbeGap("constructing %s, whose __init__ may be %s's" % (type(self).__name__, label))

        def __getattr__(self, name: str) -> "NoReturn":
            if name.startswith("__"):
                raise AttributeError(name)
            raise ProbeGap(
                "%s.%s (perhaps from %s, outside the copied code)" % (type(self).__name__, name, self._foreign)
            )

    return Foreign


def foreign_bases(label: "Callable[[Any], str]") -> "Callable[[Any, tuple[type, ...]], tuple[type]]":
    """``__mro_entries__`` of a gap or stand-in used as a base class."""
    return lambda self, bases: (foreign_base(label(self)),)


for _name in (
    "__call__ __iter__ __len__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ "
    "__contains__ __getitem__ __index__ __int__ __float__ __str__ __format__ __repr__ "
    "__add__ __radd__ __sub__ __rsub__ __mul__ __or__ __ror__ __and__ __instancecheck__ "
    "__subclasscheck__ __setattr__ __enter__"
).split():
    setattr(Gap, _name, _raise_gap)
Gap.__bool__ = _gap_truth  # type: ignore[attr-defined]  # (set on the class, as the dunders above)
Gap.__mro_entries__ = foreign_bases(lambda gap: object.__getattribute__(gap, "_label"))  # type: ignore[attr-defined]


class Obj:
    """Attributes given up front; anything else is a gap or a missing key."""

    def __init__(self, label: str, attrs: "dict[str, Any]", missing_is_gap: bool) -> None:
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_missing_is_gap", missing_is_gap)
        for key, value in attrs.items():
            object.__setattr__(self, key, value)

    def __getattr__(self, name: str) -> object:
        label = object.__getattribute__(self, "_label")
        if name.startswith("__"):
            raise AttributeError(name)
        if object.__getattribute__(self, "_missing_is_gap"):
            raise ProbeGap("%s.%s" % (label, name))
        raise MissingConfigKey(label, name)


class LooseConfig(Obj):
    """A drafter config while classes are constructed: a key the file does not set
    is the library's default, unknown here: read plainly it is a stand-in; read with
    ``getattr(config, key, default)`` or ``hasattr`` it is missing (see safe_getattr)."""

    def __getattr__(self, name: str) -> "StandIn":
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn("%s.%s" % (object.__getattribute__(self, "_label"), name), {}, ())


def _missing(obj: object, name: str) -> bool:
    return isinstance(obj, LooseConfig) and name not in object.__getattribute__(obj, "__dict__")


class NoOp:
    def __getattr__(self, name: str) -> "Callable[..., None]":
        return lambda *args, **kwargs: None


class Constructed(Gap):
    """What ``SomeClass(...)`` returns when SomeClass came from an import: it can
    only be returned (the answer says which class was built), not used."""

    def __init__(self, path: str) -> None:
        Gap.__init__(self, "an instance of %s" % path)
        object.__setattr__(self, "path", path)


class ImportedName(Gap):
    """A name imported inside probed code: it can be looked into and called."""

    def __init__(self, path: str) -> None:
        Gap.__init__(self, path)
        object.__setattr__(self, "path", path)

    def __getattr__(self, name: str) -> "ImportedName":  # type: ignore[override]  # a gap's names are gaps
        if name.startswith("__"):
            raise AttributeError(name)
        return ImportedName(object.__getattribute__(self, "path") + "." + name)

    def __call__(self, *args: object, **kwargs: object) -> Constructed:
        return Constructed(object.__getattribute__(self, "path"))


def _refusing_dunders(getter: "Callable[..., Any]") -> "Callable[..., Any]":
    def make(*names: str) -> object:
        for name in names:
            for part in str(name).split("."):
                _plain_name(part)
        return getter(*names)

    return make


def _identity_decorator(*args: "Any", **kwargs: object) -> "Callable[..., Any]":
    """``@cache``, ``@lru_cache`` and ``@lru_cache(maxsize=...)``: the same function
    (memoising pure code changes no value it computes)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda function: function


def _stdlib_modules() -> "dict[str, Obj]":
    """Pure parts of the standard library tree code may use, built from the real
    functions; anything else of these modules is a gap. No attribute reaches
    beyond its value (attrgetter and methodcaller refuse dunders)."""
    import collections.abc as collections_abc
    import functools
    import inspect
    import typing
    from abc import ABC, abstractmethod
    import math
    import numbers
    import operator

    names = {
        "operator": (
            operator,
            "abs add and_ concat contains eq floordiv ge getitem gt index inv invert is_ is_not "
            "itemgetter le lshift lt mod mul ne neg not_ or_ pos pow rshift sub truediv truth xor",
        ),
        "functools": (functools, "partial reduce"),
        "math": (math, "ceil floor gcd inf isfinite isinf isnan log log2 log10 nan prod sqrt trunc"),
        "numbers": (numbers, "Complex Integral Number Rational Real"),  # abstract classes: isinstance only
    }
    modules: "dict[str, Obj]" = {}
    for module_name, (module, members) in names.items():
        attrs = {member: getattr(module, member) for member in members.split()}
        modules[module_name] = Obj(module_name, attrs, True)
    object.__setattr__(modules["operator"], "attrgetter", _refusing_dunders(operator.attrgetter))
    object.__setattr__(
        modules["operator"], "methodcaller", lambda name, *a, **k: operator.methodcaller(_plain_name(name), *a, **k)
    )
    for decorator in ("cache", "lru_cache", "wraps"):
        object.__setattr__(modules["functools"], decorator, _identity_decorator)
    # typing's and collections.abc's names as they are: pure (no evaluation of the strings they hold)
    names["typing"] = (
        typing,
        "Any Callable ClassVar Final Generic Literal Optional Protocol TypeVar Union Type List Dict "
        "Tuple Set FrozenSet Sequence Mapping Iterable Iterator NamedTuple get_args get_origin "
        "overload final runtime_checkable",
    )
    names["collections.abc"] = (
        collections_abc,
        "Callable Collection Container Generator Hashable Iterable Iterator Mapping "
        "MutableMapping MutableSequence MutableSet Sequence Set Sized",
    )
    for module_name in ("typing", "collections.abc"):
        module, members = names[module_name]
        modules[module_name] = Obj(module_name, {member: getattr(module, member) for member in members.split()}, True)
    object.__setattr__(modules["typing"], "cast", lambda kind, value: value)
    object.__setattr__(modules["typing"], "TYPE_CHECKING", False)
    modules["importlib"] = Obj("importlib", {"import_module": import_module}, True)
    modules["abc"] = Obj("abc", {"ABC": ABC, "ABCMeta": ABCMeta, "abstractmethod": abstractmethod}, True)
    modules["inspect"] = Obj("inspect", {"signature": signature_of(inspect)}, True)
    return modules


STDLIB: "dict[str, Obj]" = {}  # filled once, before the boundary goes up


def stdlib(name: str) -> Obj:
    """A curated standard-library module (see _stdlib_modules), or a gap."""
    if name not in STDLIB:
        raise ProbeGap("the module %s" % name)
    return STDLIB[name]


RECORDS: "list[JSON]" = []  # calls of recorded stand-ins (e.g. Attention) since the last take_records()


def take_records() -> "list[JSON]":
    taken = list(RECORDS)
    del RECORDS[:]
    return taken


def summary(value: object, depth: int = 0) -> object:
    """A recorded argument as JSON: plain values as they are, stand-ins by their path."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, StandIn):
        return {"$standin": object.__getattribute__(value, "_path")}
    if isinstance(value, Holder):
        return {"$holder": object.__getattribute__(value, "_path")}
    if isinstance(value, (set, frozenset)) and depth < 4:
        return {"$set": sorted((summary(item, depth + 1) for item in value), key=repr)}
    if isinstance(value, (list, tuple)) and depth < 4:
        return [summary(item, depth + 1) for item in value]
    if isinstance(value, dict) and depth < 4 and all(isinstance(key, str) for key in value):
        return {"$dict": dict((key, summary(item, depth + 1)) for key, item in value.items())}
    return {"$repr": type(value).__name__}


NOT_ASSUMED = object()


def assumed(assume: "dict[str, Any]", path: str) -> object:
    """The value the rule assumes at ``path`` ("*.quant_config": that attribute of whatever
    it is read from), or NOT_ASSUMED."""
    if path in assume:
        return assume[path]
    for key, value in assume.items():
        if key.startswith("*.") and path.endswith(key[1:]):
            return value
    return NOT_ASSUMED


class StandIn:
    """Stands for a torch/vLLM name outside the extracted code while a class is
    constructed: attributes, calls and arithmetic give further stand-ins (named by
    their path); a branch on one is a gap unless the rule assumes its value; calls
    of a recorded name are recorded with their arguments."""

    def __init__(self, path: str, assume: "dict[str, Any]", record: "tuple[str, ...]") -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_assume", assume)
        object.__setattr__(self, "_record", record)

    def _derive(self, path: str) -> object:
        assume = object.__getattribute__(self, "_assume")
        value = assumed(assume, path)
        if value is not NOT_ASSUMED:
            return value
        return StandIn(path, assume, object.__getattribute__(self, "_record"))

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn._derive(self, "%s.%s" % (object.__getattribute__(self, "_path"), name))

    def __call__(self, *args: object, **kwargs: object) -> object:
        path = object.__getattribute__(self, "_path")
        if path in object.__getattribute__(self, "_record"):
            RECORDS.append(
                {
                    "callee": path,
                    "args": [summary(a) for a in args],
                    "kwargs": dict((k, summary(v)) for k, v in kwargs.items()),
                }
            )
        return StandIn._derive(self, path + "()")

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def __setitem__(self, key: "Any", value: "Any") -> None:  # filling a tensor stand-in: nothing the question reads
        pass

    def __repr__(self) -> str:
        return "<%s>" % object.__getattribute__(self, "_path")

    def __format__(self, spec: str) -> str:
        return repr(self)

    __str__ = __repr__


class Holder:
    """Stands for a target model, and what it holds, while its capture hook runs: an
    attribute read is the one held (an assumed value; ``layers``: ``count`` holders;
    else another holder named by its path); setting one is recorded and held; a call
    is recorded (a hand-on to another model's method) and returns None. A branch on a
    holder is a gap unless the rule assumes its value."""

    def __init__(self, path: str, assume: "dict[str, Any]", count: int) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_assume", assume)
        object.__setattr__(self, "_count", count)
        object.__setattr__(self, "_held", {})

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        held = object.__getattribute__(self, "_held")
        if name not in held:
            path = "%s.%s" % (object.__getattribute__(self, "_path"), name)
            assume = object.__getattribute__(self, "_assume")
            count = object.__getattribute__(self, "_count")
            value = assumed(assume, path)
            if value is NOT_ASSUMED:
                if name == "layers":
                    value = [Holder("%s[%d]" % (path, index), assume, count) for index in range(count)]
                else:
                    value = Holder(path, assume, count)
            held[name] = value
        return held[name]

    def __setattr__(self, name: str, value: object) -> None:
        RECORDS.append({"set": "%s.%s" % (object.__getattribute__(self, "_path"), name), "value": summary(value)})
        object.__getattribute__(self, "_held")[name] = value

    def __call__(self, *args: object, **kwargs: object) -> None:
        RECORDS.append(
            {
                "call": object.__getattribute__(self, "_path"),
                "args": [summary(a) for a in args],
                "kwargs": dict((k, summary(v)) for k, v in kwargs.items()),
            }
        )

    def __repr__(self) -> str:
        return "<%s>" % object.__getattribute__(self, "_path")

    __str__ = __repr__


def _holder_gap(self: object, *args: object) -> "NoReturn":
    raise ProbeGap("%s (a model the hook reaches) decides a branch or a value" % object.__getattribute__(self, "_path"))


for _name in "__bool__ __iter__ __len__ __index__ __int__ __float__ __contains__ __lt__ __le__ __gt__ __ge__".split():
    setattr(Holder, _name, _holder_gap)


def container(path: str) -> "Callable[..., list[Any]]":
    """A container class outside the extracted code (``nn.ModuleList``): built from
    one iterable, it holds those items in order, as a list does."""

    def build_container(*args: "Iterable[Any]", **kwargs: object) -> "list[Any]":
        if kwargs or len(args) > 1:
            raise ProbeGap("%s called with other arguments than one iterable" % path)
        return list(args[0]) if args else []

    return build_container


def _stand_in_gap(self: object, *args: object) -> "NoReturn":
    raise ProbeGap("%s (a stand-in) decides a branch or a value" % object.__getattribute__(self, "_path"))


def _stand_in_op(symbol: str) -> "Callable[..., object]":
    def operate(self: StandIn, *args: object) -> object:
        return StandIn._derive(self, "(%s %s)" % (object.__getattribute__(self, "_path"), symbol))

    return operate


for _name in "__iter__ __len__ __index__ __int__ __float__ __hash__ __contains__ __enter__".split():
    setattr(StandIn, _name, _stand_in_gap)
StandIn.__bool__ = lambda self: decide("%s (a stand-in)" % object.__getattribute__(self, "_path"))  # type: ignore[attr-defined]
StandIn.__mro_entries__ = foreign_bases(lambda stand_in: object.__getattribute__(stand_in, "_path"))  # type: ignore[attr-defined]
for _name, _symbol in (
    ("add", "+"),
    ("sub", "-"),
    ("mul", "*"),
    ("truediv", "/"),
    ("floordiv", "//"),
    ("mod", "%"),
    ("pow", "**"),
    ("and", "&"),
    ("or", "|"),
):
    setattr(StandIn, "__%s__" % _name, _stand_in_op(_symbol))
    setattr(StandIn, "__r%s__" % _name, _stand_in_op(_symbol))
for _name, _symbol in (
    ("eq", "=="),
    ("ne", "!="),
    ("lt", "<"),
    ("le", "<="),
    ("gt", ">"),
    ("ge", ">="),
    ("getitem", "[]"),
    ("neg", "-"),
    ("invert", "~"),
):
    setattr(StandIn, "__%s__" % _name, _stand_in_op(_symbol))


class Module:
    """Base of a constructed class (it stands for torch.nn.Module): an attribute
    its constructor did not set does not exist."""

    def __getattr__(self, name: str) -> "NoReturn":
        raise AttributeError("%s has no attribute %s" % (type(self).__name__, name))


def module_class_factory(namespace: "Namespace") -> "Callable[[str, str], type]":
    def module_class(name: str, body: str) -> type:
        methods: "dict[str, Any]" = {}
        exec(compiled(body), namespace, methods)
        return type(name, (Module,), methods)

    return module_class


# What the stubs of one request are built from, kept for its many calls (cleared per request).
COMPILED: "dict[str, CodeType]" = {}  # class bodies by text
DATA_TEXT: "dict[str, str]" = {}  # request data by name as JSON text: a deep copy is one json.loads


# a program statement's code by its text, kept across the requests of one child
PROGRAM_CODE: "dict[str, CodeType]" = {}


def program_code(source: str) -> "CodeType":
    """The statement compiled once per child: the rounds of a check (definitions looked up by
    name) send the same program again with a few more definitions."""
    if source not in PROGRAM_CODE:
        if len(PROGRAM_CODE) > 4096:
            PROGRAM_CODE.clear()
        PROGRAM_CODE[source] = compile(source, "<program>", "exec")
    return PROGRAM_CODE[source]


def compiled(body: str) -> "CodeType":
    if body not in COMPILED:
        COMPILED[body] = compile(body, "<stub>", "exec")
    return COMPILED[body]


def fresh(data: "JSON", name: str) -> "Any":
    """A deep copy of request data ``name`` (JSON values only)."""
    if name not in DATA_TEXT:
        DATA_TEXT[name] = json.dumps(data[name])
    return json.loads(DATA_TEXT[name])


def _plain_name(name: str) -> str:
    if isinstance(name, str) and name.startswith("__"):
        raise ProbeGap("a dunder attribute (%s)" % name)
    return name


def safe_getattr(obj: object, name: str, *default: object) -> object:
    if default and _missing(obj, name):
        return default[0]
    return getattr(obj, _plain_name(name), *default)


def safe_hasattr(obj: object, name: str) -> bool:
    return not _missing(obj, name) and hasattr(obj, _plain_name(name))


def safe_setattr(obj: object, name: str, value: object) -> None:
    setattr(obj, _plain_name(name), value)


def disguised(
    real: "Callable[..., Any]", serve: "Callable[..., Any]", arity: "tuple[int, int] | None" = None
) -> object:
    """``serve``, presented to the tree's code as the built-in ``real`` it stands
    for: the same repr, ``__name__``, ``__qualname__``, ``__module__`` and type
    names, no binding as a method, and for a call of another shape than
    ``arity`` (the counts of positional arguments it takes) the real one's own error."""

    class builtin_function_or_method(object):
        __module__ = "builtins"
        __qualname__ = "builtin_function_or_method"

        def __call__(self, *args: object, **kwargs: object) -> object:
            if arity is not None and (kwargs or not arity[0] <= len(args) <= arity[1]):
                return real(*args, **kwargs)  # raises its TypeError
            return serve(*args, **kwargs)

        def __repr__(self) -> str:
            return repr(real)

        def __setattr__(self, name: str, value: object) -> None:
            setattr(real, _plain_name(name), value)  # raises its AttributeError

        def __delattr__(self, name: str) -> None:
            delattr(real, _plain_name(name))

    kind = type(real)  # builtin_function_or_method, or type for ``type`` itself
    builtin_function_or_method.__name__ = kind.__name__
    builtin_function_or_method.__qualname__ = kind.__qualname__
    served = builtin_function_or_method()
    served.__dict__.update((name, getattr(real, name)) for name in ("__name__", "__qualname__", "__doc__"))
    return served


def fake_import(
    name: str, globals: object = None, locals: object = None, fromlist: "Sequence[str] | None" = (), level: int = 0
) -> object:
    """Imports inside probed functions give names that record what they build
    (the curated standard-library modules are themselves)."""
    if level:
        raise ProbeGap("relative import in probed code")
    if name in STDLIB:
        return STDLIB[name]
    return ImportedName(name if fromlist else name.partition(".")[0])


def _returning(value: "Any") -> "Any":
    return lambda *args, **kwargs: value


def build(spec: "Any", data: "JSON", namespace: "Namespace") -> "Any":  # a JSON spec, its stub
    if isinstance(spec, list):
        return [build(item, data, namespace) for item in spec]
    if not isinstance(spec, dict):
        return spec
    if "$data" in spec:
        return fresh(data, spec["$data"])
    if "$obj" in spec:
        if "data" in spec:
            raw = fresh(data, spec["data"])
            keys = {k: v for k, v in raw.items() if not k.startswith("__")}
            unknown = raw.get("__unknown__")  # sandbox.UNKNOWN_KEYS: attributes the tool could not compute
            if isinstance(unknown, dict):
                keys.update((key, Gap(str(why))) for key, why in unknown.items())
            built = (LooseConfig if spec.get("loose") else Obj)(spec["$obj"], keys, False)
            for method in spec.get("itself", ()):  # a method of the config's base returning the config itself
                object.__setattr__(built, method, _returning(built))
            return built
        return Obj(spec["$obj"], build(spec.get("attrs", {}), data, namespace), True)
    if "$class" in spec:
        body: "dict[str, Any]" = {}
        exec(compiled(spec["body"]), namespace, body)
        cls = type(spec["$class"], (LooseConfig if spec.get("loose") else Obj,), body)
        return cls(spec["$class"], build(spec.get("attrs", {}), data, namespace), True)
    if "$gap" in spec:
        return Gap(spec["$gap"])
    if "$returns" in spec:
        value = build(spec["$returns"], data, namespace)
        return lambda *args, **kwargs: value
    if "$noop" in spec:
        return NoOp()
    if "$holder" in spec:
        return Holder(spec["$holder"], build(spec.get("assume", {}), data, namespace), int(spec.get("count", 0)))
    if "$standin" in spec:
        return StandIn(spec["$standin"], build(spec.get("assume", {}), data, namespace), tuple(spec.get("record", ())))
    if "$tree_modules" in spec:
        TREE_MODULES.clear()
        TREE_MODULES.update(spec["$tree_modules"])
        TREE_PACKAGE[0] = spec.get("package")
        return None
    if "$omitted" in spec:
        return omitted
    if "$foreign_base" in spec:
        return foreign_base
    if "$copied_meta" in spec:
        return CopiedMeta
    if "$lazy_method" in spec:
        return lazy_method
    if "$container" in spec:
        return container(spec["$container"])
    if "$records" in spec:
        return take_records
    if "$module_class" in spec:
        return module_class_factory(namespace)
    if "$unset_env" in spec:
        return Obj(spec["$unset_env"], {"environ": {}, "getenv": lambda key, default=None: default}, True)
    return {key: build(value, data, namespace) for key, value in spec.items()}


def to_json(value: object, depth: int = 0) -> object:
    if depth > 20:
        return {"$repr": "too deep"}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(item, depth + 1) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(item, depth + 1) for item in value), key=repr)
    if isinstance(value, dict):
        return {str(key): to_json(item, depth + 1) for key, item in value.items()}
    if isinstance(value, Constructed):
        return {"$constructed": object.__getattribute__(value, "path")}
    qualified = getattr(type(value), "_qualified_name", None)  # an instance of a class copied by name
    if isinstance(qualified, str):
        return {"$constructed": qualified}
    if isinstance(value, Gap):
        raise ProbeGap(object.__getattribute__(value, "_label"))
    return {"$repr": type(value).__name__}


def type_check(real: "Callable[[Any, Any], bool]") -> "Callable[[object, Any], bool]":
    """``isinstance``/``issubclass`` against a class outside the extracted code (a
    stand-in): its answer is not known, so it decides a branch (explored both ways)."""

    def check(value: object, classes: "Any") -> bool:
        if isinstance(value, Gap):
            raise ProbeGap(object.__getattribute__(value, "_label"))
        classes = tuple(served_class(c) for c in classes) if type(classes) is tuple else served_class(classes)
        named = [c for c in (classes if type(classes) is tuple else (classes,)) if isinstance(c, ImportedName)]
        if named:
            return _by_qualified_name(real, value, classes, named)
        unknown = [c for c in (classes if type(classes) is tuple else (classes,)) if isinstance(c, StandIn)]
        if not unknown:
            return real(value, classes)
        if value is None and real is isinstance:  # None is an instance of no class from outside (but object)
            return real(
                value, tuple(c for c in (classes if type(classes) is tuple else ()) if not isinstance(c, StandIn))
            )
        known = tuple(c for c in (classes if type(classes) is tuple else ()) if not isinstance(c, StandIn))
        if known and real(value, known):
            return True
        return decide("%s(%s, %s)" % (real.__name__, summary_text(value), object.__getattribute__(unknown[0], "_path")))

    return check


def _by_qualified_name(
    real: "Callable[[Any, Any], bool]", value: object, classes: "Any", named: "list[ImportedName]"
) -> bool:
    """A type check against a class imported inside the code (known only by its qualified
    name): the copied classes' own names decide; a base from outside leaves it unknown."""
    if isinstance(value, Constructed):
        raise ProbeGap(object.__getattribute__(value, "_label"))
    kind = value if real is issubclass else type(value)
    if not isinstance(kind, type):
        raise ProbeGap("%s(%s, %s)" % (real.__name__, summary_text(value), object.__getattribute__(named[0], "path")))
    wanted = set(object.__getattribute__(c, "path") for c in named)
    if any(klass.__dict__.get("_qualified_name") in wanted for klass in kind.__mro__):
        return True
    others = tuple(c for c in (classes if type(classes) is tuple else ()) if not isinstance(c, ImportedName))
    if others and real(value, others):
        return True
    # decisive only when every class it derives from is a copied one or the standard library's
    if any(
        "_foreign" in klass.__dict__
        or ("_qualified_name" not in klass.__dict__ and klass.__module__ not in ("builtins", "abc"))
        for klass in kind.__mro__
    ):
        raise ProbeGap(
            "%s(%s, %s): a base from outside the copied code"
            % (real.__name__, kind.__name__, object.__getattribute__(named[0], "path"))
        )
    return False


def type_of(value: object) -> type:
    """``type(value)``: of a value running the code cannot know, not known either."""
    if isinstance(value, (Gap, StandIn)):
        raise ProbeGap("the type of %s" % summary_text(value))
    return type(value)


def summary_text(value: object) -> str:
    return object.__getattribute__(value, "_path") if isinstance(value, StandIn) else type(value).__name__


def on_alarm(signum: int, frame: object) -> "NoReturn":
    raise CallTimeout()


def real_builtin(name: str) -> "Any":
    return __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)


# The current request's served built-ins that are classes (``type``), each with the class it
# stands for, for type checks. Held and compared by identity, never by id(): the served
# built-ins of an earlier request are freed, and an id outlives its object (a later one at
# the same address, a name imported inside the code, would be taken for ``type``).
SERVED_CLASSES: "list[tuple[object, type]]" = []


def served_class(value: object) -> object:
    """The class a served built-in of the current request stands for; any other value itself."""
    for served, real in SERVED_CLASSES:
        if value is served:
            return real
    return value


def exposed_builtins() -> "dict[str, Any]":
    """What the tree's code gets as its built-ins."""
    builtins = {name: real_builtin(name) for name in SAFE_BUILTIN_NAMES}
    served_type = disguised(type, type_of, (1, 1))
    SERVED_CLASSES[:] = [(served_type, type)]  # a request's globals are fresh: only its built-ins are reachable
    builtins.update(
        __import__=disguised(real_builtin("__import__"), fake_import),
        getattr=disguised(getattr, safe_getattr, (2, 3)),
        hasattr=disguised(hasattr, safe_hasattr, (2, 2)),
        setattr=disguised(setattr, safe_setattr, (3, 3)),
        type=served_type,
        __build_class__=real_builtin("__build_class__"),  # class statements of copied classes (no metaclass keyword)
        isinstance=disguised(isinstance, type_check(isinstance), (2, 2)),
        issubclass=disguised(issubclass, type_check(issubclass), (2, 2)),
    )
    return builtins


def announce(request: "JSON", step: int) -> None:
    """Step ``step`` of ``request`` begins: the parent holds it to its deadline from here."""
    sys.stdout.write(json.dumps({"id": request.get("id"), "step": step}) + "\n")
    sys.stdout.flush()


def serve(request: "JSON") -> "JSON":
    """The answer to one request, run in fresh globals."""
    namespace: "Namespace" = {"__builtins__": exposed_builtins(), "__name__": "probed", "_stdlib": stdlib}
    NAMESPACE[0] = namespace
    TREE_MODULES.clear()
    TREE_PACKAGE[0] = None
    take_records()
    COMPILED.clear()
    DATA_TEXT.clear()
    data = request.get("data", {})
    steps = itertools.count()
    announce(request, next(steps))
    for name, spec in request.get("globals", {}).items():
        namespace[name] = build(spec, data, namespace)
    timeout = float(request.get("call_timeout_s", 2.0))
    # One statement at a time, each under the call timer: a definition that fails
    # or runs too long (a tree constant such as 9 ** 9 ** 9) leaves a gap under its
    # name, so only what reads that name is unknown.
    for chunk in request["program"]:
        announce(request, next(steps))
        why = None
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(program_code(chunk["source"]), namespace)
        except CallTimeout:
            why = "its definition did not finish within %g s" % timeout
        except BaseException as exc:  # noqa: B036 - any failure is reported, never raised
            why = "could not be defined: %s: %s" % (type(exc).__name__, exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if why is not None:
            namespace[chunk["name"]] = Gap("%s (%s)" % (chunk["name"], why))
    results: "dict[str, JSON]" = {}
    for call in request["calls"]:
        step = next(steps)  # each run of the call announces this step again: the parent holds each run to the deadline
        results[call["id"]] = explore(call, namespace, data, timeout, functools.partial(announce, request, step))
    return {"id": request.get("id"), "results": results}


def explore(call: "JSON", namespace: "Namespace", data: "JSON", timeout: float, begin: "Callable[[], None]") -> "JSON":
    """The call's outcome over every way the branches unknown values decide can go
    (depth first, False before True): the outcome they all give, else a gap naming them.
    ``begin`` announces each run to the parent, which holds it to its deadline."""
    pending: "list[list[bool]]" = [[]]
    outcomes: "list[JSON]" = []
    labels: "list[str]" = []
    while pending:
        if len(outcomes) == MAX_PATHS:
            return {"gap": "more than %d ways the branches decided by %s can go" % (MAX_PATHS, ", ".join(labels[:3]))}
        FORCED[:] = pending.pop()
        forced = len(FORCED)
        begin()
        outcome = run_once(call, namespace, data, timeout)
        outcomes.append(outcome)
        taken = list(TAKEN)
        for index in range(forced, len(taken)):
            pending.append([choice for _, choice in taken[:index]] + [True])
        labels.extend(label for label, _ in taken if label not in labels)
    needing = [outcome for outcome in outcomes if "needs" in outcome]
    if needing:
        return needing[0]
    if all(outcome == outcomes[0] for outcome in outcomes):
        return outcomes[0]
    timed_out = [outcome for outcome in outcomes if "timeout" in outcome]
    if timed_out:  # a way that ran out of time says so (its answer depends on the load, not the tree)
        return timed_out[0]
    return {"gap": "the branches decided by %s" % ", ".join(labels[:3])}


def run_once(call: "JSON", namespace: "Namespace", data: "JSON", timeout: float) -> "JSON":
    """One run of the call along the branch choices in FORCED."""
    del RAISED[:]
    del TAKEN[:]
    CALLING[0] = True
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        for name, spec in call.get("bind", {}).items():
            namespace[name] = build(spec, data, namespace)
        outcome: "JSON" = {"value": to_json(eval(call["expr"], namespace))}
    except ProbeGap as exc:
        outcome = {"gap": str(exc.args[0]) if exc.args else "?"}
    except CallTimeout:
        outcome = {"timeout": True}
    except MissingConfigKey as exc:
        outcome = {"missing_key": exc.key}
    except RecursionError:
        outcome = {"error": {"type": "RecursionError", "message": "recursion too deep"}}
    except Exception as exc:
        outcome = {"error": {"type": type(exc).__name__, "message": str(exc)[:500]}}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        CALLING[0] = False
    if RAISED and "gap" not in outcome and "timeout" not in outcome:
        label = RAISED[0].args[0] if RAISED[0].args else "?"
        outcome = {"gap": "%s (caught by the tree's own code, which then went on)" % label}
    needed = [gap.needs for gap in RAISED if isinstance(gap, NeedsDefinition)]
    if needed and "timeout" not in outcome:  # the run is incomplete until the parent sends it
        outcome = {"gap": outcome.get("gap", "?"), "needs": needed[0]}
    return outcome


def main() -> None:
    """Serve request lines until stdin ends: one answer line each."""
    line = sys.stdin.buffer.readline()
    if not line:
        return
    request = json.loads(line)
    # The boundary goes up before any tree code is compiled (sandbox.child_program() provides the module).
    import lockdown

    STDLIB.update(_stdlib_modules())
    lockdown.lockdown(request.get("limits"))
    signal.signal(signal.SIGALRM, on_alarm)
    while True:
        sys.stdout.write(json.dumps(serve(request)) + "\n")
        sys.stdout.flush()
        line = sys.stdin.buffer.readline()
        if not line:
            return
        request = json.loads(line)


if __name__ == "__main__":
    main()
