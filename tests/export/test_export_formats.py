"""Each text format, the filters, the split and atomic output, on results of a real SmolLM2 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_helpers import read_jsonl

import fleetgen.export as ex
from fleetgen.errors import InputError
from fleetgen.export import ExportConfig, export
from fleetgen.generate.prompts.reader import normalize


def _export(run_dir: Path, tmp_path: Path, fmt: str, **kw) -> tuple[ex.ExportSummary, Path]:
    out = tmp_path / f"{fmt}.jsonl"
    return export(ExportConfig(results_dir=run_dir, output=out, format=fmt, **kw)), out


def _finished(results: list[dict]) -> list[dict]:
    return [r for r in results if all(f in ("stop", "tool_calls") for f in r["finish_reason"])]


def test_public_api_is_declared():
    assert sorted(ex.__all__) == sorted(set(ex.__all__))
    for name in ex.__all__:
        assert getattr(ex, name) is not None
    assert {"export", "ExportConfig", "ExportSummary"} <= set(ex.__all__)


@pytest.mark.parametrize("fmt", ["specforge", "sharegpt", "openai"])
def test_format_rows_validate_and_read_back_as_the_same_conversation(run_dir, results, tmp_path, fmt):
    summary, out = _export(run_dir, tmp_path, fmt)
    rows = read_jsonl(out)
    kept = {f"{r['id']}#{r['sample']}": r for r in _finished(results)}
    assert summary.read == len(results)
    assert len(rows) == summary.rows_written == len(kept) > 0
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        src = kept[row["id"]]
        # fleetgen's own prompt reader accepts OpenAI, SpecForge and ShareGPT rows: each must read back.
        rec = normalize(row, 1)
        roles = [m["role"] for m in src["messages"]]
        assert [m["role"] for m in rec.messages] == roles
        assert [m["content"] for m in rec.messages] == [m["content"] for m in src["messages"]]
        assert (rec.tools or None) == (src.get("tools") or None)
        if fmt == "specforge":
            assert set(row) <= {"id", "conversations", "tools"}
        if fmt == "openai":
            assert set(row) <= {"id", "messages", "tools"}
        if fmt == "sharegpt":
            assert {t["from"] for t in row["conversations"]} <= {
                "system",
                "human",
                "gpt",
                "observation",
                "function_call",
            }
            assert row.get("tools") is None or isinstance(json.loads(row["tools"]), list)


def test_default_filter_keeps_only_finished_rows(run_dir, results, tmp_path):
    summary, _ = _export(run_dir, tmp_path, "openai")
    cut = [r for r in results if "length" in r["finish_reason"]]
    assert cut, "the fixture run should hold rows cut by max_tokens"
    assert summary.filtered["finish_reason length"] == len(cut)
    everything, _ = _export(run_dir, tmp_path / "all", "openai", finish_reasons=["stop", "length"])
    assert everything.rows_written == len(results)


def test_min_supervised_tokens_uses_the_servers_count(run_dir, results, tmp_path):
    floor = 40
    summary, out = _export(run_dir, tmp_path, "specforge", min_supervised_tokens=floor)
    expect = [r for r in _finished(results) if r["usage"]["completion_tokens"] >= floor]
    assert summary.rows_written == len(expect) < len(_finished(results))


def test_leftover_think_markers_are_dropped(run_dir, results, tmp_path):
    src = tmp_path / "run"
    src.mkdir()
    bad = json.loads(json.dumps(_finished(results)[0]))
    bad["id"] = "with-marker"
    next(m for m in bad["messages"] if m["role"] == "assistant")["content"] += " </think> leftover"
    (src / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*results, bad]))
    summary, out = _export(src, tmp_path, "specforge")
    assert summary.filtered["leftover think marker"] == 1
    assert "with-marker#0" not in {r["id"] for r in read_jsonl(out)}
    kept, _ = _export(src, tmp_path / "keep", "specforge", drop_think_markers=False)
    assert kept.rows_written == summary.rows_written + 1


def test_eval_split_is_by_prompt_id_and_deterministic(run_dir, tmp_path):
    a = export(
        ExportConfig(
            results_dir=run_dir,
            output=tmp_path / "a",
            format="openai",
            eval_fraction=0.3,
            finish_reasons=["stop", "length"],
        )
    )
    b = export(
        ExportConfig(
            results_dir=run_dir,
            output=tmp_path / "b",
            format="openai",
            eval_fraction=0.3,
            finish_reasons=["stop", "length"],
        )
    )
    assert a.written == b.written and a.written["eval"] > 0 and a.written["train"] > 0
    assert (tmp_path / "a" / "eval.jsonl").read_bytes() == (tmp_path / "b" / "eval.jsonl").read_bytes()
    train = {r["id"].rsplit("#", 1)[0] for r in read_jsonl(tmp_path / "a" / "train.jsonl")}
    evals = {r["id"].rsplit("#", 1)[0] for r in read_jsonl(tmp_path / "a" / "eval.jsonl")}
    assert not train & evals  # every sample of a prompt on one side: no leakage into eval
    c = export(
        ExportConfig(
            results_dir=run_dir,
            output=tmp_path / "c.jsonl",
            format="openai",
            eval_fraction=0.3,
            split_salt="other",
            finish_reasons=["stop", "length"],
        )
    )
    assert set(c.outputs) == {"train", "eval"} and c.outputs["eval"].name == "c.eval.jsonl"
    assert {r["id"] for r in read_jsonl(c.outputs["eval"])} != {
        r["id"] for r in read_jsonl(tmp_path / "a" / "eval.jsonl")
    }


def test_interrupted_export_leaves_no_half_file(run_dir, tmp_path):
    out = tmp_path / "data.jsonl"
    cfg = ExportConfig(results_dir=run_dir, output=out, format="specforge", finish_reasons=["stop", "length"])

    def stop_after_some(summary: ex.ExportSummary) -> None:
        if summary.read == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export(cfg, on_row=stop_after_some)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary

    first = export(cfg)
    before = out.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        export(cfg.model_copy(update={"overwrite": True}), on_row=stop_after_some)
    assert out.read_bytes() == before and first.rows_written == len(before.splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_existing_output_is_refused_without_overwrite(run_dir, tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("keep me\n")
    with pytest.raises(InputError, match="already exists"):
        export(ExportConfig(results_dir=run_dir, output=out, format="openai"))
    assert out.read_text() == "keep me\n"


def test_torn_last_line_and_duplicates_are_counted_not_fatal(results, tmp_path):
    src = tmp_path / "run"
    src.mkdir()
    lines = [json.dumps(r) for r in results]
    (src / "results.jsonl").write_text("\n".join(lines + [lines[0]]) + "\n" + lines[1][:40])
    summary = export(ExportConfig(results_dir=src, output=tmp_path / "o.jsonl", format="openai"))
    assert summary.duplicates == 1 and summary.corrupt_lines == 1 and summary.read == len(results)


def test_cli_export_writes_the_split_and_refuses_a_bad_split(run_dir, tmp_path):
    from typer.testing import CliRunner

    from fleetgen.cli.app import app

    out = tmp_path / "sf"
    r = CliRunner().invoke(
        app, ["export", str(run_dir), "--format", "specforge", "--split", "eval=0.5", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["eval.jsonl", "train.jsonl"]
    bad = CliRunner().invoke(app, ["export", str(run_dir), "--split", "test=0.1", "-o", str(tmp_path / "x.jsonl")])
    assert bad.exit_code != 0 and not (tmp_path / "x.jsonl").exists()
