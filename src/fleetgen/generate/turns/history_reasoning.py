"""Whether earlier turns' reasoning goes back to the server: decided from the target's own chat template.

In its native loop an agent sends each assistant message back as the server returned it,
reasoning included, and the chat template decides what the model sees: Qwen3-family templates
render the reasoning of assistant turns after the last user message (the steps of a tool loop)
inside `<think>...</think>` and drop it before. A history without that reasoning puts every such
step off the target's own distribution, and breaks the chain of token ids from one turn to the
next. So `history_reasoning: template` (the default) reads the target's chat template and
renders a small tool loop with it: when the reasoning of the step after the user's message
shows in the prompt, earlier reasoning is sent back (`keep`); when it does not, sending it
would change nothing, and it is not (`drop`, today's body byte for byte). Where the template
cannot be read, it is `drop`, and the run says so.

The template is the one the servers render: a fleet's `--chat-template` engine argument, else the
chat template of the fleet's model directory, else of `tokenizer` (config field / `--tokenizer`).
It is rendered the way transformers and the engines render it (a sandboxed Jinja environment with
`tojson`, `raise_exception`, `strftime_now`, trimmed blocks, loop controls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from fleetgen.generate.config.sampling import HistoryReasoning

_MARK = "fleetgen-probe-reasoning-7f3a"
_CALL = {"id": "call-probe-0", "type": "function", "function": {"name": "probe_tool", "arguments": '{"q": "probe"}'}}
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_tool",
            "description": "probe",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
# A tool loop (the case that matters), then the plain continuation for templates that refuse tools.
_PROBES: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    (
        [
            {"role": "user", "content": "probe question"},
            {"role": "assistant", "content": "", "reasoning_content": _MARK, "tool_calls": [_CALL]},
            {"role": "tool", "content": "probe result", "tool_call_id": "call-probe-0"},
        ],
        _TOOLS,
    ),
    (
        [
            {"role": "user", "content": "probe question"},
            {"role": "assistant", "content": "probe answer", "reasoning_content": _MARK},
        ],
        None,
    ),
]


@dataclass(frozen=True)
class Decision:
    """The policy in effect for a run (keep or drop) and the line the run's notes say about it."""

    policy: Literal["keep", "drop"]
    note: str

    def identity(self) -> dict[str, str]:
        """What the job identity adds: only `keep` (a drop job's identity is what it always was)."""
        return {"history_reasoning": "keep"} if self.policy == "keep" else {}


def decide(choice: HistoryReasoning, tokenizer: str | None, fleet_state: Path | None) -> Decision:
    """The policy of a run: `keep`/`drop` as asked, or for `template` what the target's template does."""
    if choice != "template":
        return Decision(choice, f"history_reasoning: {choice} (as configured)")
    template, where = find_template(tokenizer, fleet_state)
    if template is None:
        return Decision(
            "drop",
            f"history_reasoning: drop: the target's chat template could not be read ({where}); "
            "earlier reasoning is not sent back. Pass --tokenizer DIR (the target's model "
            "directory) or --history-reasoning keep|drop",
        )
    try:
        renders = renders_history_reasoning(template)
    except Exception as e:  # a template this environment cannot compile or render
        return Decision(
            "drop",
            f"history_reasoning: drop: the chat template from {where} does not render here "
            f"({type(e).__name__}: {str(e)[:160]}); earlier reasoning is not sent back",
        )
    if renders:
        return Decision(
            "keep",
            f"history_reasoning: keep: the chat template from {where} renders the reasoning of "
            "assistant turns after the last user message; it is sent back",
        )
    return Decision(
        "drop",
        f"history_reasoning: drop: the chat template from {where} does not render earlier "
        "reasoning; it is not sent back",
    )


def find_template(tokenizer: str | None, fleet_state: Path | None) -> tuple[str | None, str]:
    """(the chat template the servers render, where it came from), or (None, why not)."""
    if tokenizer:
        return _from_model(tokenizer)
    if fleet_state is None:
        return None, "servers given by --endpoint and no --tokenizer"
    from fleetgen.fleet.state import read_state

    fleet = read_state(fleet_state)
    for r in fleet.replicas[:1]:
        override = _flag_value(r.command, "--chat-template")
        if override is not None:
            path = Path(override)
            if path.is_file():
                return path.read_text(encoding="utf-8"), str(path)
            if "{{" in override or "{%" in override:
                return override, "the fleet's inline --chat-template"
            return None, f"the fleet's --chat-template {override!r} is neither a file here nor a template"
    return _from_model(fleet.model)


def _flag_value(command: list[str], flag: str) -> str | None:
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1 :]
    return None


def _from_model(name: str) -> tuple[str | None, str]:
    """The chat template of a model directory (or 'smollm2'), or of a .jinja file."""
    from fleetgen.models.registry import resolve_model

    try:
        path = Path(resolve_model(name, prepare=False))
    except Exception as e:  # ModelError: not prepared, not a directory
        return None, f"{name}: {getattr(e, 'message', e)}"
    if path.is_file():
        return path.read_text(encoding="utf-8"), str(path)
    if not path.is_dir():
        return None, f"{name} is not a directory here (a hub id is not fetched)"
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), str(jinja)
    for file in ("tokenizer_config.json", "chat_template.json"):
        try:
            value = json.loads((path / file).read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            value = named.get("default") or next(iter(named.values()), None)
        if isinstance(value, str) and value:
            return value, str(path / file)
    return None, f"no chat template in {path}"


def renders_history_reasoning(template: str) -> bool:
    """Whether the template shows an assistant turn's reasoning_content when that turn follows the last user message."""
    compiled = _environment().from_string(template)
    for messages, tools in _PROBES:
        try:
            text = compiled.render(
                messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token=""
            )
        except Exception:  # refuses tools or tool messages: the next probe has none
            continue
        return _MARK in text
    raise ValueError("the template renders none of the probe conversations")


def _environment() -> Any:
    """A Jinja environment configured as transformers' apply_chat_template (and the engines) configure theirs."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env
