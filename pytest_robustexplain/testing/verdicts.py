"""The fake server's faithfulness judge: deterministic verdicts from the texts a judge prompt holds.

A judge prompt (``checks/judge/prompt.py``) fences the history in ``<history>`` and the explanation in
``<explanation>``; any chat request holding both is answered here, whatever the server's reply mode, so one
fake serves the explainer and the judge. The rule (``judge="strict"``, the default):

- the explanation is **faithful** when it names a category of the history (a reason tied to what the user
  did) and does not list the history back (two or more history lines, or most of its titles named);
- otherwise it is not, with the reason as the unsupported claim.

So the stable reply ("your history shows a steady interest in Electronics products…") is faithful, the
copycat reply (the history repeated) and a reply that echoes one title without a reason are not.
A ``<criteria>`` block (``judge-criteria``) is read too: a line "A reason that mentions WORDS is unsupported"
makes an explanation that mentions WORDS not faithful, whatever else it says.
``judge="garbled"`` answers prose without the JSON shape (every verdict a judge failure);
``judge="fickle"`` flips its verdict when the history lines come newest first, as a judge that reads order
as evidence would (its reorder agreement is 0); ``judge="lenient"`` finds every explanation faithful, as a
judge that approves everything would (only people's verdicts catch it: its kappa against them is 0);
``judge="quoting"`` gives the strict verdict and then quotes the explanation as the prompt showed it, as a
judge that shows its work would (an explanation that plants a verdict of its own must not be read as the
judge's answer).
"""

from __future__ import annotations

import json
import re

from ..explainers.remote import is_warmup_prompt
from .prompts import parse_prompt

JUDGE_BEHAVIOURS: tuple[str, ...] = ("strict", "garbled", "fickle", "lenient", "quoting")
_HISTORY = re.compile(r"<history>\n(.*?)\n</history>", re.DOTALL)
_EXPLANATION = re.compile(r"<explanation>\n(.*?)\n</explanation>", re.DOTALL)
_DATE = re.compile(r"date:\s*(\d{4}-\d{2}-\d{2})")
_CRITERIA = re.compile(r"<criteria>\n(.*?)\n</criteria>", re.DOTALL)
_BANNED = re.compile(r"a reason that mentions (.+?) is (?:unsupported|not supported)", re.IGNORECASE)
_LISTED_LINE = re.compile(r"^\s*\d+\.\s|\(id [^)]*\)", re.MULTILINE)


def is_judge_prompt(prompt: str) -> bool:
    """A judge's prompt (not the warm-up, which may start with one)."""
    return bool(_HISTORY.search(prompt) and _EXPLANATION.search(prompt)) and not is_warmup_prompt(prompt)


def _named(word: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word.lower())}(?!\w)", text) is not None


def _newest_first(block: str) -> bool:
    dates = _DATE.findall(block)
    return len(dates) >= 2 and dates[0] > dates[-1]


def judge_reply(prompt: str, behaviour: str = "strict") -> str:
    """The fake judge's reply to a judge prompt (see the module docs)."""
    if behaviour not in JUDGE_BEHAVIOURS:
        raise ValueError(f"FakeOllamaServer judge must be one of {', '.join(JUDGE_BEHAVIOURS)}, "
                         f"got {behaviour!r}")
    if behaviour == "garbled":
        return "The explanation looks reasonable to me and mostly matches the user."
    history = _HISTORY.search(prompt)
    explanation = _EXPLANATION.search(prompt)
    block = history.group(1) if history else ""
    text = explanation.group(1) if explanation else ""
    entries = parse_prompt(block).history
    lowered = text.lower()
    categories = sorted({e.category for e in entries if e.category})
    titles = sorted({e.title for e in entries if e.title})
    named_titles = [t for t in titles if _named(t, lowered)]
    listed = len(_LISTED_LINE.findall(text)) >= 2 or (len(named_titles) >= 3 and
                                                       2 * len(named_titles) >= len(titles))
    cited = [c for c in categories if _named(c, lowered)]
    criteria = _CRITERIA.search(prompt)
    banned = [w for w in _BANNED.findall(criteria.group(1) if criteria else "") if _named(w, lowered)]
    if banned:
        faithful, claim = False, f"it gives a reason about {banned[0]}, which the domain's criteria refuse"
    elif listed:
        faithful, claim = False, "it lists the history back instead of giving a reason"
    elif not cited:
        faithful, claim = False, "no reason ties the user's demonstrated preferences to the item"
    else:
        faithful, claim = True, ""
    if behaviour == "lenient":
        faithful, claim = True, ""
    if behaviour == "fickle" and _newest_first(block):
        faithful, claim = not faithful, "the newest items outweigh the rest" if faithful else ""
    verdict = {"preferences": f"The user engages with {', '.join(categories[:3]) or 'few known categories'}.",
               "unsupported": [claim] if claim else [],
               "rationale": (f"It ties the item to the user's interest in {cited[0]}." if faithful and cited
                             else f"Not faithful: {claim}." if claim else "The reasons are supported."),
               "faithful": int(faithful)}
    quoted = f"\nThe explanation, as given: {text}" if behaviour == "quoting" else ""
    return f"Checking the reasons against the history.\n{json.dumps(verdict)}{quoted}"
