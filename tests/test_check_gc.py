"""The collector thresholds a check raises are the process's: checks that
overlap in threads (a fleet; the CLI run in process) leave them as they found them."""

import gc
import threading

import pytest

from dflash_doctor.check import CHECK_GC_THRESHOLDS, fewer_collections, run_check
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.path import PathTarget


def test_overlapping_checks_leave_the_thresholds_as_they_found_them():
    before = gc.get_threshold()
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    second.__enter__()  # started while the first runs: it sees the raised thresholds
    first.__exit__(None, None, None)
    assert gc.get_threshold() == CHECK_GC_THRESHOLDS  # the second still runs
    second.__exit__(None, None, None)  # the last to end puts back what was there before the first
    assert gc.get_threshold() == before


@pytest.mark.release
def test_checks_in_threads_leave_the_thresholds_as_they_found_them(mini_tree, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    before = gc.get_threshold()
    trees = [mini_tree("0.33.0", f"tree{n}") for n in range(2)]
    seen, gate = [], threading.Barrier(2)

    def check(tree):
        gate.wait()
        seen.append({fix.status for fix in run_check(PathTarget(tree), load_rules()).fixes})

    threads = [threading.Thread(target=check, args=(tree,)) for tree in trees]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [{"present"}, {"present"}]
    assert gc.get_threshold() == before
