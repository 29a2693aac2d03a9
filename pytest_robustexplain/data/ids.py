"""What makes an id safe to show and compare: the letters that print as nothing, two ids that are one
text in two Unicode forms refused, and the note on ids that only look alike (mixed scripts, whole-script
lookalikes). An id travels into every report, test id and XML attribute (``io.as_id`` reads one)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from ..errors import DataError

# Letters and symbols that print as nothing (not format characters, so spelled_out leaves them): Hangul
# fillers, the halfwidth one, the blank Braille pattern.
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Scripts whose letters look alike: "uѕer1" with a Cyrillic ѕ (U+0455) reads as "user1" and is another id.
LOOKALIKE_SCRIPTS: tuple[str, ...] = ("LATIN", "CYRILLIC", "GREEK")


def escaped(text: str) -> str:
    return "".join(c if c.isascii() and c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def compatibility_form(text: str) -> bool:
    """Whether ``text`` writes letters in a compatibility form (fullwidth ``ｕ``, styled ``𝐮``, a
    decomposed accent): NFKC folds it into another id it then reads like."""
    return unicodedata.normalize("NFKC", text) != text


def one_form_each(ids: Iterable[str], what: str, source: str) -> None:
    """DataError when two ``ids`` are one text in two Unicode forms ("José" composed and decomposed): two
    users that read as one in every report, whose histories a run would keep apart."""
    seen: dict[str, str] = {}
    for given in sorted(ids):
        first = seen.setdefault(unicodedata.normalize("NFC", given), given)
        if first != given:
            raise DataError(f"{what} ids {first!a} and {given!a} are one text in two Unicode forms "
                            f"(composed and decomposed); give each {what} one id", source=source)


def mixed_script(text: str) -> bool:
    """Whether ``text``'s letters come from more than one of :data:`LOOKALIKE_SCRIPTS` (a homoglyph id)."""
    scripts = {name.split(" ", 1)[0] for name in (unicodedata.name(c, "") for c in text if c.isalpha())}
    return len(scripts & set(LOOKALIKE_SCRIPTS)) > 1


# Cyrillic and Greek letters that print as a Latin one (Unicode TS #39's confusables, the common ones): an
# id written wholly in them ("аре", three Cyrillic letters) reads as a Latin id without mixing scripts.
LATIN_LOOKALIKES = frozenset(
    # а е о р с у х і ј ѕ һ ԁ ԛ ԝ ӏ
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u04bb\u0501\u051b\u051d\u04cf"
    # А В Е К М Н О Р С Т Х У І Ј Ѕ Ү
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0423\u0406\u0408\u0405\u04ae"
    # Α Β Ε Ζ Η Ι Κ Μ Ν Ο Ρ Τ Υ Χ, then ο ν ι κ α υ ρ
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7"
    "\u03bf\u03bd\u03b9\u03ba\u03b1\u03c5\u03c1")


def whole_script_lookalike(text: str) -> bool:
    """Whether every letter of ``text`` is a Cyrillic or Greek one that prints as a Latin letter (an id
    that imitates a Latin one in a single script); an id with any other letter of its script (a real
    Russian or Greek word) is not."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and all(c in LATIN_LOOKALIKES for c in letters)


def lookalike_note(ids: Iterable[str], what: str) -> str:
    """One sentence naming the ``ids`` that mix those scripts, or write Latin-looking letters in another
    script, their letters outside ASCII shown as ``\\uXXXX`` ("" when none): such an id may imitate another
    in every report."""
    ids = sorted({i for i in ids if not i.isascii()})
    mixed = [i for i in ids if mixed_script(i)]
    whole = [i for i in ids if whole_script_lookalike(i) and i not in mixed]
    folded = [i for i in ids if compatibility_form(i) and i not in mixed and i not in whole]
    said = []
    if mixed:
        count = f"1 {what} id mixes" if len(mixed) == 1 else f"{len(mixed)} {what} ids mix"
        said.append(f"{count} Latin, Cyrillic or Greek letters and may imitate other ids in the reports: "
                    f"{_listed(mixed)}")
    if whole:
        count = f"1 {what} id writes" if len(whole) == 1 else f"{len(whole)} {what} ids write"
        said.append(f"{count} only Cyrillic or Greek letters that look Latin and may imitate other ids in "
                    f"the reports: {_listed(whole)}")
    if folded:
        count = f"1 {what} id writes" if len(folded) == 1 else f"{len(folded)} {what} ids write"
        said.append(f"{count} letters in a compatibility form (fullwidth, styled or decomposed) and may "
                    f"imitate other ids in the reports: {_listed(folded)}")
    return "; ".join(said)


def _listed(ids: list[str]) -> str:
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return ", ".join(f"'{escaped(i)}'" for i in ids[:3]) + more
