"""pytest-robustexplain: a CI robustness gate for LLM-generated recommendation explanations.

Importing this package stays cheap on purpose: the plugin loads into every pytest run of everyone
who installs it, so numpy, scipy, nltk and the model clients are imported only where they are used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
