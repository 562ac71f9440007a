"""`build_mix`: sources -> prompt records -> filters -> dedup -> quotas -> output file and report.

Two passes keep memory bounded: the first pass normalizes every row and keeps only compact
columns per candidate (source, position, domain, tokens, MinHash signature); the second reads
back just the selected rows and spools them, and the output is written in a seeded shuffled
order, so any prefix of the file is a balanced sample. A bad row never stops the job: it is
counted per source with its reason and shown in the summary and report.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fleetgen.errors import ConfigError, InputError
from fleetgen.mix.adapters import Adapter, get_adapter
from fleetgen.mix.dedup import Signer, dedup_text, exact_key, near_duplicates
from fleetgen.mix.domains import DOMAINS, assign_domain
from fleetgen.mix.filters import filter_reason, prompt_tokens, token_counter
from fleetgen.mix.lang import detect_language
from fleetgen.mix.licenses import UNKNOWN, commercial_use
from fleetgen.mix.quotas import allocate, select
from fleetgen.mix.recipe import MixRecipe, SourceSpec
from fleetgen.mix.sources import BadLine, RowSource
from fleetgen.mix.summary import MixSummary, SourceStats
from fleetgen.mix.writer import Spool, ordered, output_format, write_records
from fleetgen.rows.prompt import PromptRecord, RecordError

Log = Callable[[str], None]
DOMAIN_INDEX = {d: i for i, d in enumerate(DOMAINS)}


def make_record(spec: SourceSpec, adapter: Adapter, row: dict, pos: int) -> PromptRecord:
    """One raw row as a prompt record with its domain, language and license; raises RecordError."""
    missing = [c for c in adapter.required_columns if c not in row]
    if missing:
        raise RecordError("missing column", ", ".join(missing))
    conv = adapter.convert(row)
    domain, why = assign_domain(
        conv.messages, conv.tools, fixed=spec.domain, source_domain=conv.source_domain, labels=conv.labels
    )
    rec = PromptRecord(id=f"{spec.name}/{pos}", messages=conv.messages, tools=conv.tools)
    rec.meta = {
        "source": spec.name,
        "domain": domain,
        "domain_reason": why,
        "lang": detect_language(rec.user_text()),
        "original_id": conv.original_id,
        "row": pos,
        "license": spec.license or conv.license or adapter.license or UNKNOWN,
        **conv.extra,
    }
    rec.meta["commercial_use"] = commercial_use(rec.meta["license"])
    return rec


class _Candidates:
    """Compact per-candidate columns of the first pass."""

    def __init__(self, num_perm: int | None) -> None:
        self.source = array("h")
        self.pos = array("q")
        self.domain = array("b")
        self.tokens = array("q")
        self.sigs = bytearray()
        self.num_perm = num_perm

    def __len__(self) -> int:
        return len(self.pos)

    def signatures(self) -> np.ndarray:
        return np.frombuffer(self.sigs, dtype=np.uint32).reshape(len(self), self.num_perm)


def build_mix(
    recipe: MixRecipe, output: str | Path, report_dir: str | Path | None = None, *, log: Log | None = None
) -> MixSummary:
    """Build the prompt set the recipe describes into `output` (.jsonl or .parquet); optionally a report."""
    t0 = time.monotonic()
    say = log or (lambda _m: None)
    output = Path(output)
    fmt = output_format(output)
    f = recipe.filters
    unknown = [d for d in recipe.quotas.domain if d not in DOMAIN_INDEX]
    if unknown:
        raise ConfigError(f"unknown quota domain(s): {', '.join(unknown)}")
    adapters = [get_adapter(s.adapter) for s in recipe.sources]
    for s, a in zip(recipe.sources, adapters):
        if s.max_per_original_question and not a.has_original_question:
            raise ConfigError(
                f"source {s.name!r}: max_per_original_question needs an adapter with original questions",
                hint="only metamathqa has them",
            )
    count = token_counter(f)
    readers = [RowSource(s) for s in recipe.sources]
    for s, a, r in zip(recipe.sources, adapters, readers):
        cols = r.columns()
        missing = [c for c in a.required_columns if c not in cols]
        if missing:
            raise InputError(
                f"source {s.name!r}: adapter {a.name} needs column(s) {', '.join(missing)}; "
                f"columns found: {', '.join(cols) or '(none)'}",
                hint="pick the adapter that matches this dataset's schema",
            )

    stats = [SourceStats(s.name, s.adapter, s.path) for s in recipe.sources]
    signer = Signer(f.minhash_permutations) if f.drop_near_duplicates else None
    cand = _Candidates(f.minhash_permutations if signer else None)
    lengths_before = array("q")
    seen: dict[int, int] = {}
    cross = 0

    # Pass 1: normalize, filter, exact dedup, cap per original question, sign.
    for si, (spec, adapter, reader, st) in enumerate(zip(recipe.sources, adapters, readers, stats)):
        say(f"reading {spec.name} ({spec.adapter}: {spec.path})")
        groups: dict[str, int] = {}
        cap = spec.max_per_original_question
        for pos, row in reader.rows():
            st.rows_read += 1
            if isinstance(row, BadLine):
                st.skip(pos, row.reason)
                continue
            try:
                rec = make_record(spec, adapter, row, pos)
                tokens = prompt_tokens(rec, count)
            except RecordError as e:
                st.skip(pos, e.reason, e.detail)
                continue
            except Exception as e:  # a malformed row must never stop the job
                st.skip(pos, f"malformed row ({type(e).__name__})", str(e))
                continue
            lengths_before.append(tokens)
            st.domains_before[rec.meta["domain"]] += 1
            st.licenses[rec.meta["license"]] += 1
            why = filter_reason(rec, tokens, f)
            if why:
                st.filtered[why] += 1
                continue
            text = dedup_text(rec)
            k = exact_key(text)
            first = seen.get(k)
            if first is not None:
                st.exact_duplicates += 1
                cross += first != si
                continue
            if cap:  # counts distinct prompts: identical AnsAug repeats are exact duplicates above
                key = rec.meta.get("original_question_hash")
                if key is not None:
                    n = groups.get(key, 0)
                    if n >= cap:
                        st.capped += 1
                        continue
                    groups[key] = n + 1
            seen[k] = si
            cand.source.append(si)
            cand.pos.append(pos)
            cand.domain.append(DOMAIN_INDEX[rec.meta["domain"]])
            cand.tokens.append(tokens)
            if signer:
                cand.sigs += signer.sign(text).tobytes()
        say(f"  {st.rows_read} rows, {sum(st.skipped.values())} skipped, {sum(st.filtered.values())} filtered")
    del seen

    n = len(cand)
    src_of = np.frombuffer(cand.source, dtype=np.int16) if n else np.empty(0, np.int16)
    keep = np.ones(n, dtype=bool)
    if signer and n:
        say(f"near-duplicate search over {n} prompts")
        dup_of = near_duplicates(cand.signatures(), f.drop_near_duplicates)
        keep = dup_of < 0
        for i in np.flatnonzero(~keep).tolist():
            stats[src_of[i]].near_duplicates += 1
            cross += int(src_of[dup_of[i]] != src_of[i])
        cand.sigs = bytearray()
    idx = np.flatnonzero(keep)
    dom = np.frombuffer(cand.domain, dtype=np.int8)[idx] if n else np.empty(0, np.int8)
    tok = np.frombuffer(cand.tokens, dtype=np.int64)[idx] if n else np.empty(0, np.int64)
    srcs = src_of[idx]
    for si, c in zip(*np.unique(srcs, return_counts=True)):
        stats[si].candidates = int(c)

    # Quotas.
    by_tokens = recipe.quota_unit == "tokens"
    units = tok if by_tokens else np.ones(len(idx), dtype=np.int64)
    available = {d: float(units[dom == DOMAIN_INDEX[d]].sum()) for d in recipe.quotas.domain}
    allocs = allocate(
        recipe.quotas.domain, available, recipe.total, integer=not by_tokens, on_shortfall=recipe.on_shortfall
    )
    weights = np.array([s.weight for s in recipe.sources], dtype=np.float64)[srcs] if len(idx) else np.empty(0)
    picked = select(dom, units, weights, allocs, DOMAIN_INDEX, recipe.seed, by_tokens=by_tokens)
    notes = [f"{a.domain}: {a.note}" for a in allocs if a.note]
    got = float(units[picked].sum())
    if got < recipe.total - (1e-9 if by_tokens else 0.5):
        notes.append(f"total not reached: {got:g} of {recipe.total} {recipe.quota_unit} (candidates ran out)")

    # Pass 2: read back the selected rows, spool them, write in the shuffled order.
    chosen = idx[picked]
    slot_of = {int(c): r for r, c in enumerate(chosen.tolist())}
    cand_pos = np.frombuffer(cand.pos, dtype=np.int64) if n else np.empty(0, np.int64)
    output.parent.mkdir(parents=True, exist_ok=True)
    spool = Spool(output.parent, len(chosen))
    lengths_after = array("q")
    try:
        for si, (spec, adapter, reader, st) in enumerate(zip(recipe.sources, adapters, readers, stats)):
            mine = chosen[src_of[chosen] == si]
            if not len(mine):
                continue
            say(f"writing {len(mine)} prompts from {spec.name}")
            pos_to_cand = {int(cand_pos[c]): int(c) for c in mine.tolist()}
            for pos, row in reader.take(sorted(pos_to_cand)):
                try:
                    rec = make_record(spec, adapter, row, pos)
                except Exception as e:
                    raise InputError(f"source {spec.name!r} changed while mixing: row {pos} now fails ({e})") from None
                c = pos_to_cand[pos]
                spool.put(slot_of[c], rec.to_dict())
                t = int(cand.tokens[c])
                lengths_after.append(t)
                st.selected += 1
                st.selected_tokens += t
                st.domains_after[rec.meta["domain"]] += 1
                st.licenses_selected[rec.meta["license"]] += 1
        spool.close()
        written = write_records(ordered(spool, range(len(chosen))), output, fmt)
    finally:
        spool.close()
        spool.remove()

    selected_by_domain = {d: sum(s.domains_after.get(d, 0) for s in stats) for d in DOMAINS}
    summary = MixSummary(
        output=output,
        rows_written=written,
        tokens_written=sum(s.selected_tokens for s in stats),
        quota_unit=recipe.quota_unit,
        total_requested=recipe.total,
        seed=recipe.seed,
        domains=allocs,
        domains_selected={d: v for d, v in selected_by_domain.items() if v or d in recipe.quotas.domain},
        sources=stats,
        notes=notes,
        cross_source_duplicates=cross,
    )
    if report_dir is not None:
        from fleetgen.mix.report import write_report

        summary.report_dir = Path(report_dir)
        write_report(
            summary,
            Path(report_dir),
            np.frombuffer(lengths_before, dtype=np.int64),
            np.frombuffer(lengths_after, dtype=np.int64),
        )
    summary.elapsed_s = time.monotonic() - t0
    return summary
