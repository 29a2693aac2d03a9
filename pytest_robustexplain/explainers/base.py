"""The explainer interface every backend implements, and what an explanation carries back.

An explainer turns (history, item) into an :class:`Explanation`. Failures are never turned into text:
an explanation that could not be generated has ``failure`` set and empty ``text``, and is scored 0 and
listed separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..data import EvalCase, Item, UserHistory
from ..results import ModelInfo
from ..sanitize import clean

if TYPE_CHECKING:
    from .context import ContextWindow

# Values of Explanation.failure.
STOP_LENGTH = "length"  # the stop reason of a reply cut at the token limit, on both APIs
FAILURE_EMPTY = "empty"  # the model answered with nothing (or whitespace / only a think block)
FAILURE_REFUSAL = "refusal"  # the model declined to answer
FAILURE_ERROR = "error"  # transport or server errors survived every retry
FAILURE_CONTEXT = "context"  # the server refused the prompt as longer than its context

# The fake model server (``pytest_robustexplain.testing``) says what it is in the model facts it serves: a key
# no GGUF carries in Ollama's ``/api/show`` ``model_info``, an owner no server lists in ``/v1/models``. A run
# against it is then labelled as one in every report ("[fake model server — not a language model]"), never
# as the model whose name it answers to — and never set beside the paper's model of that name.
# What a model's replies showed during a run, kept in its record's ``extra`` (``remote.py``): the context its
# token counts gave away, and the model names its replies gave when one was not the model asked.
INFERRED_CONTEXT, ANSWERED_AS = "inferred_context", "answered_as"
MODEL_FINDINGS = (INFERRED_CONTEXT, ANSWERED_AS)
FAKE_SERVER_MARK = "robustexplain.fake_server"
FAKE_SERVER_OWNER = "robustexplain-fake-server"
FAKE_SERVER_KIND = "fake model server"


def served_by_fake(model_info: Any = None, owned_by: Any = None) -> bool:
    """Whether model facts come from the fake model server (``model_info``: Ollama's, a mapping;
    ``owned_by``: an OpenAI-compatible ``/v1/models`` entry's owner)."""
    marked = isinstance(model_info, dict) or hasattr(model_info, "get")
    return (marked and model_info.get(FAKE_SERVER_MARK) is True) or owned_by == FAKE_SERVER_OWNER


@dataclass(frozen=True)
class Explanation:
    """One generated explanation and how it was obtained."""

    text: str
    model: str
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    failure: str | None = None
    # The error message when failure == "error"; what was refused for "refusal"; the server's numbers for
    # "context"; for a truncated prompt, how far it overran the context.
    detail: str = ""
    embedding: tuple[float, ...] | None = None  # the text's vector (opt-in metric; () when not embedded)
    host: str | None = None  # which host answered, when the calls are spread over several
    # Why the server stopped generating, as it says it (Ollama ``done_reason``, OpenAI ``finish_reason``):
    # "stop" for a finished reply, "length" for one cut at the token limit; None when it did not say.
    stop_reason: str | None = None
    retries: int = 0  # attempts after the first that this reply took (timeouts, 5xx, dropped connections)
    # Of ``prompt_tokens``, those the server took from its prompt cache instead of reading them again (the
    # prefix an earlier prompt shared), as it said it; None when it does not say (Ollama's own API).
    reused_tokens: int | None = None
    # The server read less of the prompt than it holds (Ollama drops the start of a prompt longer than
    # num_ctx without an error): the reply answers a history the model did not see whole (context.py).
    truncated: bool = False

    def __post_init__(self) -> None:
        # Outside text enters the run here, from every backend: make it encodable (lone surrogates from a
        # broken server or a JSON escape would crash the cache, the reports and xdist) once, for all.
        object.__setattr__(self, "text", clean(self.text))
        object.__setattr__(self, "detail", clean(self.detail))

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def unfit(self) -> bool:
        """Whether the prompt did not fit the model's context: refused by the server or truncated by it."""
        return self.truncated or self.failure == FAILURE_CONTEXT

    @property
    def cut(self) -> bool:
        """Whether the reply was cut at the token limit (num_predict / max_tokens): unfinished text."""
        return self.stop_reason == STOP_LENGTH


@runtime_checkable
class Explainer(Protocol):
    """What the sweep needs from a backend.

    ``explain`` must be safe to call concurrently; backends bound their own in-flight requests.
    ``request_identity`` returns everything that determines the reply (backend, model digest, full
    prompt, options, seed, repeat): the response cache hashes it.
    """

    backend: str
    model: str

    async def preflight(self) -> ModelInfo: ...

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation: ...

    def request_identity(
        self, history: UserHistory, item: Item, *, seed: int, repeat: int
    ) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


async def context_check(explainer: object, cases: Sequence[EvalCase]
                        ) -> tuple[ContextWindow | None, list[tuple[str, int]], bool]:
    """``explainer.oversized(cases)`` for explainers that check prompts against a context (the remote
    backends and the wrappers around them); "no context, nothing over" from the others."""
    check = getattr(explainer, "oversized", None)
    return await check(cases) if check is not None else (None, [], False)


async def digest_now(explainer: object) -> str | None:
    """The model digest ``explainer``'s server lists now, from explainers that can ask (the remote backends
    and the wrappers around them: ``current_digest``); None from the others, or when the server cannot say."""
    ask = getattr(explainer, "current_digest", None)
    return await ask() if ask is not None else None
