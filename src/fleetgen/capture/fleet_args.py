"""A capture fleet's engine flags: vLLM's extract_hidden_states method and fleetgen's connector (connector.py).

Such a replica writes the hidden states at its layers of every request it runs to `staging` (one file per
request, read and deleted by the capture client), so a fleet that generates should not carry them
unless it also captures (docs/capture.md: one fleet or two).
"""

from __future__ import annotations

import json
from pathlib import Path

CONNECTOR = "FleetgenHiddenStatesConnector"
CONNECTOR_MODULE = "fleetgen.capture.connector"


def capture_engine_args(layers: list[int], staging: Path) -> list[str]:
    """vLLM flags that make a replica capture `layers` (capture indices) into `staging`."""
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": sorted(layers)}},
    }
    kv = {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(staging)},
    }
    return ["--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]


def served_layers(command: list[str]) -> list[int] | None:
    """The capture layers a replica's command line gives it; None for a replica that does not capture."""
    for flag in ("--speculative-config", "--speculative_config"):
        if flag in command[:-1]:
            try:
                spec = json.loads(command[command.index(flag) + 1])
            except (json.JSONDecodeError, TypeError):
                return None
            if spec.get("method") != "extract_hidden_states":
                return None
            ids = ((spec.get("draft_model_config") or {}).get("hf_config") or {}).get(
                "eagle_aux_hidden_state_layer_ids"
            )
            return sorted(int(k) for k in ids) if ids else None
    return None


def fleet_capture_args(model: str, spec: str, staging: Path, draft_layers: int = 5) -> tuple[list[str], list[int]]:
    """(flags, layers) for `fleetgen up --capture-layers SPEC`: presets or lists joined by `+` serve their union
    (eagle3+dflash: one fleet for both; a capture keeps the layers it asks for)."""
    from fleetgen.capture.layers import resolve_layers
    from fleetgen.capture.shape import read_shape

    num_layers = read_shape(model, hint="pass --model PATH (the target model's directory)").num_layers
    layers = sorted({k for part in spec.split("+") for k in resolve_layers(part, num_layers, draft_layers)})
    staging.mkdir(parents=True, exist_ok=True)
    return capture_engine_args(layers, staging.resolve()), layers
