"""Stubs the planned calls run on: class bodies copied from the tree, and the
speculative config each drafter config is asked about."""

from __future__ import annotations

from ..isolation import sandbox
from ..isolation.sandbox import Call
from ..source import Symbol
from .definitions import ExtractError, attribute_names
from .plan import Plan
from .program import ProgramBuilder


def build_stubs(builder: ProgramBuilder, spec_symbol: Symbol, plan: Plan) -> str:
    """Build the class stubs of the planned calls, then the speculative config's body
    with every method the program reads (until no new one is needed)."""
    bodies: dict[tuple[str, str, tuple[str, ...], bool], str] = {}
    for stub_call in plan.stub_calls:
        key = (stub_call.owner.file, stub_call.owner.qualname, stub_call.entries, stub_call.loose)
        try:
            if key not in bodies:
                # a loose stub stands for the deployment: its fields keep their launch defaults
                bodies[key] = builder.class_body(stub_call.owner, stub_call.entries, option_defaults=stub_call.loose)
        except ExtractError as exc:
            plan.reasons[stub_call.reason_key] = str(exc)
            continue
        holder = {
            "$marker": "class",
            "label": stub_call.owner.qualname.rsplit(".", 1)[-1],
            "body": bodies[key],
            "holds": stub_call.holds,
            "loose": stub_call.loose,
        }
        plan.calls.append(Call(stub_call.id, stub_call.expr, ((stub_call.holder, holder), *stub_call.bind)))
    seen: set[str] = set()
    body = ""
    while True:
        wanted = builder.attribute_names() | attribute_names(body or "pass")
        for other in bodies.values():
            wanted |= attribute_names(other)
        if plan.drop:
            wanted.update(plan.drop.attributes)
        if wanted <= seen:
            return body
        seen |= wanted
        body = builder.class_body(spec_symbol, sorted(seen), option_defaults=True)


def with_spec(
    plan: Plan, call: Call, spec: dict, spec_body: str, spec_attrs: dict, hf_name: str, layer_count: int | None
) -> Call:
    """Resolve the markers left in calls for one drafter config: every stub that
    holds its speculative config, and its hf_config under its own data name."""
    route = plan.route
    opted = {plan.opt_out: True} if plan.opt_out else {}
    opted_out = sandbox.class_instance(route.speculative_config.name, spec_body, **spec_attrs, **opted)
    bind = []
    for name, value in call.bind:
        if isinstance(value, dict) and value.get("$marker") == "class":
            held = opted_out if value.get("holds") == "spec_opted_out" else spec
            value = sandbox.class_instance(
                value["label"], value["body"], loose=value.get("loose", False), **{route.fields.speculative: held}
            )
        elif isinstance(value, dict) and value.get("$marker") == "plain-deployment":
            value = sandbox.strict_object(route.deployment_config.name, **{route.fields.speculative: spec})
        elif value == sandbox.config_object("hf_config", "hf"):
            value = sandbox.config_object("hf_config", hf_name)
        bind.append((name, value))
    bind.append(("spec", spec))
    if call.id in plan.layer_calls:
        bind.append(("layer_count", layer_count))
    return Call(call.id, call.expr, tuple(bind))
