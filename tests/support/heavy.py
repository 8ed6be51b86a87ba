"""Which fixtures are heavy: their own code starts moto's server, dynalite or daemon processes.

tests/conftest.py marks every test using one `emulator` (so `make check` leaves it to `make test`),
whatever the fixture's name; tests/test_selection.py checks `make check` selects none.
"""

from __future__ import annotations

import inspect

NEEDS = ("Emulator(", "Dynalite(", "DaemonSpawner(")  # an in-process daemon on the project's own servers is not
_heavy: dict[object, bool] = {}


def heavy_fixture(func: object) -> bool:
    """Whether a fixture's own code starts moto's server, dynalite or daemon processes (NEEDS)."""
    if func not in _heavy:
        try:
            source = inspect.getsource(func)  # type: ignore[arg-type]
        except (OSError, TypeError):
            source = ""
        _heavy[func] = any(need in source for need in NEEDS)
    return _heavy[func]
