"""The target's tokenizer from files on this machine: a stage that needs one never asks a model hub.

On a GPU node without network, the report once asked huggingface.co for the tokenizer of the served
name `model`, retrying for minutes, and then counted characters (issue 41). Now the tokenizer comes
from the fleet's model path (or `--tokenizer`), a local directory or the Hugging Face cache, read with
the `tokenizers` library alone: no hub call, and no torch import (BENCHMARKS.md, "Figures the code
cites"). A `--tokenizer` that is nowhere here is reported, not fetched: download it first
(`huggingface-cli download ORG/NAME`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("fleetgen.models.tokenizer")

# tokenizer_config.json keys naming special tokens (what transformers' `all_special_ids` lists).
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclass(frozen=True)
class TokenizerSource:
    """Where the tokenizer is (a directory with tokenizer.json), or why there is none (`path` None)."""

    path: Path | None
    origin: str  # what it is, for the report: "the fleet's model /models/x", "--tokenizer", or why none


class LocalTokenizer:
    """The part of a Hugging Face fast tokenizer the report uses, over a `tokenizers.Tokenizer` read from disk."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        self._tok = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self.all_special_ids = sorted(self._special_ids())

    def _special_ids(self) -> set[int]:
        try:
            config = json.loads((self.directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = None
        if not isinstance(config, dict):  # no config: what the tokenizer itself marks special
            return {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        names: list[Any] = [config.get(k) for k in _SPECIAL_KEYS]
        for key in ("additional_special_tokens", "extra_special_tokens"):
            extra = config.get(key)
            names += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
        ids = set()
        for name in names:
            text = name.get("content") if isinstance(name, dict) else name
            if isinstance(text, str) and (i := self._tok.token_to_id(text)) is not None:
                ids.add(i)
        return ids

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(
        self, ids: list[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False
    ) -> str:
        if clean_up_tokenization_spaces:
            raise ValueError("LocalTokenizer decodes without clean-up only (the text as sampled)")
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)


def local_directory(name: str) -> Path | None:
    """A directory holding `name`'s tokenizer.json on this machine, looking nowhere else; None if there is none.

    `name` is an embedded model name (`smollm2`, prepared), a directory, or a hub id found in the
    Hugging Face cache (`huggingface_hub.try_to_load_from_cache`, which reads the disk only).
    """
    from fleetgen.models.registry import EMBEDDED_MODELS, embedded_path

    if name in EMBEDDED_MODELS:
        path = embedded_path(name)
        return path if (path / "tokenizer.json").is_file() else None
    path = Path(name).expanduser()
    if path.is_dir():
        return path if (path / "tokenizer.json").is_file() else None
    if path.is_file() and path.name == "tokenizer.json":
        return path.parent
    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        return None  # not a hub id: nothing to look up in the cache
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(name, "tokenizer.json")
    except Exception:  # an id the cache layout cannot hold (bad characters): not here
        return None
    return Path(found).parent if isinstance(found, str) else None


def find_tokenizer(
    explicit: str | None = None, fleet_model: str | None = None, served: str | None = None
) -> TokenizerSource:
    """The tokenizer to use, from local files: `--tokenizer`, else
    the fleet's model, else the served name if it is local."""
    for name, origin in ((explicit, "--tokenizer"), (fleet_model, "the fleet's model"), (served, "the run's model")):
        if not name:
            continue
        path = local_directory(name)
        if path is not None:
            return TokenizerSource(path, f"{origin} {name}")
        if origin == "--tokenizer":
            return TokenizerSource(None, f"--tokenizer {name} is not on this machine (no tokenizer.json found)")
    tried = ", ".join(f"{o} {n!r}" for n, o in ((fleet_model, "the fleet's model"), (served, "the run's model")) if n)
    return TokenizerSource(None, f"no tokenizer on this machine for {tried or 'this run'} (no model hub is asked)")


def load_local(source: TokenizerSource) -> LocalTokenizer | None:
    """The tokenizer at `source`, or None (logged) when it cannot be read."""
    if source.path is None:
        return None
    try:
        return LocalTokenizer(source.path)
    except Exception as e:  # a tokenizer.json this tokenizers version cannot read
        log.warning(
            f"tokenizer at {source.path} not readable ({type(e).__name__}: {e}); counts use the recorded ids only"
        )
        return None
