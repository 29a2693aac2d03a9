"""The faithfulness judge's client: :class:`Judge` asks a model through the same backends, response cache,
retries and concurrency limits as the explanations, each prompt once per run. What it asks (the prompt, the
team's criteria) and how its reply is read are the check's (``checks/judge``); ``docs/faithfulness.md``
explains both.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..checks.judge.measure import JudgeReply, read_verdict
from ..checks.judge.prompt import render_judge_prompt
from ..data import Item, UserHistory
from .base import Explanation

JUDGE_PURPOSE = "judge"  # the response cache keeps judge replies apart from explanations by this


@dataclass
class JudgeStats:
    """The judge's calls (this process): asked, answered from the response cache, failed."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    # The tokens of the replies the server counted (a cached reply keeps its counts): every reply, and the
    # calls made now — what the judge's replies cost, and what this run spent on them (cache hits are free).
    counted: int = 0
    prompt: int = 0
    completion: int = 0
    made_prompt: int = 0
    made_completion: int = 0

    def to_dict(self) -> dict[str, int]:
        if not self.calls:
            return {}
        return {"judge calls made": self.calls - self.cached, "judge calls cached": self.cached,
                "judge calls failed": self.failed}

    def tokens(self) -> dict[str, int]:
        """The judge's token counts as a run record keeps them (``RunResult.judge_tokens``); empty when the
        server counted none."""
        if not self.counted:
            return {}
        return {"replies": self.counted, "prompt": self.prompt, "completion": self.completion,
                "made_prompt": self.made_prompt, "made_completion": self.made_completion}

    def count(self, reply: Explanation) -> None:
        """One reply the judge read: a call, from the cache or not, failed or not, and its tokens."""
        self.calls += 1
        self.cached += reply.cached
        self.failed += not reply.ok
        if reply.prompt_tokens is None or reply.completion_tokens is None:
            return
        self.counted += 1
        self.prompt += reply.prompt_tokens
        self.completion += reply.completion_tokens
        if not reply.cached:
            self.made_prompt += reply.prompt_tokens
            self.made_completion += reply.completion_tokens


@dataclass
class Judge:
    """Asks ``explainer`` for verdicts; the same prompt is asked once per run (slices share originals)."""

    explainer: Any  # what has ``complete(prompt, seed=, purpose=)``: a remote backend or the response cache
    seed: int
    criteria: str = ""  # the domain's criteria (judge-criteria), read and checked
    stats: JudgeStats = field(default_factory=JudgeStats)
    _asked: dict[str, asyncio.Future[Explanation]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.explainer.model} ({self.explainer.backend})"

    async def verdict(self, history: UserHistory, item: Item, explanation: str, *, reverse: bool = False
                      ) -> tuple[JudgeReply, bool]:
        """The judge's verdict on one explanation, and whether its reply came from the response cache."""
        reply = await self._ask(render_judge_prompt(history, item, explanation, reverse=reverse,
                                                    criteria=self.criteria))
        if not reply.ok:
            detail = f": {reply.detail}" if reply.detail else ""
            return JudgeReply(None, failure=f"the judge call failed ({reply.failure}{detail})"), reply.cached
        return read_verdict(reply.text, cut=reply.cut, explanation=explanation), reply.cached

    async def _ask(self, prompt: str) -> Explanation:
        key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        future = self._asked.get(key)
        if future is None:  # first asker: the call is made and counted once
            future = self._asked[key] = asyncio.ensure_future(self._call(prompt))
        return await asyncio.shield(future)

    async def _call(self, prompt: str) -> Explanation:
        reply: Explanation = await self.explainer.complete(prompt, seed=self.seed, purpose=JUDGE_PURPOSE)
        self.stats.count(reply)
        return reply
