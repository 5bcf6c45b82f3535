"""Code that runs without the tool, on the standard library alone, under any Python
from 3.6: ``probe.py``, the collector sent to other hosts, and ``lockdown.py`` with
``harness.py``, the behaviour child (here or on a host). Nothing here imports the
rest of the package; tests/test_standalone.py holds it to that and to Python 3.6 syntax."""
