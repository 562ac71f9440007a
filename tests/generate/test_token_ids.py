"""Token ids: read from every engine's spelling, packed losslessly, and marked where a server gives none."""

from __future__ import annotations

import pytest
from helpers import read_jsonl, write_prompts
from standin_server import StandinServer

from fleetgen.generate import GenerateConfig, generate
from fleetgen.generate.dispatch.answer_ids import REQUEST_FIELDS, read_ids
from fleetgen.rows.token_ids import TurnIds, TurnIdsLog, pack, recorded_turns, unpack


def test_pack_round_trips_ids_and_falls_back_to_a_list_for_ids_past_24_bits():
    ids = [0, 1, 2, 255, 256, 65535, 65536, 151668, (1 << 24) - 1]
    packed = pack(ids)
    assert isinstance(packed, str) and len(packed) == 4 * len(ids)
    assert unpack(packed) == ids
    assert pack([1, 1 << 24]) == [1, 1 << 24] and unpack([1, 1 << 24]) == [1, 1 << 24]
    assert pack([]) == "" and unpack("") == []


def test_read_ids_reads_vllm_and_both_sglang_spellings():
    usage = {"completion_tokens": 2}
    vllm = {"prompt_token_ids": [1, 2, 3], "usage": usage, "choices": [{"token_ids": [7, 8]}]}
    sglang_old = {"usage": usage, "choices": [{"prompt_token_ids": [1, 2, 3], "token_ids": [7, 8]}]}
    sglang_new = {"usage": usage, "choices": [{"prompt_token_ids": [1, 2, 3], "response_token_ids": [7, 8]}]}
    for payload in (vllm, sglang_old, sglang_new):
        assert read_ids(payload, payload["choices"][0]) == TurnIds([1, 2, 3], [7, 8])
    none = {"usage": usage, "choices": [{"message": {}}]}
    assert read_ids(none, none["choices"][0]) == "none"
    # Ids the server's own count contradicts are not trusted, and say so apart from "none returned".
    bad = {"prompt_token_ids": [1], "usage": {"completion_tokens": 3}, "choices": [{"token_ids": [7, 8]}]}
    assert read_ids(bad, bad["choices"][0]) == "mismatch"
    assert REQUEST_FIELDS == {"return_token_ids": True, "return_prompt_token_ids": True}


def test_a_multi_turn_record_stores_the_shared_history_once_and_reads_back_exactly():
    log = TurnIdsLog()
    t0 = TurnIds([1, 2, 3], [10, 11, 2])
    t1 = TurnIds([1, 2, 3, 10, 11, 2, 198, 5, 6], [20, 2])  # history re-sent: reused
    t2 = TurnIds([1, 2, 3, 10, 99, 2, 198, 5, 6, 20, 2, 7], [30, 2])  # template re-rendered a turn: partly reused
    for t in (t0, None, t1, t2):
        log.add(t)
    rec = {"token_ids": log.record()}
    turns = rec["token_ids"]["turns"]
    assert turns[1] is None and turns[2]["reuse"] == 0  # after a turn without ids nothing is reused
    assert turns[3]["reuse"] == 4
    assert recorded_turns(rec) == [t0, None, t1, t2]
    assert log.with_ids == 3 and log.without_ids == 1
    assert recorded_turns({"messages": []}) is None


@pytest.fixture
def standin(tmp_path):
    server = StandinServer()
    url = server.start()
    yield url
    server.stop()


def test_a_server_that_returns_no_ids_still_works_and_every_turn_is_counted_as_without(tmp_path, standin):
    """STAND-IN server (answers text only, like SGLang 0.5.12's chat endpoint)."""
    write_prompts(tmp_path / "p.jsonl", 6)
    cfg = GenerateConfig(
        prompts=tmp_path / "p.jsonl",
        output_dir=tmp_path / "out",
        endpoints=[standin],
        max_tokens=8,
        hedge=False,
        commit_interval_s=0.0,
    )
    stats = generate(cfg, handle_signals=False)
    assert stats.ok == 6 and stats.turns_without_ids == 6 and stats.turns_with_ids == 0
    rows = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert all(r["token_ids"]["turns"] == [None] and r["token_ids"]["why"] == ["none"] for r in rows)
    import json

    assert json.loads((tmp_path / "out" / "stats.json").read_text())["token_ids"] == {
        "turns_with": 0,
        "turns_without": 6,
        "without_by_reason": {"none": 6, "mismatch": 0, "refused": 0},
    }
    from fleetgen.report import build_report

    md = build_report(tmp_path / "out", tokenizer="smollm2").read_text()
    assert "| turns without (the tokens export re-tokenizes their rows) | 6 |" in md
    from fleetgen.export import ExportConfig, export

    s = export(
        ExportConfig(
            results_dir=tmp_path / "out",
            output=tmp_path / "t.parquet",
            format="tokens",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
        )
    )
    assert s.rows_written == 6 and s.from_ids == 0 and s.retokenized == {"none returned": 6}


def test_no_token_ids_sends_no_id_fields_and_records_none(tmp_path):
    """STAND-IN server that refuses unknown fields, as api.openai.com does: --no-token-ids keeps it working."""
    from aiohttp import web

    class Strict(StandinServer):
        async def _chat(self, request: web.Request) -> web.Response:
            body = await request.json()
            if set(REQUEST_FIELDS) & set(body):
                return web.json_response({"error": {"message": "Unrecognized request argument"}}, status=400)
            return await super()._chat(request)  # aiohttp keeps the body: it reads it again

    server = Strict()
    url = server.start()
    try:
        write_prompts(tmp_path / "p.jsonl", 3)
        base = dict(prompts=tmp_path / "p.jsonl", endpoints=[url], max_tokens=8, hedge=False, commit_interval_s=0.0)
        refused = generate(GenerateConfig(output_dir=tmp_path / "a", **base), handle_signals=False)
        plain = generate(GenerateConfig(output_dir=tmp_path / "b", token_ids=False, **base), handle_signals=False)
    finally:
        server.stop()
    assert refused.ok == 0 and refused.errors == 3  # the refusal is the row's error, not a crash
    assert plain.ok == 3 and plain.turns_without_ids == 0
    assert all("token_ids" not in r for r in read_jsonl(tmp_path / "b" / "results.jsonl"))
