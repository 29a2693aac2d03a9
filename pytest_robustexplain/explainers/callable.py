"""Any Python function as an explainer: ``fn(history, item) -> str``, plain or ``async``.

Plain functions run in worker threads (``asyncio.to_thread``) so a slow or blocking one does not stall
the event loop; at most ``concurrency`` calls run at once either way. An exception or a non-string
return value becomes an Explanation with ``failure="error"`` (the pair scores 0 and is listed), never a
crash of the whole run; empty replies and refusals are classified as for the HTTP backends.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sysconfig
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from ..data import Interaction, Item, UserHistory
from ..errors import ConfigError
from ..options import suggest
from .base import FAILURE_ERROR, Explainer, Explanation, ModelInfo
from .prompt import case_payload
from .reply import finish_reply

ExplainFn = Callable[[UserHistory, Item], Any]


def callable_name(fn: Callable[..., Any]) -> str:
    """``__qualname__`` of a function, of a partial's function, or of a callable object's class."""
    target = getattr(fn, "func", fn)  # functools.partial
    name = getattr(target, "__qualname__", None)
    return str(name) if name else type(target).__qualname__


def qualified_name(fn: Callable[..., Any]) -> str:
    """``module.qualname``: two functions called ``explain`` in different modules stay distinct."""
    target = getattr(fn, "func", fn)
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{callable_name(fn)}"


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "func", fn)  # functools.partial
    if inspect.iscoroutinefunction(target):
        return True
    # A callable object whose __call__ is ``async def``.
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)


class CallableExplainer:
    """Wraps a user callable ``(history, item) -> str`` (or an async one) as an Explainer."""

    backend = "callable"

    def __init__(self, fn: ExplainFn, *, model: str | None = None, concurrency: int = 4,
                 is_llm: bool = True, timeout: float | None = None) -> None:
        """``model`` defaults to the callable's ``__qualname__``; set ``is_llm=False`` for rule-based
        functions so reports do not present them as a language model. ``timeout``: seconds one call may
        take; past it the pair fails with an error (a plain function's thread cannot be stopped and
        finishes on its own, but the run does not wait for it)."""
        if not callable(fn):
            raise ConfigError(
                f"explainer must be callable as fn(history, item) -> str, got {type(fn).__name__}")
        if concurrency < 1:
            raise ConfigError(f"callable explainer concurrency must be at least 1, got {concurrency}")
        self.fn = fn
        self.model = model or callable_name(fn)
        self.concurrency = concurrency
        self.is_llm = is_llm
        self.timeout = timeout
        self._is_async = _is_async_callable(fn)
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def __repr__(self) -> str:
        return f"CallableExplainer({self.model!r})"

    async def preflight(self) -> ModelInfo:
        """Nothing to contact; describes the callable."""
        return ModelInfo(name=self.model, backend=self.backend, is_llm=self.is_llm,
                         extra={"callable": qualified_name(self.fn),
                                "kind": "callable explainer"})

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        """Call the function; errors and wrong return types become failures, not exceptions."""
        async with self._semaphore():
            started = time.perf_counter()
            try:
                call = self._call(history, item)
                result = await (call if self.timeout is None else asyncio.wait_for(call, self.timeout))
            except asyncio.TimeoutError:
                return self._error(f"no answer within {self.timeout:g} s (timeout)", started)
            except Exception as exc:
                return self._error(raised(exc), started)
            latency = time.perf_counter() - started
        if not isinstance(result, str):
            return self._error(f"the explainer callable {self.model} returned {type(result).__name__}, "
                               "expected str", started, latency)
        return finish_reply(result, model=self.model, latency_s=latency)

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        """The callable's full name plus its inputs (it sees no prompt, so no prompt is part of it)."""
        return {"backend": self.backend, "model": self.model, "callable": qualified_name(self.fn),
                "input": case_payload(history, item), "seed": seed, "repeat": repeat}

    async def aclose(self) -> None:
        """Nothing to release: the callable (and whatever it holds) belongs to the caller."""

    # ------------------------------------------------------------------ internals
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = self._semaphores[loop] = asyncio.Semaphore(self.concurrency)
        return semaphore

    async def _call(self, history: UserHistory, item: Item) -> Any:
        if self._is_async:
            return await self.fn(history, item)
        result = await asyncio.to_thread(self.fn, history, item)
        # A plain function may still hand back an awaitable (a lambda around an async function).
        return await result if inspect.isawaitable(result) else result

    def _error(self, detail: str, started: float, latency: float | None = None) -> Explanation:
        elapsed = latency if latency is not None else time.perf_counter() - started
        return Explanation(text="", model=self.model, latency_s=elapsed, failure=FAILURE_ERROR, detail=detail)


def raised(exc: BaseException) -> str:
    """What the user's explainer raised, as one line: the exception, where in their code (the innermost frame
    outside this package and Python's own library), and a hint only where one applies."""
    return f"{type(exc).__name__}: {exc}{_where(exc)}{_hint(exc)}"


_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PYTHON = sysconfig.get_paths()["stdlib"]


def _where(exc: BaseException) -> str:
    try:
        here = os.getcwd() + os.sep
    except OSError:  # the working directory is gone: paths shown as the frames name them
        here = None
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = frame.filename if here is None else os.path.abspath(frame.filename)
        if not path.startswith((_OURS + os.sep, _PYTHON + os.sep)) and not frame.filename.startswith("<"):
            shown = path.removeprefix(here) if here is not None else path
            return f" (at {shown}:{frame.lineno}, in {frame.name})"
    return ""


_RECORDS = {record.__name__: tuple(f.name for f in fields(record))
            for record in (UserHistory, Item, Interaction)}
_DICT_WAYS = ("get", "keys", "items", "values", "__getitem__")


def _hint(exc: BaseException) -> str:
    """For an explainer written for dicts (``item.get("title")``, ``item["title"]``): what it gets; for a
    misspelt field (``item.titel``): the field."""
    record = type(getattr(exc, "obj", None)).__name__
    if isinstance(exc, AttributeError) and record in _RECORDS and exc.name not in _DICT_WAYS:
        return suggest(str(exc.name), _RECORDS[record]).replace(";", " —", 1)
    if not any(f"'{name}' object" in str(exc) for name in _RECORDS):
        return ""
    return (" — the explainer gets records, not dicts: a UserHistory (iterate it for Interaction records) "
            "and an Item, read by attribute (interaction.title, item.category); for one written for plain "
            "data, return pytest_robustexplain.plain_data_explainer(fn) from the explainer fixture")


def wrap_explainer(obj: Any, *, model: str | None = None, timeout: float | None = None) -> Explainer:
    """An Explainer from an Explainer (returned as is) or a callable ``(history, item) -> str`` (each call
    bounded by ``timeout`` seconds when given)."""
    if isinstance(obj, Explainer):
        return obj
    if callable(obj):
        return CallableExplainer(obj, model=model, timeout=timeout)
    raise ConfigError(
        f"cannot use {type(obj).__name__} as an explainer: pass an object with preflight/explain/"
        "request_identity/aclose (the Explainer protocol) or a callable fn(history, item) -> str"
    )
