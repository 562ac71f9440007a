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

_LANGS_OF: dict[str, tuple[str, ...]] = {}
for _code, _words in _STOPWORDS.items():
    for _w in _words:
        _LANGS_OF[_w] = _LANGS_OF.get(_w, ()) + (_code,)

_NON_LETTERS = re.compile(r"[\W\d_]+", re.U)
_SCRIPTS = [
    (code, re.compile(rng))
    for code, rng in (
        ("ja", "[\u3040-\u30ff]"),
        ("zh", "[\u4e00-\u9fff]"),
        ("ko", "[\uac00-\ud7af]"),
        ("ru", "[\u0400-\u04ff]"),
        ("ar", "[\u0600-\u06ff]"),
        ("hi", "[\u0900-\u097f]"),
        ("th", "[\u0e00-\u0e7f]"),
        ("el", "[\u0370-\u03ff]"),
    )
]
# Share of the letters a script needs to decide the language (kana is mixed with kanji in Japanese).
_SCRIPT_SHARE = {"ja": 0.05, "zh": 0.15}


def detect_language(text: str) -> str:
    """ISO 639-1 code of the text's main language, or 'und'."""
    text = _CODE.sub(" ", text[:8000])[:4000]
    letters = len(_NON_LETTERS.sub("", text))
    if letters < 3:
        return "und"
    if not text.isascii():
        for code, pattern in _SCRIPTS:
            if len(pattern.findall(text)) > _SCRIPT_SHARE.get(code, 0.3) * letters:
                return code
    words = _WORD.findall(text.lower())
    if len(words) < 2:
        return "und"
    hits = dict.fromkeys(_STOPWORDS, 0)
    for w in words:
        for code in _LANGS_OF.get(w, ()):
            hits[code] += 1
    best, best_hits = "und", 0
    for code, n in hits.items():  # dict order breaks ties: en first
        if n > best_hits:
            best, best_hits = code, n
    # Latin text with no stopword at all (identifiers, a list of terms) stays undetermined.
    return best if best_hits else ("en" if len(words) >= 8 else "und")
