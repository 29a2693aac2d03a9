"""The judge's room: ``measure`` (reading a judge's verdicts, the faithful rate, the judge's agreement with
people and other judges, and their sentences), ``prompt`` (what the judge is asked, and a team's criteria)
and ``check`` (the ``faithfulness`` check). The client that asks is a model client like the explainers'
(``explainers/judge.py``), and when it asks during a run is the engine's (``engine/judging.py``). This face
only hands the check on, as the other rooms do; ``pytest_robustexplain.faithfulness`` is ``measure`` by its
old name."""

from .check import Faithfulness

__all__ = ["Faithfulness"]
