"""Dead code is told from its form, and forms are read from live code only (issue 19
item 2: a link judged by forms alone is judged from the code that runs). Every
snippet here is our own; each dead case is also run, to show Python never runs it."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from dflash_doctor.structure.forms import DEAD, UNRECOGNISED, FormReader, match_forms
from dflash_doctor.structure.liveness import dead_nodes, module_constants
from dflash_doctor.rulefile import load_rules
from dflash_doctor.engines import SGLANG
from dflash_doctor.source import DirectoryTree

# Each snippet is the body of ``f(x)``; ``ran.append("dead")`` never runs, ``ran.append("live")`` does.
DEAD_CASES = {
    "if False": "if False:\n    ran.append('dead')\nran.append('live')",
    "if 0": "if 0:\n    ran.append('dead')\nran.append('live')",
    "if None and an empty string": "if None or '':\n    ran.append('dead')\nran.append('live')",
    "while False": "while False:\n    ran.append('dead')\nelse:\n    ran.append('live')",
    "not __debug__": "if not __debug__:\n    ran.append('dead')\nran.append('live')",
    "__debug__ is False": "if __debug__ is False:\n    ran.append('dead')\nran.append('live')",
    "else of if True": "if True:\n    ran.append('live')\nelse:\n    ran.append('dead')",
    "elif after if 1": "if 1:\n    ran.append('live')\nelif x:\n    ran.append('dead')",
    "loop over an empty tuple": "for item in ():\n    ran.append('dead')\nran.append('live')",
    "after return": "ran.append('live')\nreturn\nran.append('dead')",
    "after return on one line": "ran.append('live'); return; ran.append('dead')",
    "after raise": "ran.append('live')\nraise StopIteration\nran.append('dead')",
    "after continue": "for item in [1]:\n    ran.append('live')\n    continue\n    ran.append('dead')",
    "after break": "while x:\n    ran.append('live')\n    break\n    ran.append('dead')",
    "after an if whose branches both return": (
        "if x:\n    ran.append('live')\n    return\nelse:\n    return\nran.append('dead')"
    ),
    "after an if/elif/else that all end": (
        "if x:\n    return\nelif not x:\n    raise ValueError\nelse:\n    return\nran.append('dead')"
    ),
    "after while True without break": (
        "while True:\n    ran.append('live')\n    for item in [1]:\n        break\n    return\nran.append('dead')"
    ),
    "after try whose body and handlers end": (
        "try:\n    ran.append('live')\n    return\nexcept ValueError:\n    raise\nran.append('dead')"
    ),
    "after a finally that returns": "try:\n    ran.append('live')\nfinally:\n    return\nran.append('dead')",
    "untaken arm of a conditional expression": "ran.append('live') if True else ran.append('dead')",
    "right of a false and": "False and ran.append('dead')\nran.append('live')",
    "right of a true or": "(1 or ran.append('dead')) and ran.append('live')",
    "nested dead inside live": "if x:\n    ran.append('live')\n    if ():\n        ran.append('dead')",
    "a nested function nothing calls": "def helper():\n    ran.append('dead')\nran.append('live')",
    "a def that a later def of its name replaces": (
        "def helper():\n    ran.append('dead')\nx = 1\ndef helper():\n    ran.append('live')\nhelper()"
    ),
}
LIVE_CASES = {
    "an unknown test": "if x:\n    ran.append('live')",
    "while True with its own break": "while True:\n    break\nran.append('live')",
    "a handler that falls through": (
        "try:\n    if x:\n        raise ValueError\n    return\nexcept ValueError:\n    pass\nran.append('live')"
    ),
    "a with block (its exit may swallow the raise)": (
        "import contextlib\nwith contextlib.suppress(ValueError):\n    raise ValueError\nran.append('live')"
    ),
    "one branch returns": "if x:\n    return\nran.append('live')",
    "a comparison with an unknown side": "if x == 1 or x != 1:\n    ran.append('live')",
    "a loop over a starred tuple": "for item in (*[1],):\n    ran.append('live')",
    "a bare TYPE_CHECKING nothing vouches for": "if TYPE_CHECKING:\n    ran.append('live')",
    "a nested function called": "def helper():\n    ran.append('live')\nif x:\n    helper()",
    "a nested function handed on": "def helper():\n    ran.append('live')\nlist(map(lambda f: f(), [helper]))",
    "a nested function a decorator may call": (
        "def call(function):\n    function()\n    return function\n@call\ndef helper():\n    ran.append('live')"
    ),
    "a nested function reached through locals()": "def helper():\n    ran.append('live')\nlocals()['helper']()",
    "a def used before a later def of its name": (
        "def helper():\n    ran.append('live')\nfirst = helper\ndef helper():\n    pass\nfirst()"
    ),
    "a def a decorated def of its name follows (the decorator may keep it)": (
        "def keep(function):\n    return lambda: ran.append('live')\n"
        "def helper():\n    ran.append('live')\n@keep\ndef helper():\n    pass\nhelper()"
    ),
}


def _function(body: str) -> str:
    return "def f(x):\n" + textwrap.indent(body, "    ") + "\n"


def _marked(code: str, constants: dict | None = None) -> dict[str, list[bool]]:
    """For each marker ('dead', 'live'), whether each of its calls lies in dead code."""
    module = cst.parse_module(code)
    dead = dead_nodes(module, constants)
    marks: dict[str, list[bool]] = {"dead": [], "live": []}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "append":
            marker = ast.literal_eval(module.code_for_node(node.args[0].value))
            marks[marker].append(id(node) in dead)
        stack.extend(node.children)
    return marks


def _ran(code: str, x: bool) -> list[str]:
    ran: list[str] = []
    namespace = {"ran": ran, "TYPE_CHECKING": True}
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - our own snippet
    try:
        namespace["f"](x)
    except (ValueError, StopIteration):
        pass
    return ran


@pytest.mark.parametrize("name", sorted(DEAD_CASES))
def test_code_that_never_runs_is_dead(name):
    code = _function(DEAD_CASES[name])
    assert "dead" not in _ran(code, True) + _ran(code, False)  # Python never runs it
    marks = _marked(code)
    assert marks["dead"] and all(marks["dead"]), marks
    assert not any(marks["live"]), marks


@pytest.mark.parametrize("name", sorted(LIVE_CASES))
def test_code_that_may_run_is_live(name):
    code = _function(LIVE_CASES[name])
    assert "live" in _ran(code, True) + _ran(code, False)
    marks = _marked(code)
    assert marks["live"] and not any(marks["live"]), marks


def test_type_checking_is_a_constant_only_when_it_comes_from_typing():
    block = "if TYPE_CHECKING:\n    ran.append('dead')\nif typing.TYPE_CHECKING:\n    ran.append('dead')\n"
    assert module_constants(ast.parse("import typing\nfrom typing import TYPE_CHECKING\n")) == {
        "TYPE_CHECKING": False,
        "typing.TYPE_CHECKING": False,
    }
    assert all(_marked(block, {"TYPE_CHECKING": False, "typing.TYPE_CHECKING": False})["dead"])
    for rebinding in (
        "TYPE_CHECKING = True\n",
        "def g(TYPE_CHECKING=True):\n    pass\n",
        "from mylib import TYPE_CHECKING\n",
        "from typing import TYPE_CHECKING as T, Any as TYPE_CHECKING\n",
    ):
        assert "TYPE_CHECKING" not in module_constants(ast.parse("from typing import TYPE_CHECKING\n" + rebinding))
    assert "typing.TYPE_CHECKING" not in module_constants(ast.parse("import typing\ntyping = object()\n"))
    assert not any(_marked(block, {})["dead"])


# The hybrid Mamba back-off of cache-drop is a link judged by its forms alone.
BACKOFF_FIXED = "if self.use_eagle and not self.spec.use_dflash():\n    last = max(last - self.block_size, 0)\n"
BACKOFF_UNKNOWN = "last = self.block_size * self.use_eagle\n"  # reads use_eagle in no form the rule knows


def _backoff(*blocks: str) -> str:
    body = "last = request.num_tokens\n" + "".join(blocks) + "return last\n"
    return "def _mamba_block_aligned_split(self, request, num_new_tokens):\n" + textwrap.indent(body, "    ")


def _forms(code: str) -> list[str]:
    (rule,) = [rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm"]
    return [hit.form.id for hit in match_forms(rule.forms_for("mamba-backoff"), cst.parse_module(code))]


@pytest.mark.parametrize(
    "dead",
    [
        "if False:\n" + textwrap.indent(BACKOFF_FIXED, "    "),
        "return last\n" + BACKOFF_FIXED,
        "while 0:\n" + textwrap.indent(BACKOFF_FIXED, "    "),
    ],
    ids=["if-false", "after-return", "while-0"],
)
def test_a_form_in_dead_code_does_not_count(dead):
    assert _forms(_backoff(BACKOFF_FIXED)) == ["backoff-exempts-dflash"]
    assert _forms(_backoff(BACKOFF_UNKNOWN, dead)) == []
    assert _forms(_backoff("if self.use_eagle:\n    last -= 1\n", dead)) == ["backoff-keyed-on-use-eagle"]
    # an unless that names dead code only does not hold the form back
    assert _forms(_backoff("if self.use_eagle_block_drop:\n    last -= 1\n", dead)) == ["backoff-keyed-on-predicate"]


SPEC = "class SpeculativeConfig:\n    method: str = 'dflash'\n"
SCHEDULER = (
    "class Scheduler:\n"
    "    def __init__(self, vllm_config):\n"
    "        self.use_eagle_block_drop = vllm_config.speculative_config.use_eagle_block_drop()\n"
    "        self.kv_cache_manager = KVCacheManager(use_eagle=self.use_eagle_block_drop)\n\n"
)


def test_the_check_reads_a_dead_form_as_not_there_and_says_so(tmp_path: Path):
    """A live back-off line no form knows, beside a dead copy of the fixed form: the
    site is unrecognised (the fix unknown), never present; the evidence names the dead copy."""
    (tmp_path / "vllm/config").mkdir(parents=True)
    (tmp_path / "vllm/config/speculative.py").write_text(SPEC)
    (tmp_path / "vllm/v1/core/sched").mkdir(parents=True)
    scheduler = SCHEDULER + textwrap.indent(
        _backoff(BACKOFF_UNKNOWN, "if False:\n" + textwrap.indent(BACKOFF_FIXED, "    ")), "    "
    )
    (tmp_path / "vllm/v1/core/sched/scheduler.py").write_text(scheduler)
    (rule,) = [rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm"]
    (fix,) = FormReader(DirectoryTree(tmp_path, None)).run((rule,))
    assert fix.status == "unknown", fix.reason
    backoff = [item for item in fix.evidence if item.symbol == "Scheduler._mamba_block_aligned_split"]
    assert [item.form for item in backoff] == [UNRECOGNISED, DEAD]
    dead_line = scheduler.splitlines().index("            if self.use_eagle and not self.spec.use_dflash():") + 1
    assert backoff[1].line == dead_line and "backoff-exempts-dflash" in backoff[1].note


def test_the_function_read_and_functions_outside_a_function_are_live():
    """Only a function defined in another one's body can be told never called: the anchored
    function itself (the tree, or a statement of the module read) and a module's own are live."""
    function = cst.parse_statement("def f(x):\n    def unused():\n        return 1\n    return 2\n")
    dead = dead_nodes(function)
    assert id(function) not in dead and id(function.body.body[0]) in dead
    module = cst.parse_module("def f(x):\n    return 1\n\n\nif x:\n    def g():\n        return 2\n")
    assert not dead_nodes(module)


SPEC_INFO = "import enum\n\n\nclass SpeculativeAlgorithm(enum.Enum):\n    DFLASH = 1\n"
SHIFTED = (
    "    def set_dflash_layers_to_capture(self, layer_ids):\n"
    "        self.model.set_dflash_layers_to_capture([i + 1 for i in layer_ids])\n"
)
UNSHIFTED = (
    "    def set_dflash_layers_to_capture(self, layers):\n        self.model.set_dflash_layers_to_capture(layers)\n"
)


@pytest.mark.parametrize(
    "body, status, read",
    [
        (SHIFTED + "\n" + UNSHIFTED, "absent", ["shadowed", "unshifted-delegation"]),  # SGLang 0.5.19 - 0.5.21
        (UNSHIFTED + "\n" + SHIFTED, "present", ["shadowed", "shifted-delegation"]),
        (SHIFTED + "\n    x = 1\n\n" + UNSHIFTED, "absent", ["shadowed", "unshifted-delegation"]),
        (SHIFTED + "\n    first = set_dflash_layers_to_capture\n\n" + UNSHIFTED, "unknown", ["rebound"]),
        (SHIFTED + "\n    @keep\n" + UNSHIFTED, "unknown", ["rebound"]),
    ],
    ids=["shifted-then-unshifted", "unshifted-then-shifted", "a statement between", "named between", "decorated"],
)
def test_a_def_that_a_later_def_of_its_name_replaces_is_not_read(tmp_path: Path, body, status, read):
    """Python keeps the last of two plain defs of one name in a class body: the check reads that one
    and cites the other as shadowed; where something may keep the first (a use of its name between
    them, a decorator on the later one), the first may still run, and the fix is unknown."""
    (tmp_path / "sglang/srt/speculative").mkdir(parents=True)
    (tmp_path / "sglang/srt/speculative/spec_info.py").write_text(SPEC_INFO)
    (tmp_path / "sglang/srt/models").mkdir(parents=True)
    text = "class Qwen3_5ForCausalLM:\n" + body
    compile(text, "qwen3_5_text.py", "exec")
    (tmp_path / "sglang/srt/models/qwen3_5_text.py").write_text(text)
    (rule,) = [rule for rule in load_rules() if rule.id == "layer-offset" and rule.engine == "sglang"]
    (fix,) = FormReader(DirectoryTree(tmp_path, None, SGLANG)).run((rule,))
    assert fix.status == status, fix.reason
    assert [item.form for item in fix.evidence][: len(read)] == read
