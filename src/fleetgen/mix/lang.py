"""A cheap language guess from scripts and stopwords.

Why not the datasets' own tags: Infinity-Instruct's `langdetect` column is unreliable (code and
formula-heavy English is tagged de/fr/..., Chinese is `zh-cn`), and most sources have no tag at
all. Code blocks and inline code are removed before guessing. `und` means undetermined: too few
letters to tell (a formula, a bare code snippet).
"""

from __future__ import annotations

import re

_CODE = re.compile(r"```.*?(```|$)|`[^`\n]*`", re.S)
_WORD = re.compile(r"[a-zà-öø-ÿ']+")
_STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset("the and of to a in is that for it with as on are be this what how you i can your".split()),
    "fr": frozenset("le la les et des est un une du que pour dans pas qui sur avec ce je vous".split()),
    "de": frozenset("der die das und ist nicht ein eine zu den mit von ich sie es auf für wie".split()),
    "es": frozenset("el la los las y de que en un una es por para con no se su como lo".split()),
    "pt": frozenset("o a os as e de que em um uma é não para com se do da por como".split()),
    "it": frozenset("il la le e di che un una è per non con del della sono come si".split()),
}


def _count(text: str, lo: int, hi: int) -> int:
    return sum(1 for ch in text if lo <= ord(ch) <= hi)


def detect_language(text: str) -> str:
    """ISO 639-1 code of the text's main language, or 'und'."""
    text = _CODE.sub(" ", text)[:4000]
    if not text.strip():
        return "und"
    letters = sum(1 for ch in text if ch.isalpha())
    if letters < 3:
        return "und"
    kana = _count(text, 0x3040, 0x30FF)
    if kana > 0.05 * letters:
        return "ja"
    cjk = _count(text, 0x4E00, 0x9FFF)
    if cjk > 0.15 * letters:
        return "zh"
    for code, lo, hi in (("ko", 0xAC00, 0xD7AF), ("ru", 0x0400, 0x04FF), ("ar", 0x0600, 0x06FF),
                         ("hi", 0x0900, 0x097F), ("th", 0x0E00, 0x0E7F), ("el", 0x0370, 0x03FF)):
        if _count(text, lo, hi) > 0.3 * letters:
            return code
    words = _WORD.findall(text.lower())
    if len(words) < 2:
        return "und"
    best, best_hits = "und", 0
    for code, stop in _STOPWORDS.items():
        hits = sum(1 for w in words if w in stop)
        if hits > best_hits:
            best, best_hits = code, hits
    # Latin text with no stopword at all (identifiers, a list of terms) stays undetermined.
    return best if best_hits else ("en" if len(words) >= 8 else "und")
