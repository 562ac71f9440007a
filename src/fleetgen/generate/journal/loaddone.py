"""Reading back what an output directory holds as done, and bringing
its key index level: apart from the journal, which only appends."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson

from fleetgen.atomic import commit, temp_path
from fleetgen.generate.journal import donefile, keyindex
from fleetgen.generate.journal.linekey import KEY_RE, key_of
from fleetgen.rows.doneset import DoneSet, id_hash
from fleetgen.rows.files import journal_names

log = logging.getLogger(__name__)

KeysChunk = Callable[[np.ndarray, int, int, bytes], None]


class DoneRead(NamedTuple):
    """What load_done found, with what the journal needs to know of how it found it."""

    done: DoneSet
    index_level: bool  # the key index is now level with the results (a done-set snapshot may name its length)
    from_snapshot: bool  # a done-set snapshot was used


def load_done(outdir: Path, *, update_index: bool = False, suffix: str = "") -> DoneSet:
    """Read results and errors into a DoneSet: results through the key index where it is sound, the rest scanned.

    With update_index, the index is brought level with the results: a stale or missing one is
    rewritten (atomically), a torn tail cut, and the keys read from the results appended.
    A sound done-set snapshot (donefile.py) stands for everything up to the ends it records.
    """
    return read_done(outdir, update_index=update_index, suffix=suffix).done


def read_done(outdir: Path, *, update_index: bool, suffix: str) -> DoneRead:
    """load_done, and whether the key index is now level and a snapshot was used (what Journal.open records)."""
    names = journal_names(suffix)
    results, index = outdir / names[0], outdir / names[2]

    def add(keys: np.ndarray) -> None:  # `done` is looked up when called: the one in use then
        done.results += done.add_many(keys["lo"], keys["hi"], keys["sample"])

    errors_from = 0
    snapped = _from_snapshot(outdir, suffix)
    if snapped is not None:
        done, loaded, errors_from = snapped
    else:
        done = DoneSet()

        try:  # at most this many ids: a table of that size from the start never grows (growing holds two tables)
            done.reserve((index.stat().st_size - len(keyindex.HEADER)) // keyindex.KEY_DTYPE.itemsize)
        except FileNotFoundError:
            pass
        loaded = keyindex.read_index(index, on_keys=add)
        if loaded is not None and not keyindex.matches_results(loaded, results):
            loaded, done = None, DoneSet()  # stale: it describes other results; read them all instead

    start = loaded.end if loaded is not None else 0
    frames = _IndexLeveler(index, loaded) if update_index else None

    def scanned(keys: np.ndarray, chunk_start: int, chunk_end: int, last: bytes) -> None:
        add(keys)
        if frames is not None:
            frames.append(keyindex.encode_keys(keys, chunk_start, chunk_end, last))

    if results.exists():
        _scan_results(results, start, scanned)
    level = frames.finish() if frames is not None else False
    errors = outdir / names[1]
    if errors.exists():
        with open(errors, "rb") as f:
            f.seek(errors_from)  # a snapshot holds the errors before its end
            for line in f:
                if not line.strip():
                    continue
                rid, sample, rec = key_of(line)
                if sample is None:
                    # A row-level input error: the whole row, keyed by its line in the prompt file.
                    rec = rec if rec is not None else orjson.loads(line)
                    if isinstance(rec.get("line"), int):
                        done.bad_lines.add(rec["line"])
                        done.errors += 1
                elif isinstance(rid, str) and done.add(rid, sample):
                    done.errors += 1
    return DoneRead(done, level, snapped is not None)


def _from_snapshot(outdir: Path, suffix: str) -> tuple[DoneSet, keyindex.Loaded, int] | None:
    """The snapshot's done set with the index frames after it
    added, its index view and the errors offset; None: unusable."""
    results, errors, index = (outdir / n for n in journal_names(suffix))
    snap = donefile.load(outdir / donefile.snapshot_name(suffix), results, errors, index)
    if snap is None:
        return None
    done = snap.done

    def add(keys: np.ndarray) -> None:
        done.results += done.add_many(keys["lo"], keys["hi"], keys["sample"])

    loaded = keyindex.read_index(index, on_keys=add, start=snap.index)
    if loaded is None or not keyindex.matches_results(loaded, results):
        donefile.last_refusal = "stale: the key index after it describes other results"
        return None  # the full path sorts it out
    return done, loaded, snap.errors_end


def _scan_results(path: Path, start: int, on_chunk: KeysChunk) -> int:
    """Keys of results.jsonl from byte `start` on, handed over a chunk at a time; returns the end offset.

    on_chunk(keys, chunk_start, chunk_end, last_line) gets up to FRAME_KEYS keys of the lines in
    bytes [chunk_start, chunk_end), which end with `last_line`. The key is read from the line's head
    by regex, the id decoded without a JSON parse unless escaped.
    """
    match = KEY_RE.match
    hashes: list[int] = []
    samples: list[int] = []
    last = b""
    with open(path, "rb") as f:
        f.seek(start)
        chunk_start = start
        for line in f:
            last = line
            m = match(line)
            if m is not None and m.group(1) != b"null" and m.group(2) != b"null":
                raw, sample = m.groups()
                rid = orjson.loads(raw) if b"\\" in raw else raw[1:-1].decode()
                sample = int(sample)
            elif line.strip():
                rid, sample, _ = key_of(line)
                if type(rid) is not str or type(sample) is not int or sample < 0:
                    continue
            else:
                continue
            if sample < 1 << 32:
                hashes.append(id_hash(rid))
                samples.append(sample)
                if len(hashes) == keyindex.FRAME_KEYS:
                    here = f.tell()
                    on_chunk(keyindex.keys_array(hashes, samples), chunk_start, here, last)
                    hashes, samples, chunk_start = [], [], here
        end = f.tell()
    if end > chunk_start:
        on_chunk(keyindex.keys_array(hashes, samples), chunk_start, end, last)
    return end


class _IndexLeveler:
    """Brings the index level with the results: a rewrite (temporary
    file, fsync, rename) or appends after its sound part.

    Advisory only: on an OSError the index is left for the next open, which reads the results instead.
    """

    def __init__(self, index: Path, loaded: keyindex.Loaded | None) -> None:
        self.index, self.rewrite, self.f = index, loaded is None, None
        self.tmp = temp_path(index)
        try:
            if self.rewrite:
                self.f = open(self.tmp, "wb")
                self.f.write(keyindex.HEADER)
            else:
                if not loaded.whole:
                    os.truncate(index, loaded.good_bytes)
                self.f = open(index, "ab")
        except OSError as e:
            self._give_up(e)

    def append(self, frame: bytes) -> None:
        if self.f is not None:
            try:
                self.f.write(frame)
            except OSError as e:
                self._give_up(e)

    def finish(self) -> bool:
        """Close the index; True when it is now level with the results."""
        if self.f is None:
            return False
        try:
            self.f.close()
            if self.rewrite:
                commit(self.tmp, self.index)
        except OSError as e:
            self._give_up(e)
            return False
        self.f = None
        return True

    def _give_up(self, e: OSError) -> None:
        log.warning(
            f"key index {self.index} not updated ({e.strerror or e}); the next resume reads the results instead"
        )
        if self.f is not None:
            try:
                self.f.close()
            except OSError:
                pass
        self.f = None
        if self.rewrite:
            self.tmp.unlink(missing_ok=True)
