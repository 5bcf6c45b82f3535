"""The speculator config a drafter's model class declares, as vLLM's ModelConfig reports it.

``ModelConfig.speculator_config_class`` returns what the model registry found when it
inspected the drafter's model class: that class's ``speculator_config_class``, by
qualified name. vLLM inspects the class in a subprocess; behaviour does not run that
inspection. It looks the class up in the tree's own registry table for the drafter's
architectures and reads the attribute from the class copied by name (by_name.py).
Only a tree whose ModelConfig has the property gets it on the drafter's model config.
"""

from __future__ import annotations

import ast

from ..source import SourceError, SourceTree
from .definitions import ExtractError, parsed_or_none
from .program import ProgramBuilder

MODEL_CONFIG = ("vllm/config/model.py", "ModelConfig")
REGISTRY = "vllm/model_executor/models/registry.py"
TABLE = "_VLLM_MODELS"  # architecture -> (module, class name)
MODULE_NAME = "_resolve_module_name"  # a table's module -> the module's full name
DECLARED = "speculator_config_class"
FUNCTION = "_declared_speculator_config"
NOT_IN_TABLE = "_architecture_not_in_registry"
SNIPPET = f'''def {FUNCTION}(architectures):
    for architecture in architectures:
        if architecture in {TABLE}:
            module, name = {TABLE}[architecture]
            model = getattr(_stdlib("importlib").import_module({MODULE_NAME}(module)), name)
            declared = getattr(model, {DECLARED!r}, None)
            return None if declared is None else declared._qualified_name
    return {NOT_IN_TABLE}()
'''


def plan_declared(tree: SourceTree, builder: ProgramBuilder) -> str | None:
    """The body of the drafter model config's class (the property reading the declared
    config), its definitions copied into ``builder``; None when the tree's ModelConfig
    has no such property (or the registry cannot be read: then reading it is a gap)."""
    try:
        text = tree.data(MODEL_CONFIG[0])
        # the file is long: parsed only where it names the property at all
        model_config = parsed_or_none(tree, MODEL_CONFIG[0]) if text and f"def {DECLARED}(".encode() in text else None
    except (SourceError, ExtractError):  # not sent by the collector: reading the property stays a gap
        return None
    classes = [] if model_config is None else [
        node for node in model_config.tree.body if isinstance(node, ast.ClassDef) and node.name == MODEL_CONFIG[1]]
    if len(classes) != 1 or not any(isinstance(item, ast.FunctionDef) and item.name == DECLARED for item in classes[0].body):
        return None
    try:
        registry = tree.parsed(REGISTRY)
        if registry is None:
            return None
        for name in (TABLE, MODULE_NAME):
            builder.resolve_name(registry, REGISTRY, name)
    except (SourceError, ExtractError):
        return None
    builder.gaps.setdefault(NOT_IN_TABLE, f"the drafter's architectures, which {TABLE} in {REGISTRY} does not hold")
    builder.add_chunk(FUNCTION, SNIPPET)
    return f"@property\ndef {DECLARED}(self):\n    return {FUNCTION}(self.architectures)\n"
