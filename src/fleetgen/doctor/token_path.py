"""Which path `generate` will take for exact token ids, expected from the engine's version.

`up` and `generate` decide by what each server answers (generate/turns/paths.py); the doctor, with no server
running, says what to expect and why, so a user sees before a run whether rows will carry the target's ids.
"""

from __future__ import annotations

from fleetgen.doctor.report import Check, Status

# The first SGLang release whose chat endpoint answers `return_token_ids` (srt/entrypoints/openai/protocol.py).
SGLANG_CHAT_IDS = (0, 5, 17)


def _version(text: str) -> tuple[int, ...] | None:
    parts = []
    for p in text.split("+")[0].split("."):
        digits = "".join(ch for ch in p if ch.isdigit()) if p[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def check_token_path(engine: str, versions: dict[str, str]) -> Check:
    cid = "generate.token_ids"
    if engine != "sglang":
        return Check(
            id=cid,
            status=Status.OK,
            evidence={"engine": engine},
            summary=f"{engine}: the chat endpoint returns token ids; generate records them from its answers",
        )
    installed = versions.get("sglang")
    ev = {"engine": engine, "sglang": installed, "chat_ids_since": ".".join(map(str, SGLANG_CHAT_IDS))}
    v = _version(installed or "")
    if v is None:
        return Check(
            id=cid,
            status=Status.SKIP,
            cause="version_unknown",
            evidence=ev,
            summary="sglang's version is unknown: generate will choose its path by what the server answers",
        )
    if v >= SGLANG_CHAT_IDS:
        return Check(
            id=cid,
            status=Status.OK,
            evidence=ev | {"path": "chat"},
            summary=f"sglang {installed}: the chat endpoint returns token ids; generate takes the chat path",
        )
    return Check(
        id=cid,
        status=Status.OK,
        evidence=ev | {"path": "native"},
        summary=f"sglang {installed}: the chat endpoint returns no token ids (they came in 0.5.17); generate "
        "drives /generate with the server's own template rendering and parsers, checked against its chat "
        "endpoint at start (docs/sglang.md)",
    )
