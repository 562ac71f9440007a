"""Which hidden states a capture writes: the layer presets of the drafters and what a layer index means.

Index k, everywhere in fleetgen capture, is the hidden state *entering* decoder layer k: 0 is the
embeddings, k in 1..N-1 is the output of decoder layer k-1 (the residual stream; Hugging Face's
`output_hidden_states[k]`), and N is the last decoder layer's output *before* the final norm. That is
vLLM's numbering (`eagle_aux_hidden_state_layer_ids`: the model adds hidden_states + residual after
layer k-1) and speculators'. Hugging Face's `output_hidden_states[N]` differs only there: it has the final
norm applied. The transformers backend hooks the decoder layers, so it gives vLLM's value at N too.

Presets, for a target with N decoder layers:
- `eagle3`: speculators 0.9.0's default, [2, N//2, N-3] plus the last (N) that its trainer reads as the
  verifier's last hidden state (scripts/launch_vllm.py; speculators.models.utils.resolve_target_layer_ids).
- `dflash`: a DFlash drafter with K draft layers reads the *output* of target decoder layers
  T = round(1 + i*(N-4)/(K-1)), i = 0..K-1 (SpecForge's build_target_layer_ids; [N//2] when K = 1; for
  Qwen3-8B, N=36, K=5: [1, 9, 17, 25, 33]). vLLM's DFlash and SpecForge both take layer t's output, index
  t+1 here (vLLM: `i + 1 for i in target_layer_ids`; SpecForge: `hidden_states[layer_id + 1]`), so dflash
  captures at T+1, and N last: speculators' ArrowDataset reads a file's last layer as the verifier's
  final (pre-norm) hidden state, so without N the deepest DFlash layer would be taken for it
  (docs/capture-formats.md). Qwen3-8B, K=5: [2, 10, 18, 26, 34, 36]. capture.json records T too.

A file's layer axis is in ascending index order whatever order a list gives (vLLM collects them walking
the layers).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetgen.errors import ConfigError

PRESETS = ("eagle3", "dflash")


def eagle3_layers(num_layers: int) -> list[int]:
    """speculators' EAGLE-3 default: [2, N//2, N-3] and the last layer N."""
    return [2, num_layers // 2, num_layers - 3, num_layers]


def dflash_target_layers(num_layers: int, draft_layers: int) -> list[int]:
    """The target decoder layers a DFlash drafter of `draft_layers` layers reads (decoder numbering)."""
    if draft_layers < 1:
        raise ConfigError(f"--draft-layers {draft_layers}: a DFlash drafter has at least 1 layer")
    if draft_layers == 1:
        return [num_layers // 2]
    start, end = 1, num_layers - 3
    # round() as SpecForge computes it (banker's rounding at .5), so both name the same layers.
    return [int(round(start + i * (end - start) / (draft_layers - 1))) for i in range(draft_layers)]


def dflash_layers(num_layers: int, draft_layers: int) -> list[int]:
    """Capture indices of the DFlash preset: each target layer's output (one past its decoder number), and N."""
    return sorted({t + 1 for t in dflash_target_layers(num_layers, draft_layers)} | {num_layers})


def parse_layers(spec: str | Iterable[int]) -> str | list[int]:
    """A preset name, or the explicit list a comma-separated string or a sequence gives."""
    if not isinstance(spec, str):
        return [int(x) for x in spec]
    text = spec.strip().lower()
    if text in PRESETS:
        return text
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(
            f"--layers {spec!r}: not a preset or a list of layer indices",
            hint="use eagle3, dflash (with --draft-layers K) or a list like 2,15,27,30",
        ) from None


def resolve_layers(spec: str | Iterable[int], num_layers: int, draft_layers: int = 5) -> list[int]:
    """The capture indices (see the module docstring) a preset or list names, checked against the model."""
    parsed = parse_layers(spec)
    if parsed == "eagle3":
        layers = eagle3_layers(num_layers)
    elif parsed == "dflash":
        layers = dflash_layers(num_layers, draft_layers)
    else:
        layers = list(parsed)  # type: ignore[arg-type]
    if not layers:
        raise ConfigError("--layers: no layer given", hint="use eagle3, dflash or a list like 2,15,27,30")
    bad = [k for k in layers if not 0 <= k <= num_layers]
    if bad or len(set(layers)) != len(layers):
        raise ConfigError(
            f"--layers {layers}: indices must be distinct and within [0, {num_layers}] for a model of "
            f"{num_layers} layers",
            hint="0 is the embeddings, N the last layer's output (see docs/capture.md)",
        )
    return sorted(layers)  # the order vLLM emits them in (it collects them walking the layers): the file's axis
