"""The capture stage: hidden states of the generate stage's rows, after export.

With the vllm backend and no endpoints the stage starts a capture fleet of its own from the job's fleet
section (its engine flags plus the capture flags, in WORKDIR/capture-fleet) and stops it after: the
generate fleet is not a capture fleet, since capture flags slow generation (docs/capture.md, "One fleet
or two"). With transformers it loads the job's model in this process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from fleetgen.errors import ConfigError
from fleetgen.run.stage import Done, Stage


class CaptureStage(Stage):
    name = "capture"
    reads = ("generate",)

    def section(self) -> object:
        return self.ctx.job.capture.model_dump(mode="json")  # type: ignore[union-attr]

    def _output(self) -> Path:
        out = self.ctx.job.capture.output  # type: ignore[union-attr]
        return out if out.is_absolute() else self.ctx.workdir / out

    def outputs(self) -> list[Path]:
        return [self._output() / "captured.jsonl", self._output() / "state.json"]

    def config(self, fleet_state: Path | None):
        from fleetgen.capture import CaptureConfig

        section = self.ctx.job.capture
        fleet = self.ctx.job.fleet
        data = {
            **section.model_dump(),  # type: ignore[union-attr]
            "output": self._output(),
            "results_dir": section.results_dir or self.ctx.results_dir,  # type: ignore[union-attr]
            "fleet": fleet_state,
        }
        if data["model"] is None and fleet is not None:
            data["model"] = fleet.model
        return CaptureConfig.model_validate(data)

    async def _capture_fleet(self) -> Path:
        """A fleet like the job's, started with the capture flags for the section's layers."""
        from fleetgen.capture import capture_engine_args, resolve_layers
        from fleetgen.capture.shape import read_shape
        from fleetgen.fleet import up

        fleet, section = self.ctx.job.fleet, self.ctx.job.capture
        if fleet is None or fleet.engine != "vllm":
            raise ConfigError(
                "capture with backend vllm needs a vllm fleet section or capture.endpoints",
                hint="set capture.backend: transformers, or give capture.endpoints of capture servers",
            )
        n = (await asyncio.to_thread(read_shape, section.model or fleet.model)).num_layers  # type: ignore[union-attr]
        layers = resolve_layers(section.layers, n, section.draft_layers)  # type: ignore[union-attr]
        state_dir = self.ctx.workdir / "capture-fleet"
        staging = self.ctx.workdir / "capture-staging"
        staging.mkdir(parents=True, exist_ok=True)
        update = {"state_dir": state_dir, "engine_args": [*fleet.engine_args, *capture_engine_args(layers, staging)]}
        if self.ctx.keep_fleet:  # the generate fleet still holds its ports
            update["port_base"] = min(fleet.port_base + 100, 65000 - (fleet.replicas or 1))
        cfg = fleet.model_copy(update=update)
        self.ctx.say("capture", "info", f"starting a capture fleet in {state_dir} (layers {layers})")
        await up(cfg)
        return state_dir

    async def run(self) -> Done:
        from fleetgen.capture import capture
        from fleetgen.fleet import down
        from fleetgen.fleet.capture_jobs import CaptureProgressFile

        section = self.ctx.job.capture
        own = section.backend == "vllm" and not section.endpoints and section.fleet is None  # type: ignore[union-attr]
        state_dir = await self._capture_fleet() if own else section.fleet  # type: ignore[union-attr]
        publish = CaptureProgressFile(state_dir, self._output()) if state_dir is not None else None
        metrics = self.ctx.metrics

        def progress(summary) -> None:  # fleetgen status (the fleet's captures/ file) and the job's metrics
            if publish is not None:
                publish(summary)
            if metrics is not None:
                metrics.show_capture(summary)

        try:
            s = await asyncio.to_thread(capture, self.config(state_dir), progress)
        finally:
            if publish is not None:
                publish.close()
            if own and not self.ctx.keep_fleet:
                await asyncio.to_thread(down, state_dir)
        line = (
            f"{s.total_captured} rows captured ({s.captured} now, {s.tokens:,} tokens, {s.bytes / 1e6:.1f} MB, "
            f"{s.from_text} from text, {s.failed} failed) -> {s.output}"
        )
        return Done(line, {"captured": s.total_captured, "bytes": s.bytes, "failed": s.failed})
