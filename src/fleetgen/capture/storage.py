"""Storage known first: bytes a token, a job's total, the disk check before a capture starts, the margin during it.

What a captured token costs, counted exactly as the files hold it (capture/tensors.py, capture/dataset.py):
- hidden states: layers x hidden x 2 bytes (bf16), or x 1 (fp8 e4m3) plus ONE float32 scale per token over all
  its layers (hs_connectors.fp8_utils: scale shape [seq, 1, 1]), so fp8 adds 4 bytes a token, not 4 a layer;
- its id: `token_ids` int64, 8 bytes, in the same file;
- the Arrow dataset beside the files: `input_ids` and `loss_mask` as int64 lists, 16 bytes a token.
Per row (one hs_{i}.safetensors file): the safetensors header (152-272 bytes measured; FILE_HEADER_BYTES
counted), the dataset's per-row columns and offsets, and a captured.jsonl line. The per-token figure
`bytes_per_token` is the file's (hidden states, id, scale): what capture.json records.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fleetgen.errors import DiskSpaceError

BYTES_PER_VALUE = {"bf16": 2, "fp8": 1}
# A token's file overhead besides its hidden states: its int64 id, and fp8's float32 scale (one per token).
_ID_BYTES = 8
_SCALE_BYTES = {"bf16": 0, "fp8": 4}
DATASET_BYTES_PER_TOKEN = 16  # input_ids + loss_mask, int64 each
FILE_HEADER_BYTES = 512  # safetensors' length + JSON header, rounded up from the 152-272 bytes measured
ROW_BYTES = 16 + 256  # the dataset's seq_len and list offsets, and a captured.jsonl line (~200 bytes)
DEFAULT_MARGIN = 1 << 30  # stop, cleanly, when less than this is free
FORCE_FLAG = "--force"


def bytes_per_token(hidden: int, n_layers: int, dtype: str) -> int:
    """Bytes one token costs in its file: layers x hidden x the dtype's bytes, its id and (fp8) its scale."""
    if dtype not in BYTES_PER_VALUE:
        raise ValueError(f"unknown capture dtype {dtype!r} (bf16 or fp8)")
    return n_layers * hidden * BYTES_PER_VALUE[dtype] + _ID_BYTES + _SCALE_BYTES[dtype]


@dataclass(frozen=True)
class StorageEstimate:
    """What a capture of `tokens` tokens in `rows` files writes, by part; `total` is what the disk must hold."""

    hidden_size: int
    n_layers: int
    dtype: str
    tokens: int
    rows: int

    @property
    def per_token(self) -> int:
        """The hidden-state file's bytes a token (what capture.json records)."""
        return bytes_per_token(self.hidden_size, self.n_layers, self.dtype)

    @property
    def hidden_states(self) -> int:
        """Bytes of hidden_states/hs_*.safetensors: every token's bytes and each file's header."""
        return self.tokens * self.per_token + self.rows * FILE_HEADER_BYTES

    @property
    def dataset(self) -> int:
        """Bytes of the Arrow dataset and the journal beside the files."""
        return self.tokens * DATASET_BYTES_PER_TOKEN + self.rows * ROW_BYTES

    @property
    def total(self) -> int:
        return self.hidden_states + self.dataset


def estimate(hidden_size: int, n_layers: int, dtype: str, *, tokens: int, rows: int) -> StorageEstimate:
    """The storage of a capture of `tokens` tokens over `rows` rows (files) at `n_layers` layers of `hidden_size`."""
    bytes_per_token(hidden_size, n_layers, dtype)  # validates the dtype here, not at first use
    return StorageEstimate(hidden_size, n_layers, dtype, int(tokens), int(rows))


def format_bytes(n: float) -> str:
    """Decimal units, as disks are sold: 46.08 TB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{int(n)} B"


def format_per_token(n: int) -> str:
    """Bytes a token, with KiB as the issue and trainers' docs quote them (4 x 4096 x 2 = 32 KiB)."""
    return f"{n:,} B ({n / 1024:,.1f} KiB)"


def storage_line(est: StorageEstimate, label: str = "") -> str:
    """One line `plan` and the start of `capture` print: per token, tokens and rows, the total and its parts."""
    head = f"{label}: " if label else ""
    return (
        f"{head}{est.n_layers} layers x {est.hidden_size} {est.dtype}: {format_per_token(est.per_token)} a token; "
        f"{est.tokens:,} tokens in {est.rows:,} rows: {format_bytes(est.total)} "
        f"(hidden states {format_bytes(est.hidden_states)}, dataset and journal {format_bytes(est.dataset)})"
    )


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem of `path` (its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def check_disk(path: Path, needed: int, *, force: bool, margin: int = DEFAULT_MARGIN) -> int:
    """Refuse to start when the disk cannot hold `needed` bytes and the margin, unless forced; returns the free bytes.

    Forced, the run starts anyway and stops cleanly at the margin (room_left), so a resume finishes it on a
    disk with room.
    """
    free = free_bytes(path)
    if needed + margin > free and not force:
        raise DiskSpaceError(
            f"{path}: the capture needs {format_bytes(needed)} and a margin of {format_bytes(margin)}, "
            f"but {format_bytes(free)} are free there",
            hint=f"free space, write elsewhere (-o), capture fewer rows (--limit), fp8 or fewer layers; or pass "
            f"{FORCE_FLAG} to start anyway (it stops cleanly when free space falls under the margin)",
        )
    return free


def room_left(path: Path, margin: int = DEFAULT_MARGIN, upcoming: int = 0) -> bool:
    """Whether the next `upcoming` bytes still leave more than the margin free: the runner stops cleanly if not.

    Called between files (a statvfs, microseconds): a file is written whole or not begun, so stopping here
    leaves nothing half-written.
    """
    return free_bytes(path) - upcoming > margin
