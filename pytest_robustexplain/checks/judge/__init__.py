"""The judge's room: ``measure`` (reading a judge's verdicts, the faithful rate, the judge's agreement with
people and other judges, and their sentences) and ``check`` (the ``faithfulness`` check). The judge's calls
are the explainers' (``explainers/judge.py``) and the engine's (``engine/judging.py``). This face only hands
the check on, as the other rooms do; ``pytest_robustexplain.faithfulness`` is ``measure`` by its old name."""

from .check import Faithfulness

__all__ = ["Faithfulness"]
