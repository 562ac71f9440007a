"""The token ids a server was fed and sampled for each assistant turn: asked for, read, kept compactly.

Engine-agnostic by reading whatever the answer carries. The request asks with every spelling the
engines know; servers ignore request fields they do not know (vLLM: `extra="allow"`, logged at
debug; SGLang: pydantic's default `extra="ignore"`), so one body works everywhere:

- vLLM >= 0.10.2: `return_token_ids` -> `prompt_token_ids` at the response root, `choices[0].token_ids`.
- SGLang with return_token_ids on chat: `return_token_ids` + `return_prompt_token_ids` ->
  `choices[0].prompt_token_ids` and `choices[0].token_ids`, renamed `response_token_ids` by
  sgl-project/sglang PR #35225 (both spellings are read).
- SGLang 0.5.12 and other servers: the chat answer carries no ids; the turn is recorded as
  without ids (None) and the tokens export falls back to re-tokenizing its text.
- A server that refuses the fields (a 4xx whose message names them, e.g. SGLang 0.5.17's
  "return_prompt_token_ids is not supported with streaming"): that endpoint is asked without them
  from then on (`refuses_ids`, conversation.py), and its turns are recorded as refused.

What a row records of them, and how: fleetgen/rows/token_ids.py.
"""

from __future__ import annotations

from array import array
from typing import Any

from fleetgen.generate.config.sampling import TOKEN_ID_FIELDS as REQUEST_FIELDS
from fleetgen.rows.token_ids import COUNT_MISMATCH, NONE_RETURNED, TurnIds


def _int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    try:
        array("q", value)  # checks every item is an int, at C speed
    except (TypeError, OverflowError):
        return None
    return value


def read_ids(payload: dict[str, Any], choice: dict[str, Any]) -> TurnIds | str:
    """The ids in one chat answer, whichever engine spelled them; else why not (NONE_RETURNED or COUNT_MISMATCH)."""
    prompt = _int_list(payload.get("prompt_token_ids") or choice.get("prompt_token_ids"))
    completion = _int_list(choice.get("token_ids") or choice.get("response_token_ids"))
    if not prompt or completion is None:
        return NONE_RETURNED
    usage = payload.get("usage") or {}
    counted = usage.get("completion_tokens")
    if isinstance(counted, int) and counted != len(completion):
        return COUNT_MISMATCH  # ids that disagree with the server's own count are not trusted
    return TurnIds(prompt, completion)


def refuses_ids(message: str) -> bool:
    """A server's 4xx message that names the id fields: it refuses them (not the row)."""
    return any(name in message for name in REQUEST_FIELDS)


def without_id_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The request body without the id fields, for an endpoint that refused them."""
    return {k: v for k, v in body.items() if k not in REQUEST_FIELDS}
