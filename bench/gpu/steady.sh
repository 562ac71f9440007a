#!/usr/bin/env bash
# Device-side driver of issue 46's "steady state" runs (BENCHMARKS.md): a job longer than the engine's KV pool,
# no flush between its requests, on SGLang 0.5.12 with and without the radix cache. From the repository root:
#   bash bench/gpu/steady.sh STEP [STEP...]
# Staging and the first start are bench/gpu/speed.sh's s1, s2 and up1. Steps (output under $OUT):
#   restart   fleetgen down, then up 1 replica of $M at --mem-fraction-static $MEM: fleetgen's flags $UPFLAGS (--prefix-cache:
#             SGLang's default server, radix cache on), engine flags $EXTRA; the server's command line in $OUT/up-$LABEL.log
#   short     128-token answers to one-line prompts, 4 samples each; the job's tokens >= $X x the KV pool
#   long      1,024-token answers to ~2K-token multi-turn prompts, 3 samples each; the job's tokens >= $X x the pool
#             Each shape runs $ARMS: F = fleetgen on a fresh cache ($FRESH_S seconds' worth of the job, flushed first),
#             J = fleetgen over the whole job (flushed once at its start, never after), P = the plain client over the
#             whole job (flushed at its start; stopped after $PLAIN_DEADLINE s, its rate then an upper bound)
#   ceiling   SGLang's offline Engine on the short shape's first $N_CEIL prompts (no HTTP): the engine's own ceiling
#   down      fleetgen down
# Every arm is one JSON line in $OUT/arms.jsonl with the server's label ($LABEL), the shape and the pool.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$PWD
export PYTHONPATH=$REPO/src:/tmp/site PATH=/tmp/bin:/tmp/site/bin:/usr/local/cuda-13.0/bin:$PATH CUDA_HOME=/usr/local/cuda-13.0
export PYTHONUNBUFFERED=1 COLUMNS=160
M=${M:-/tmp/model}; ST=${ST:-/tmp/fleet}; EP=${EP:-http://127.0.0.1:30000}; MEM=${MEM:-0.6}; X=${X:-3}
LABEL=${LABEL:-default}; FRESH_S=${FRESH_S:-30}; PLAIN_DEADLINE=${PLAIN_DEADLINE:-240}
T0=$(date +%s)
log() { echo "[$(date +%T) t+$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/steady.log"; }
flush() { curl -s -m 30 -X POST $EP/flush_cache > /dev/null || true; sleep 1; }
pool() { curl -s -m 10 $EP/get_server_info | python3 -c "import json,sys; print(json.load(sys.stdin)['max_total_num_tokens'])"; }

prompts() {  # shape pool -> /tmp/steady-SHAPE.jsonl (the whole job) and /tmp/steady-SHAPE-fresh.jsonl
  python3 - "$1" "$2" "$X" "$FRESH_S" <<'P'
import json, random, sys
shape, pool, x, fresh_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
T = ["the sea", "a robot", "autumn", "a city at night", "bread", "a violin", "mountains", "a cat", "rain", "trains"]
rng = random.Random(0)
words = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "number group problem fact river engine garden signal market theory window forest letter energy").split()
def text(n):  # ~n words of filler, different per call: no prefix is shared across prompts
    return " ".join(rng.choice(words) for _ in range(n))
rows = []
if shape == "short":  # ~30 prompt tokens + 128 answer tokens, 4 samples
    per_req, samples, rate = 30 + 128, 4, 40000 / 128
    n = int(x * pool / (per_req * samples)) + 1
    for i in range(n):
        rows.append({"id": f"s{i}", "messages": [{"role": "user", "content": f"Describe {T[i % 10]} in detail, number {i}."}]})
else:  # ~2K-token multi-turn prompts, 1,024-token answers, 3 samples
    per_req, samples, rate = 2100 + 1024, 3, 20000 / 1024
    n = int(x * pool / (per_req * samples)) + 1
    for i in range(n):
        rows.append({"id": f"l{i}", "messages": [
            {"role": "system", "content": "You are a careful assistant. Answer at length."},
            {"role": "user", "content": f"Case {i}: " + text(700)},
            {"role": "assistant", "content": text(630)},
            {"role": "user", "content": text(630) + f" Now write a long essay about {T[i % 10]}."}]})
with open(f"/tmp/steady-{shape}.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
fresh = max(64, int(fresh_s * rate / samples))  # about fresh_s seconds of the job at a fresh server's rate
with open(f"/tmp/steady-{shape}-fresh.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows[-fresh:])
print(n, fresh, samples)
P
}

record() {  # arm shape wall rc outdir|plainjson
  python3 - "$@" "$LABEL" "$POOL" <<'P' | tee -a "$OUT/steady.log" "$OUT/arms.jsonl"
import glob, json, os, sys
arm, shape, wall, rc, src, label, pool = sys.argv[1:8]
wall = float(wall)
if os.path.isdir(src):
    rows = [json.loads(l) for f in glob.glob(src + "/results*.jsonl") for l in open(f) if l.strip()]
    tk = sum(r["usage"]["completion_tokens"] for r in rows)
    pt = sum(r["usage"]["prompt_tokens"] for r in rows)
    try:
        reps = json.load(open(src + "/stats.json")).get("replicas", [])
    except Exception:
        reps = []
    ev = [r.get("engine_eviction_s") for r in reps]
    out = {"rows": len(rows), "tokens": tk, "prompt_tokens": pt, "eviction_s": ev}
else:
    d = json.load(open(src))
    tk = d["tokens"]
    out = {"rows": d["ok"], "errors": d.get("errors"), "tokens": tk, "stopped_early": d.get("stopped_early")}
print(json.dumps({"server": label, "shape": shape, "arm": arm, "pool": int(pool), "rc": int(rc), "wall_s": wall,
                  "tok_s": round(tk / wall, 1), **out}))
P
}

fg() {  # arm shape prompts samples max_tokens
  local arm=$1 shape=$2 p=$3 s=$4 mt=$5 d=/tmp/g-$LABEL-$1-$2; rm -rf $d
  local t=$(date +%s.%N)
  timeout -s TERM ${ARM_LIMIT:-420} fleetgen generate $p -o $d --endpoint $EP --samples $s --max-tokens $mt \
    --temperature 0.8 --top-p 0.9 --reasoning off > $OUT/gen-$LABEL-$arm-$shape.log 2>&1
  local rc=$? w=$(python3 -c "import time; print(round(time.time()-$t,2))")
  record "fleetgen $arm" $shape $w $rc $d
  grep -iE "evict|stalled|frozen|error" $OUT/gen-$LABEL-$arm-$shape.log | head -3 | cut -c1-220 | tee -a "$OUT/steady.log"
}

plain() {  # shape prompts samples max_tokens
  local t=$(date +%s.%N) j=$OUT/plain-$LABEL-$1.json
  python3 bench/plain_client.py --endpoint $EP --model ${MODEL_NAME:-model} --prompts $2 --samples $3 --concurrency 256 \
    --max-tokens $4 --reasoning-off --deadline $PLAIN_DEADLINE > $j 2> $OUT/plain-$LABEL-$1.err
  local rc=$? w=$(python3 -c "import time; print(round(time.time()-$t,2))")
  record "plain c=256" $1 $w $rc $j
}

shape_run() {  # shape samples max_tokens
  local shape=$1 s=$2 mt=$3; POOL=$(pool); read n fresh _ <<< "$(prompts $shape $POOL)"
  log "$LABEL $shape: pool $POOL tokens, job $n prompts x $s (fresh arm $fresh prompts)"
  for a in ${ARMS:-F J}; do flush; case $a in
    F) fg fresh $shape /tmp/steady-$shape-fresh.jsonl $s $mt ;;
    J) fg job $shape /tmp/steady-$shape.jsonl $s $mt ;;
    P) plain $shape /tmp/steady-$shape.jsonl $s $mt ;;
  esac; done
}

for step in "$@"; do log "BEGIN $step ($LABEL)"; case $step in
restart) fleetgen down --state $ST > /dev/null 2>&1
    timeout ${UP_TIMEOUT:-450} fleetgen up --engine sglang --gpus all --replicas 1 --model $M --state $ST ${UPFLAGS:-} -- \
      --attention-backend flashinfer --grammar-backend none --mem-fraction-static $MEM --reasoning-parser qwen3 \
      --tool-call-parser qwen25 --context-length 8192 ${EXTRA:-} > $OUT/up-$LABEL.log 2>&1
    log "up rc=$? pool=$(pool) radix cache disabled: $(curl -s -m 10 $EP/get_server_info | python3 -c "import json,sys; print(json.load(sys.stdin)['disable_radix_cache'])")"; tail -3 $OUT/up-$LABEL.log | cut -c1-200 | tee -a "$OUT/steady.log"
    curl -s -m 300 $EP/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"model":"model","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0.8,"top_p":0.9}' > /dev/null ;;
short) shape_run short 4 128 ;;
long) shape_run long 3 1024 ;;
ceiling) POOL=$(pool); read n fresh _ <<< "$(prompts short $POOL)"
    timeout 400 python3 bench/gpu/engine_ceiling.py $M /tmp/steady-short.jsonl ${N_CEIL:-2400} $MEM > $OUT/ceiling.log 2>&1
    log "ceiling rc=$?"; grep '"arm"' $OUT/ceiling.log | tee -a "$OUT/steady.log" "$OUT/arms.jsonl"; tail -2 $OUT/ceiling.log | cut -c1-200 ;;
down) fleetgen down --state $ST 2>&1 | tail -1 ;;
*) log "unknown step $step" ;;
esac; log "END $step"; done
