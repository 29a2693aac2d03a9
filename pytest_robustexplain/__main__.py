"""``python -m pytest_robustexplain``: the ``robustexplain`` command."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
