"""Check a generate output's token ids against the server that made them.

Usage: python3 bench/gpu/check_rows.py OUTDIR [--endpoint URL --greedy N --max-tokens M]
Prints: rows, turns with/without ids, rows whose completion id count differs from usage.completion_tokens,
the first job request's latency (the earliest-started row) and the latency spread; with --greedy N, re-sends
N rows' recorded prompt ids to /generate greedily and counts rows whose sampled ids equal the recorded ones.
"""

from __future__ import annotations

import argparse
import glob
import json
import urllib.request

from fleetgen.rows.token_ids import recorded_turns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--endpoint")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    rows = [json.loads(line) for f in sorted(glob.glob(a.out + "/results*.jsonl")) for line in open(f) if line.strip()]
    errors = [json.loads(line) for f in sorted(glob.glob(a.out + "/errors*.jsonl")) for line in open(f) if line.strip()]
    with_ids = without = count_bad = 0
    for r in rows:
        turns = recorded_turns(r) or []
        with_ids += sum(t is not None for t in turns)
        without += sum(t is None for t in turns) + (0 if turns else len(r.get("finish_reason") or [1]))
        if turns and all(t is not None for t in turns):
            if sum(len(t.completion) for t in turns) != r["usage"]["completion_tokens"]:
                count_bad += 1
    lat = sorted(r["timing"]["latency_s"] for r in rows)
    first = min(rows, key=lambda r: r["timing"]["started_at"]) if rows else None
    print(
        json.dumps(
            {
                "rows": len(rows),
                "errors": len(errors),
                "turns_with_ids": with_ids,
                "turns_without_ids": without,
                "rows_ids_count_differs_from_usage": count_bad,
                "first_request_latency_s": first["timing"]["latency_s"] if first else None,
                "latency_p50_s": lat[len(lat) // 2] if lat else None,
                "latency_max_s": lat[-1] if lat else None,
                "finish_reasons": sorted({str(x) for r in rows for x in r.get("finish_reason") or []}),
            }
        )
    )
    if a.greedy and a.endpoint:
        same = checked = 0
        for r in rows[: a.greedy]:
            turns = recorded_turns(r)
            if not turns or turns[0] is None:
                continue
            t = turns[0]
            body = {"input_ids": t.prompt, "sampling_params": {"max_new_tokens": a.max_tokens, "temperature": 0}}
            req = urllib.request.Request(
                a.endpoint + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=120) as resp:
                answer = json.loads(resp.read())
            checked += 1
            same += answer["output_ids"] == t.completion
        print(json.dumps({"greedy_rows_checked": checked, "greedy_rows_ids_equal_generate": same}))


if __name__ == "__main__":
    main()
