"""Behavioural probes: what this vLLM tree computes for this drafter config.

Each probe takes pure functions out of the tree (``extract``), runs them in
the sandbox on stubs built from the drafter config, and reports the answer,
or ``None`` with the reason when the code reads something the probe cannot
know. Nothing is inferred from a version number.

* aux layers: ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (V1) and
  ``get_eagle3_aux_layers_from_config`` (V2) on the drafter's hf_config.
* layers: ``_resolve_layer_attention(config, i)`` for each draft layer, with
  ``get_current_vllm_config()`` answering for the V1 and for the V2 runner.
* runner: ``VLLM_USE_V2_MODEL_RUNNER``'s default (envs.py), the
  ``VllmConfig.use_v2_model_runner`` property, the V1 runner's refusals
  (``if self.<check>(): unsupported.append(...)``), and the speculator the V2
  runner builds for ``method="dflash"`` (``init_speculator``).
* prefix block: the predicate ``Scheduler.__init__`` hands to
  ``KVCacheManager(use_eagle=...)``, evaluated on ``SpeculativeConfig`` with
  ``method="dflash"``.

Stubs: the drafter's hf_config holds the file's keys (speculators configs go
through the tree's own ``update_<type>`` translation first); a missing key
raises AttributeError as on a real config. ``SpeculativeConfig`` and
``VllmConfig`` carry the tree's own methods and literal field defaults; any
other attribute (the target model, the deployment) is a gap.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..model import UNKNOWN
from ..source import SiteError, SourceTree, Symbol
from . import sandbox
from .config import SPECULATORS, ZLAB, DraftConfig, draft_layer_count
from .extract import ExtractError, Locator, ProgramBuilder, Site, attribute_names
from .sandbox import Call, Chunk, Outcome, SandboxError

V1_RESOLVER = ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._get_eagle3_aux_layers_from_config")
V2_RESOLVER = ("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "get_eagle3_aux_layers_from_config")
LAYER_RESOLVER = ("vllm/model_executor/models/qwen3_dflash.py", "_resolve_layer_attention")
SPEC_CONFIG = ("vllm/config/speculative.py", "SpeculativeConfig")
VLLM_CONFIG = ("vllm/config/vllm.py", "VllmConfig")
RUNNER_PROPERTY = "use_v2_model_runner"
V1_REFUSALS = "_get_v1_model_runner_unsupported_features"
SPECULATOR_FACTORY = ("vllm/v1/worker/gpu/spec_decode/__init__.py", "init_speculator")
ENVS = "vllm/envs.py"
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
SCHEDULER = ("vllm/v1/core/sched/scheduler.py", "Scheduler.__init__")
SPECULATORS_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
OPT_OUT_FIELD = "disable_eagle_block_drop"
REFUSALS = ("NotImplementedError", "ValueError")  # deliberate refusals by vLLM code
PROVIDED = ("get_current_vllm_config", "envs", "logger", "os")
# Every DFlash release has these; the others are missing from older releases.
REQUIRED = (V1_RESOLVER, SPEC_CONFIG, VLLM_CONFIG, SCHEDULER)
OPTIONAL = (V2_RESOLVER, LAYER_RESOLVER, SPECULATOR_FACTORY)
RUNNERS = ("v1", "v2")
# Where a probe program runs: sandbox.run here, or the same request on the host that holds the tree.
Runner = Callable[[Sequence[Chunk], Sequence[Call], dict[str, Any], dict[str, Any]], dict[str, Outcome]]


class NotRegistered(ExtractError):
    """The tree has no loader for the drafter's format: it cannot run that drafter."""


@dataclasses.dataclass(frozen=True)
class RunnerSupport:
    supported: bool | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"supported": self.supported, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Probes:
    """Everything the probes computed; ``None`` means not computable (see ``reasons``)."""

    aux_layer_ids: tuple[int, ...] | None
    expected_aux_layer_ids: tuple[int, ...] | None
    aux_by_runner: tuple[tuple[str, Any], ...]
    layers: tuple[tuple[int | None, bool], ...] | None
    expected_layers: tuple[dict[str, Any], ...] | None
    runner: str | None
    default_runner: str | None
    runner_support: tuple[tuple[str, RunnerSupport], ...]
    drops_prefix_block: bool | None
    prefix_block_predicate: str | None
    drops_prefix_block_when_disabled: bool | None
    mismatches: tuple[str, ...]
    reasons: tuple[tuple[str, str], ...]
    evidence: tuple[Site, ...]
    has_opt_out: bool = False  # the tree's SpeculativeConfig has the opt-out flag
    hf_config: dict[str, Any] | None = dataclasses.field(default=None, compare=False)  # as vLLM builds it

    def to_json(self) -> dict[str, Any]:
        return {
            "aux_layer_ids": _list(self.aux_layer_ids),
            "expected_aux_layer_ids": _list(self.expected_aux_layer_ids),
            "aux_layer_ids_by_runner": {name: _list(value) if value != UNKNOWN else UNKNOWN for name, value in self.aux_by_runner},
            "layers": None if self.layers is None else [
                {"index": index, "sliding_window": window, "causal": causal} for index, (window, causal) in enumerate(self.layers)
            ],
            "expected_layers": None if self.expected_layers is None else list(self.expected_layers),
            "runner": self.runner,
            "default_runner": self.default_runner,
            "runner_support": {name: support.to_json() for name, support in self.runner_support},
            "drops_prefix_block": self.drops_prefix_block,
            "prefix_block_predicate": self.prefix_block_predicate,
            f"drops_prefix_block_with_{OPT_OUT_FIELD}": self.drops_prefix_block_when_disabled,
            "mismatches": list(self.mismatches),
            "evidence": [site.to_json() for site in self.evidence],
            "reason": dict(self.reasons) or None,
        }


def _list(value):
    return None if value is None else list(value)


# -- building the probe program ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _StubCall:
    """A call on an instance of a class stub (a runner, VllmConfig): made once
    the SpeculativeConfig stub it holds is known."""

    id: str
    expr: str
    holder: str
    owner: Symbol
    entries: tuple[str, ...]
    reason_key: str
    bind: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass
class _Plan:
    """Calls to make and what each needs; filled while the program is built."""

    calls: list[Call] = dataclasses.field(default_factory=list)
    stub_calls: list[_StubCall] = dataclasses.field(default_factory=list)
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    evidence: list[Site] = dataclasses.field(default_factory=list)
    v1_refusals: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    drop: DropPredicate | None = None
    has_opt_out: bool = False
    has_runner_property: bool = False


def run_probes(tree: SourceTree, draft: DraftConfig, run: Runner = sandbox.run) -> Probes:
    return probe_configs(tree, (draft,), run)[0]


def probe_configs(tree: SourceTree, drafts: tuple[DraftConfig, ...], run: Runner = sandbox.run) -> tuple[Probes, ...]:
    """The probes of every drafter config, planned once and run in one sandbox process
    (``run``: where the program runs, ``sandbox.run`` or a remote host's equivalent)."""
    hfs: list[tuple[dict[str, Any], Site | None] | str | NotRegistered] = []
    for draft in drafts:
        try:
            hfs.append(_hf_config(tree, draft, run))
        except NotRegistered as exc:
            hfs.append(exc)
        except (ExtractError, SandboxError) as exc:
            hfs.append(f"the drafter's hf_config could not be built: {exc}")
    plan = _Plan()
    builder = ProgramBuilder(tree, PROVIDED)
    locator = Locator(tree, REQUIRED, OPTIONAL)
    spec_symbol = _optional(plan, "spec", lambda: locator.one(*SPEC_CONFIG))
    _plan_aux(locator, builder, plan)
    _plan_layers(locator, builder, plan)
    _plan_runner(tree, locator, builder, plan)
    _plan_prefix_block(locator, plan, spec_symbol)
    failed = None
    if spec_symbol is None:
        failed = plan.reasons.get("spec") or f"{SPEC_CONFIG[1]} not found in {SPEC_CONFIG[0]}"
    else:
        try:
            spec_body = _build_stubs(builder, spec_symbol, plan)
        except ExtractError as exc:
            failed = f"{SPEC_CONFIG[1]} could not be stubbed: {exc}"
    if failed:
        return tuple(_nothing(draft, failed if isinstance(hf, tuple) else str(hf)) for draft, hf in zip(drafts, hfs))
    plan.evidence.append(Site(spec_symbol.file, spec_symbol.qualname, spec_symbol.line))
    plans: list[_Plan] = []  # one per drafter config: its own reasons and evidence
    calls: list[Call] = []
    data: dict[str, Any] = {}
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        mine = dataclasses.replace(plan, reasons=dict(plan.reasons), evidence=list(plan.evidence))
        plans.append(mine)
        if not isinstance(hf, tuple):
            continue
        hf_data, translation_site = hf
        if translation_site:
            mine.evidence.insert(0, translation_site)
        data[f"hf{index}"] = hf_data
        count = draft_layer_count(hf_data)
        if count is None and "layers" not in mine.reasons:
            mine.reasons["layers"] = "the drafter config has no usable num_hidden_layers"
        spec_attrs: dict[str, Any] = {
            "method": "dflash",
            "draft_model_config": sandbox.strict_object(
                "draft_model_config", hf_config=sandbox.config_object("hf_config", f"hf{index}"),
                architectures=list(hf_data.get("architectures") or []),
            ),
        }
        block = draft.block_size
        if isinstance(block, int) and not isinstance(block, bool) and block > 1:
            spec_attrs["num_speculative_tokens"] = block - 1
        spec = sandbox.class_instance(SPEC_CONFIG[1], spec_body, **spec_attrs)
        for call in plan.calls:
            if call.id.startswith("layers:") and count is None:
                continue
            call = _with_spec(call, spec, spec_body, spec_attrs, f"hf{index}", count)
            calls.append(Call(f"{index}|{call.id}", call.expr, call.bind))
    globals_ = {name: sandbox.gap(label) for name, label in builder.gaps.items()}
    globals_["logger"] = sandbox.noop("logger")
    globals_["os"] = sandbox.unset_env("os")
    try:
        outcomes = run(builder.chunks, calls, data, globals_) if calls else {}
    except SandboxError as exc:
        return tuple(_nothing(draft, str(exc)) for draft in drafts)
    answers = []
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        if isinstance(hf, NotRegistered):  # no runner of this tree can load the drafter at all
            refused = RunnerSupport(False, str(hf))
            answers.append(dataclasses.replace(_nothing(draft, str(hf)), runner_support=tuple((name, refused) for name in RUNNERS)))
            continue
        if isinstance(hf, str):
            answers.append(_nothing(draft, hf))
            continue
        prefix = f"{index}|"
        mine = {call_id[len(prefix):]: outcome for call_id, outcome in outcomes.items() if call_id.startswith(prefix)}
        found = _interpret(plans[index], mine, builder, draft, draft.expected_aux_layer_ids(), draft.expected_layers())
        answers.append(dataclasses.replace(found, hf_config=hf[0]))
    return tuple(answers)


def _nothing(draft: DraftConfig, reason: str) -> Probes:
    fields = ("aux_layer_ids", "layers", "runner", "drops_prefix_block")
    expected_layers = draft.expected_layers()
    return Probes(
        aux_layer_ids=None, expected_aux_layer_ids=draft.expected_aux_layer_ids(), aux_by_runner=(), layers=None,
        expected_layers=None if expected_layers is None else tuple(expected_layers), runner=None, default_runner=None,
        runner_support=(), drops_prefix_block=None, prefix_block_predicate=None, drops_prefix_block_when_disabled=None,
        mismatches=(), reasons=tuple((field, reason) for field in fields), evidence=(),
    )


def _optional(plan: _Plan, key: str, find):
    try:
        return find()
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return None


def _hf_config(tree: SourceTree, draft: DraftConfig, run: Runner) -> tuple[dict[str, Any], Site | None]:
    """The drafter's hf_config keys as vLLM builds them (speculators: the tree's translation)."""
    if draft.format != SPECULATORS:
        return dict(draft.data), None
    kind = draft.data.get("speculators_model_type")
    parsed = _parsed_or_none(tree, SPECULATORS_ALGOS)
    updater = None
    for node in parsed.tree.body if parsed else ():
        if isinstance(node, ast.FunctionDef) and any(_registers(d, kind) for d in node.decorator_list):
            updater = node
    if updater is None:
        raise NotRegistered(f"this vLLM registers no speculators translation for {kind!r} in {SPECULATORS_ALGOS}")
    builder = ProgramBuilder(tree, ())
    symbol = Symbol(SPECULATORS_ALGOS, updater.name, updater, parsed)
    name = builder.function(symbol)
    call = Call("translate", f"({name}(config_dict=config_dict, pre_trained_config=pre), pre)[1]",
                (("config_dict", sandbox.data_ref("draft")), ("pre", sandbox.data_ref("layers"))))
    layers = draft.data.get("transformer_layer_config")
    globals_ = {gap_name: sandbox.gap(label) for gap_name, label in builder.gaps.items()}
    outcomes = run(builder.chunks, [call], {"draft": draft.data, "layers": layers if isinstance(layers, dict) else {}}, globals_)
    outcome = outcomes.get("translate", Outcome(gap="no answer"))
    if not outcome.ok or not isinstance(outcome.value, dict):
        raise ExtractError(f"{updater.name} in {SPECULATORS_ALGOS} {_failure(outcome)}")
    return outcome.value, Site(SPECULATORS_ALGOS, updater.name, updater.lineno)


def _registers(decorator: ast.expr, kind: Any) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and decorator.args[0].value == kind
    )


def _plan_aux(locator: Locator, builder: ProgramBuilder, plan: _Plan) -> None:
    v1 = _optional(plan, "aux:v1", lambda: locator.one(*V1_RESOLVER))
    owner = _optional(plan, "aux:v1", lambda: _owner(v1)) if v1 is not None else None
    if owner is not None:
        method = v1.qualname.rsplit(".", 1)[-1]
        plan.stub_calls.append(_StubCall("aux:v1", f"runner.{method}()", "runner", owner, (method,), "aux:v1"))
        plan.evidence.append(Site(v1.file, v1.qualname, v1.line))
    elif v1 is None:
        plan.reasons.setdefault("aux:v1", f"{V1_RESOLVER[1]} not found in this tree")
    v2 = _optional(plan, "aux:v2", lambda: locator.one(*V2_RESOLVER))
    if v2 is not None and _add(builder, plan, "aux:v2", v2):
        plan.calls.append(Call("aux:v2", f"{v2.node.name}(spec)"))
    elif v2 is None:
        plan.reasons.setdefault("aux:v2", f"{V2_RESOLVER[1]} not found in this tree")


def _plan_layers(locator: Locator, builder: ProgramBuilder, plan: _Plan) -> None:
    resolver = _optional(plan, "layers", lambda: locator.one(*LAYER_RESOLVER))
    if resolver is None:
        plan.reasons.setdefault("layers", f"this vLLM has no per-layer resolver ({LAYER_RESOLVER[1]} in {LAYER_RESOLVER[0]}); "
                                          "the swa-config verdict says what its draft layers do")
        return
    if not _add(builder, plan, "layers", resolver):
        return
    for runner in RUNNERS:
        current = sandbox.strict_object("VllmConfig", use_v2_model_runner=runner == "v2")
        plan.calls.append(Call(
            f"layers:{runner}", f"[{resolver.node.name}(config, index) for index in range(layer_count)]",
            (("config", sandbox.config_object("hf_config", "hf")), ("get_current_vllm_config", sandbox.returns(current))),
        ))


def _plan_runner(tree: SourceTree, locator: Locator, builder: ProgramBuilder, plan: _Plan) -> None:
    parsed = _optional(plan, "runner:env", lambda: _parsed_or_none(tree, ENVS))
    lam = _env_lambda(parsed.tree) if parsed is not None else None
    if lam is None:
        plan.reasons.setdefault("runner:env", f"no {RUNNER_ENV} entry in {ENVS}" if parsed is not None else f"{ENVS} is not in this tree")
    else:
        try:
            name = builder.expression_function(ENVS, "_default_" + RUNNER_ENV, lam.body)
            plan.calls.append(Call("runner:env", f"{name}()"))
            plan.evidence.append(Site(ENVS, f"environment_variables[{RUNNER_ENV!r}]", lam.lineno))
        except ExtractError as exc:
            plan.reasons["runner:env"] = str(exc)
    vllm_config = _optional(plan, "runner:default", lambda: locator.one(*VLLM_CONFIG))
    if vllm_config is not None and isinstance(vllm_config.node, ast.ClassDef):
        methods = {s.name: s for s in vllm_config.node.body if isinstance(s, ast.FunctionDef)}
        if RUNNER_PROPERTY in methods:
            plan.has_runner_property = True
            plan.evidence.append(Site(vllm_config.file, f"{vllm_config.qualname}.{RUNNER_PROPERTY}", methods[RUNNER_PROPERTY].lineno))
            for value in (None, False, True):
                envs = sandbox.strict_object("envs", **{RUNNER_ENV: value})
                plan.stub_calls.append(_StubCall(f"runner:default:{value}", f"vllm_config.{RUNNER_PROPERTY}", "vllm_config",
                                                 vllm_config, (RUNNER_PROPERTY,), "runner:default", (("envs", envs),)))
        if V1_REFUSALS in methods:
            plan.evidence.append(Site(vllm_config.file, f"{vllm_config.qualname}.{V1_REFUSALS}", methods[V1_REFUSALS].lineno))
            for check, message in _refusal_checks(methods[V1_REFUSALS], set(methods)):
                plan.v1_refusals.append((check, message))
                plan.stub_calls.append(_StubCall(f"v1-refusal:{check}", f"vllm_config.{check}()", "vllm_config",
                                                 vllm_config, (check,), f"v1-refusal:{check}"))
    factory = _optional(plan, "runner:v2", lambda: locator.one(*SPECULATOR_FACTORY))
    if factory is None:
        plan.reasons.setdefault("runner:v2", f"{SPECULATOR_FACTORY[1]} not found in {SPECULATOR_FACTORY[0]}: no V2 speculator to check")
    elif _add(builder, plan, "runner:v2", factory):
        extra = ", None" * max(0, _required_positional(factory.node) - 1)
        plan.calls.append(Call("runner:v2", f"{factory.node.name}(vllm_config{extra})",
                               (("vllm_config", {"$marker": "plain-vllm-config"}),)))


def _plan_prefix_block(locator: Locator, plan: _Plan, spec_symbol: Symbol | None) -> None:
    scheduler = _optional(plan, "prefix", lambda: locator.one(*SCHEDULER))
    if scheduler is None:
        plan.reasons.setdefault("prefix", f"{SCHEDULER[1]} not found in {SCHEDULER[0]}")
        return
    try:
        plan.drop = _drop_predicate(scheduler)
    except ExtractError as exc:
        plan.reasons["prefix"] = str(exc)
        return
    plan.evidence.append(Site(scheduler.file, scheduler.qualname, scheduler.line))
    plan.calls.append(Call("prefix", plan.drop.expression.format(spec="spec")))
    if spec_symbol is not None and any(
        isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == OPT_OUT_FIELD for s in spec_symbol.node.body
    ):
        plan.has_opt_out = True
        plan.calls.append(Call("prefix:opt-out", plan.drop.expression.format(spec="spec_opted_out")))


def _add(builder: ProgramBuilder, plan: _Plan, key: str, symbol: Symbol) -> bool:
    try:
        builder.function(symbol)
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return False
    plan.evidence.append(Site(symbol.file, symbol.qualname, symbol.line))
    return True


def _owner(method: Symbol) -> Symbol:
    class_name = method.qualname.rsplit(".", 1)[0]
    owner = method.parsed.symbols(class_name)
    if len(owner) != 1:
        raise ExtractError(f"the class of {method.qualname} cannot be told apart in {method.file}")
    return owner[0]


def _parsed_or_none(tree, relpath):
    try:
        return tree.parsed(relpath)
    except SiteError as exc:
        raise ExtractError(str(exc)) from None


def _env_lambda(module: ast.Module) -> ast.Lambda | None:
    for statement in module.body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and key.value == RUNNER_ENV and isinstance(item, ast.Lambda) and not item.args.args:
                    return item
    return None


def _refusal_checks(function: ast.FunctionDef, methods: set[str]) -> list[tuple[str, str]]:
    """``if self.<check>(): unsupported.append("...")`` in the V1 refusal list."""
    checks = []
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (
            isinstance(test, ast.Call) and not test.args and isinstance(test.func, ast.Attribute)
            and isinstance(test.func.value, ast.Name) and test.func.value.id == "self" and test.func.attr in methods
        ):
            appended = [
                n.args[0] for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" and n.args
            ]
            message = appended[0].value if appended and isinstance(appended[0], ast.Constant) else test.func.attr
            checks.append((test.func.attr, str(message)))
    return checks


def _required_positional(function: ast.FunctionDef) -> int:
    arguments = function.args
    return len(arguments.posonlyargs) + len(arguments.args) - len(arguments.defaults)


@dataclasses.dataclass(frozen=True)
class DropPredicate:
    """What ``KVCacheManager(use_eagle=...)`` is told, as an expression over the
    SpeculativeConfig (``{spec}`` stands for it), and the lines that may turn the
    drop off afterwards."""

    shown: str  # a method name, or the expression for a compound one
    expression: str
    methods: tuple[str, ...]
    overrides: tuple[int, ...]


def _drop_predicate(scheduler: Symbol) -> DropPredicate:
    handed = None
    for node in ast.walk(scheduler.node):
        if isinstance(node, ast.Call) and _callee(node.func) == "KVCacheManager":
            handed = next((k.value for k in node.keywords if k.arg == "use_eagle"), handed)
    if handed is None:
        raise ExtractError(f"{scheduler.qualname} hands no use_eagle= to KVCacheManager")
    methods: list[str] = []
    overrides: list[int] = []

    def translate(node: ast.expr) -> str:
        """``spec.m()`` / ``x.speculative_config.m()`` / ``self.attr`` (assigned from one),
        joined by and/or/not; anything else is a form the probe does not know."""
        if isinstance(node, ast.BoolOp):
            joiner = " and " if isinstance(node.op, ast.And) else " or "
            return "(" + joiner.join(translate(value) for value in node.values) + ")"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"(not {translate(node.operand)})"
        if isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute) and not (
            isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
        ):
            methods.append(node.func.attr)
            return "{spec}." + node.func.attr + "()"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            method, later = _attribute_predicate(scheduler, node.attr)
            methods.append(method)
            overrides.extend(later)
            return "{spec}." + method + "()"
        raise ExtractError(f"KVCacheManager(use_eagle={ast.unparse(handed)}) is a form the probe does not know")

    expression = translate(handed)
    shown = methods[0] if len(methods) == 1 and expression == "{spec}." + methods[0] + "()" else expression.replace("{spec}.", "")
    return DropPredicate(shown, expression, tuple(dict.fromkeys(methods)), tuple(sorted(set(overrides))))


def _attribute_predicate(scheduler: Symbol, attribute: str) -> tuple[str, tuple[int, ...]]:
    """The SpeculativeConfig method ``self.<attribute>`` is set from in ``Scheduler.__init__``,
    and the lines that may set it False afterwards."""
    assignments: list[tuple[ast.Assign, list[ast.expr]]] = []

    def visit(statements, tests):
        for statement in statements:
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" and t.attr == attribute
                for t in statement.targets
            ):
                assignments.append((statement, tests))
            if isinstance(statement, ast.If):
                visit(statement.body, [*tests, statement.test])
                visit(statement.orelse, [*tests, ast.UnaryOp(op=ast.Not(), operand=statement.test)])
            elif isinstance(statement, (ast.For, ast.While, ast.With, ast.Try)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(statement, field, []) or [], [*tests, statement])
                for handler in getattr(statement, "handlers", []) or []:
                    visit(handler.body, [*tests, handler])

    visit(scheduler.node.body, [])
    predicate, index = None, -1
    for position, (statement, tests) in enumerate(assignments):
        value = statement.value
        if isinstance(value, ast.Call) and not value.args and isinstance(value.func, ast.Attribute) and not (
            isinstance(value.func.value, ast.Name) and value.func.value.id == "self"
        ):
            predicate, index = value.func.attr, position
        elif isinstance(value, ast.Constant) and value.value is True and tests and _predicate_test(tests[-1]):
            predicate, index = tests[-1].func.attr, position
    if predicate is None:
        raise ExtractError(f"no assignment of self.{attribute} in {scheduler.qualname} reads a SpeculativeConfig predicate")
    overrides = []
    for statement, _ in assignments[index + 1:]:
        if isinstance(statement.value, ast.Constant) and statement.value.value is False:
            overrides.append(statement.lineno)
        else:
            raise ExtractError(f"self.{attribute} is set again at line {statement.lineno} in a form the probe does not know")
    return predicate, tuple(overrides)


def _shown(plan: _Plan) -> str:
    shown = plan.drop.shown
    return f"{shown}()" if shown.isidentifier() else shown


def _predicate_test(test: ast.expr) -> bool:
    return isinstance(test, ast.Call) and not test.args and isinstance(test.func, ast.Attribute)


def _callee(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _build_stubs(builder: ProgramBuilder, spec_symbol: Symbol, plan: _Plan) -> str:
    """Build the class stubs of the planned calls, then the SpeculativeConfig body
    with every method the program reads (until no new one is needed)."""
    bodies: dict[tuple[str, str, tuple[str, ...]], str] = {}
    for stub_call in plan.stub_calls:
        key = (stub_call.owner.file, stub_call.owner.qualname, stub_call.entries)
        try:
            if key not in bodies:
                bodies[key] = builder.class_body(stub_call.owner, stub_call.entries)
        except ExtractError as exc:
            plan.reasons[stub_call.reason_key] = str(exc)
            continue
        holder = {"$marker": "class", "label": stub_call.owner.node.name, "body": bodies[key]}
        plan.calls.append(Call(stub_call.id, stub_call.expr, ((stub_call.holder, holder), *stub_call.bind)))
    seen: set[str] = set()
    body = ""
    while True:
        wanted = builder.attribute_names() | attribute_names(body or "pass")
        for other in bodies.values():
            wanted |= attribute_names(other)
        if plan.drop:
            wanted.update(plan.drop.methods)
        if wanted <= seen:
            return body
        seen |= wanted
        body = builder.class_body(spec_symbol, sorted(seen), option_defaults=True)


def _with_spec(call: Call, spec: dict, spec_body: str, spec_attrs: dict, hf_name: str, layer_count: int | None) -> Call:
    """Resolve the markers left in calls for one drafter config: every stub that
    holds its SpeculativeConfig, and its hf_config under its own data name."""
    bind = []
    for name, value in call.bind:
        if isinstance(value, dict) and value.get("$marker") == "class":
            value = sandbox.class_instance(value["label"], value["body"], speculative_config=spec)
        elif isinstance(value, dict) and value.get("$marker") == "plain-vllm-config":
            value = sandbox.strict_object("VllmConfig", speculative_config=spec)
        elif value == sandbox.config_object("hf_config", "hf"):
            value = sandbox.config_object("hf_config", hf_name)
        bind.append((name, value))
    bind.append(("spec", spec))
    if call.id.startswith("layers:"):
        bind.append(("layer_count", layer_count))
    if call.id == "prefix:opt-out":
        bind.append(("spec_opted_out", sandbox.class_instance(SPEC_CONFIG[1], spec_body, **spec_attrs, **{OPT_OUT_FIELD: True})))
    return Call(call.id, call.expr, tuple(bind))


# -- reading the answers ------------------------------------------------------------


def _failure(outcome: Outcome) -> str:
    why = outcome.unknowable
    if why:
        return f"could not be evaluated: {why}"
    return f"raises {outcome.error_type}: {outcome.error_message}"


def _interpret(plan: _Plan, outcomes: dict[str, Outcome], builder: ProgramBuilder, draft: DraftConfig,
               expected_aux, expected_layers) -> Probes:
    reasons: dict[str, str] = {}
    mismatches: list[str] = []

    def outcome(call_id: str) -> Outcome | None:
        result = outcomes.get(call_id)
        if result is not None and result.gap and result.gap in builder.omitted:
            return dataclasses.replace(result, gap=f"{result.gap} ({builder.omitted[result.gap]})")
        return result

    # Runner support and choice.
    support: dict[str, RunnerSupport] = {}
    layer_results = {runner: outcome(f"layers:{runner}") for runner in RUNNERS}
    support["v1"] = _v1_support(plan, outcome, layer_results["v1"])
    support["v2"] = _v2_support(plan, outcome, layer_results["v2"])
    default, default_why = _default_runner(plan, outcome)
    runner, runner_why = _choose_runner(default, default_why, support)
    if default is None:
        reasons["default_runner"] = default_why
    if runner is None:
        reasons["runner"] = runner_why
        if all(support[name].supported is False for name in RUNNERS):
            mismatches.append(f"no runner of this vLLM accepts this drafter: {support['v1'].reason}")
    elif support[runner].supported is False:
        mismatches.append(f"this vLLM runs the drafter on the {runner.upper()} runner ({runner_why}), which refuses it: {support[runner].reason}")

    # Aux layer ids.
    aux_by_runner: dict[str, Any] = {}
    for name in RUNNERS:
        result = outcome(f"aux:{name}")
        if result is None:
            aux_by_runner[name] = UNKNOWN
            reasons[f"aux_layer_ids_by_runner.{name}"] = plan.reasons.get(f"aux:{name}", "not probed")
        elif result.ok and (result.value is None or _int_sequence(result.value)):
            aux_by_runner[name] = None if result.value is None else tuple(result.value)
        else:
            aux_by_runner[name] = UNKNOWN
            reasons[f"aux_layer_ids_by_runner.{name}"] = f"the {name.upper()} resolver {_failure(result)}"
    aux, aux_why = _pick(aux_by_runner, runner, "aux layer ids")
    if aux_why:
        reasons["aux_layer_ids"] = aux_why
    if aux is None and runner and aux_by_runner.get(runner) is None:
        reasons["aux_layer_ids"] = (f"the {runner.upper()} resolver returns None for this config: vLLM ignores the drafter's ids "
                                    "and captures the target model's default aux layers")
        mismatches.append(reasons["aux_layer_ids"])
    if aux is not None and expected_aux is not None and tuple(aux) != tuple(expected_aux):
        raw = draft.layer_ids
        detail = " (the raw target_layer_ids, without +1)" if draft.format == ZLAB and list(aux) == list(raw) else ""
        mismatches.append(f"vLLM captures aux layers {list(aux)}{detail}, the drafter expects {list(expected_aux)}")
    if expected_aux is None:
        reasons["expected_aux_layer_ids"] = "the drafter config states no usable layer ids"

    # Per-layer windows and causality.
    by_runner: dict[str, Any] = {}
    for name in RUNNERS:
        result = layer_results[name]
        if result is None:
            by_runner[name] = UNKNOWN
        elif result.ok and _layer_list(result.value):
            by_runner[name] = tuple((window, causal) for window, causal in result.value)
        else:
            by_runner[name] = UNKNOWN
    layers, layers_why = _pick(by_runner, runner, "per-layer attention")
    if layers is None:
        reasons["layers"] = plan.reasons.get("layers") or layers_why or _layers_failure(layer_results, runner)
    elif expected_layers is not None:
        for (window, causal), wanted in zip(layers, expected_layers):
            index = wanted["index"]
            if window != wanted["sliding_window"]:
                mismatches.append(f"draft layer {index}: vLLM uses sliding window {window}, the drafter was trained with {wanted['sliding_window']}")
            if wanted["causal"] is not None and causal != wanted["causal"]:
                mismatches.append(f"draft layer {index}: vLLM runs it {'causal' if causal else 'non-causal'}, the drafter was trained {'causal' if wanted['causal'] else 'non-causal'}")

    # Prefix-cache block drop.
    drops, drops_disabled = _prefix_block(plan, outcome, reasons)
    if drops:
        hint = f"; {OPT_OUT_FIELD}: true turns it off" if drops_disabled is False else ""
        mismatches.append(f"the scheduler drops the last matched prefix-cache block for method='dflash' ({_shown(plan)} is true){hint}")

    return Probes(
        aux_layer_ids=None if aux is None else tuple(aux),
        expected_aux_layer_ids=expected_aux,
        aux_by_runner=tuple((name, aux_by_runner[name]) for name in RUNNERS),
        layers=layers,
        expected_layers=None if expected_layers is None else tuple(expected_layers),
        runner=runner,
        default_runner=default,
        runner_support=tuple((name, support[name]) for name in RUNNERS),
        drops_prefix_block=drops,
        prefix_block_predicate=plan.drop.shown if plan.drop else None,
        drops_prefix_block_when_disabled=drops_disabled,
        mismatches=tuple(mismatches),
        reasons=tuple(reasons.items()),
        evidence=tuple(dict.fromkeys(plan.evidence)),
        has_opt_out=plan.has_opt_out,
    )


def _int_sequence(value) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _layer_list(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, list) and len(item) == 2 and (item[0] is None or isinstance(item[0], int)) and isinstance(item[1], bool)
        for item in value
    )


def _pick(by_runner: dict[str, Any], runner: str | None, what: str) -> tuple[Any, str | None]:
    """The answer of the runner that runs the drafter; else the answer both runners agree on."""
    if runner is not None:
        value = by_runner.get(runner, UNKNOWN)
        return (None, f"the {runner.upper()} runner's {what} could not be computed") if value is UNKNOWN else (value, None)
    known = [value for value in by_runner.values() if value is not UNKNOWN]
    if len(known) == len(by_runner) and all(value == known[0] for value in known):
        return known[0], None
    if len(known) == 1 and len(by_runner) > 1:
        return None, f"only one runner's {what} could be computed and the runner is not known"
    if known:
        return None, f"the V1 and V2 runners give different {what} and which runner runs is not known"
    return None, None


def _layers_failure(results: dict[str, Outcome | None], runner: str | None) -> str:
    chosen = [results[runner]] if runner else [r for r in results.values() if r is not None]
    for result in chosen:
        if result is not None and not result.ok:
            return f"{LAYER_RESOLVER[1]} {_failure(result)}"
    return "not computable"


def _v1_support(plan: _Plan, outcome, layers: Outcome | None) -> RunnerSupport:
    unknown = []
    if layers is not None:
        if layers.error_type in REFUSALS:
            return RunnerSupport(False, f"{LAYER_RESOLVER[1]} raises {layers.error_type}: {layers.error_message}")
        if not layers.ok:
            unknown.append(f"{LAYER_RESOLVER[1]} {_failure(layers)}")
    for check, message in plan.v1_refusals:
        result = outcome(f"v1-refusal:{check}")
        if result is None:
            unknown.append(f"{check} could not be stubbed: {plan.reasons.get(f'v1-refusal:{check}', '?')}")
        elif result.ok and result.value is True:
            return RunnerSupport(False, f"VllmConfig.{V1_REFUSALS} lists {message!r} ({check}() is true for this drafter)")
        elif not result.ok:
            unknown.append(f"{check} {_failure(result)}")
    if unknown:
        return RunnerSupport(None, "; ".join(unknown))
    return RunnerSupport(True, "no V1 refusal of this drafter in this tree")


def _v2_support(plan: _Plan, outcome, layers: Outcome | None) -> RunnerSupport:
    result = outcome("runner:v2")
    if result is None:
        return RunnerSupport(None, plan.reasons.get("runner:v2", "not probed"))
    if result.error_type == "NotImplementedError":
        return RunnerSupport(False, f"{SPECULATOR_FACTORY[1]} raises NotImplementedError: {result.error_message}")
    built = result.value.get("$constructed") if result.ok and isinstance(result.value, dict) else None
    if built is None:
        return RunnerSupport(None, f"{SPECULATOR_FACTORY[1]} {_failure(result)}" if not result.ok else f"{SPECULATOR_FACTORY[1]} builds no speculator class the probe can name")
    speculator = built.rsplit(".", 1)[-1]
    if ".eagle." in f".{built}.":
        return RunnerSupport(False, f"the V2 runner builds {speculator} ({built}) for method='dflash': it runs the drafter as EAGLE, with no DFlash speculator")
    if layers is not None and layers.error_type in REFUSALS:
        return RunnerSupport(False, f"{LAYER_RESOLVER[1]} raises {layers.error_type}: {layers.error_message}")
    if layers is not None and not layers.ok:
        return RunnerSupport(None, f"{LAYER_RESOLVER[1]} {_failure(layers)}")
    return RunnerSupport(True, f"the V2 runner builds {speculator} ({built})")


def _default_runner(plan: _Plan, outcome) -> tuple[str | None, str]:
    env = outcome("runner:env")
    if env is None or not env.ok or env.value not in (None, True, False):
        why = plan.reasons.get("runner:env") or (f"its default {_failure(env)}" if env is not None else "not probed")
        return None, f"the default of {RUNNER_ENV} is not known: {why}"
    if not plan.has_runner_property:
        runner = "v2" if env.value else "v1"
        return runner, f"{RUNNER_ENV} defaults to {env.value} in {ENVS} and nothing else chooses the runner"
    result = outcome(f"runner:default:{env.value}")
    if result is None:
        return None, plan.reasons.get("runner:default", "VllmConfig could not be stubbed")
    if result.ok and isinstance(result.value, bool):
        runner = "v2" if result.value else "v1"
        return runner, f"VllmConfig.{RUNNER_PROPERTY} is {result.value} for this drafter with {RUNNER_ENV} unset"
    if result.gap:
        return None, f"with {RUNNER_ENV} unset, VllmConfig.{RUNNER_PROPERTY} reads {result.gap} before deciding: it depends on the target model and deployment"
    return None, f"VllmConfig.{RUNNER_PROPERTY} {_failure(result)}"


def _choose_runner(default: str | None, default_why: str, support: dict[str, RunnerSupport]) -> tuple[str | None, str]:
    if default is not None:
        return default, default_why
    accepted = [name for name in RUNNERS if support[name].supported is True]
    refused = [name for name in RUNNERS if support[name].supported is False]
    if len(accepted) == 1 and len(refused) == 1:
        return accepted[0], f"only the {accepted[0].upper()} runner accepts this drafter"
    if len(accepted) == 2:
        return None, f"both runners accept this drafter; {default_why}"
    if len(refused) == 2:
        return None, "no runner of this vLLM accepts this drafter"
    return None, f"{default_why}; and whether each runner accepts the drafter is not fully known"


def _prefix_block(plan: _Plan, outcome, reasons: dict[str, str]) -> tuple[bool | None, bool | None]:
    result = outcome("prefix")
    if plan.drop is None or result is None:
        reasons["drops_prefix_block"] = plan.reasons.get("prefix") or plan.reasons.get("spec") or "not probed"
        return None, None
    if not result.ok or not isinstance(result.value, bool):
        reasons["drops_prefix_block"] = f"SpeculativeConfig: {_shown(plan)} {_failure(result)}"
        return None, None
    drops = result.value
    if drops and plan.drop.overrides:
        lines = ", ".join(str(line) for line in plan.drop.overrides)
        reasons["drops_prefix_block"] = (f"{_shown(plan)} is true for method='dflash', but {SCHEDULER[1]} may turn the drop off "
                                         f"again (line {lines}) under conditions the probe cannot know")
        return None, None
    disabled = None
    if plan.has_opt_out:
        opted = outcome("prefix:opt-out")
        if opted is not None and opted.ok and isinstance(opted.value, bool):
            disabled = opted.value
    return drops, disabled
