"""The attacks' room: ``measure`` (what an injected instruction or a shilling review did to each explanation,
its shares and sentences — the kinds and payloads themselves are ``perturbations/attacks.py``) and ``check``
(the ``injection`` and ``hijack`` checks). This face only hands the checks on (``measure`` imports numpy,
which plugin start-up does not); ``pytest_robustexplain.adversarial`` is ``measure`` under its old name."""

from .check import AttackCheck, Hijack, Injection

__all__ = ["AttackCheck", "Hijack", "Injection"]
