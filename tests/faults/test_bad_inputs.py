"""A corpus of bad input rows and bad configs/flags, each with the text it gets.

Rows: every bad row goes to errors.jsonl naming its line and saying what to do; good rows around
them complete. Configs/flags: every one fails with one line that names the flag, field or file and a
hint (or click's usage line), never a traceback. Both corpora with their texts are written to the
results dir, and bench/reliability_table.py --corpus prints them for docs/bad-inputs.md.
"""

from __future__ import annotations

import json

import pytest
from faultkit import RESULTS_DIR, audit, gen_config, write_yaml
from standin_server import StandinServer

from fleetgen.cli._errors import run_guarded
from fleetgen.cli.app import app
from fleetgen.generate import generate

OK = '{"id": "%s", "messages": [{"role": "user", "content": "Name one color."}]}'
U = '{"role": "user", "content": "hi"}'
A_TOOL = (
    '{"role": "assistant", "content": null, '
    '"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}'
)

# (label, raw line bytes, expected: "error" or "accepted: why")
BAD_ROWS: list[tuple[str, bytes, str]] = [
    ("broken JSON", b'{"id": "b1", "messages": [', "error"),
    ("trailing garbage", b'{"id": "b2", "messages": []} xyz', "error"),
    ("not an object (list)", b"[1, 2, 3]", "error"),
    ("not an object (string)", b'"just a string"', "error"),
    ("not an object (number)", b"42", "error"),
    ("null row", b"null", "error"),
    ("empty object", b"{}", "error"),
    ("messages is a string", b'{"id": "b8", "messages": "hello"}', "error"),
    ("messages is an object", b'{"id": "b9", "messages": {"role": "user"}}', "error"),
    ("empty messages", b'{"id": "b10", "messages": []}', "error"),
    ("message is a string", b'{"id": "b11", "messages": ["hi"]}', "error"),
    ("content is a number", b'{"id": "b12", "messages": [{"role": "user", "content": 5}]}', "error"),
    ("content a list of bare strings", b'{"id": "b13", "messages": [{"role": "user", "content": ["a"]}]}', "error"),
    ("content missing", b'{"id": "b14", "messages": [{"role": "user"}]}', "error"),
    (
        "image content part",
        b'{"id": "b38", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"}, '
        b'{"type": "image_url", "image_url": {"url": "x.png"}}]}]}',
        "error",
    ),
    (
        "OpenAI text content parts",
        b'{"id": "b39", "messages": [{"role": "user", "content": [{"type": "text", "text": "Name one"}, '
        b'{"type": "text", "text": "color."}]}]}',
        "accepted: text parts joined by a newline, as vLLM joins them",
    ),
    ("unknown role", b'{"id": "b15", "messages": [{"role": "wizard", "content": "hi"}]}', "error"),
    ("role missing", b'{"id": "b16", "messages": [{"content": "hi"}]}', "error"),
    ("only a system message", b'{"id": "b17", "messages": [{"role": "system", "content": "be brief"}]}', "error"),
    ("starts with assistant", b'{"id": "b18", "messages": [{"role": "assistant", "content": "hi"}]}', "error"),
    ("id is a list", b'{"id": [1], "messages": [' + U.encode() + b"]}", "error"),
    ("id is empty", b'{"id": "", "messages": [' + U.encode() + b"]}", "error"),
    ("id is a bool", b'{"id": true, "messages": [' + U.encode() + b"]}", "error"),
    ("tools not a list", b'{"id": "b22", "messages": [' + U.encode() + b'], "tools": {"a": 1}}', "error"),
    ("tools a non-JSON string", b'{"id": "b23", "messages": [' + U.encode() + b'], "tools": "[oops"}', "error"),
    ("meta not an object", b'{"id": "b24", "messages": [' + U.encode() + b'], "meta": "x"}', "error"),
    (
        "tool_calls not a list",
        b'{"id": "b25", "messages": [' + U.encode() + b', {"role": "assistant", "content": "", "tool_calls": 3}]}',
        "error",
    ),
    ("unknown ShareGPT speaker", b'{"id": "b26", "conversations": [{"from": "robot", "value": "hi"}]}', "error"),
    ("conversations a number", b'{"id": "b27", "conversations": 7}', "error"),
    ("invalid UTF-8 bytes", b'{"id": "b28", "messages": [{"role": "user", "content": "caf\xe9 \xff"}]}', "error"),
    ("lone surrogate escape", b'{"id": "b29", "messages": [{"role": "user", "content": "x \\ud800 y"}]}', "error"),
    ("NaN literal", b'{"id": "b30", "messages": [' + U.encode() + b'], "meta": {"x": NaN}}', "error"),
    (
        "huge broken line (2 MB)",
        b'{"id": "b31", "messages": [{"role": "user", "content": "' + b"x" * 2_000_000,
        "error",
    ),
    ("duplicate id", (OK % "g0").encode(), "error"),
    (
        "missing id",
        b'{"messages": [{"role": "user", "content": "no id here"}]}',
        "accepted: id derived from the content (h-<sha256>), stable across runs",
    ),
    ("integer id", b'{"id": 77, "messages": [' + U.encode() + b"]}", 'accepted: id 77 read as "77"'),
    (
        "tool call without id",
        b'{"id": "b35", "messages": ['
        + U.encode()
        + b", "
        + A_TOOL.encode()
        + b', {"role": "tool", "content": "42"}, '
        + U.encode()
        + b"]}",
        "accepted: assistant turns are regenerated; the recorded call is context the server checks",
    ),
    (
        "10 MB prompt",
        b'{"id": "b36", "messages": [{"role": "user", "content": "' + b"word " * 2_000_000 + b'"}]}',
        "accepted by the reader: the server decides (vLLM answers 400 over max_model_len -> errors.jsonl)",
    ),
    ("blank line", b"   ", "accepted: skipped"),
]


def test_bad_row_corpus_each_gets_a_reason_with_line_and_what_to_do(tmp_path, recorder):
    lines = [(OK % "g0").encode()]
    where: dict[int, str] = {}
    for label, raw, _ in BAD_ROWS:
        lines.append(raw)
        where[len(lines)] = label
        lines.append((OK % f"g{len(lines)}").encode())
    (tmp_path / "p.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    server = StandinServer()
    url = server.start()
    try:
        stats = generate(gen_config(tmp_path, [url], timeout_base_s=30), handle_signals=False)
        again = generate(gen_config(tmp_path, [url], timeout_base_s=30), handle_signals=False)  # a resume keeps them
    finally:
        server.stop()
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_bytes().splitlines()]
    by_line = {e["line"]: e["reason"] for e in errors if e.get("sample") is None}
    corpus = []
    for line, label in where.items():
        expected = next(e for lab, _, e in BAD_ROWS if lab == label)
        reason = by_line.get(line)
        corpus.append({"row": label, "line": line, "expected": expected, "text": reason or expected})
        if expected == "error":
            assert reason, f"{label}: no error recorded"
            assert reason.startswith(f"line {line}: "), reason[:200]  # names the place
            assert "fix or drop the row" in reason and "--retry-errors" in reason  # says what to do
            assert len(reason) < 1000, f"{label}: reason not bounded ({len(reason)} chars)"
        else:
            assert reason is None, f"{label}: {reason[:200]}"
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_bytes().splitlines()]
    derived = [r["id"] for r in results if r["id"].startswith("h-")]
    good = [f"g{i}" for i in range(len(lines) + 1) if f'"g{i}"' in (tmp_path / "p.jsonl").read_text(errors="replace")]
    a = audit(tmp_path / "out", good + derived + ["77", "b35", "b36", "b39"], 1)
    server_said = {e["id"]: e["reason"] for e in errors if e.get("sample") is not None}
    for row in corpus:
        if row["row"] == "10 MB prompt":
            row["text"] = f"{row['expected']}; the stand-in said: {server_said.get('b36', 'nothing (accepted)')}"
    assert len(derived) == 1
    assert a.duplicated == 0 and a.corrupt == 0
    assert stats.input_errors == sum(1 for *_, e in BAD_ROWS if e == "error")
    assert again.ok == 0 and again.input_errors == 0  # recorded once, not again on resume
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "corpus_rows.json").write_text(json.dumps(corpus, indent=1))
    recorder.record(
        "bad_rows",
        fault=f"bad input rows ({len(BAD_ROWS)} kinds)",
        injected="one prompt file: each bad row between good rows (see docs/bad-inputs.md)",
        runs=2,
        audit=a,
        outcome=f"{stats.input_errors} rows to errors.jsonl with 'line N: why; what to do', "
        f"{len(BAD_ROWS) - stats.input_errors} accepted as documented; good rows done; resume adds nothing",
    )


def _run_cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        run_guarded(lambda: app(args, prog_name="fleetgen"))
    out = capsys.readouterr()
    return e.value.code, (out.out + out.err).strip()


@pytest.fixture(scope="module")
def standin_url():
    server = StandinServer()
    yield server.start()
    server.stop()


def _config_cases(tmp_path, url):
    p = tmp_path / "p.jsonl"
    p.write_text(OK % "c0" + "\n")
    o = str(tmp_path / "o")
    ep = ["--endpoint", url]
    g = ["generate", str(p), "-o", o]
    (tmp_path / "bad.yaml").write_text("samples: [1,\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    write_yaml(tmp_path / "unknown.yaml", {"prompts": p, "output_dir": o, "endpoints": [url], "sampels": 2})
    write_yaml(tmp_path / "type.yaml", {"prompts": p, "output_dir": o, "endpoints": [url], "samples": "many"})
    (tmp_path / "afile").write_text("x")
    st = str(tmp_path / "st")
    return [
        ("--samples 0", g + ep + ["--samples", "0"], "samples"),
        ("--temperature -1", g + ep + ["--temperature", "-1"], "temperature"),
        ("--top-p 1.5", g + ep + ["--top-p", "1.5"], "top_p"),
        ("--max-tokens 0", g + ep + ["--max-tokens", "0"], "max_tokens"),
        ("--concurrency 0", g + ep + ["--concurrency", "0"], "concurrency"),
        ("--fleet and --endpoint", g + ep + ["--fleet", st], "fleet_state"),
        ("neither --fleet nor --endpoint", g, "endpoint"),
        ("--endpoint ftp://", g + ["--endpoint", "ftp://host:1"], "endpoints"),
        ("--endpoint twice", g + ep + ep, "endpoints"),
        ("--reasoning bogus", g + ep + ["--reasoning", "bogus"], "reasoning"),
        ("--truncation bogus", g + ep + ["--truncation", "bogus"], "truncation"),
        ("--dispatch bogus", g + ep + ["--dispatch", "bogus"], "dispatch"),
        ("--samples not a number", g + ep + ["--samples", "two"], "--samples"),
        ("unknown flag", g + ep + ["--sampels", "2"], "--sampels"),
        ("missing -o", ["generate", str(p)] + ep, "--output"),
        ("prompt file missing", ["generate", str(tmp_path / "nope.jsonl"), "-o", o] + ep, "nope.jsonl"),
        ("--config missing", g + ["--config", str(tmp_path / "none.yaml")], "none.yaml"),
        ("--config not YAML", g + ["--config", str(tmp_path / "bad.yaml")], "bad.yaml"),
        ("--config a list", g + ["--config", str(tmp_path / "list.yaml")], "list.yaml"),
        ("--config unknown field", g + ["--config", str(tmp_path / "unknown.yaml")], "sampels"),
        ("--config wrong type", g + ["--config", str(tmp_path / "type.yaml")], "samples"),
        ("--fleet without a fleet", g + ["--fleet", st], "st"),
        ("-o is a file", ["generate", str(p), "-o", str(tmp_path / "afile")] + ep, "afile"),
        ("up --replicas 0", ["up", "--replicas", "0", "--state", st], "replicas"),
        ("up --engine nope", ["up", "--engine", "nope", "--state", st], "engine"),
        ("up --tp 0", ["up", "--tp", "0", "--state", st], "tp"),
        ("up --port-base 80", ["up", "--port-base", "80", "--state", st], "port_base"),
        (
            "up --model missing path",
            ["up", "--model", str(tmp_path / "no-model"), "--gpus", "none", "--state", st],
            "no-model",
        ),
        ("status without a fleet", ["status", "--state", st], "st"),
    ]


def test_bad_configs_and_flags_each_name_the_place_and_what_to_do(tmp_path, standin_url, capsys, recorder):
    rows = []
    for label, args, place in _config_cases(tmp_path, standin_url):
        code, text = _run_cli(args, capsys)
        rows.append(
            {
                "case": label,
                "args": " ".join(a.replace(str(tmp_path), "$T") for a in args),
                "exit": code,
                "text": text.replace(str(tmp_path), "$T"),
            }
        )
        assert code not in (0, None), f"{label}: accepted\n{text}"
        assert "Traceback" not in text, f"{label}: traceback\n{text}"
        assert place in text, f"{label}: does not name {place!r}\n{text}"
        assert "hint:" in text or "Try 'fleetgen" in text, f"{label}: says nothing about what to do\n{text}"
    # A resume with other sampling parameters is refused, naming what changed.
    g = [
        "generate",
        str(tmp_path / "p.jsonl"),
        "-o",
        str(tmp_path / "o2"),
        "--endpoint",
        standin_url,
        "--max-tokens",
        "4",
    ]
    assert _run_cli(g, capsys)[0] in (0, None)
    code, text = _run_cli(g + ["--temperature", "0.1"], capsys)
    rows.append(
        {
            "case": "resume with other sampling",
            "args": "generate ... --temperature 0.1 (after 0.7)",
            "exit": code,
            "text": text.replace(str(tmp_path), "$T"),
        }
    )
    assert code == 2 and "sampling.temperature was 0.7, now 0.1" in text and "--force" in text
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "corpus_configs.json").write_text(json.dumps(rows, indent=1))
    assert len(rows) >= 20
