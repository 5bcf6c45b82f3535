"""Stdlib-only probe, run by the inspected interpreter as ``python - locate``.

It finds vllm WITHOUT importing it (``find_spec`` of a top-level package
does not execute it) and prints one marked JSON line, so that anything a
site hook prints before it cannot be mistaken for the answer. It must run on
any Python 3 the server has: no imports from dflash_doctor, no f-strings
with ``=``, nothing newer than 3.8.
"""

import json
import sys

MARKER = "DFLASH-DOCTOR-PROBE:"


def locate():
    import importlib.util

    answer = {"python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3]}
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError) as exc:
        spec = None
        answer["error"] = "vllm cannot be located: %s" % exc
    if spec is None or not spec.submodule_search_locations:
        answer.setdefault("error", "vllm is not installed in this interpreter's environment")
        return answer
    answer["package_dir"] = list(spec.submodule_search_locations)[0]
    try:
        from importlib import metadata

        dist = metadata.distribution("vllm")
        answer["version"] = dist.version
        answer["dist_info"] = str(getattr(dist, "_path", "") or "") or None
    except Exception:  # noqa: BLE001 - any metadata failure just means "not recorded"
        answer["version"] = None
        answer["dist_info"] = None
    return answer


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "locate"
    if mode != "locate":
        answer = {"error": "unknown probe mode %r" % mode}
    else:
        answer = locate()
    sys.stdout.write("\n" + MARKER + json.dumps(answer) + "\n")


if __name__ in ("__main__", "<stdin>"):
    main()
