"""Regenerating one sample of one prompt, on policy: each assistant turn against the regenerated history."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from fleetgen.errors import MissingTokenIdsError
from fleetgen.generate.config.profiles import SamplingProfile, assign, row_sampling
from fleetgen.generate.config.sampling import SamplingConfig, derived_seed
from fleetgen.generate.config.sections import TransportConfig
from fleetgen.generate.dispatch.client import ChatAnswer, IdsRefused, Rejected, TransientError, chat_or_without_ids
from fleetgen.generate.dispatch.dispatcher import Dispatcher
from fleetgen.generate.dispatch.prefix_map import prefix_blocks
from fleetgen.generate.dispatch.replica import Replica
from fleetgen.generate.journal.outcomes import Completed, Failed, Outcome
from fleetgen.generate.prompts.reader import PromptRecord
from fleetgen.generate.turns.native import native_chat
from fleetgen.generate.turns.paths import TurnPath
from fleetgen.generate.turns.tool_turns import FollowUp, follow_up
from fleetgen.rows.markup import THINK_CLOSE, THINK_OPEN
from fleetgen.rows.token_ids import MISSING, REFUSED, TurnIdsLog

_NO_TOOLS = FollowUp(None)  # never changed: its lists are only read


@dataclass
class Session:
    """What every sample of a run shares: its sampling and transport
    sections, the dispatcher, the HTTP session, the model."""

    sampling: SamplingConfig
    transport: TransportConfig
    output_dir: Path  # named in the error that stops a run on a turn without ids
    dispatcher: Dispatcher
    http: aiohttp.ClientSession
    model: str
    context_length: int | None = None
    # "auto" until a server says it cannot parse tool calls; then "none" (tools still reach the template).
    tool_choice: str = "auto"
    notes: list[str] = field(default_factory=list)
    # The path each endpoint's turns take (paths.py); an endpoint not listed takes the chat path.
    paths: dict[str, TurnPath] = field(default_factory=dict)
    # Whether earlier reasoning goes back to the server (history_reasoning.decide: keep or drop).
    history_reasoning: str = "drop"
    ids_refused: set[str] = field(default_factory=set)  # endpoints that refused the token id fields: asked without
    # The job's policies (SamplingConfig.policies), built once: every row's `sampling` records them.
    policies: dict[str, object] = field(init=False)

    def __post_init__(self) -> None:
        self.policies = self.sampling.policies()
        if self.history_reasoning == "keep":
            self.policies["history_reasoning"] = "keep"


def is_truncated(answer: ChatAnswer) -> bool:
    """Cut by the budget, reasoning that never closed, or nothing said: not a success."""
    if answer.finish_reason == "length":
        return True
    content = answer.content or ""
    if THINK_OPEN in content and THINK_CLOSE not in content.split(THINK_OPEN)[-1]:
        return True
    return not content.strip() and not answer.tool_calls


async def regenerate(s: Session, prompt: PromptRecord, sample: int) -> Outcome:
    """Every assistant turn of `prompt` regenerated for sample index `sample`; one Outcome."""
    cfg = s.sampling
    history: list[dict[str, Any]] = []  # what the server sees
    out: list[dict[str, Any]] = []  # what the result record holds
    finish: list[str | None] = []
    replicas: list[str] = []
    prompt_tokens = completion_tokens = 0
    truncated = False
    ids = TurnIdsLog()
    t0 = time.time()
    sent: list[float] = []  # when the first request went out: a slot, the warm-up and retries' waits come before
    messages = prompt.messages
    # A prompt without a final answer gets one: the step past the last message (None).
    last = len(messages) if messages[-1]["role"] != "assistant" else len(messages) - 1
    turn = 0
    i = 0
    cut: dict[str, Any] | None = None
    dropped: list[dict[str, Any]] = []
    profile = assign(cfg.profiles, cfg.seed, prompt.id, sample) if cfg.profiles else None
    first_body: dict[str, Any] | None = None
    while i <= last:
        m = messages[i] if i < len(messages) else None
        if m is not None and m["role"] != "assistant":
            if m["role"] == "tool":
                # A recorded result with no regenerated call before it answers nothing the target did.
                dropped.append(dict(m))
            else:
                # System and user turns stay in place.
                out.append(dict(m))
                history.append(dict(m))
            i += 1
            continue
        step = await _turn(s, prompt, sample, turn, history, profile, sent)
        if isinstance(step, Failed):
            return step
        answer, replica, truncated_turn, body = step
        first_body = first_body or body
        prompt_tokens += answer.prompt_tokens
        completion_tokens += answer.completion_tokens
        finish.append(answer.finish_reason)
        ids.add(answer.token_ids, answer.ids_missing)
        if cfg.require_token_ids and answer.token_ids is None:
            raise ids_required(s, prompt.id, sample, turn, MISSING[answer.ids_missing])
        replicas.append(replica.endpoint)
        if truncated_turn:
            if cfg.truncation == "drop":
                return Failed(
                    prompt.id,
                    sample,
                    f"turn {turn} truncated (finish_reason={answer.finish_reason}); dropped by policy",
                    "truncated",
                    prompt.line,
                )
            truncated = True
        # The recorded tool results after this turn follow it only where the target made their calls.
        j = i + 1
        while j < len(messages) and messages[j]["role"] == "tool":
            j += 1
        if answer.tool_calls or j > i + 1:
            follow = follow_up(
                m, list(messages[i + 1 : j]), answer.tool_calls, match=cfg.tool_match, more_follows=j <= last
            )
        else:
            follow = _NO_TOOLS  # no call made, no result recorded: what follow_up answers then
        message = _assistant_message(answer, follow.calls, cfg.reasoning)
        out.append(message)
        history.append(_for_request(message, answer.reasoning if s.history_reasoning == "keep" else None))
        turn += 1
        if follow.cut is not None:
            # The sample ends at the target's own turn; what the record held after it is not kept.
            cut = {
                "turn": turn - 1,
                "message": len(out) - 1,
                "reason": follow.cut.reason,
                "detail": follow.cut.detail,
                "recorded_messages_dropped": len(messages) - (i + 1),
            }
            break
        if follow is not _NO_TOOLS:
            dropped += follow.dropped
            out += follow.results
            history += follow.results
        i = j
    return Completed(
        id=prompt.id,
        sample=sample,
        record={
            "messages": out,
            "tools": prompt.tools,
            "meta": prompt.meta,
            "finish_reason": finish,
            "truncated": truncated,
            "cut": cut,
            **({"dropped_tool_results": dropped} if dropped else {}),
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
            "replica": replicas[0] if len(replicas) == 1 or len(set(replicas)) == 1 else replicas,
            "model": s.model,
            **_sampling_of(s, profile, first_body or {}),
            # latency from the first request's send; what the sample waited before it (a free slot, a replica's
            # warm-up) apart, so a job's first rows do not count a kernel compile as the target's latency.
            "timing": {
                "started_at": round(sent[0], 3),
                "latency_s": round(time.time() - sent[0], 3),
                "wait_s": round(sent[0] - t0, 3),
            },
            **({"token_ids": ids.record()} if cfg.token_ids else {}),
        },
        truncated=truncated,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        turns_with_ids=ids.with_ids if cfg.token_ids else 0,
        turns_without_ids=ids.without_ids if cfg.token_ids else 0,
        ids_missing=ids.missing() if cfg.token_ids else {},
    )


def ids_required(s: Session, rid: str, sample: int, turn: int, reason: str) -> MissingTokenIdsError:
    """--require-token-ids: the run stops at this turn; its sample is not recorded (a resume redoes it)."""
    return MissingTokenIdsError(
        [(rid, sample, turn, reason)],
        what=f"generate {s.output_dir}",
        hint="the servers must return token ids (vLLM >= 0.10.2; SGLang with chat return_token_ids); or run without "
        "--require-token-ids: such turns are then recorded with the reason and token exports re-tokenize them",
    )


def _sampling_of(s: Session, profile: SamplingProfile | None, body: dict[str, Any]) -> dict[str, Any]:
    """What a row records of its sampling: the job's policies
    and what its first turn sent; with profiles, the profile."""
    # Later turns send the same parameters, with their own derived seed (and budget, after retry-longer).
    sampling = row_sampling(s.policies, body)
    return {"sampling": sampling} if profile is None else {"profile": profile.name, "sampling": sampling}


def _for_request(m: dict[str, Any], reasoning: str | None = None) -> dict[str, Any]:
    """What the server sees of a message: its reasoning as sampled (history_reasoning keep), else none.

    Sent as `reasoning_content` (SGLang's name; vLLM reads it as `reasoning`), whatever the row keeps.
    """
    out = {k: v for k, v in m.items() if k != "reasoning_content"}
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def _assistant_message(answer: ChatAnswer, calls: list[dict[str, Any]] | None, reasoning: str) -> dict[str, Any]:
    """The target's turn as the row keeps it; `calls` are its tool calls with recorded ids re-attached."""
    content = answer.content or ""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning == "save" and answer.reasoning:
        msg["reasoning_content"] = answer.reasoning
    if calls:
        msg["tool_calls"] = calls
    return msg


async def _turn(
    s: Session,
    prompt: PromptRecord,
    sample: int,
    turn: int,
    history: list[dict[str, Any]],
    profile: SamplingProfile | None = None,
    sent: list[float] | None = None,
) -> Failed | tuple[ChatAnswer, Replica, bool, dict[str, Any]]:
    """One assistant turn, with the truncation policy's one longer
    retry; Failed, or (answer, replica, truncated, body sent)."""
    cfg = s.sampling
    max_tokens = cfg.budget(profile)
    seed = derived_seed(cfg.seed, prompt.id, sample, turn)
    retried_longer = False
    tool_fallback_tried = False
    while True:
        body = cfg.body(
            s.model,
            history,
            max_tokens=max_tokens,
            profile=profile,
            seed=seed,
            tools=prompt.tools,
            tool_choice=s.tool_choice,
        )
        timeout = s.transport.timeout_s(max_tokens)

        async def call(replica: Replica, body: dict[str, Any] = body, timeout: float = timeout) -> ChatAnswer:
            if sent is not None and not sent:
                sent.append(time.time())
            path = s.paths.get(replica.endpoint)
            if path is not None and path.native is not None:
                return await native_chat(s.http, replica.endpoint, body, timeout, path.native)
            return await chat_or_without_ids(
                s.http, replica.endpoint, body, timeout, s.ids_refused, s.notes, downgrade=not cfg.require_token_ids
            )

        try:
            answer, replica = await s.dispatcher.run(
                prompt.id,
                call,
                partial(prefix_blocks, history, prompt.tools),
                max_tokens=max_tokens,
                tokens_of=_completion_tokens,
            )
        except IdsRefused as e:
            raise ids_required(s, prompt.id, sample, turn, f"{MISSING[REFUSED]}: {e.message}") from None
        except Rejected as e:
            if body.get("tool_choice") == "auto" and "tool choice" in e.message.lower() and not tool_fallback_tried:
                # Requests already in flight with "auto" meet the same refusal: each retries once.
                tool_fallback_tried = True
                if s.tool_choice != "none":
                    s.tool_choice = "none"
                    s.notes.append(
                        f"server refused tool_choice=auto ({e.message}); sending tools with tool_choice=none"
                    )
                continue
            return Failed(
                prompt.id, sample, f"turn {turn}: server rejected the request: {e.message}", "rejected", prompt.line
            )
        except TransientError as e:
            return Failed(
                prompt.id,
                sample,
                f"turn {turn}: gave up after {s.transport.max_attempts} attempts: {e.message}",
                "failed",
                prompt.line,
            )
        replica.stats.completion_tokens += answer.completion_tokens
        replica.stats.prompt_tokens += answer.prompt_tokens
        cut = is_truncated(answer)
        if cut and cfg.truncation == "retry-longer" and not retried_longer and answer.finish_reason == "length":
            retried_longer = True
            limit = (s.context_length - answer.prompt_tokens) if s.context_length else 2 * max_tokens
            longer = min(2 * max_tokens, limit)
            if longer > max_tokens:
                max_tokens = longer
                continue
        return answer, replica, cut, body


def _completion_tokens(answer: ChatAnswer) -> int:
    return answer.completion_tokens
