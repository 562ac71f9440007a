"""Where a capture's hidden states come from: the target model (layers, hidden size, tokenizer) and its backend.

The model is --model, else the fleet's (the path its replicas were started with). Its config gives N and
the hidden size, which turn a preset into layer indices (layers.py) and into bytes a token (storage.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgen.capture import storage
from fleetgen.capture.backends.base import Backend
from fleetgen.capture.config import CaptureConfig
from fleetgen.capture.fleet_args import served_layers
from fleetgen.capture.layers import dflash_target_layers, parse_layers, resolve_layers
from fleetgen.capture.shape import read_shape
from fleetgen.errors import ConfigError, FleetError


@dataclass
class Source:
    model_path: str
    served_name: str | None
    num_layers: int
    hidden_size: int
    layers: list[int]
    tokenizer: Any
    endpoints: list[str]
    server_layers: list[int] | None
    dtype: str

    @property
    def bytes_per_token(self) -> int:
        return storage.bytes_per_token(self.hidden_size, len(self.layers), self.dtype)

    def identity(self, cfg: CaptureConfig) -> dict[str, Any]:
        """capture.json (journal.py): what this capture is."""
        ident: dict[str, Any] = {
            "model": self.model_path,
            "layers": self.layers,
            "preset": cfg.layers if parse_layers(cfg.layers) in ("eagle3", "dflash") else "list",
            "dtype": cfg.dtype,
            "backend": cfg.backend,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "bytes_per_token": self.bytes_per_token,
            "source": str(Path(cfg.results_dir).resolve()),
            "format": "speculators",
            "layer_index": "k = hidden state entering decoder layer k (0 = embeddings, N = last layer, pre-norm)",
        }
        if parse_layers(cfg.layers) == "dflash":
            ident["dflash_target_layer_ids"] = dflash_target_layers(self.num_layers, cfg.draft_layers)
        return ident

    def backend(self, cfg: CaptureConfig) -> Backend:
        if cfg.backend == "transformers":
            from fleetgen.capture.backends.transformers import TransformersBackend
            from fleetgen.capture.forward import load_model

            return TransformersBackend(load_model(self.model_path, cfg.device), self.layers, cfg.batch_tokens)
        from fleetgen.capture.backends.vllm import VllmBackend

        return VllmBackend(
            self.endpoints,
            self.served_name or self.model_path,
            self.layers,
            self.server_layers or self.layers,
            api_key=cfg.api_key,
            concurrency=cfg.concurrency,
        )


def _fleet(cfg: CaptureConfig) -> tuple[list[str], str, str, list[int] | None]:
    """(endpoints, model path, served name, layers) of a capture fleet's state."""
    from fleetgen.fleet import read_state

    state = read_state(Path(cfg.fleet))  # type: ignore[arg-type]
    if not state.replicas:
        raise FleetError(f"no replicas in {cfg.fleet}", hint="start a capture fleet: fleetgen up --capture-layers ...")
    first = state.replicas[0].command
    model = first[first.index("--model") + 1] if "--model" in first else state.model
    layers = served_layers(first)
    if cfg.backend == "vllm" and layers is None:
        raise FleetError(
            f"the fleet in {cfg.fleet} does not capture hidden states",
            hint="start one with `fleetgen up --capture-layers eagle3` (or pass --backend transformers --model PATH)",
        )
    return [r.endpoint for r in state.replicas], model, state.served_model_name, layers


def resolve_source(cfg: CaptureConfig) -> Source:
    from fleetgen.export.formats.tokens import load_tokenizer
    from fleetgen.models.registry import resolve_model

    endpoints, served, server_layers = list(cfg.endpoints), None, None
    model = cfg.model
    if cfg.fleet is not None:
        endpoints, fleet_model, served, server_layers = _fleet(cfg)
        model = model or fleet_model
    if model is None:
        raise ConfigError("capture needs the target model", hint="pass --model PATH (or 'smollm2')")
    try:
        path = resolve_model(model, prepare=False)
    except Exception as e:  # ModelError: keep its message, name the flag
        raise ConfigError(f"model {model!r}: {e}", hint="pass --model PATH (the target model's directory)") from None
    shape = read_shape(path, hint="pass --model PATH (the target model's directory)")
    num_layers, hidden = shape.num_layers, shape.hidden_size
    layers = resolve_layers(cfg.layers, num_layers, cfg.draft_layers)
    if cfg.server_layers:
        server_layers = resolve_layers(cfg.server_layers, num_layers, cfg.draft_layers)
    if served is None and endpoints:
        served = _served_name(endpoints[0], cfg.api_key)
    return Source(path, served, num_layers, hidden, layers, load_tokenizer(path), endpoints, server_layers, cfg.dtype)


def _served_name(endpoint: str, api_key: str | None) -> str | None:
    """The model name an endpoint serves (its /v1/models), for the completions it is sent."""
    import json
    import urllib.request

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        req = urllib.request.Request(endpoint.rstrip("/") + "/v1/models", headers=headers)
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - the user's own endpoint
            return json.loads(r.read())["data"][0]["id"]
    except Exception:  # noqa: BLE001 - the completions will say what is wrong with the endpoint
        return None
