"""The work a run walks: each (prompt, sample) of the file not yet recorded, in file order, bad rows as row errors.

Apart from the loop that sends them because this is where the job's exactly-once bookkeeping meets
the prompt file: which rows a resume skips, which shard owns a row, which line of a repeated id is
the first, and what each row counts for in the resume checkpoint.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from pathlib import Path

from fleetgen.generate.config.partition import Shard
from fleetgen.generate.journal.checkpoint import CheckpointProgress
from fleetgen.generate.journal.outcomes import Batch, Failed, Skipped, record
from fleetgen.generate.observe.stats import Stats
from fleetgen.generate.prompts.reader import (
    BadRow,
    PromptRecord,
    iter_rows,
    iter_rows_at,
    prompt_of,
    raw_id,
    surely_valid,
)
from fleetgen.rows.doneset import U64, DoneSet, id_hash

# What to do about a bad input row, appended to its reason in errors.jsonl.
ROW_HINT = "fix or drop the row in the prompt file, then rerun with --retry-errors --force (the file changed)"


class FirstLines:
    """Line of the first row of each id, by 64-bit id hash, in two flat arrays (12 bytes a slot).

    A dict of ints would cost several times as much per entry (BENCHMARKS.md, scale); here a slot is 12 bytes.
    Open addressing with linear probing; the table doubles at 3/4 full. Hashes are str hashes,
    stable within one process, which is all the duplicate check needs.
    """

    def __init__(self, bits: int = 16) -> None:
        self._mask = (1 << bits) - 1
        self._keys = array("Q", bytes(8 << bits))
        self._lines = array("I", bytes(4 << bits))
        self._n = 0

    @classmethod
    def for_rows(cls, rows: int) -> FirstLines:
        """A table that holds `rows` ids without growing (each doubling rehashes every slot in Python)."""
        return cls(max(16, (4 * rows // 3 + 1).bit_length()))

    def __len__(self) -> int:
        return self._n

    def setdefault(self, rid: str, line: int) -> int:
        """The first line recorded for `rid`, recording `line` when there is none."""
        key = (hash(rid) & U64) or 1  # 0 marks an empty slot
        keys, mask = self._keys, self._mask
        i = key & mask
        while True:
            k = keys[i]
            if k == key:
                return self._lines[i]
            if not k:
                break
            i = (i + 1) & mask
        keys[i] = key
        self._lines[i] = line
        self._n += 1
        if 4 * self._n > 3 * mask:
            self._grow()
        return line

    def _grow(self) -> None:
        old_keys, old_lines = self._keys, self._lines
        size = 2 * len(old_keys)
        self._mask = mask = size - 1
        self._keys = keys = array("Q", bytes(8 * size))
        self._lines = lines = array("I", bytes(4 * size))
        for key, line in zip(old_keys, old_lines):
            if key:
                i = key & mask
                while keys[i]:
                    i = (i + 1) & mask
                keys[i] = key
                lines[i] = line


class WorkList:
    """Iterating it yields the work; it keeps what the run needs to know about it as it goes."""

    # Skip finished rows before normalizing them (see __iter__). Off only in tests and the benchmark,
    # where every row then takes the full path, as before the fast skip existed.
    fast_skip = True

    def __init__(
        self,
        prompts: Path,
        samples: int,
        done: DoneSet,
        stats: Stats,
        *,
        shard: Shard = Shard(),
        progress: CheckpointProgress | None = None,
    ) -> None:
        self.prompts = prompts
        self.samples = samples
        self.done = done
        self.stats = stats
        self.shard = shard  # the whole job, unless the run is one of N shards
        self.progress = progress  # the resume checkpoint: where this run starts reading, what it records
        self.next_resumed = 0  # what a resume after this run counts as already done (see complete.py)
        self.remaining: dict[str, int] = {}  # samples yielded and not yet finished, per prompt id

    def finished(self, rid: str) -> bool:
        """One sample of `rid` is finished (recorded or abandoned); True when it was the id's last."""
        left = self.remaining.get(rid, 1) - 1
        if left <= 0:
            self.remaining.pop(rid, None)
            return True
        self.remaining[rid] = left
        return False

    def __iter__(self) -> Iterator[tuple[PromptRecord, int] | Failed]:
        """(prompt, sample) pairs not yet recorded, in file order; bad rows as row-level Failed.

        With a resume checkpoint (journal/checkpoint.py) the rows before its watermark are not read: they are
        all resolved, and it says what they count for and which ids they claimed. Every row read is
        reported to the checkpoint (resolved now, or pending until its samples or row error are written).
        """
        samples = self.samples
        done, bad_lines = self.done, self.done.bad_lines
        progress = self.progress
        start = progress.start if progress is not None else None
        first_line = FirstLines.for_rows(
            max(0, self.stats.total // samples - (start.line - 1 if start else 0))
        )  # rows x samples
        has_all, fast = done.has_all_hash, self.fast_skip
        claim = local = first_line.setdefault
        prefix = None  # the ids claimed before the watermark, by hash
        hash_ids = done.ids > 0  # nothing done before this run: no row is skipped (ids done later fail the claim)
        fresh = done.empty
        if start is not None:
            self.stats.resumed += start.count
            self.next_resumed += start.count
            if len(start.claims):
                prefix = start.claims.line_of_hash

                def claim(rid: str, line: int) -> int:
                    seen = prefix(id_hash(rid))  # an id first seen before the watermark
                    return local(rid, line) if seen is None else seen

        if progress is not None:
            resolved, pending_row, pending_bad = progress.resolved, progress.pending_row, progress.pending_bad
            rows = iter_rows_at(self.prompts, start.offset, start.line) if start else iter_rows_at(self.prompts)
        else:
            resolved = pending_row = pending_bad = _ignore
            rows = ((line, row, 0) for line, row in iter_rows(self.prompts))
        shard = self.shard
        skipped = Batch()
        for line, row, end in rows:
            # Fast skip: a finished row is skipped without normalizing it (a resume of a finished run
            # is mostly this). It takes only rows the full path below would skip too, with the same
            # effects (counted as resumed, its id's first line claimed, nothing written):
            # - `surely_valid` passes only rows normalize accepts, so a row it would refuse never
            #   claims its id (the full path writes that row's error, and a later line of the id
            #   becomes the first); it runs after `has_all`, so a fresh run pays only the lookup;
            # - a line recorded as a bad row goes the full path: it may normalize now (a newer
            #   fleetgen, or --force on a changed file), and then the full path claims its id;
            # - the claim comes last, only for a row that is skipped: `claim` records the line
            #   (inlined, with the hash has_all took: an id claimed before the watermark is on an earlier line).
            if fast and line not in bad_lines:
                rid = raw_id(row)
                if rid is not None and not shard.whole and surely_valid(row) and not shard.owns(rid):
                    resolved(line, end, 0, None)
                    continue  # another shard's row (normalize gives it this id)
                if (
                    rid is not None
                    and hash_ids
                    and has_all(h := id_hash(rid), samples)
                    and surely_valid(row)
                    and (prefix is None or prefix(h) is None)
                    and local(rid, line) == line
                ):
                    self.stats.resumed += samples  # what record(Skipped(rid, k)) does for each sample
                    self.next_resumed += samples
                    resolved(line, end, samples, h)
                    continue
            item = prompt_of(line, row)
            if not (shard.owns_line(line) if isinstance(item, BadRow) else shard.owns(item.id)):
                resolved(line, end, 0, None)
                continue
            self.next_resumed += 1 if isinstance(item, BadRow) else samples  # a duplicate: corrected below
            if isinstance(item, BadRow):
                if item.line not in bad_lines:
                    pending_bad(line, end)
                    yield Failed(item.id, None, f"line {item.line}: {item.reason}; {ROW_HINT}", "input", item.line)
                else:
                    self.stats.resumed += 1
                    resolved(line, end, 1, None)
                continue
            seen = claim(item.id, item.line)
            if seen != item.line:
                self.next_resumed += 1 - samples  # a later line of a claimed id: a row error, counted once
                if item.line not in bad_lines:
                    pending_bad(line, end)
                    yield Failed(
                        item.id,
                        None,
                        f"line {item.line}: duplicate id {item.id!r} (first on line {seen}); {ROW_HINT}",
                        "input",
                        item.line,
                    )
                else:
                    self.stats.resumed += 1
                    resolved(line, end, 1, None)
                continue
            h = id_hash(item.id)
            # Nothing done before this run: no sample of an id first seen here is done yet.
            todo = range(samples) if fresh else [k for k in range(samples) if not done.has_hash(h, k)]
            for k in range(samples - len(todo)):
                record(Skipped(item.id, k), skipped, done, self.stats)
            if todo:
                self.remaining[item.id] = len(todo)
                pending_row(line, end, samples, h)
            else:
                resolved(line, end, samples, h)
            for k in todo:
                yield item, k


def _ignore(*args: object) -> None:
    """The checkpoint's reports, when there is no checkpoint (a Parquet prompt file, the stream benchmark)."""
