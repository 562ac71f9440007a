"""Sampling profiles: several sampling settings in one job, each (id, sample) assigned one by weight.

The assignment is a hash of (seed, id, sample) onto the profiles' cumulative weights: it does not
depend on dispatch order, on which rows are already done, or on anything but the job's own
identity, so a resume (after kill -9 too) gives every pending sample the profile it had before.
Shares are drawn, not quota'd: with weights 1:1 about half the samples get each profile.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from itertools import accumulate
from typing import Any

from pydantic import Field, field_validator

from fleetgen.config import StrictModel

# Body keys fleetgen owns (the conversation, the target, the parsers' switches): a profile's
# extra_body may not set them.
RESERVED_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "n",
        "seed",
        "return_token_ids",
        "return_prompt_token_ids",
        "logprobs",
        "top_logprobs",
        "chat_template_kwargs",
    }
)
# The job's policies a row's `sampling` records beside what was sent (config.GenerateConfig.policies):
# no request field may take their names, so the two never collide.
POLICY_KEYS = frozenset({"reasoning", "truncation", "tool_match", "history_reasoning"})
# Keys of a request body that are not sampling parameters: left out of what a row records as sent.
NOT_SAMPLING = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "return_token_ids",
        "return_prompt_token_ids",
        "logprobs",
        "top_logprobs",
    }
)


class SamplingProfile(StrictModel):
    """One sampling setting; fields left unset take the job's values (temperature, top_p, max_tokens)."""

    name: str = Field(description="Name recorded on each row of this profile (unique in the job).", min_length=1)
    weight: float = Field(1.0, gt=0, description="Relative share of (id, sample) pairs this profile gets.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature; default: the job's.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus mass; default: the job's.")
    top_k: int | None = Field(None, description="Top-k (-1 or 0: off, as the engine reads it).")
    min_p: float | None = Field(None, ge=0, le=1, description="Min-p sampling floor.")
    repetition_penalty: float | None = Field(None, gt=0, description="Repetition penalty (1.0: off).")
    presence_penalty: float | None = Field(None, description="OpenAI presence penalty.")
    frequency_penalty: float | None = Field(None, description="OpenAI frequency penalty.")
    max_tokens: int | None = Field(None, ge=1, description="Token budget per turn; default: the job's max_tokens.")
    reasoning_effort: str | None = Field(
        None, description="reasoning_effort sent as is (e.g. low/medium/high, gpt-oss)."
    )
    thinking: bool | None = Field(
        None, description="chat_template_kwargs.enable_thinking: true or false (Qwen3-style thinking on or off)."
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Extra chat template arguments (merged; `thinking` wins for enable_thinking)."
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Other request fields sent as is (engine-specific sampling knobs)."
    )

    @field_validator("extra_body")
    @classmethod
    def _not_reserved(cls, v: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(v) & (RESERVED_KEYS | set(cls.model_fields)))
        if clash:
            raise ValueError(
                f"extra_body may not set {', '.join(clash)}: fleetgen sets them, or the profile has a field for them"
            )
        policy = sorted(set(v) & POLICY_KEYS)
        if policy:
            raise ValueError(
                f"extra_body may not set {', '.join(policy)}: rows record the job's policy under that name "
                "(set the job's field of that name instead)"
            )
        return v

    def identity(self) -> dict[str, Any]:
        """What the job identity records of this profile: every field set."""
        return self.model_dump(exclude_none=True, exclude_defaults=False)


def check_profiles(profiles: list[SamplingProfile], reasoning: str) -> None:
    """Names unique; no profile asks to think in a job whose reasoning is off. Raises ValueError."""
    names = [p.name for p in profiles]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"profile names must be unique, repeated: {', '.join(dup)}")
    if reasoning == "off":
        thinking = [p.name for p in profiles if p.thinking or p.chat_template_kwargs.get("enable_thinking")]
        if thinking:
            raise ValueError(
                f"reasoning is off but profile(s) {', '.join(thinking)} turn thinking on; "
                "set reasoning to save or strip (each profile's `thinking` then decides)"
            )


def assign(profiles: list[SamplingProfile], seed: int | None, rid: str, sample: int) -> SamplingProfile:
    """The profile of (rid, sample): a stable hash onto the cumulative weights."""
    if len(profiles) == 1:
        return profiles[0]
    digest = hashlib.blake2b(f"profile\x00{seed or 0}\x00{rid}\x00{sample}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    bounds = list(accumulate(p.weight for p in profiles))
    return profiles[min(bisect_right(bounds, u * bounds[-1]), len(profiles) - 1)]


def apply(body: dict[str, Any], profile: SamplingProfile) -> dict[str, Any]:
    """`body` with the profile's settings laid over the job's (in place; returned for chaining)."""
    # max_tokens is not laid here: the turn's budget (profile's, or the job's, or retry-longer's) is the caller's.
    for key in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "reasoning_effort",
    ):
        value = getattr(profile, key)
        if value is not None:
            body[key] = value
    kwargs = {**(body.get("chat_template_kwargs") or {}), **profile.chat_template_kwargs}
    if profile.thinking is not None:
        kwargs["enable_thinking"] = profile.thinking
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    body.update(profile.extra_body)
    return body


def sent_sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling part of a request body as sent."""
    return {k: v for k, v in body.items() if k not in NOT_SAMPLING}


def row_sampling(policies: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A row's `sampling`, one shape for every row: the job's policies plus what its first turn sent.

    `seed` is always there (null when the job has none): the seed the first turn was sent. The
    exports read `reasoning` here to know whether the sampled reasoning was stripped from the row.
    """
    return {**sent_sampling(body), **policies, "seed": body.get("seed")}
