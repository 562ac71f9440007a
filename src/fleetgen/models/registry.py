"""Names like `smollm2` that stand for a model fleetgen prepares itself."""

from __future__ import annotations

import os
from pathlib import Path

from fleetgen.errors import ModelError

EMBEDDED_MODELS = {"smollm2": "SmolLM2-135M-Instruct"}


def model_cache_dir() -> Path:
    """XDG cache: $FLEETGEN_CACHE, else $XDG_CACHE_HOME/fleetgen, else ~/.cache/fleetgen."""
    if env := os.environ.get("FLEETGEN_CACHE"):
        return Path(env) / "models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgen" / "models"


def embedded_path(name: str) -> Path:
    return model_cache_dir() / EMBEDDED_MODELS[name]


def resolve_model(model: str, *, prepare: bool = True) -> str:
    """Turn a model name into what the engine loads: a prepared directory, a path, or a hub id."""
    if model in EMBEDDED_MODELS:
        path = embedded_path(model)
        if not (path / "config.json").exists():
            if not prepare:
                raise ModelError(
                    f"the embedded model {model!r} is not prepared",
                    hint=f"run `fleetgen model prepare {model}`",
                )
            from fleetgen.models.smollm2 import prepare_smollm2

            prepare_smollm2(path)
        return str(path)
    looks_local = model.startswith(("/", "./", "../", "~")) or Path(model).exists()
    if looks_local:
        path = Path(model).expanduser()
        if not path.exists():
            raise ModelError(f"model path does not exist: {model}", hint="check --model, or use 'smollm2'")
        if path.is_dir() and not (path / "config.json").exists() and not any(path.glob("*.gguf")):
            raise ModelError(
                f"{model} is not a model directory (no config.json)", hint="point --model at the checkpoint folder"
            )
        return str(path.resolve())
    return model


def served_name_for(model: str) -> str:
    """The name clients use: the embedded name itself, or the last part of a path or hub id."""
    if model in EMBEDDED_MODELS:
        return model
    return Path(model.rstrip("/")).name or model
