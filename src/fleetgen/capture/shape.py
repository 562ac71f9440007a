"""The target's decoder shape (layers, hidden size), read from its config.json on this machine, never a hub.

Capture resolves its layer presets by it, `up --capture-layers` sizes the capture fleet by it, and `plan`
prices the storage by it: one reader, so the three agree on a multimodal checkpoint's nested text config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetgen.errors import ConfigError, ModelError

SHAPE_HINT = "pass --hidden-size H --num-layers N (the text model's hidden_size and num_hidden_layers)"


@dataclass(frozen=True)
class ModelShape:
    """The target's decoder: layers and hidden size, and where they were read."""

    num_layers: int
    hidden_size: int
    source: str


def read_shape(model: str, hint: str = SHAPE_HINT) -> ModelShape:
    """The shape in `model`'s config.json (a local directory or an embedded name; its text config where nested)."""
    from fleetgen.doctor.modelinfo import read_model
    from fleetgen.models.registry import EMBEDDED_MODELS, resolve_model

    path = Path(model)
    try:
        path = Path(resolve_model(model, prepare=False))
        cfg = read_model(path).config
    except ModelError as e:
        raise ConfigError(f"cannot read the shape of {model}: {e.message}", hint=hint) from None
    except (OSError, ValueError):
        hub = model not in EMBEDDED_MODELS and not path.exists()
        where = "a hub id: fleetgen reads no hub" if hub else "no config.json"
        raise ConfigError(f"cannot read the shape of {model} ({where})", hint=hint) from None
    try:
        layers, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{path}/config.json has no num_hidden_layers and hidden_size", hint=hint) from None
    return ModelShape(layers, hidden, f"{path}/config.json")
