"""The tier a test is in is written on it: ``pytest.mark.release`` (it reads a
real vLLM wheel) and ``pytest.mark.slow`` (it starts a real server or git
history, or waits seconds), on the test or as ``pytestmark`` on its module.

What reads a wheel or starts such a server calls ``require``, so a test that
does it without its marker fails, instead of quietly making the fast tier
(``-m "not release and not slow"``) slow. ``running`` is the test pytest is
setting up, running or tearing down (tests/conftest.py sets it); outside
pytest (benchmarks/ use the same helpers) it is None and nothing is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

running: pytest.Item | None = None


def require(marker: str, what: str) -> None:
    """Fail the running test unless it carries ``marker``; ``what`` says what it did."""
    if running is not None and running.get_closest_marker(marker) is None:
        import pytest

        pytest.fail(
            f"{running.nodeid} {what}: mark it {marker} (@pytest.mark.{marker} on the test, "
            f"or pytestmark = pytest.mark.{marker} in its module)",
            pytrace=False,
        )
