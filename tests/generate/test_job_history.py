"""`--force` keeps every job identity: job-history.jsonl, a `job` digest on each row, rows counted per identity.

Against a STAND-IN server (tests/generate/standin_server.py): what is checked is the output directory's
bookkeeping, not the server's answers.
"""

from __future__ import annotations

import orjson
import pytest
from helpers import read_jsonl, write_prompts

from fleetgen.errors import ResumeMismatchError
from fleetgen.generate import GenerateConfig, generate
from fleetgen.report import build_report, load_run
from fleetgen.report.identities import identity_rows
from fleetgen.rows.history import HISTORY, identity_digest, read_history


def cfg(tmp_path, url, **kw) -> GenerateConfig:
    base = dict(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=[url],
        model="standin",
        max_tokens=4,
        concurrency=4,
        hedge=False,
    )
    return GenerateConfig(**{**base, **kw})


def test_a_forced_resume_keeps_the_old_identity_and_the_report_counts_rows_per_identity(tmp_path, standin):
    out = tmp_path / "out"
    write_prompts(tmp_path / "p.jsonl", 4)
    assert generate(cfg(tmp_path, standin, temperature=0.7), handle_signals=False).ok == 4
    first = orjson.loads((out / "job.json").read_bytes())
    write_prompts(tmp_path / "p.jsonl", 6)  # 2 more rows, and another temperature: another job
    with pytest.raises(ResumeMismatchError):
        generate(cfg(tmp_path, standin, temperature=0.3), handle_signals=False)
    assert generate(cfg(tmp_path, standin, temperature=0.3, force=True), handle_signals=False).ok == 2
    second = orjson.loads((out / "job.json").read_bytes())
    a, b = identity_digest(first), identity_digest(second)

    history = read_history(out)
    assert [(e["job"], e["identity"], e["forced"]) for e in history] == [(a, first, False), (b, second, True)]
    assert all(e["since"] for e in history)
    jobs = {r["id"]: r["job"] for r in read_jsonl(out / "results.jsonl")}
    assert jobs == {**{f"p{i}": a for i in range(4)}, "p4": b, "p5": b}

    rows = identity_rows(load_run(out))
    assert [(e["job"], e["results"], e["forced"]) for e in rows] == [(a, 4, False), (b, 2, True)]
    report = build_report(out, dest=tmp_path / "report", tokenizer="/nonexistent").read_text()
    assert "## Job identity" in report and f"`{b}`" in report and "sampling.temperature 0.7 → 0.3" in report

    generate(cfg(tmp_path, standin, temperature=0.3), handle_signals=False)  # a plain resume adds no identity
    assert len(read_history(out)) == 2


def test_a_directory_from_before_the_history_counts_its_rows_as_untagged(tmp_path, standin):
    out = tmp_path / "out"
    write_prompts(tmp_path / "p.jsonl", 3)
    generate(cfg(tmp_path, standin), handle_signals=False)
    old = orjson.loads((out / "job.json").read_bytes())
    (out / HISTORY).unlink()  # as an older fleetgen left it: job.json, rows without a `job`
    untagged = [{k: v for k, v in r.items() if k != "job"} for r in read_jsonl(out / "results.jsonl")]
    (out / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in untagged))
    (out / "results.keys").unlink(missing_ok=True)
    for name in ("complete.json", "progress.json"):
        (out / name).unlink(missing_ok=True)
    write_prompts(tmp_path / "p.jsonl", 5)
    generate(cfg(tmp_path, standin, force=True), handle_signals=False)
    new = orjson.loads((out / "job.json").read_bytes())
    history = read_history(out)
    assert [(e["job"], e["since"]) for e in history][0] == (identity_digest(old), None)  # the one before: no date
    assert history[1]["job"] == identity_digest(new)
    counts = {e["job"]: e["results"] for e in identity_rows(load_run(out))}
    assert counts == {identity_digest(old): 0, identity_digest(new): 2, "untagged": 3}
