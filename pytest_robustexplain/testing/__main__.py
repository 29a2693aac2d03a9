"""``python -m pytest_robustexplain.testing``: serve the fake Ollama until Ctrl-C."""

from __future__ import annotations

from .serve import main

if __name__ == "__main__":
    raise SystemExit(main())
