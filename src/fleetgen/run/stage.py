"""What a stage of `run` is: a name, a fingerprint of what it is made from, the files it leaves, and run().

The pipeline (pipeline.py) is a loop over stages: a stage whose fingerprint matches the one recorded
when it last finished, and whose outputs are all there, is skipped; any other runs, and the stages
after it that were done are forgotten. Stages talk through files, never through each other: the
job's layout (Context) says where each one reads and writes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fleetgen.run.book import fingerprint
from fleetgen.run.config import JobConfig

if TYPE_CHECKING:
    from fleetgen.metrics import MetricsServer


@dataclass
class RunEvent:
    stage: str
    kind: str  # start, skip, done, invalidated, info
    detail: str = ""


@dataclass
class RunSummary:
    workdir: Path
    prompts: Path | None = None
    results: Path | None = None
    export: dict[str, Path] = field(default_factory=dict)
    capture: Path | None = None  # the capture stage's directory (dataset, hidden_states/, journal)
    report: Path | None = None
    restarts: dict[int, int] = field(default_factory=dict)
    stages_run: list[str] = field(default_factory=list)
    stages_skipped: list[str] = field(default_factory=list)


@dataclass
class Context:
    """What the stages of one job share: the job, where each stage's files are, and where it reports."""

    job: JobConfig
    say: Callable[[str, str, str], None]  # (stage, kind, detail): a RunEvent for the caller
    summary: RunSummary
    keep_fleet: bool = False
    on_progress: Callable[[object], None] | None = None
    metrics: MetricsServer | None = None
    fingerprints: dict[str, str] = field(default_factory=dict)  # each stage's, as the pipeline reaches it

    @property
    def workdir(self) -> Path:
        return Path(self.job.workdir)

    @property
    def prompts(self) -> Path:
        """The prompt file generate reads: the mix stage's output, or the job's own file."""
        return Path(self.job.generate.prompts) if self.job.mix is None else self.workdir / "prompts.jsonl"

    @property
    def results_dir(self) -> Path:
        """generate's output directory, which export and report read."""
        out = self.job.generate.output_dir
        return Path(out) if out else self.workdir / "generate"


@dataclass
class Done:
    """What a stage that ran says (its done line) and records in stages.json beside its fingerprint."""

    line: str
    facts: dict[str, Any] = field(default_factory=dict)


class Stage(ABC):
    """One step of a job. Subclasses set `name` and say what they are made from, what they leave, and how."""

    name: ClassVar[str]
    reads: ClassVar[tuple[str, ...]] = ()  # the stages whose fingerprints are part of this one's
    gate: ClassVar[bool] = False  # when it runs, no later stage begins before it has passed (the doctor)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @abstractmethod
    def section(self) -> Any:
        """The part of the job this stage is made from (JSON-able): a change of it re-runs the stage."""

    async def fingerprint(self) -> str:
        """The stage's identity: its section and the fingerprints of the stages it reads."""
        return fingerprint(self.section(), *(self.ctx.fingerprints[name] for name in self.reads))

    @abstractmethod
    def outputs(self) -> list[Path]:
        """What the stage leaves; a stage with one of them missing runs again."""

    @abstractmethod
    async def run(self) -> Done:
        """Make the outputs."""

    def head_start(self) -> bool:
        """Begin, in the background, work of this stage that needs nothing from the stages before it.

        The pipeline calls it when the stage will run and stages before it run first (the fleet starts
        while the mix is built); run() then uses what it began. Returns whether anything began.
        """
        return False

    async def drop_head_start(self) -> None:
        """Undo what head_start began when run() will not use it (a stage before failed, or this one was skipped)."""
        return None
