"""Every prompt gets exactly one domain: the source's own labels first, cheap heuristics for the rest.

Mapping table (source label -> domain). Labels are matched case-insensitively; when a row has
several labels, the domain that comes first in `PRECEDENCE` wins.

| source                      | label                                                        | domain   |
|-----------------------------|--------------------------------------------------------------|----------|
| any                         | recipe `domain:` on the source                                | that one |
| hermes_function_calling     | (whole dataset)                                              | tool_use |
| codefeedback                | (whole dataset)                                              | code     |
| metamathqa                  | (whole dataset)                                              | math     |
| webinstructsub              | source=mathstackexchange                                     | math     |
| webinstructsub              | source=stackexchange, source=socratic                        | stem     |
| infinity_instruct           | cate_ability_en contains "programming", "software", "coding" | code     |
| infinity_instruct           | ... "mathematical", "math"                                   | math     |
| infinity_instruct           | ... "stem", "science", "data science"                        | stem     |
| infinity_instruct           | ... "literary", "creativ", "artistic", "task generation",   | other    |
|                             |     "multilingual", "translation"                            |          |
| infinity_instruct           | any other label (knowledge, reasoning, advice, ...)          | general  |
| no label (generic adapters) | heuristics below, in this order                               |          |

Heuristics, first match wins: tools or `<tools>`/`<tool_call>` markup -> tool_use unless the
conversation already has tool results or ReAct steps (Thought/Action/Observation), which make
it agent; code fences or code keywords -> code; LaTeX or equation-solving words -> math;
science vocabulary -> stem; creative-writing, role-play or translation requests -> other;
anything else -> general.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DOMAINS = ("general", "code", "math", "stem", "tool_use", "agent", "other")
PRECEDENCE = ("tool_use", "agent", "code", "math", "stem", "other", "general")

# Source labels (lower-cased substrings) -> domain; checked in PRECEDENCE order.
LABEL_TABLE: dict[str, tuple[str, ...]] = {
    "code": ("programming", "software", "coding", "code generation"),
    "math": ("mathematical", "mathematics", "math"),
    "stem": ("stem", "science", "data science", "physics", "chemistry", "biology"),
    "other": (
        "literary",
        "creativ",
        "artistic",
        "task generation",
        "multilingual",
        "translation",
        "role-play",
        "roleplay",
    ),
}

_REACT = re.compile(r"^\s*(Thought|Think|Action|Act|Action Input|Observation)\s*:", re.M)
_TOOL_MARKUP = re.compile(r"</?(tools|tool_call|tool_response|functioncall)>")
_FENCE = re.compile(r"```")
_CODE_WORDS = re.compile(
    r"(\bdef \w+\(|\bclass \w+[:(]|#include\s*<|\bpublic static\b|\bfunction \w*\(|\bimport \w+|"
    r"\bSELECT\b.+\bFROM\b|\bconsole\.log\(|\bprintf\(|=>\s*\{|\bstd::|\breturn [^.]{0,40};|</?div\b|"
    r"\b(python|javascript|typescript|java|c\+\+|rust|golang|sql|bash|regex|html|css)\b.{0,40}\b(code|function|script|program|query)\b|"
    r"\b(write|implement|debug|fix|refactor)\b.{0,40}\b(function|code|script|program|class|method|algorithm)\b)",
    re.I | re.S,
)
_LATEX = re.compile(r"(\$[^$\n]{1,200}\$|\\frac|\\sqrt|\\int|\\sum|\\begin\{(equation|align)|\\cdot|\\le\b|\\ge\b)")
_MATH_WORDS = re.compile(
    r"\b(solve|equation|integral|derivative|probability|polynomial|theorem|prove that|calculate|how many|"
    r"what is the (sum|product|value)|factor|simplify|fraction|percent|matrix|eigen|logarithm)\b|"
    r"\d+\s*[+*/^=]\s*\d+|\d+\s+-\s+\d+|求解|方程|计算|几何|概率",
    re.I,
)
_STEM_WORDS = re.compile(
    r"\b(physics|chemistry|biology|molecule|atom|electron|velocity|acceleration|force|energy|enzyme|cell|"
    r"reaction|wavelength|circuit|voltage|genetic|dna|protein|organism|thermodynamic|quantum|planet|"
    r"newton|joule|molar|photosynthesis|ecosystem|nucleus|gravity|magnetic|isotope|neuron|climate)(s|es)?\b",
    re.I,
)
_OTHER_WORDS = re.compile(
    r"\b(write (a|an) (poem|story|song|haiku|essay)|poem|short story|role-?play|pretend you are|act as|"
    r"translate (this|the following|into|to))\b|翻译|写一首",
    re.I,
)


def domain_from_labels(labels: Iterable[str]) -> tuple[str, str] | None:
    """(domain, the label that decided) from a source's own labels, by the mapping table; None if no label."""
    lowered = [str(x).lower() for x in labels if x]
    if not lowered:
        return None
    for domain in PRECEDENCE:
        keys = LABEL_TABLE.get(domain, ())
        for lab in lowered:
            if any(k in lab for k in keys):
                return domain, lab
    return "general", lowered[0]


def domain_from_text(messages: list[dict], tools: list | None) -> tuple[str, str]:
    """(domain, the heuristic that fired) for a conversation without usable labels."""
    has_tool_turn = any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    text = "\n".join(m["content"] for m in messages if m["role"] in ("system", "user"))
    all_text = "\n".join(m["content"] for m in messages)
    if has_tool_turn or _REACT.search(all_text):
        return "agent", "heuristic:tool-results-or-react"
    if tools or _TOOL_MARKUP.search(text):
        return "tool_use", "heuristic:tools"
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    if _FENCE.search(user) or _CODE_WORDS.search(user):
        return "code", "heuristic:code"
    if _LATEX.search(user) or _MATH_WORDS.search(user):
        return "math", "heuristic:math"
    if _STEM_WORDS.search(user):
        return "stem", "heuristic:stem"
    if _OTHER_WORDS.search(user):
        return "other", "heuristic:creative-or-translation"
    return "general", "heuristic:default"


def assign_domain(
    messages: list[dict],
    tools: list | None,
    *,
    fixed: str | None = None,
    source_domain: tuple[str, str] | None = None,
    labels: Iterable[str] = (),
) -> tuple[str, str]:
    """The one domain of a prompt and why: recipe override, adapter's source label, row labels, heuristics."""
    if fixed:
        return fixed, "recipe"
    if source_domain is not None:
        return source_domain
    by_label = domain_from_labels(labels)
    if by_label is not None:
        return by_label[0], f"label:{by_label[1]}"
    return domain_from_text(messages, tools)
