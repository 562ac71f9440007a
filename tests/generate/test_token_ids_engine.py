"""Token ids on real vLLM-CPU replicas (the session's `cpu_fleet`): recorded as returned, exported as sampled.

A pass-through RECORDER sits in front of one real replica: it forwards each request unchanged and
keeps the answer it got back, so the test knows exactly which ids the server returned.
"""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import orjson
import pyarrow.parquet as pq
import pytest
from aiohttp import web
from helpers import read_jsonl

from fleetgen.export import ExportConfig, export, load_tokenizer
from fleetgen.fleet import FleetState
from fleetgen.generate import GenerateConfig, generate
from fleetgen.rows.token_ids import TurnIds, TurnIdsLog, recorded_turns

pytestmark = pytest.mark.engine


class Recorder:
    """Forwards /v1/* to `upstream` as is; keeps (request messages -> answers) of every chat completion."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.answers: dict[bytes, list[dict]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _forward(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with aiohttp.ClientSession() as s:
            async with s.request(
                request.method,
                self.upstream + request.path,
                data=body or None,
                headers={"Content-Type": "application/json"},
            ) as r:
                raw, status = await r.read(), r.status
        if request.path == "/v1/chat/completions" and status == 200:
            self.answers.setdefault(orjson.dumps(orjson.loads(body)["messages"]), []).append(orjson.loads(raw))
        return web.Response(body=raw, status=status, content_type="application/json")

    def start(self) -> str:
        ready, box = threading.Event(), {}

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._forward)
            runner = web.AppRunner(app)
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            box["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(runner.cleanup())

        threading.Thread(target=serve, daemon=True).start()
        assert ready.wait(10)
        return f"http://127.0.0.1:{box['port']}"

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture(scope="module")
def id_run(cpu_fleet: FleetState, tmp_path_factory):
    d = tmp_path_factory.mktemp("ids")
    rows = [
        {"id": f"s{i}", "messages": [{"role": "user", "content": f"Describe a {w} in one sentence."}]}
        for i, w in enumerate(["pianist", "volcano", "lighthouse", "glacier", "violin", "octopus", "castle", "comet"])
    ]
    rows += [
        {
            "id": f"m{i}",
            "messages": [
                {"role": "user", "content": f"Name a city. ({i})"},
                {"role": "assistant", "content": "old"},
                {"role": "user", "content": "Why is it famous?"},
                {"role": "assistant", "content": "old"},
            ],
        }
        for i in range(4)
    ]
    (d / "p.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    rec = Recorder(cpu_fleet.endpoints[0])
    url = rec.start()
    try:
        stats = generate(
            GenerateConfig(
                prompts=d / "p.jsonl",
                output_dir=d / "out",
                endpoints=[url],
                model=cpu_fleet.served_model_name,
                max_tokens=32,
                temperature=1.0,
                hedge=False,
                commit_interval_s=0.0,
            ),
            handle_signals=False,
        )
    finally:
        rec.stop()
    return d, stats, rec, read_jsonl(d / "out" / "results.jsonl")


def _turns_with_history(r: dict):
    """(messages the server was sent, the regenerated assistant message) per regenerated turn."""
    for i, m in enumerate(r["messages"]):
        if m["role"] == "assistant":
            yield [{k: v for k, v in x.items() if k != "reasoning_content"} for x in r["messages"][:i]], m


def _spelled_bytes(tok, ids: list[int]) -> bytes:
    """The bytes a byte-level BPE tokenizer's ids spell (special tokens skipped), a cut character's bytes kept."""
    # GPT-2's byte-to-character map (byte-level BPE): printable bytes stand for themselves, the rest from U+0100 on.
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    hidden = [b for b in range(256) if b not in shown]
    byte_of = {chr(b): b for b in shown} | {chr(256 + n): b for n, b in enumerate(hidden)}
    special = set(tok.all_special_ids)
    pieces = tok.convert_ids_to_tokens([i for i in ids if i not in special])
    return bytes(byte_of[c] for piece in pieces for c in piece)


def _whole_characters(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _ends_inside_a_character(b: bytes) -> bool:
    """Whole characters, then the first 1-3 bytes of one UTF-8 multi-byte character whose rest is missing."""
    for n in (1, 2, 3):
        tail, lead = b[-n:], b[-n:][:1]
        width = (
            2
            if b"\xc0" <= lead < b"\xe0"
            else 3
            if b"\xe0" <= lead < b"\xf0"
            else 4
            if b"\xf0" <= lead < b"\xf8"
            else 0
        )
        if len(b) >= n and n < width and all(0x80 <= c < 0xC0 for c in tail[1:]) and _whole_characters(b[:-n]):
            return True
    return False


def _ids_spell_the_text(tok, ids: list[int], text: str, finish_reason: str) -> bool:
    """The sampled ids decode to the text the server returned, exactly, with one allowance.

    An answer cut by max_tokens inside a multi-byte character: vLLM's detokenizer (tokenizers' DecodeStream)
    holds back each token whose bytes end inside a character until a later one completes it, and at the cut
    none does. Its text then ends at the last token where the ids spelled whole characters; the ids go on to
    the cut character's first bytes.
    """
    if tok.decode(ids, skip_special_tokens=True) == text:
        return True
    spelled = _spelled_bytes(tok, ids)
    if finish_reason != "length" or not _ends_inside_a_character(spelled):
        return False
    last_whole = max(k for k in range(len(ids) + 1) if _whole_characters(_spelled_bytes(tok, ids[:k])))
    return _spelled_bytes(tok, ids[:last_whole]) == text.encode()


def _server_text(tok, ids: list[int]) -> str:
    """What vLLM's detokenizer returns for these ids: tokenizers' DecodeStream, one step a token, as it runs it."""
    from tokenizers.decoders import DecodeStream

    stream = DecodeStream(skip_special_tokens=True)
    return "".join(stream.step(tok.backend_tokenizer, i) or "" for i in ids)


def test_a_cut_character_is_allowed_only_at_the_end_of_a_truncated_answer():
    tok = load_tokenizer("smollm2")
    ids = tok("Café 日本語 😀 ok", add_special_tokens=False)["input_ids"]
    cut = next(k for k in range(1, len(ids)) if tok.decode(ids[:k]).endswith("\ufffd"))  # inside 日
    text = _server_text(tok, ids[:cut])
    assert text == "Café"  # the token " 日"'s first byte is held back whole, its space with it
    assert _ids_spell_the_text(tok, ids[:cut], text, "length")
    assert not _ids_spell_the_text(tok, ids[:cut], text, "stop")  # only an answer cut by max_tokens
    assert not _ids_spell_the_text(tok, ids[:cut], text[:-1], "length")  # no more is missing than that token
    assert not _ids_spell_the_text(tok, ids[:cut], text + " ", "length")
    for k in range(1, len(ids) + 1):  # every cut of the sentence: what the server says is what is allowed
        finish = "length" if _ends_inside_a_character(_spelled_bytes(tok, ids[:k])) else "stop"
        assert _ids_spell_the_text(tok, ids[:k], _server_text(tok, ids[:k]), finish), k
    assert _ids_spell_the_text(tok, ids, "Café 日本語 😀 ok", "stop")
    assert not _ids_spell_the_text(tok, ids, "Café 日本語 😀 ok ", "length")


def test_recorded_ids_are_exactly_what_the_server_returned_and_decode_to_the_text(id_run):
    _, stats, rec, results = id_run
    tok = load_tokenizer("smollm2")
    assert stats.ok == 12 and stats.turns_without_ids == 0 and stats.turns_with_ids == 8 + 4 * 2
    assert stats.ids_missing == {} and all("why" not in r["token_ids"] for r in results)  # rows as before `why`
    for r in results:
        turns = recorded_turns(r)
        pairs = list(_turns_with_history(r))
        assert turns is not None and len(turns) == len(pairs) == len(r["finish_reason"])
        for t, (history, message), finish in zip(turns, pairs, r["finish_reason"]):
            # Usually one answer per history; a request retried after a lost reply (a loaded machine) has
            # more, and the row must then hold exactly one of the answers the server gave.
            returned = [
                TurnIds(a["prompt_token_ids"], a["choices"][0]["token_ids"]) for a in rec.answers[orjson.dumps(history)]
            ]
            assert t in returned
            assert _ids_spell_the_text(tok, t.completion, message["content"], finish), (t.completion, message, finish)


def _split_one_token(tok, ids: list[int]) -> list[int] | None:
    """The same text in other tokens: one sampled token replaced by two vocabulary pieces that spell it."""
    vocab = tok.get_vocab()
    for i, piece in enumerate(tok.convert_ids_to_tokens(ids)):
        for cut in range(1, len(piece)):
            a, b = vocab.get(piece[:cut]), vocab.get(piece[cut:])
            if a is not None and b is not None:
                return ids[:i] + [a, b] + ids[i + 1 :]
    return None


def test_tokens_rows_supervise_exactly_the_sampled_ids_never_a_re_encoding(id_run, tmp_path):
    d, _, _, results = id_run
    tok = load_tokenizer("smollm2")
    # One real record whose sampled ids are rewritten to a non-canonical tokenization of the same text:
    # the server could have sampled it, and re-encoding the text would not give it back.
    single = next(r for r in results if r["id"].startswith("s") and r["finish_reason"] == ["stop"])
    t = recorded_turns(single)[0]
    other = _split_one_token(tok, t.completion)
    assert other is not None
    assert tok.decode(other, skip_special_tokens=True) == single["messages"][-1]["content"]
    assert tok(single["messages"][-1]["content"], add_special_tokens=False)["input_ids"] != other[:-1]
    log = TurnIdsLog()
    log.add(TurnIds(t.prompt, other))
    edited = {**single, "id": "edited", "token_ids": log.record()}
    src = tmp_path / "run"
    src.mkdir()
    (src / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*results, edited]))

    s = export(
        ExportConfig(
            results_dir=src,
            output=tmp_path / "t.parquet",
            format="tokens",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
        )
    )
    assert s.from_ids == len(results) + 1 and not s.retokenized
    by_record = {r["id"]: r for r in [*results, edited]}
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert rows
    first_turn: dict[str, int] = {}  # a record's next row starts after the turns its earlier rows hold
    for row in rows:
        key = row["id"].split("#")[0]
        turns = recorded_turns(by_record[key])
        last = int(row["id"].rpartition("/turn")[2]) if "/turn" in row["id"] else len(turns) - 1
        assert row["input_ids"] == turns[last].prompt + turns[last].completion  # context: what the server was fed
        supervised = [i for i, m in zip(row["input_ids"], row["loss_mask"]) if m]
        start = first_turn.get(key, 0)
        assert supervised == [i for tt in turns[start : last + 1] for i in tt.completion]  # exactly the sampled ids
        first_turn[key] = last + 1
    assert all(first_turn[r["id"]] == len(recorded_turns(r)) for r in by_record.values())  # every turn supervised once
    assert {(r["ids_from"], r["ids_reason"]) for r in rows} == {("ids", None)}
    edited_row = next(r for r in rows if r["id"].startswith("edited"))
    assert [i for i, m in zip(edited_row["input_ids"], edited_row["loss_mask"]) if m] == other


def test_speculators_rows_are_one_per_generation_of_the_sampled_ids(id_run, tmp_path):
    d, _, _, results = id_run
    tok = load_tokenizer("smollm2")
    s = export(
        ExportConfig(
            results_dir=d / "out",
            output=tmp_path / "s.jsonl",
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
        )
    )
    rows = read_jsonl(tmp_path / "s.jsonl")
    assert s.from_ids == len(results) and len(rows) == sum(len(recorded_turns(r)) for r in results)
    by_record = {f"{r['id']}#{r['sample']}": r for r in results}
    for row in rows:
        rec = by_record[row["primary_id"]]
        k = int(row["id"].rpartition("_gen")[2])
        t = recorded_turns(rec)[k]
        assert row["input_ids"] == t.prompt + t.completion
        assert row["loss_mask"] == [0] * len(t.prompt) + [1] * len(t.completion)
        assert row["text"] == tok.decode(row["input_ids"], skip_special_tokens=False)
        assert row["metadata"]["finish_reason"] == rec["finish_reason"][k]
        assert row["metadata"]["usage"]["completion_tokens"] == len(t.completion)
        assert set(row["metadata"]) >= {"idx", "finish_reason", "is_tool_call", "usage", "endpoint", "sampling_params"}
        assert (row["metadata"]["ids_from"], row["metadata"]["ids_reason"]) == ("ids", None)
    # Strict: every row is the server's ids, so --require-token-ids writes the same file.
    strict = export(
        ExportConfig(
            results_dir=d / "out",
            output=tmp_path / "strict.jsonl",
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
            require_token_ids=True,
        )
    )
    assert strict.rows_written == len(rows) and read_jsonl(tmp_path / "strict.jsonl") == rows


def test_speculators_own_loader_reads_the_export_unchanged(id_run, tmp_path):
    """speculators is not a dependency: scripts/setup.sh installs
    it (pinned, --no-deps); missing, this fails, never skips."""
    from speculators.data_generation import preprocessing as prep

    from fleetgen.models.registry import resolve_model

    d, _, _, _ = id_run
    export(
        ExportConfig(
            results_dir=d / "out",
            output=tmp_path / "s.jsonl",
            format="speculators",
            tokenizer="smollm2",
            finish_reasons=["stop", "length"],
        )
    )
    ours = read_jsonl(tmp_path / "s.jsonl")
    ds, _ = prep.load_and_preprocess_dataset(
        str(resolve_model("smollm2", prepare=False)),
        [str(tmp_path / "s.jsonl")],
        seq_length=4096,
        build_dataset_num_proc=1,
        skip_token_freq=True,
    )
    theirs = sorted((list(map(int, r["input_ids"])), list(map(int, r["loss_mask"]))) for r in ds)
    assert theirs == sorted((r["input_ids"], r["loss_mask"]) for r in ours)


def test_reasoning_drop_takes_the_named_text_path_only_where_there_is_reasoning(id_run, tmp_path):
    d, _, _, results = id_run
    # SmolLM2 does not reason: dropping reasoning removes nothing, the rows stay the sampled ids.
    s = export(
        ExportConfig(
            results_dir=d / "out",
            output=tmp_path / "a.parquet",
            format="tokens",
            tokenizer="smollm2",
            reasoning="drop",
            finish_reasons=["stop", "length"],
        )
    )
    assert s.from_ids == len(results) and not s.retokenized
    thinking = {
        **results[0],
        "id": "thinking",
        "messages": [*results[0]["messages"][:-1], {**results[0]["messages"][-1], "reasoning_content": "hmm"}],
    }
    src = tmp_path / "run"
    src.mkdir()
    (src / "results.jsonl").write_bytes(orjson.dumps(thinking) + b"\n")
    s = export(
        ExportConfig(
            results_dir=src,
            output=tmp_path / "b.parquet",
            format="tokens",
            tokenizer="smollm2",
            reasoning="drop",
            finish_reasons=["stop", "length"],
        )
    )
    assert s.from_ids == 0 and s.retokenized == {"reasoning dropped (the ids hold the sampled reasoning)": 1}
