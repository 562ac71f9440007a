"""Token rows: input_ids and loss_mask from the ids the server sampled, else from the target's chat template.

A record whose every regenerated turn carries the server's token ids becomes rows of exactly those
ids (formats/token_rows.py): nothing is re-encoded. The rest of this module is the fallback for
records without them (older engines, external endpoints, --no-token-ids, reasoning dropped),
counted per reason in the export summary as re-tokenized: it re-renders the text, and a decoded
text re-encodes to the canonical tokenization, not necessarily to the tokens the target sampled.
Every row says which path made it: `ids_from` is `ids` or `text`, and `ids_reason` (null for `ids`)
why: a turn's own reason from generate (`none returned`, `count mismatch`, `refused`; token_ids.py),
`not requested` (no ids in the record: --no-token-ids), or one of the export's own (reasoning dropped).
With `require_token_ids` a record that would take the text path fails the export instead, naming its
turns (id, sample, turn, reason).

How the mask is found, for any template: for assistant turn i the template renders the history
with a generation prompt (what the server saw before it answered) and then the history with the
turn itself; the turn's text is the difference. When the full conversation starts with every such
rendering (the template is prefix-stable for it), it is one row with every assistant turn
supervised. Templates that rewrite earlier turns are not: Qwen3's drops the reasoning of assistant
turns before the last user message. Such a conversation is split into rows that each end at an
assistant turn and hold the rendering of the messages up to it, which is what the server saw when
it generated that turn (earlier turns as the template renders them then, as unsupervised
context). Consecutive turns that a later rendering keeps unchanged share its row (with Qwen3 and
reasoning on every turn: one row per user turn), so no turn is supervised twice, and none in text
the target never saw. A split row's id is `<prompt id>#<sample>/turn<k>`, k the 0-based index of
its last assistant turn; `prompt_id` and `sample` stay those of the conversation.

The supervised text runs from the end of the generation prompt to the end-of-turn token
inclusive; with reasoning "context" it starts at the answer instead. Tokens come from one
encoding of each row's text with offsets; a token that straddles a span edge is a failure, and
the round-trip check decodes each masked run and compares it with the supervised text and the
regenerated message. Any failure rejects the whole conversation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from fleetgen.errors import ConfigError, InputError, MissingTokenIdsError
from fleetgen.export.config import ExportConfig
from fleetgen.export.formats.base import Format, Row, RowRejected, clean_message
from fleetgen.export.formats.token_rows import IdRow, chained_rows, think_close_id
from fleetgen.export.results import reasoning_policy, row_id
from fleetgen.rows.markup import THINK_CLOSE
from fleetgen.rows.token_ids import MISSING, TurnIds, missing_turns, recorded_turns

NOT_REQUESTED = "not requested"  # a record without ids at all: --no-token-ids, or a fleetgen older than token ids


@dataclass(frozen=True)
class Turn:
    """One assistant turn: the rendering of the messages through it, and its supervised characters there."""

    index: int  # among the assistant turns, 0-based
    message: dict[str, Any]
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Piece:
    """The text of one row and the turns it supervises (each turn's characters are valid in `text`)."""

    text: str
    turns: list[Turn]


def load_tokenizer(name: str) -> Any:
    """A fast tokenizer with a chat template; 'smollm2' means the embedded model's."""
    from fleetgen.models.registry import resolve_model

    try:
        path = resolve_model(name, prepare=False)
    except Exception as e:  # ModelError: keep the message, point at the flag
        raise ConfigError(
            f"tokenizer {name!r}: {e}", hint="pass --tokenizer PATH (the target model's directory)"
        ) from None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # transformers raises OSError, ValueError and more for a bad path
        raise ConfigError(f"cannot load a tokenizer from {path}: {e}", hint="pass --tokenizer PATH") from None
    if not getattr(tok, "is_fast", False):
        raise ConfigError(f"tokenizer at {path} is not a fast tokenizer", hint="token offsets need a fast tokenizer")
    if not tok.chat_template:
        raise ConfigError(f"tokenizer at {path} has no chat template", hint="use the target model's own tokenizer")
    return tok


class TokensFormat(Format):
    name = "tokens"

    def __init__(self, config: ExportConfig, tokenizer: Any, chat_template: str | None = None) -> None:
        super().__init__(config)
        self.tok = tokenizer
        self.chat_template = chat_template
        self.eot = tokenizer.eos_token or ""
        self.think_close = think_close_id(tokenizer)
        # The run's reasoning policy from job.json, for rows that do not record theirs (export/run.py sets it).
        self.job_reasoning: str | None = None
        self.from_ids = 0  # records whose rows are the server's ids
        self.retokenized: Counter = Counter()  # records that took the text path, by why
        # require_token_ids: (id, sample, turn, reason) of turns that would take the text path, and their count.
        self.without_ids: list[tuple[str, int, int, str]] = []
        self.without_ids_count = 0

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        try:
            return self.tok.apply_chat_template(
                messages,
                tools=tools or None,
                tokenize=False,
                add_generation_prompt=gen,
                chat_template=self.chat_template,
            )
        except Exception as e:  # jinja raises TemplateError and friends for messages it refuses
            raise RowRejected(f"chat template refused the conversation: {type(e).__name__}") from None

    def turns(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[Turn]:
        """Each assistant turn as the server saw it: rendered with the history before it."""
        turns = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.render(messages[:i], tools, gen=True)
            upto = self.render(messages[: i + 1], tools, gen=False)
            if not upto.startswith(before):
                raise RowRejected("template renders an assistant turn unlike its generation prompt")
            start, end = self._supervised(upto[len(before) :], m)
            turns.append(Turn(len(turns), m, upto, len(before) + start, len(before) + end))
        return turns

    def pieces(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[Piece]:
        """The whole conversation when the template is prefix-stable
        for it; else one piece per run of turns it keeps."""
        turns = self.turns(messages, tools)
        full = self.render(messages, tools, gen=False)
        if all(full.startswith(t.text) for t in turns):
            return [Piece(full, turns)]
        runs: list[list[Turn]] = []
        for t in turns:
            if runs and t.text.startswith(runs[-1][-1].text):
                runs[-1].append(t)  # the earlier turns of the run are unchanged in this rendering
            else:
                runs.append([t])
        return [Piece(run[-1].text, run) for run in runs]

    def _supervised(self, body: str, m: dict[str, Any]) -> tuple[int, int]:
        """Within one turn's rendered text: from its first generated character to the end-of-turn token."""
        content = m.get("content") or ""
        reasoning = m.get("reasoning_content") or ""
        if reasoning and reasoning not in body:
            raise RowRejected("template does not render reasoning_content")
        for call in m.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name")
            if name and name not in body:
                raise RowRejected("template does not render tool_calls")
        cut = body.rfind(self.eot) if self.eot else -1
        end = cut + len(self.eot) if cut >= 0 else len(body.rstrip())
        start = 0
        if reasoning and self.config.reasoning == "context":
            after = body.index(reasoning) + len(reasoning)
            close = body.find(THINK_CLOSE, after)
            after = close + len(THINK_CLOSE) if close >= 0 else after
            at = body.find(content, after) if content else -1
            start = at if at >= 0 else after + len(body[after:]) - len(body[after:].lstrip())
        if content and body.find(content, start, end) < 0:
            raise RowRejected("assistant content is not in its rendered turn")
        return start, end

    def recorded(self, rec: dict[str, Any]) -> list[TurnIds] | str:
        """The record's ids for every regenerated turn, or why its rows must be re-tokenized instead."""
        try:
            turns = recorded_turns(rec)
        except (ValueError, TypeError, KeyError):
            return "token ids unreadable"
        if turns is None:
            return NOT_REQUESTED
        missing = missing_turns(rec)
        if missing:  # each turn's reason from generate, in a stable order
            return "; ".join(sorted({MISSING.get(why, MISSING[None]) for _, why in missing}))
        assistants = [m for m in rec["messages"] if m.get("role") == "assistant"]
        if len(turns) != len(assistants):
            return "token ids do not match the assistant turns"
        if self._reasoning_removed(rec, assistants, turns):
            return "reasoning dropped (the ids hold the sampled reasoning)"
        if (
            self.config.reasoning == "context"
            and self.think_close is None
            and any(m.get("reasoning_content") for m in assistants)
        ):
            return f"reasoning context: {THINK_CLOSE} is not one token"
        return turns  # type: ignore[return-value]

    def _reasoning_removed(self, rec: dict[str, Any], assistants: list[dict[str, Any]], turns: list[Any]) -> bool:
        """Whether the rows must lack reasoning the ids may hold, so the ids cannot be the rows.

        That is `--reasoning-in-data drop` with reasoning on a turn, or a run whose policy kept sampled reasoning
        out of the row: `strip`, or `off` (a target that thinks anyway has its reasoning dropped too). The
        policy is the row's own (`sampling.reasoning`), else job.json's (rows of profile runs written
        before rows recorded it); every run fleetgen wrote records one of the two. The ids hold reasoning
        when a completion has `</think>`; where that is not one token, a stripped row cannot be told
        apart and takes the text path.
        """
        policy = reasoning_policy(rec, self.job_reasoning)
        if self.config.reasoning == "drop" and any(m.get("reasoning_content") for m in assistants):
            return True
        stripped = policy == "strip"
        if policy != "off" and not stripped and self.config.reasoning != "drop":
            return False
        if self.think_close is None:
            if policy == "off":  # the template was asked not to think: look for the marker in the text
                return any(THINK_CLOSE in self.tok.decode(t.completion, skip_special_tokens=False) for t in turns)
            return stripped
        return any(self.think_close in t.completion for t in turns)

    def convert(self, rec: dict[str, Any]) -> list[Row]:
        turns = self.recorded(rec)
        if not isinstance(turns, str):
            rows = self.id_rows(rec, turns)
            self.from_ids += 1
            return self.provenance(rows, "ids", None)
        if self.config.require_token_ids:
            self._without_ids(rec, turns)
            return []  # the export fails at its end, naming these turns (see run.py)
        rows = self.text_rows(rec)
        self.retokenized[turns] += 1
        return self.provenance(rows, "text", turns)

    def provenance(self, rows: list[Row], source: str, reason: str | None) -> list[Row]:
        """Each row says where its ids came from (`ids`: the server's; `text`: re-tokenized) and why."""
        for row in rows:
            row["ids_from"], row["ids_reason"] = source, reason
        return rows

    def _without_ids(self, rec: dict[str, Any], reason: str) -> None:
        """Name the record's turns that have no usable ids: each turn's own reason, else the record's for every turn."""
        missing = missing_turns(rec)
        if missing:
            named = [(k, MISSING.get(why, MISSING[None])) for k, why in missing]
        else:
            n = sum(1 for m in rec.get("messages") or () if m.get("role") == "assistant")
            named = [(k, reason) for k in range(n)]
        self.without_ids_count += len(named)
        room = MissingTokenIdsError.KEPT - len(self.without_ids)
        self.without_ids += [
            (str(rec.get("id")), int(rec.get("sample") or 0), k, why) for k, why in named[: max(0, room)]
        ]

    def id_rows(self, rec: dict[str, Any], turns: list[TurnIds]) -> list[Row]:
        """Rows of the sampled ids: supervised ids are the completions, context ids the prompts (no re-encoding)."""
        close = self.think_close if self.config.reasoning == "context" else None
        chained = chained_rows(turns, close)
        for r in chained:
            if self.config.max_length and len(r.input_ids) > self.config.max_length:
                raise RowRejected(f"longer than max_length {self.config.max_length}")
        return [self._row(rec, r, len(chained)) for r in chained]

    def _row(self, rec: dict[str, Any], r: IdRow, n: int) -> Row:
        return {
            "id": row_id(rec) if n == 1 else f"{row_id(rec)}/turn{r.last_turn}",
            "prompt_id": str(rec["id"]),
            "sample": int(rec.get("sample") or 0),
            "input_ids": r.input_ids,
            "loss_mask": r.loss_mask,
        }

    def text_rows(self, rec: dict[str, Any]) -> list[Row]:
        """The fallback: rows from the re-rendered, re-encoded text, checked by a round trip."""
        messages = [clean_message(m, self.config.reasoning) for m in rec["messages"]]
        pieces = self.pieces(messages, rec.get("tools"))
        rows = []
        for piece in pieces:
            ids, mask = self._tokens(piece)
            rid = row_id(rec) if len(pieces) == 1 else f"{row_id(rec)}/turn{piece.turns[-1].index}"
            rows.append(
                {
                    "id": rid,
                    "prompt_id": str(rec["id"]),
                    "sample": int(rec.get("sample") or 0),
                    "input_ids": ids,
                    "loss_mask": mask,
                }
            )
        return rows

    def _tokens(self, piece: Piece) -> tuple[list[int], list[int]]:
        """Token ids of the piece's text and the mask of its turns, each turn checked by a round trip."""
        enc = self.tok(piece.text, add_special_tokens=False, return_offsets_mapping=True)
        ids: list[int] = enc["input_ids"]
        offsets: list[tuple[int, int]] = enc["offset_mapping"]
        if self.config.max_length and len(ids) > self.config.max_length:
            raise RowRejected(f"longer than max_length {self.config.max_length}")
        mask = [0] * len(ids)
        for turn in piece.turns:
            inside = []
            for t, (a, b) in enumerate(offsets):
                if b <= turn.start or a >= turn.end or a == b:
                    continue
                if a < turn.start or b > turn.end:
                    raise RowRejected("a token straddles an assistant span edge")
                inside.append(t)
            for t in inside:
                mask[t] = 1
            self._round_trip(ids, inside, piece.text[turn.start : turn.end], turn.message)
        return ids, mask

    def _round_trip(self, ids: list[int], run: list[int], text: str, m: dict[str, Any]) -> None:
        """Decoded masked tokens must give back the supervised text, which must hold the regenerated answer."""
        if run and run != list(range(run[0], run[-1] + 1)):
            raise RowRejected("round-trip: masked tokens of one turn are not contiguous")
        decoded = self.tok.decode([ids[t] for t in run], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if decoded != text:
            raise RowRejected("round-trip: decoded masked tokens differ from the rendered turn")
        content = m.get("content") or ""
        if content and content not in decoded:
            raise RowRejected("round-trip: regenerated content missing from the masked tokens")
        reasoning = m.get("reasoning_content") or ""
        if reasoning and self.config.reasoning == "train" and reasoning not in decoded:
            raise RowRejected("round-trip: reasoning missing from the masked tokens")

    def supervised_tokens(self, row: Row, rec: dict[str, Any]) -> int:
        return sum(row["loss_mask"])


def parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("prompt_id", pa.string()),
            ("sample", pa.int32()),
            ("input_ids", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("ids_from", pa.string()),  # ids: the server's sampled ids; text: re-tokenized (see the module docstring)
            ("ids_reason", pa.string()),  # why text; null for ids
        ]
    )


def require_tokenizer(config: ExportConfig, model: str | None) -> str:
    """--tokenizer as given, else the target's from this machine only (the fleet's model path the runs
    recorded, or the served name where it is local): without --tokenizer no model hub is asked (issue 41)."""
    if config.tokenizer:
        return config.tokenizer
    from fleetgen.models.tokenizer import find_tokenizer
    from fleetgen.rows.runs import read_runs

    recorded = next((r.model_path for r in reversed(read_runs(config.results_dir)) if r.model_path), None)
    source = find_tokenizer(None, recorded, model)
    if source.path is None:
        raise InputError(
            f"format {config.format} needs the target's tokenizer: {source.origin}",
            hint="pass --tokenizer PATH (the target model's directory)",
        )
    return str(source.path)
