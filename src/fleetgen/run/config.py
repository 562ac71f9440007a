"""The job file of `fleetgen run`: one config tree with a section per stage."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from fleetgen.capture import CaptureConfig
from fleetgen.config import StrictModel, load_yaml
from fleetgen.doctor import DoctorConfig
from fleetgen.export import ExportConfig
from fleetgen.fleet import FleetConfig
from fleetgen.generate import GenerateConfig
from fleetgen.mix import MixRecipe


class GenerateSection(GenerateConfig):
    """`generate` without its inputs and outputs: the pipeline supplies prompts, fleet and directory."""

    prompts: Path | None = Field(None, description="An existing prompt file; default: the output of the mix stage.")
    output_dir: Path | None = Field(None, description="Default: WORKDIR/generate.")

    @model_validator(mode="after")
    def _one_source(self) -> GenerateSection:  # replaces GenerateConfig's check: the fleet comes from the job
        return self


class ExportSection(ExportConfig):
    """`export` without its input: the results of the generate stage."""

    results_dir: Path | None = Field(None, description="Default: the generate stage's output directory.")
    output: Path = Field(Path("export"), description="File or directory, relative to WORKDIR.")


class CaptureSection(CaptureConfig):
    """`capture` without its input: the generate stage's results; backend vllm starts its own capture fleet."""

    results_dir: Path | None = Field(None, description="Default: the generate stage's output directory.")
    output: Path = Field(Path("capture"), description="Capture directory, relative to WORKDIR.")

    @model_validator(mode="after")
    def _source(self) -> CaptureSection:  # replaces CaptureConfig's check: the fleet comes from the job
        return self


class ReportSection(StrictModel):
    html: bool = Field(False, description="Also write report.html next to report.md.")


class JobConfig(StrictModel):
    workdir: Path = Field(Path("runs/job"), description="Directory of every stage's output; relative to the job file.")
    doctor: DoctorConfig | None = Field(None, description="Run the doctor first and stop on a failed check.")
    fleet: FleetConfig | None = Field(
        None, description="The fleet to start; leave out to use generate.endpoints (servers started elsewhere)."
    )
    mix: MixRecipe | None = Field(None, description="Build the prompt set; leave out to use generate.prompts.")
    generate: GenerateSection = Field(description="How responses are regenerated.")
    export: ExportSection | None = Field(None, description="Write drafter-training data.")
    capture: CaptureSection | None = Field(
        None, description="Capture the target's hidden states at a drafter's layers over the generated rows."
    )
    report: ReportSection | None = Field(None, description="Write a report with plots.")
    supervise: bool = Field(True, description="Restart replicas that die or hang during generate.")
    max_restarts: int = Field(3, ge=0, description="Restarts per replica before the supervisor gives up on it.")
    hang_timeout_s: float = Field(
        180, gt=0, description="A replica with requests but no new token for this long is restarted."
    )

    @model_validator(mode="after")
    def _inputs(self) -> JobConfig:
        if self.mix is None and self.generate.prompts is None:
            raise ValueError("give a mix section or generate.prompts")
        if self.fleet is None and not self.generate.endpoints:
            raise ValueError("give a fleet section or generate.endpoints")
        if self.fleet is not None and self.generate.endpoints:
            raise ValueError("give either a fleet section or generate.endpoints, not both")
        return self


def load_job(path: str | Path) -> JobConfig:
    """Read a job file; relative paths in it resolve against the file's directory."""
    p = Path(path)
    job = load_yaml(p, JobConfig)
    base = p.resolve().parent

    def rel(x: Path) -> Path:
        return x if x.expanduser().is_absolute() else (base / x).resolve()

    job.workdir = rel(job.workdir)
    if job.generate.prompts is not None:
        job.generate.prompts = rel(job.generate.prompts)
    if job.mix is not None:
        for source in job.mix.sources:
            candidate = base / source.path
            if not Path(source.path).is_absolute() and candidate.exists():
                source.path = str(candidate)
    return job
