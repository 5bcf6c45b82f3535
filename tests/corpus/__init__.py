"""The metamorphic corpus: small declarative edits of real vLLM and SGLang release
trees that keep, break or add one fix (issues 11 and 23, "Tests").

An edit is a record: which fix, which release tree, which files, whether it
preserves the fix's semantics, breaks them, or adds the fix to a tree that
lacks it, why, and the changes (an exact find/replace that must match the
stated number of times, or a function over the source)."""

from __future__ import annotations

import dataclasses
import dis
import re
from collections.abc import Callable
from pathlib import Path
from types import CodeType

KINDS = ("preserve", "break", "add")


@dataclasses.dataclass(frozen=True)
class Replace:
    """Replace ``find`` by ``replace`` in ``file``; ``find`` must occur exactly ``count`` times."""

    file: str
    find: str
    replace: str
    count: int = 1

    def apply(self, text: str) -> str:
        found = text.count(self.find)
        assert found == self.count, f"{self.file}: {self.find!r} found {found} times, expected {self.count}"
        edited = text.replace(self.find, self.replace)
        assert self.replace in edited, f"{self.file}: replacement missing after the edit"
        return edited


@dataclasses.dataclass(frozen=True)
class Dead:
    """Put ``code`` right after the unique text ``after`` in ``file``: code that never runs
    (its lines from ``copy`` on sit under a constant-false test or after a ``return``).
    Python is asked: the compiled file holds no line of ``copy``."""

    file: str
    after: str
    code: str
    copy: str  # the part of ``code`` that never runs

    def apply(self, text: str) -> str:
        edited = Replace(self.file, self.after, self.after + self.code).apply(text)
        assert self.code.count(self.copy) == 1, f"{self.file}: the dead copy is not in the code put in"
        start = edited.index(self.after + self.code) + len(self.after) + self.code.index(self.copy)
        first = edited.count("\n", 0, start) + 1
        dead = set(range(first, first + self.copy.count("\n")))
        ran = _compiled_lines(compile(edited, self.file, "exec"))
        assert not dead & ran, f"{self.file}: lines {sorted(dead & ran)} of the dead copy are compiled to run"
        return edited


def _compiled_lines(code: CodeType) -> set[int]:
    """Every line the code object would run, with the code objects its bytecode loads
    (a comprehension under ``if False:`` is compiled, but nothing loads it)."""
    lines = {line for _, _, line in code.co_lines() if line is not None}
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST" and isinstance(instruction.argval, CodeType):
            lines |= _compiled_lines(instruction.argval)
    return lines


@dataclasses.dataclass(frozen=True)
class Transform:
    """A function over the source of ``file``, for edits a find/replace cannot say."""

    file: str
    function: Callable[[str], str]

    def apply(self, text: str) -> str:
        return self.function(text)


@dataclasses.dataclass(frozen=True)
class Edit:
    fix: str
    name: str
    base: str  # the release whose tree is edited
    kind: str  # preserve | break | add
    why: str  # what the edit does and why it keeps, breaks or adds the fix
    changes: tuple[Replace | Transform | Dead, ...]
    draft_config: str | None = None  # a file in tests/corpus/drafters/, checked as the user's --draft-config
    engine: str = "vllm"  # whose release tree is edited, and whose rule judges it
    setting: str | None = None  # the alternative (a target architecture) the edit touches: judged by its observations

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        assert self.changes, self.name

    @property
    def id(self) -> str:
        return f"{self.subject}/{self.kind}/{self.name}"

    @property
    def subject(self) -> str:
        """The fix, named with its engine unless it is vLLM's."""
        return self.fix if self.engine == "vllm" else f"{self.engine}-{self.fix}"

    @property
    def live(self) -> Edit | None:
        """The edit without its code that never runs (None: it is all dead code), for an edit
        with some; the check must read both alike."""
        changes = tuple(change for change in self.changes if not isinstance(change, Dead))
        return dataclasses.replace(self, changes=changes) if changes else None

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(change.file for change in self.changes))

    def apply(self, tree: Path) -> None:
        """Edit ``tree`` in place; every edited file must change and compile."""
        for relpath in self.files:
            path = tree / relpath
            original = path.read_text()
            text = original
            for change in self.changes:
                if change.file == relpath:
                    text = change.apply(text)
            assert text != original, f"{self.id}: {relpath} unchanged"
            compile(text, str(path), "exec")
            path.write_text(text)


def edits(fix: str, *records: tuple, engine: str = "vllm", setting: str | None = None) -> tuple[Edit, ...]:
    """``edits(FIX, (name, base, kind, why, change, ...), ...)`` -> the fix's Edit records."""
    built = tuple(
        Edit(fix, name, base, kind, why, tuple(changes), engine=engine, setting=setting)
        for name, base, kind, why, *changes in records
    )
    names = [edit.name for edit in built]
    assert len(names) == len(set(names)), "edit names repeat"
    return built


def replace_span(start: str, end: str, new: str) -> Callable[[str], str]:
    """A transform replacing the text from the unique ``start`` up to (not
    including) the next ``end`` with ``new``."""

    def apply(text: str) -> str:
        assert text.count(start) == 1, f"{start!r} is not unique"
        head, rest = text.split(start, 1)
        assert end in rest, f"{end!r} does not follow {start!r}"
        return head + new + end + rest.split(end, 1)[1]

    return apply


def rename_within(start: str, end: str | None, old: str, new: str) -> Callable[[str], str]:
    """A transform renaming the identifier ``old`` to ``new`` between the unique
    marker ``start`` and the next ``end`` (None: the end of the file); string
    literals keep their text."""
    name = re.compile(rf"(?<![\w\"']){re.escape(old)}(?![\w\"'])")

    def apply(text: str) -> str:
        assert text.count(start) == 1, f"{start!r} is not unique"
        head, rest = text.split(start, 1)
        body, tail = rest.split(end, 1) if end else (rest, "")
        renamed, found = name.subn(new, body)
        assert found, f"{old!r} not between the markers"
        return head + start + renamed + (end or "") + tail

    return apply
