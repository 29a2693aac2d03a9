"""Several hosts serving one model: the calls of a run spread over them, each host with its own limit.

:class:`HostsExplainer` sits in front of one ordinary explainer per host (each with its own client and its
own ``concurrency`` slots, so N hosts give N × concurrency calls in flight). A call goes to the host with
the fewest calls in flight (ties: the one that has answered fewest, then the order given), so a faster
host simply takes more of them. Every explanation comes back with ``host`` set; the sweep counts them and
each report lists "N answered by HOST".

Preflight checks every host: one that cannot serve the model is one BackendError naming it, and hosts
whose copies of the model differ (another digest) are refused — the run would otherwise mix two models.
Replies do not depend on the host, so the response cache (keyed without it) is shared by all of them.

For larger fleets a gateway in front of the servers (vLLM's router, LiteLLM, any OpenAI-compatible
proxy) is the better tool: give its single URL as the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..data import EvalCase, Item, UserHistory
from ..errors import BackendError
from ..sanitize import redact_url
from .base import Explainer, Explanation, ModelInfo, context_check, digest_now
from .context import ContextWindow


class HostsExplainer:
    """One model on several hosts (``explainers[i]`` talks to ``hosts[i]``)."""

    def __init__(self, explainers: Sequence[Explainer], hosts: Sequence[str]) -> None:
        if len(explainers) != len(hosts) or len(hosts) < 2:
            raise ValueError("HostsExplainer needs one explainer per host, and at least two hosts")
        self.explainers = list(explainers)
        self.hosts = [redact_url(h) for h in hosts]  # the labels every record shows: no credentials
        self.backend = explainers[0].backend
        self.model = explainers[0].model
        self._in_flight = [0] * len(hosts)
        self.answered = [0] * len(hosts)

    def __repr__(self) -> str:
        return f"HostsExplainer({self.model!r}, hosts={self.hosts!r})"

    async def preflight(self) -> ModelInfo:
        """Every host's preflight (one after the other, so the first failing host is the one named)."""
        infos = [await self._preflight_one(explainer, host) for explainer, host in
                 zip(self.explainers, self.hosts, strict=True)]
        digests = {info.digest: host for info, host in zip(infos, self.hosts, strict=True) if info.digest}
        if len(digests) > 1:
            shown = ", ".join(f"{digest[:19]}… on {host}" for digest, host in digests.items())
            raise BackendError(f"the hosts serve different builds of model {self.model!r} ({shown}); pull "
                               "the same one everywhere, or the run would mix two models")
        return replace(infos[0], host=",".join(self.hosts), extra={**infos[0].extra, "hosts": self.hosts})

    @staticmethod
    async def _preflight_one(explainer: Explainer, host: str) -> ModelInfo:
        try:
            return await explainer.preflight()
        except BackendError as exc:
            message = str(exc)
            raise BackendError(message if host in message else f"host {host}: {message}") from None

    def use_model_info(self, info: ModelInfo) -> None:
        """Offline replay: every host adopts the recorded model facts."""
        for explainer in self.explainers:
            adopt = getattr(explainer, "use_model_info", None)
            if adopt is not None:
                adopt(info)

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        index = self._pick()
        self._in_flight[index] += 1
        try:
            explanation = await self.explainers[index].explain(history, item, seed=seed, repeat=repeat)
        finally:
            self._in_flight[index] -= 1
        self.answered[index] += 1
        return replace(explanation, host=self.hosts[index])

    def _pick(self) -> int:
        # Runs on the event loop thread between awaits: no lock needed for these counters.
        return min(range(len(self.hosts)), key=lambda i: (self._in_flight[i], self.answered[i], i))

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        # Host-independent (the cache is shared by every host); the first host's explainer knows the digest.
        return self.explainers[0].request_identity(history, item, seed=seed, repeat=repeat)

    async def current_digest(self) -> str | None:
        """A host's digest that is not the one every host served at preflight, else that one (None when
        no host can say)."""
        now = [d for d in [await digest_now(e) for e in self.explainers] if d is not None]
        before = {getattr(getattr(e, "info", None), "digest", None) for e in self.explainers}
        return next((d for d in now if d not in before), now[0] if now else None)

    async def oversized(self, cases: Sequence[EvalCase]) -> tuple[ContextWindow | None, list[tuple[str, int]],
                                                                  bool]:
        """The first host's context check: every host serves the same model (preflight says so)."""
        return await context_check(self.explainers[0], cases)

    async def aclose(self) -> None:
        for explainer in self.explainers:
            await explainer.aclose()
