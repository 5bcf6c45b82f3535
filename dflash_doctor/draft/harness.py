"""Child side of the behaviour sandbox: run as ``python -I -S harness.py``.

Stdlib only; the tool imports it only for ``SAFE_BUILTIN_NAMES``. Reads JSON
requests on stdin, one a line, and prints one JSON answer line for each on
stdout, until stdin ends (session.py is the other side). Each request runs in
fresh globals; the boundary goes up once, when the first request has arrived:

    request  {"id": str, "globals": {name: spec}, "program": [{"name", "source"}],
              "data": {name: json}, "calls": [call], "call_timeout_s": float}
    call     {"id": str, "expr": str, "bind": {name: spec}}
    answer   {"id": the request's, "results": {id: outcome}}
    outcome  {"value": json} | {"error": {"type", "message"}} | {"gap": str}
             | {"missing_key": str} | {"timeout": true}

The program holds functions taken out of a vLLM tree. It runs with a small
set of builtins (no open, no eval, no real import) under CPU, memory and file
size limits; each call has its own timer. Stubs are described by ``spec``:

    plain JSON               itself, with dict values read as specs
    {"$data": name}          a deep copy of request data (never read as specs)
    {"$obj": label, "data": name}     attributes from request data; a missing
                                      attribute raises AttributeError (a config);
                                      those its "__unknown__" key names are gaps
    {"$obj": label, "attrs": {..}}    attributes from specs; a missing one is a gap
    {"$class": label, "body": src, "attrs": {..}}  an instance of a class whose
                                      methods are ``src``; missing attributes are gaps
    {"$gap": label}          anything done with it is a gap: running the code cannot know
    {"$returns": spec}       a function returning the spec (any arguments)
    {"$noop": label}         every attribute is a function doing nothing (a logger)
    {"$unset_env": label}    an ``os`` whose environment is empty (anything else is a gap)
    {"$standin": path, "assume": {path: value}, "record": [path]}
                             a permissive stand-in for a name outside the extracted code
    {"$records": true}       a function taking the calls recorded so far
    {"$module_class": true}  ``f(name, body)``: a class with that body on a Module base

A gap is raised as a BaseException, so no ``except Exception`` in the
inspected code can swallow it and take another path.

One file past ~400 lines on purpose: the child is sent as one self-contained
text (sandbox.BOOTSTRAP loads it by name, locally and over ssh), and the stubs
and the request loop share its state (RECORDS, COMPILED, the timer); a split
would be a third module text to ship and a second import path in the parent.
"""

import json
import signal
import sys

SAFE_BUILTIN_NAMES = (
    "abs all any bool callable dict divmod enumerate filter float frozenset getattr hasattr "
    "int isinstance issubclass iter len list map max min next range repr reversed round set "
    "setattr slice sorted str sum tuple zip property staticmethod classmethod object "
    "Exception ValueError TypeError KeyError IndexError AttributeError NotImplementedError "
    "RuntimeError AssertionError ZeroDivisionError StopIteration LookupError ArithmeticError"
).split()


class ProbeGap(BaseException):
    """The code touched something running it here cannot know."""


class CallTimeout(BaseException):
    pass


class MissingConfigKey(AttributeError):
    def __init__(self, label, key):
        AttributeError.__init__(self, "%r object has no attribute %r" % (label, key))
        self.key = key


def _raise_gap(self, *args, **kwargs):
    raise ProbeGap(object.__getattribute__(self, "_label"))


class Gap:
    """Stands for something running the code cannot know: any use of it is a gap."""

    def __init__(self, label):
        object.__setattr__(self, "_label", label)

    __getattr__ = _raise_gap


for _name in (
    "__call__ __bool__ __iter__ __len__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ "
    "__contains__ __getitem__ __index__ __int__ __float__ __str__ __format__ __repr__ "
    "__add__ __radd__ __sub__ __rsub__ __mul__ __or__ __ror__ __and__ __instancecheck__ "
    "__subclasscheck__ __setattr__ __enter__"
).split():
    setattr(Gap, _name, _raise_gap)


class Obj:
    """Attributes given up front; anything else is a gap or a missing key."""

    def __init__(self, label, attrs, missing_is_gap):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_missing_is_gap", missing_is_gap)
        for key, value in attrs.items():
            object.__setattr__(self, key, value)

    def __getattr__(self, name):
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

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn("%s.%s" % (object.__getattribute__(self, "_label"), name), {}, ())


def _missing(obj, name):
    return isinstance(obj, LooseConfig) and name not in object.__getattribute__(obj, "__dict__")


class NoOp:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class Constructed(Gap):
    """What ``SomeClass(...)`` returns when SomeClass came from an import: it can
    only be returned (the answer says which class was built), not used."""

    def __init__(self, path):
        Gap.__init__(self, "an instance of %s" % path)
        object.__setattr__(self, "path", path)


class ImportedName(Gap):
    """A name imported inside probed code: it can be looked into and called."""

    def __init__(self, path):
        Gap.__init__(self, path)
        object.__setattr__(self, "path", path)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return ImportedName(object.__getattribute__(self, "path") + "." + name)

    def __call__(self, *args, **kwargs):
        return Constructed(object.__getattribute__(self, "path"))


RECORDS = []  # calls of recorded stand-ins (e.g. Attention) since the last take_records()


def take_records():
    taken = list(RECORDS)
    del RECORDS[:]
    return taken


def summary(value, depth=0):
    """A recorded argument as JSON: plain values as they are, stand-ins by their path."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, StandIn):
        return {"$standin": object.__getattribute__(value, "_path")}
    if isinstance(value, (list, tuple)) and depth < 4:
        return [summary(item, depth + 1) for item in value]
    return {"$repr": type(value).__name__}


class StandIn:
    """Stands for a torch/vLLM name outside the extracted code while a class is
    constructed: attributes, calls and arithmetic give further stand-ins (named by
    their path); a branch on one is a gap unless the rule assumes its value; calls
    of a recorded name are recorded with their arguments."""

    def __init__(self, path, assume, record):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_assume", assume)
        object.__setattr__(self, "_record", record)

    def _derive(self, path):
        assume = object.__getattribute__(self, "_assume")
        if path in assume:
            return assume[path]
        return StandIn(path, assume, object.__getattribute__(self, "_record"))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn._derive(self, "%s.%s" % (object.__getattribute__(self, "_path"), name))

    def __call__(self, *args, **kwargs):
        path = object.__getattribute__(self, "_path")
        if path in object.__getattribute__(self, "_record"):
            RECORDS.append({"callee": path, "args": [summary(a) for a in args],
                            "kwargs": dict((k, summary(v)) for k, v in kwargs.items())})
        return StandIn._derive(self, path + "()")

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def __repr__(self):
        return "<%s>" % object.__getattribute__(self, "_path")

    def __format__(self, spec):
        return repr(self)

    __str__ = __repr__


def _stand_in_gap(self, *args):
    raise ProbeGap("%s (a stand-in) decides a branch or a value" % object.__getattribute__(self, "_path"))


def _stand_in_op(symbol):
    def operate(self, *args):
        return StandIn._derive(self, "(%s %s)" % (object.__getattribute__(self, "_path"), symbol))
    return operate


for _name in "__bool__ __iter__ __len__ __index__ __int__ __float__ __hash__ __contains__ __enter__".split():
    setattr(StandIn, _name, _stand_in_gap)
for _name, _symbol in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"), ("mod", "%"),
                       ("pow", "**"), ("and", "&"), ("or", "|")):
    setattr(StandIn, "__%s__" % _name, _stand_in_op(_symbol))
    setattr(StandIn, "__r%s__" % _name, _stand_in_op(_symbol))
for _name, _symbol in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="),
                       ("getitem", "[]"), ("neg", "-"), ("invert", "~")):
    setattr(StandIn, "__%s__" % _name, _stand_in_op(_symbol))


class Module:
    """Base of a constructed class (it stands for torch.nn.Module): an attribute
    its constructor did not set does not exist."""

    def __getattr__(self, name):
        raise AttributeError("%s has no attribute %s" % (type(self).__name__, name))


def module_class_factory(namespace):
    def module_class(name, body):
        methods = {}
        exec(compiled(body), namespace, methods)
        return type(name, (Module,), methods)
    return module_class


# What the stubs of one request are built from, kept for its many calls (cleared per request).
COMPILED = {}  # class bodies by text
DATA_TEXT = {}  # request data by name as JSON text: a deep copy is one json.loads


def compiled(body):
    if body not in COMPILED:
        COMPILED[body] = compile(body, "<stub>", "exec")
    return COMPILED[body]


def fresh(data, name):
    """A deep copy of request data ``name`` (JSON values only)."""
    if name not in DATA_TEXT:
        DATA_TEXT[name] = json.dumps(data[name])
    return json.loads(DATA_TEXT[name])


def _plain_name(name):
    if isinstance(name, str) and name.startswith("__"):
        raise ProbeGap("a dunder attribute (%s)" % name)
    return name


def safe_getattr(obj, name, *default):
    if default and _missing(obj, name):
        return default[0]
    return getattr(obj, _plain_name(name), *default)


def safe_hasattr(obj, name):
    return not _missing(obj, name) and hasattr(obj, _plain_name(name))


def safe_setattr(obj, name, value):
    setattr(obj, _plain_name(name), value)


def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
    """Imports inside probed functions give names that record what they build."""
    if level:
        raise ProbeGap("relative import in probed code")
    return ImportedName(name if fromlist else name.partition(".")[0])


def build(spec, data, namespace):
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
            return (LooseConfig if spec.get("loose") else Obj)(spec["$obj"], keys, False)
        return Obj(spec["$obj"], build(spec.get("attrs", {}), data, namespace), True)
    if "$class" in spec:
        body = {}
        exec(compiled(spec["body"]), namespace, body)
        cls = type(spec["$class"], (Obj,), body)
        return cls(spec["$class"], build(spec.get("attrs", {}), data, namespace), True)
    if "$gap" in spec:
        return Gap(spec["$gap"])
    if "$returns" in spec:
        value = build(spec["$returns"], data, namespace)
        return lambda *args, **kwargs: value
    if "$noop" in spec:
        return NoOp()
    if "$standin" in spec:
        return StandIn(spec["$standin"], build(spec.get("assume", {}), data, namespace), tuple(spec.get("record", ())))
    if "$records" in spec:
        return take_records
    if "$module_class" in spec:
        return module_class_factory(namespace)
    if "$unset_env" in spec:
        return Obj(spec["$unset_env"], {"environ": {}, "getenv": lambda key, default=None: default}, True)
    return {key: build(value, data, namespace) for key, value in spec.items()}


def to_json(value, depth=0):
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
    if isinstance(value, Gap):
        raise ProbeGap(object.__getattribute__(value, "_label"))
    return {"$repr": type(value).__name__}


def on_alarm(signum, frame):
    raise CallTimeout()


def serve(request):
    """The answer to one request, run in fresh globals."""
    builtins = {name: __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
                for name in SAFE_BUILTIN_NAMES}
    builtins.update(__import__=fake_import, getattr=safe_getattr, hasattr=safe_hasattr, setattr=safe_setattr)
    namespace = {"__builtins__": builtins, "__name__": "probed"}
    take_records()
    COMPILED.clear()
    DATA_TEXT.clear()
    data = request.get("data", {})
    for name, spec in request.get("globals", {}).items():
        namespace[name] = build(spec, data, namespace)
    timeout = float(request.get("call_timeout_s", 2.0))
    # One statement at a time, each under the call timer: a definition that fails
    # or runs too long (a tree constant such as 9 ** 9 ** 9) leaves a gap under its
    # name, so only what reads that name is unknown.
    for chunk in request["program"]:
        why = None
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(chunk["source"], namespace)
        except CallTimeout:
            why = "its definition did not finish within %g s" % timeout
        except BaseException as exc:  # noqa: B036 - any failure is reported, never raised
            why = "could not be defined: %s: %s" % (type(exc).__name__, exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if why is not None:
            namespace[chunk["name"]] = Gap("%s (%s)" % (chunk["name"], why))
    results = {}
    for call in request["calls"]:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            for name, spec in call.get("bind", {}).items():
                namespace[name] = build(spec, data, namespace)
            outcome = {"value": to_json(eval(call["expr"], namespace))}
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
        results[call["id"]] = outcome
    return {"id": request.get("id"), "results": results}


def main():
    """Serve request lines until stdin ends: one answer line each."""
    line = sys.stdin.buffer.readline()
    if not line:
        return
    request = json.loads(line)
    # The boundary goes up before any tree code is compiled (sandbox.child_program() provides the module).
    import lockdown

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
