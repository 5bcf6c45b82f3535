"""What vLLM runs, not a model of the releases the rules were written from:
the runners a tree really has, and gaps the tree's own code catches. Each edit
is asserted to apply and compile, and changes what vLLM would run."""

import ast
from pathlib import Path

import pytest
from conftest import run_cli

from dflash_doctor.check import run_check
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.path import PathTarget

V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RESOLVER = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"


def verdicts(tree: Path) -> dict:
    return {fix.id: fix for fix in run_check(PathTarget(tree), load_rules()).fixes}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"the edit does not apply to {path}"
    path.write_text(text.replace(old, new))
    ast.parse(path.read_text())  # the edited tree still compiles


@pytest.mark.release
def test_a_runner_the_tree_lacks_is_never_modelled(mini_tree, monkeypatch):
    """0.34.0 removed the V1 model runner: a tree without it is judged on the V2
    runner alone (it was unknown: the V1 resolver "not found anywhere")."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    (tree / V1_RUNNER).unlink()
    fixes = verdicts(tree)
    fix = fixes["layer-offset"]
    assert (fix.status, fix.decided_by) == ("present", "behaviour"), fix.reason
    assert {item.runner for item in fix.behaviour.observations} == {"v2"}
    swa = fixes["swa-config"]
    assert {item.runner for item in swa.behaviour.observations} == {"v2"}
    assert swa.behaviour.status == "present"


@pytest.mark.release
def test_a_gap_the_trees_code_catches_is_still_a_gap(mini_tree, monkeypatch):
    """A bare ``except`` around the real route would let the stand-in choose the
    fallback branch (the raw ids: absent); vLLM on a GPU runs the route itself,
    so the answer is unknown, naming what was caught."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    assert verdicts(tree)["layer-offset"].status == "present"
    edit(
        tree / V2_RESOLVER,
        "    hf_config = spec_config.draft_model_config.hf_config\n    layer_ids = getattr(",
        "    hf_config = spec_config.draft_model_config.hf_config\n"
        "    try:\n        torch.cuda.synchronize()\n    except:  # noqa: E722\n"
        "        return tuple(hf_config.dflash_config.get('target_layer_ids') or ())\n"
        "    layer_ids = getattr(",
    )
    fix = verdicts(tree)["layer-offset"]
    assert fix.status == "unknown", fix.reason
    assert "caught by the tree's own code" in fix.reason


SCHEDULER = "vllm/v1/core/sched/scheduler.py"
OLD_DROP = (
    "class Scheduler:\n    def __init__(self, *args, **kwargs):\n"
    "        self.use_eagle = True  # drops the block for every EAGLE method\n"
)


@pytest.mark.release
def test_a_package_beside_a_module_is_what_python_imports(mini_tree, monkeypatch):
    """``scheduler/`` with an ``__init__.py`` next to ``scheduler.py``: Python imports
    the package, so the present verdict read from scheduler.py is not what runs."""
    import importlib.util

    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    assert verdicts(tree)["cache-drop"].status == "present"
    package = tree / "vllm/v1/core/sched/scheduler"
    package.mkdir()
    (package / "__init__.py").write_text(OLD_DROP)
    # what Python's own path finder picks for the module
    spec = importlib.machinery.PathFinder.find_spec("scheduler", [str(tree / "vllm/v1/core/sched")])
    assert spec.origin == str(package / "__init__.py")
    fix = verdicts(tree)["cache-drop"]
    assert fix.status == "unknown"
    assert (
        "Python imports the package vllm/v1/core/sched/scheduler/ instead of vllm/v1/core/sched/scheduler.py"
        in fix.reason
    )
    assert any(item.form == "shadowed" for item in fix.evidence)


@pytest.mark.release
def test_an_unchecked_hash_pyc_runs_instead_of_its_source(mini_tree, monkeypatch, tmp_path):
    """A ``.pyc`` compiled from other source with PEP 552's unchecked-hash flag: Python
    runs it without reading scheduler.py (shown by importing it here)."""
    import importlib.util
    import py_compile
    import sys

    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    source = tree / SCHEDULER
    real = source.read_text()
    source.write_text("WHICH = 'old'\n")
    cache = importlib.util.cache_from_source(str(source))
    py_compile.compile(str(source), cfile=cache, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    source.write_text(real)  # the source says one thing, the .pyc another
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "which.py").write_text(real[:0] + "WHICH = 'new'\n")
    py_compile.compile(
        str(probe / "which.py"),
        cfile=importlib.util.cache_from_source(str(probe / "which.py")),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    (probe / "which.py").write_text("WHICH = 'edited'\n")
    sys.path.insert(0, str(probe))
    try:
        assert importlib.import_module("which").WHICH == "new"  # Python ran the .pyc, not the edited source
    finally:
        sys.path.remove(str(probe))
        sys.modules.pop("which", None)
    fix = verdicts(tree)["cache-drop"]
    assert fix.status == "unknown"
    assert "is an unchecked-hash .pyc: Python runs it without reading vllm/v1/core/sched/scheduler.py" in fix.reason


def install_plugin(tree: Path, name: str, code: str) -> None:
    """A distribution with a vLLM general plugin, as pip would install it."""
    meta = tree / f"{name}-1.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{name} = {name}:register\n")
    (tree / f"{name}.py").write_text(code)


@pytest.mark.release
def test_a_plugin_that_patches_the_scheduler_leaves_its_fix_unknown(mini_tree, monkeypatch):
    import importlib.metadata

    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    install_plugin(
        tree,
        "old_sched",
        "def register():\n"
        "    from vllm.v1.core.sched.scheduler import Scheduler\n"
        "    from old_sched_impl import init\n"
        "    Scheduler.__init__ = init\n",
    )
    install_plugin(
        tree,
        "my_models",
        "def register():\n    from vllm import ModelRegistry\n"
        "    ModelRegistry.register_model('MyModel', 'my_models.model:MyModel')\n",
    )
    # the entry points vLLM's plugin loader reads
    found = {
        ep.name
        for dist in importlib.metadata.distributions(path=[str(tree)])
        for ep in dist.entry_points
        if ep.group == "vllm.general_plugins"
    }
    assert {"old_sched", "my_models"} <= found
    fixes = verdicts(tree)
    fix = fixes["cache-drop"]
    assert fix.status == "unknown"
    assert "plugin old_sched (vllm.general_plugins of old_sched, old_sched:register) names" in fix.reason
    assert "Scheduler" in fix.reason and "my_models" not in fix.reason
    assert fixes["layer-offset"].status == "present"  # neither plugin names its route


@pytest.mark.release
def test_the_newest_release_is_judged_on_the_runner_it_has(release, monkeypatch):
    """0.34.0: no V1 runner; every fix present by behaviour on V2. Whether V2 accepts a
    mixed drafter runs through its registry of speculator configs resolved by
    qualified name, the drafter model's declared config and the speculator class it names."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = release("0.34.0")
    assert not (tree / V1_RUNNER).exists()
    fixes = verdicts(tree)
    for fix_id in ("layer-offset", "cache-drop", "swa-config"):
        assert (fixes[fix_id].status, fixes[fix_id].decided_by) == ("present", "behaviour"), fixes[fix_id].reason
    assert {item.runner for item in fixes["layer-offset"].behaviour.observations} == {"v2"}
    accepts = [item for item in fixes["swa-config"].behaviour.observations if item.part == "runner-accepts"]
    assert accepts and all(
        item.ok and "Speculator (vllm.v1.worker.gpu.spec_decode.dflash" in item.note for item in accepts
    ), accepts
    # the drafter with only sliding, non-causal layers declares DFlash2 (its architecture's model class)
    assert any("DFlash2Speculator" in item.note for item in accepts if item.config == "sliding-noncausal")


@pytest.mark.release
def test_a_registry_entry_pointing_dflash_at_eagle_is_followed(tmp_path, release, monkeypatch):
    """0.34.0 with the registry of speculator configs mapping method "dflash" to EAGLE's
    config: the drafter's declared DFlash config is no subclass of it, so EAGLE's config
    is used and the V2 runner builds the EAGLE speculator for a DFlash drafter: the
    drafter runs without its windows, swa-config is broken by behaviour."""
    import shutil

    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = tmp_path / "tree"
    shutil.copytree(release("0.34.0"), tree, ignore=shutil.ignore_patterns("*.so", "*.pyc"))
    registry = tree / "vllm/v1/worker/gpu/spec_decode/speculator_config.py"
    edit(
        registry,
        '    "dflash": _builtin("dflash.config", "DFlashSpeculatorConfig"),\n',
        '    "dflash": _builtin("eagle.config", "EagleSpeculatorConfig"),\n',
    )
    compile(registry.read_text(encoding="utf-8"), str(registry), "exec")
    fix = verdicts(tree)["swa-config"]
    assert fix.status in ("absent", "partial") and fix.decided_by == "behaviour", fix.reason
    accepts = [item for item in fix.behaviour.observations if item.part == "runner-accepts" and item.ok is False]
    assert accepts and "Eagle" in accepts[0].note, fix.behaviour.observations


SHIFT_033 = '            layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n'


@pytest.mark.release
def test_pure_standard_library_code_on_the_route_is_run(mini_tree, monkeypatch):
    """The shift written with operator and functools (imported at module level and
    inside the function) is run, not a gap; attrgetter cannot reach a dunder."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    resolver = tree / V2_RESOLVER
    edit(resolver, "import torch\n", "import operator\nfrom functools import partial\n\nimport torch\n")
    edit(
        resolver,
        SHIFT_033,
        "            import functools\n"
        "            shift = functools.reduce(operator.add, [1])\n"
        "            layer_ids = list(map(partial(operator.add, shift), "
        'dflash_config.get("target_layer_ids") or []))\n',
    )
    fix = verdicts(tree)["layer-offset"]
    assert (fix.status, fix.decided_by) == ("present", "behaviour"), fix.reason
    # the same route, reaching for a dunder through attrgetter: a gap, never a value
    edit(
        resolver,
        "            shift = functools.reduce(operator.add, [1])\n",
        "            shift = functools.reduce(operator.add, [1])\n"
        "            operator.attrgetter('__class__.__subclasses__')(0)\n",
    )
    fix = verdicts(tree)["layer-offset"]
    assert fix.status == "unknown" and "a dunder attribute" in fix.reason


QWEN3_DFLASH = "vllm/model_executor/models/qwen3_dflash.py"


@pytest.mark.release
def test_platform_branches_are_taken_for_the_platform_the_target_is_built_for(mini_tree, monkeypatch):
    """A window dropped on CPU builds only: a CUDA build (vLLM's own wheel) keeps it, the
    same tree built for CPU (its version label says +cpu) does not."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    rules = tuple(rule for rule in load_rules() if rule.id == "swa-config" and rule.engine == "vllm")
    tree = mini_tree("0.33.0")
    edit(
        tree / QWEN3_DFLASH,
        "        self.sliding_window = sliding_window\n        self.attn = Attention(\n",
        "        if current_platform.is_cpu():\n            sliding_window = None\n"
        "        self.sliding_window = sliding_window\n        self.attn = Attention(\n",
    )
    (fix,) = run_check(PathTarget(tree), rules).fixes
    assert (fix.status, fix.decided_by) == ("present", "behaviour"), fix.reason
    metadata = next(tree.glob("vllm-*.dist-info")) / "METADATA"
    text = metadata.read_text()
    assert text.count("Version: 0.33.0\n") == 1
    metadata.write_text(text.replace("Version: 0.33.0\n", "Version: 0.33.0+cpu\n"))
    (fix,) = run_check(PathTarget(tree), rules).fixes
    assert (fix.status, fix.decided_by) == ("absent", "behaviour"), fix.reason
    assert "the sliding window of layer 0 is None" in fix.reason


@pytest.mark.release
def test_a_module_constant_computed_at_import_is_run(mini_tree, monkeypatch):
    """The shift taken from a module constant that a helper computes when the module
    is imported: the statement runs in the child (a constant read from a gap stays a gap)."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    resolver = tree / V2_RESOLVER
    edit(
        resolver,
        "import torch\n",
        "import torch\n\n\ndef _capture_offset(hidden_states_first):\n"
        "    return 1 if hidden_states_first else 0\n\n\n"
        "_CAPTURE_OFFSET = _capture_offset(hidden_states_first=True)\n",
    )
    edit(
        resolver,
        SHIFT_033,
        '            layer_ids = [i + _CAPTURE_OFFSET for i in (dflash_config.get("target_layer_ids") or [])]\n',
    )
    fix = verdicts(tree)["layer-offset"]
    assert (fix.status, fix.decided_by) == ("present", "behaviour"), fix.reason
    edit(
        resolver,
        "_CAPTURE_OFFSET = _capture_offset(hidden_states_first=True)\n",
        "_CAPTURE_OFFSET = _capture_offset(hidden_states_first=torch.cuda.is_available())\n",
    )
    fix = verdicts(tree)["layer-offset"]
    assert fix.status == "unknown" and "_CAPTURE_OFFSET" in fix.reason, fix.reason


@pytest.mark.release
def test_the_results_cache_sees_a_shadowing_package_and_a_new_plugin(mini_tree, monkeypatch, tmp_path):
    """Filled with a present answer, the cache must not serve it once Python would load
    another scheduler, or once a plugin that patches the scheduler is installed."""
    tree = mini_tree("0.33.0")
    monkeypatch.delenv("DFLASH_DOCTOR_NO_CACHE", raising=False)  # the results cache, in the user cache
    assert verdicts(tree)["cache-drop"].status == "present"
    assert verdicts(tree)["cache-drop"].status == "present"  # from the cache
    package = tree / "vllm/v1/core/sched/scheduler"
    package.mkdir()
    (package / "__init__.py").write_text(OLD_DROP)
    assert verdicts(tree)["cache-drop"].status == "unknown"
    (package / "__init__.py").unlink()
    package.rmdir()
    assert verdicts(tree)["cache-drop"].status == "present"
    install_plugin(
        tree,
        "old_sched",
        "def register():\n    from vllm.v1.core.sched.scheduler import Scheduler\n"
        "    Scheduler.__init__ = lambda self, *a, **k: None\n",
    )
    assert verdicts(tree)["cache-drop"].status == "unknown"


# Ways code that runs at import replaces Scheduler.__init__ after it is read (issue 19 item 2).
# Each helper below is also run here on a class of our own, to show it changes what runs.
OLD_INIT = "def _old_init(self, *args, **kwargs):\n    self.use_eagle = True\n\n\n"
REPLACERS = {
    "a class decorator": (
        OLD_INIT + "def _keep_old_init(cls):\n    cls.__init__ = _old_init\n    return cls\n\n\n",
        ("class Scheduler(SchedulerInterface):", "@_keep_old_init\nclass Scheduler(SchedulerInterface):"),
        "",
    ),
    "a helper called at import": (
        OLD_INIT + "def _patch(cls):\n    cls.__init__ = _old_init\n\n\n",
        None,
        "\n_patch(Scheduler)\n",
    ),
    "a setattr with a computed name": (OLD_INIT, None, '\nsetattr(Scheduler, "__" + "init__", _old_init)\n'),
}


@pytest.mark.release
@pytest.mark.parametrize("how", sorted(REPLACERS))
def test_code_run_at_import_that_replaces_the_scheduler_constructor_is_seen(mini_tree, monkeypatch, how):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    helpers, decorate, tail = REPLACERS[how]
    namespace: dict = {}
    exec(
        helpers
        + "class Scheduler:\n    def __init__(self):\n        self.use_eagle = False\n"
        + (tail if tail else "Scheduler = _keep_old_init(Scheduler)\n"),
        namespace,
    )
    assert namespace["Scheduler"]().use_eagle is True  # the replaced constructor is what runs
    tree = mini_tree("0.33.0")
    assert verdicts(tree)["cache-drop"].status == "present"
    scheduler = tree / SCHEDULER
    edit(scheduler, "class Scheduler(SchedulerInterface):", helpers + "class Scheduler(SchedulerInterface):")
    if decorate:
        edit(scheduler, *decorate)
    scheduler.write_text(scheduler.read_text() + tail)
    ast.parse(scheduler.read_text())
    fix = verdicts(tree)["cache-drop"]
    assert fix.status == "unknown" and "may be replaced at line" in fix.reason, fix.reason


@pytest.mark.release
def test_a_rebinding_in_a_package_init_is_seen(mini_tree, monkeypatch):
    """``vllm/v1/core/sched/__init__.py`` runs before scheduler.py is used: a rebinding
    there replaces the constructor the check read."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    init = tree / "vllm/v1/core/sched/__init__.py"
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(init.read_text() if init.exists() else "")
    assert verdicts(tree)["cache-drop"].status == "present"
    init.write_text(
        init.read_text()
        + "from vllm.v1.core.sched.scheduler import Scheduler\n\n\n"
        + OLD_INIT
        + "Scheduler.__init__ = _old_init\n"
    )
    ast.parse(init.read_text())
    fix = verdicts(tree)["cache-drop"]
    assert fix.status == "unknown" and "vllm/v1/core/sched/__init__.py" in fix.reason, fix.reason


@pytest.mark.release
def test_a_translation_that_hands_back_a_wrong_shape_costs_that_drafter_only(mini_tree):
    """The tree's own update_dflash sets ``architectures = 5`` (issue 20): the check still
    answers (no internal error); only what reads it is unknown, with the value named."""
    tree = mini_tree("0.33.0")
    algos = tree / "vllm/transformers_utils/configs/speculators/algos.py"
    edit(
        algos,
        '    pre_trained_config["architectures"] = ["DFlashDraftModel"]\n',
        '    pre_trained_config["architectures"] = 5\n',
    )
    proc = run_cli("check", "--path", str(tree), "--format", "json")
    assert proc.returncode in (0, 1, 2) and "internal error" not in proc.stderr, proc.stderr
