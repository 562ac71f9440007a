"""The adapter contract: one dataset row in, one normalized conversation out (or RecordError)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(slots=True)
class Converted:
    """What an adapter knows about a row; the pipeline adds id, domain, language and token counts."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    original_id: str | None = None
    license: str | None = None
    source_domain: tuple[str, str] | None = None
    labels: tuple[str, ...] = ()
    group_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Adapter:
    """Base of every adapter: the columns it needs, the dataset's license, and `convert`.

    Assistant turns: the trailing assistant answer(s) are removed, since the target model writes
    the reply to the last user/tool turn. Earlier assistant turns of a multi-turn conversation
    keep their position and their original content: `generate` regenerates every assistant turn
    in order, so they are placeholders that keep the conversation's structure, not answers that
    reach the training data.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    required_columns: ClassVar[tuple[str, ...]]
    # The dataset card's `license:` id; None where the card states none: its prompts record `unknown`.
    license: ClassVar[str | None] = None
    has_original_question: ClassVar[bool] = False

    def convert(self, row: dict[str, Any]) -> Converted:
        raise NotImplementedError
