"""The sections of the generate config besides `sampling`: transport, routing, sharding, observe, warmup.

Each module of generate takes the section it acts on (the dispatcher takes routing and transport, the
warm-up its own), so a default is written once, here, where the field is declared and documented.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema, field_validator, model_validator

from fleetgen.config import StrictModel
from fleetgen.errors import ConfigError
from fleetgen.generate.config.partition import Shard

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

ReplicaChoice = Literal["least-outstanding", "round-robin"]
EventLoop = Literal["auto", "uvloop", "asyncio"]
ShardRunner = Literal["auto", "ray", "process"]


class Section(StrictModel):
    """A section of GenerateConfig; its fields are also accepted flat (`max_attempts: 3` at the top)."""

    # Flat names are the fields' own, or with a prefix (warmup_timeout_s); a field `enabled` is the prefix alone.
    FLAT_PREFIX: ClassVar[str] = ""

    @classmethod
    def flat_name(cls, field: str) -> str:
        """The name a flat YAML key and the CLI flag give this section's `field`."""
        if not cls.FLAT_PREFIX:
            return field
        return cls.FLAT_PREFIX if field == "enabled" else f"{cls.FLAT_PREFIX}_{field}"


def _shard(value: object) -> Shard:
    if isinstance(value, Shard):
        return value
    if isinstance(value, str):
        try:
            return Shard.parse(value)
        except ConfigError:
            pass
    raise ValueError(f"{value!r} is not i/N with 0 <= i < N (e.g. 0/4 ... 3/4)")


# One i/N split, parsed once where the config is read; written back as i/N (YAML, job.json, a shard's config).
ShardSpec = Annotated[
    Shard,
    PlainValidator(_shard),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^\d+/\d+$"}),
]


class TransportConfig(Section):
    """How a request travels and is retried: timeouts, attempts, backoff, the stall bound, replica ejection."""

    max_attempts: int = Field(6, ge=1, description="Attempts per request on connection errors, timeouts, 429 and 5xx.")
    backoff_base_s: float = Field(0.5, gt=0, description="First retry delay; doubles each attempt, with full jitter.")
    backoff_max_s: float = Field(30.0, gt=0, description="Upper bound of one retry delay.")
    timeout_base_s: float = Field(
        120.0, gt=0, description="Request timeout: this plus timeout_per_token_s x max_tokens."
    )
    timeout_per_token_s: float = Field(0.5, ge=0, description="Seconds of request timeout added per token of budget.")
    stall_factor: float = Field(
        4.0,
        gt=0,
        description=(
            "A request unanswered for this many times what its replica's recent answers took per token (their "
            "95th percentile) x its max_tokens is cancelled and re-sent, and the replica is named (stall.py)."
        ),
    )
    stall_floor_s: float = Field(
        30.0,
        gt=0,
        description="The shortest such bound, whatever the replica's pace (queueing at the engine needs room).",
    )
    freeze_factor: float = Field(
        2.0,
        ge=0,
        description=(
            "A replica holding requests that answers none while the others answer is declared frozen after this many "
            "times the silence the fleet's recent pace allows it (the slowest gap between two answers x the requests "
            "in flight, over the requests it holds; by its requests' ages if it has not answered since it got them): "
            "its requests are re-sent at once and it takes no work until a 1-token probe answers (freeze.py). 0 turns "
            "it off."
        ),
    )
    replica_failures: int = Field(
        3, ge=1, description="Consecutive failures that take a replica out of rotation (it is retried later)."
    )
    replica_cooldown_s: float = Field(
        5.0, gt=0, description="First wait before an out-of-rotation replica is tried again."
    )
    give_up_after_s: float = Field(
        120.0, gt=0, description="Stop cleanly (resumable) when no replica has answered for this long."
    )
    event_loop: EventLoop = Field(
        "auto",
        description=(
            "The client's event loop: auto (uvloop when installed, as fleetgen installs it on Linux and macOS: less "
            "CPU per request than asyncio's, BENCHMARKS.md), uvloop, or asyncio."
        ),
    )

    def timeout_s(self, max_tokens: int) -> float:
        """The timeout of a request whose budget is `max_tokens`."""
        return self.timeout_base_s + self.timeout_per_token_s * max_tokens

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        """uvloop's loop when chosen (or, for auto, installed); None: asyncio's own."""
        if self.event_loop == "asyncio":
            return None
        try:
            import uvloop
        except ImportError:
            if self.event_loop == "uvloop":
                raise ConfigError(
                    "event_loop uvloop: the uvloop package is not installed",
                    hint="pip install uvloop, or use --event-loop asyncio",
                ) from None
            return None
        return uvloop.new_event_loop


class RoutingConfig(Section):
    """Which replica takes a request, and how many each takes at once."""

    concurrency: int | Literal["auto"] = Field(
        "auto",
        description=(
            "Requests in flight per replica: auto (each replica's limit follows the load its engine reports, polled "
            "once a second: a short waiting queue, no preemption, headroom in the KV cache; it starts at 16 and "
            "doubles while the engine has room), or a fixed number (default before auto: the fleet's max running "
            "requests + 8, or 64)."
        ),
    )
    dispatch: ReplicaChoice = Field(
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
    hedge: bool = Field(
        True,
        description="Near the end of the run, duplicate stragglers on replicas at most half full; first answer wins.",
    )
    hedge_after_s: float = Field(
        10.0,
        gt=0,
        description="In the tail, hedge a request in flight longer than this and 2x the median latency (of 8 answers "
        "at least).",
    )

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

    @property
    def auto(self) -> bool:
        """--concurrency auto: each replica's window follows its engine's load (load_poll.py)."""
        return self.concurrency == "auto"

    def window(self, fleet_default: int) -> int:
        """The window each replica starts with: the fixed concurrency, or for auto what the fleet suggests."""
        return fleet_default if self.concurrency == "auto" else self.concurrency


class ShardingConfig(Section):
    """How one job splits over client processes and their replicas; the splits are parsed once, here."""

    shard: ShardSpec | None = Field(
        None,
        description=(
            "i/N: this process runs one shard, i of N (0-based): the prompt ids whose hash falls in it, into its own "
            "journal files in the shared output directory. You start the N processes (any machines) to cover the "
            "job; `shards` (--shards N) starts all N from one command instead."
        ),
    )
    replica_slice: ShardSpec | None = Field(
        None,
        description=(
            "i/N: which replicas this process drives: those at positions i, i+N, ... of the fleet state (or the "
            "--endpoint list), each with its whole window; pair it with `shard` (--shard i/N) so hand-run shards do "
            "not "
            "share replicas. `shards` sets it for each of its shards when there are at least N replicas."
        ),
    )
    shards: int | None = Field(
        None,
        ge=1,
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
    shard_retries: int = Field(
        3, ge=0, description="Times a shard whose process or Ray worker died (killed, node lost) is started again."
    )
    lease_wait_s: float = Field(
        600.0,
        ge=0,
        description=(
            "A shard attempt that finds its journal's lease held by an earlier attempt of the same sharded run (a Ray "
            "retry while the old worker still runs) waits this long for it to end, then resumes; any other second "
            "writer on an output is refused at once."
        ),
    )
    lease_group: str | None = Field(
        None,
        description="Set by `shards` (not by hand): the sharded run a shard attempt belongs to, kept in its lease.",
    )

    @model_validator(mode="after")
    def _one_split(self) -> ShardingConfig:
        if self.shard is not None and self.shards is not None:
            raise ValueError(
                "give shard (--shard i/N: this process is one shard) or shards (--shards N: run all N), not both"
            )
        if self.replica_slice is not None and self.shards is not None:
            raise ValueError(
                "shards (--shards N) slices the replicas itself: leave replica_slice (--replica-slice) out"
            )
        return self

    @property
    def rows(self) -> Shard:
        """The part of the prompt rows this process owns (the whole job unless `shard` is set)."""
        return self.shard or Shard()

    @property
    def replicas(self) -> Shard:
        """The part of the fleet's replicas this process drives (all unless `replica_slice` is set)."""
        return self.replica_slice or Shard()


class ObserveConfig(Section):
    """What the job shows outside itself while it runs: its Prometheus page."""

    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve Prometheus metrics of the job on this port (0: a free one, printed at start); off by "
        "default.",
    )
    metrics_host: str = Field(
        "127.0.0.1", description="Address the metrics port binds to; a non-loopback one needs metrics_allow_remote."
    )
    metrics_allow_remote: bool = Field(
        False,
        description="Allow a non-loopback metrics_host: the page shows endpoints and progress (never the API key).",
    )

    @model_validator(mode="after")
    def _metrics_bind(self) -> ObserveConfig:
        from fleetgen.fleet.net import is_loopback

        if self.metrics_port is not None and not self.metrics_allow_remote and not is_loopback(self.metrics_host):
            raise ValueError(
                f"metrics_host {self.metrics_host!r} is not a loopback address: bind 127.0.0.1, "
                "or set metrics_allow_remote (--metrics-allow-remote) to serve metrics off this host"
            )
        return self


class WarmupConfig(Section):
    """The warm-up each replica gets before it takes the job's requests (dispatch/warmup.py)."""

    FLAT_PREFIX: ClassVar[str] = "warmup"

    enabled: bool = Field(
        True,
        description=(
            "Before a replica takes the job's requests, send it one short request per distinct sampling path of the "
            "job (greedy, top_p<1, top_k, min_p, ..., each profile's), so no job request waits behind a first-use "
            "kernel compile (SGLang's flashinfer sampling JIT: minutes); see generate/dispatch/warmup.py."
        ),
    )
    timeout_s: float = Field(
        900.0,
        gt=0,
        description="Time one warm-up request may take (a kernel compile); a replica over it takes no work.",
    )
