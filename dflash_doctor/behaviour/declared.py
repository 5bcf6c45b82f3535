"""The speculator config a drafter's model class declares, as the engine's model config reports it.

vLLM's ``ModelConfig.speculator_config_class`` returns what the model registry found
when it inspected the drafter's model class: that class's attribute of the same name,
by qualified name. The engine inspects the class in a subprocess; behaviour does not
run that inspection. It looks the class up in the tree's own registry table for the
drafter's architectures and reads the attribute from the class copied by name
(by_name.py). Only a tree whose model config has the property gets it on the drafter's
model config. Which class, table and property these are is the engine's route.
"""

from __future__ import annotations

import ast

from ..engines.route import Route
from ..source import SourceError, SourceTree
from .definitions import ExtractError, parsed_or_none
from .program import ProgramBuilder

FUNCTION = "_declared_speculator_config"
NOT_IN_TABLE = "_architecture_not_in_registry"
SNIPPET = """def {function}(architectures):
    for architecture in architectures:
        if architecture in {table}:
            module, name = {table}[architecture]
            model = getattr(_stdlib("importlib").import_module({module_name}(module)), name)
            declared = getattr(model, {declared!r}, None)
            return None if declared is None else declared._qualified_name
    return {missing}()
"""


def plan_declared(tree: SourceTree, route: Route, builder: ProgramBuilder) -> str | None:
    """The body of the drafter model config's class (the property reading the declared
    config), its definitions copied into ``builder``; None when the tree's model config
    has no such property (or the registry cannot be read: then reading it is a gap)."""
    where, declared, models = route.model_config, route.declared, route.models
    try:
        text = tree.data(where.file)
        # the file is long: parsed only where it names the property at all
        model_config = parsed_or_none(tree, where.file) if text and f"def {declared}(".encode() in text else None
    except (SourceError, ExtractError):  # not sent by the collector: reading the property stays a gap
        return None
    classes = (
        []
        if model_config is None
        else [node for node in model_config.tree.body if isinstance(node, ast.ClassDef) and node.name == where.symbol]
    )
    if len(classes) != 1 or not any(
        isinstance(item, ast.FunctionDef) and item.name == declared for item in classes[0].body
    ):
        return None
    try:
        registry = tree.parsed(models.file)
        if registry is None:
            return None
        for name in (models.table, models.module_name):
            builder.resolve_name(registry, models.file, name)
    except (SourceError, ExtractError):
        return None
    builder.gaps.setdefault(
        NOT_IN_TABLE, f"the drafter's architectures, which {models.table} in {models.file} does not hold"
    )
    builder.add_chunk(
        FUNCTION,
        SNIPPET.format(
            function=FUNCTION,
            table=models.table,
            module_name=models.module_name,
            declared=declared,
            missing=NOT_IN_TABLE,
        ),
    )
    return f"@property\ndef {declared}(self):\n    return {FUNCTION}(self.{route.fields.architectures})\n"
