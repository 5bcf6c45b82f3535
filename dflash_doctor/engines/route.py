"""The route an engine takes from a drafter's config to its model runner, as data.

Behaviour runs the tree's own code on the objects the engine hands it: the
speculative config built for the drafter's method, the deployment config around
it, the model runners and what chooses between them. Which classes, files,
variables and functions those are is the engine's (``engines/<name>.py``); the
behaviour engine reads them here and names none. What each fix asks of that
route (which resolver, which constructor hands what on) is its rule file's.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Where:
    """A definition: ``symbol`` (``Class``, ``function`` or ``Class.method``) in ``file``."""

    file: str
    symbol: str

    @property
    def name(self) -> str:
        """The last part of the symbol, as code calls it."""
        return self.symbol.rsplit(".", 1)[-1]


@dataclasses.dataclass(frozen=True)
class RunnerKind:
    """One model runner an engine may run a drafter on. ``marker``: a file whose
    presence means the tree has this runner (a runner the tree lacks is never
    modelled). How a runner tells it refuses a drafter: ``refusals`` names a method
    of the deployment config whose ``if self.<check>(): <list>.append("...")`` lines
    list what it refuses; ``factory`` is the function that builds the runner's
    speculator for the method, and a speculator built from a module whose dotted path
    holds ``foreign`` runs the drafter as another method."""

    name: str
    marker: str
    refusals: str | None = None
    factory: Where | None = None
    foreign: str | None = None


@dataclasses.dataclass(frozen=True)
class RunnerSwitch:
    """What chooses the runner when the tree has more than one: an environment
    variable whose default is a zero-argument lambda in ``env_file``'s table, and a
    property of the deployment config (``property``, where the tree has it) that reads it.
    True selects ``on``, false ``off``."""

    env_file: str
    env_module: str  # the name code reads the variable through (``envs.<variable>``)
    variable: str
    property: str
    on: str
    off: str


@dataclasses.dataclass(frozen=True)
class Registry:
    """A table mapping names to (module, class name), and the function that turns
    the table's module into a full module name."""

    file: str
    table: str
    module_name: str


@dataclasses.dataclass(frozen=True)
class Fields:
    """The attribute names that carry the drafter from the deployment config down to its hf_config."""

    speculative: str  # the deployment config's speculative config
    method: str  # the speculative config's method
    tokens: str  # the speculative config's number of speculative tokens (the drafter's block size - 1)
    draft: str  # the speculative config's drafter model config
    hf: str  # the drafter model config's hf_config
    architectures: str  # the drafter model config's architectures


@dataclasses.dataclass(frozen=True)
class Direct:
    """An engine that hands the drafter's hf_config straight to the drafter's model class,
    as its ``parameter``, on one worker (no runner to choose): behaviour builds the model
    from the config alone. ``config_registry``/``configs_package``: as ``Route``'s, where
    the engine has config classes of its own."""

    parameter: str
    config_registry: Where | None = None
    configs_package: str | None = None


@dataclasses.dataclass(frozen=True)
class Route:
    """Everything behaviour needs to know about an engine's objects."""

    method: str  # the speculative method the drafter runs as
    speculative_config: Where  # the class built for the method (its methods and field defaults are the tree's)
    deployment_config: Where  # the class holding the speculative config, handed to runners and schedulers
    deployment_name: str  # the parameter name code receives the deployment config under
    current_config: str  # the function code calls for the deployment config in force
    fields: Fields
    runners: tuple[RunnerKind, ...]
    switch: RunnerSwitch
    # the per-layer attention resolver the drafter's model calls: a refusal raised there is
    # the runner refusing the drafter
    layer_resolver: Where
    refusals: tuple[str, ...]  # the exception types the engine's code raises to refuse a configuration
    provided: tuple[str, ...]  # names a run binds itself, never copied from the tree
    translations: str  # the module registering each speculators format's translation (``update_<type>``)
    translations_label: str  # how a report names the translated config
    model_config: Where  # the drafter's model config, where it declares the drafter's speculator config
    declared: str  # the model config's property (and the model class attribute) that declares it
    models: Registry  # the engine's model registry: architecture -> (module, class)
    config_registry: Where  # the engine's own config classes by model_type (tried before transformers)
    configs_package: str  # the package whose imports name those classes

    def runner(self, name: str) -> RunnerKind:
        return next(kind for kind in self.runners if kind.name == name)

    @property
    def runner_names(self) -> tuple[str, ...]:
        return tuple(kind.name for kind in self.runners)
