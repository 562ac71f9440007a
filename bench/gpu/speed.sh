#!/usr/bin/env bash
# Device-side driver of issue 41's runs ("full speed", BENCHMARKS.md). From the repository root on the GPU machine:
#   bash bench/gpu/speed.sh STEP [STEP...]
# Steps (output under $OUT; /tmp survives between calls of one warm machine):
#   s1       stage chunk 1 of SGLang 0.5.12 (carry .stage/sglang-0.5.12/chunk-01-of-02.tar)
#   s2       stage chunk 2 and .stage/misc, install, the random 176M model, prompts (bench/gpu/h200.sh stage install)
#   up1      fleetgen up: 1 replica of /tmp/model ($M), then one top_p<1 request (flashinfer's sampling JIT)
#   prof     one replica: plain c=256, fleetgen native auto, chat auto, native 128: client stacks and engine CPU
#   race     plain swept over $PLAIN_LEVELS, then A C P P C A: fleetgen native auto, chat auto, plain at its best
#            level of the sweep; then fleetgen native at a fixed 128 (the 12-06 stall); ratios in race.json
#   big      down the small fleet; a random Qwen3 of ~4B ($M4B), up, its sampling JIT (then: M=$M4B ... race)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$PWD
export PYTHONPATH=$REPO/src:/tmp/site PATH=/tmp/bin:/tmp/site/bin:/usr/local/cuda-13.0/bin:$PATH CUDA_HOME=/usr/local/cuda-13.0
export PYTHONUNBUFFERED=1 COLUMNS=160
M=${M:-/tmp/model}; ST=${ST:-/tmp/fleet}; EP=${EP:-http://127.0.0.1:30000}
N=${N:-1800}; SAMPLES=${SAMPLES:-4}; TOK=${TOK:-128}
T0=$(date +%s)
log() { echo "[$(date +%T) t+$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/speed.log"; }

prompts() {  # N prompts of one turn, as the 12-06 run's
  python3 - "$N" <<'P'
import json, sys
T = ["the sea", "a robot", "autumn", "a city at night", "bread", "a violin", "mountains", "a cat", "rain", "trains"]
with open("/tmp/speed-prompts.jsonl", "w") as f:
    for i in range(int(sys.argv[1])):
        f.write(json.dumps({"id": f"s{i}", "messages": [{"role": "user", "content": f"Describe {T[i % 10]} in detail, number {i}."}]}) + "\n")
P
}

# SGLang 0.5.12 keeps every finished answer in its radix cache, and once those fill the KV pool each decode
# step's allocation evicts from a heap built of every cached leaf (RadixCache.evict): steps got 5x slower and
# stayed so (BENCHMARKS.md, "full speed"). Each arm starts from an empty cache, so arms compare alike.
flush() { curl -s -m 30 -X POST $EP/flush_cache > /dev/null || true; sleep 1; }

monitor_start() { python3 bench/gpu/procmon.py sglang stack_sampler plain_client fleetgen > "$1" 2>/dev/null & MON=$!; }
monitor_stop() { kill -TERM $MON 2>/dev/null; wait $MON 2>/dev/null; cat "$1" | tee -a "$OUT/speed.log"; }

fg_arm() {  # name timeout extra-flags...: fleetgen generate over $EP, whole-process wall
  local name=$1 lim=$2; shift 2; local d=$OUT/$name; mkdir -p $d; rm -rf /tmp/g-$name
  flush; monitor_start $d/cpu.json
  local t=$(date +%s.%N)
  timeout -s TERM $lim python3 bench/gpu/stack_sampler.py $d/stacks.txt generate /tmp/speed-prompts.jsonl -o /tmp/g-$name \
    --endpoint $EP --samples $SAMPLES --max-tokens $TOK --temperature 0.8 --top-p 0.9 --reasoning off "$@" > $d/gen.log 2>&1
  local rc=$?
  local w=$(python3 -c "import time; print(round(time.time()-$t,2))")
  monitor_stop $d/cpu.json
  python3 - "$name" "$rc" "$w" /tmp/g-$name <<'P' | tee -a "$OUT/speed.log" "$OUT/arms.jsonl"
import glob, json, sys
name, rc, wall, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for f in glob.glob(out + "/results*.jsonl") for l in open(f) if l.strip()]
tk = sum(r["usage"]["completion_tokens"] for r in rows)
try:
    s = json.load(open(out + "/stats.json"))
except Exception:
    s = {}
print(json.dumps({"arm": name, "rc": rc, "rows": len(rows), "tokens": tk, "wall_s": wall, "tok_s": round(tk / wall, 1),
                  "run_wall_s": s.get("wall_s"), "replicas": [{k: r.get(k) for k in ("window", "window_range", "requests", "ok", "failures", "hedges")} for r in s.get("replicas", [])][:8]}))
P
  grep -E "path|note|stopping|warm|compil" $d/gen.log | cut -c1-200 | head -8 | tee -a "$OUT/speed.log"
  head -30 $d/stacks.txt > $d/stacks-head.txt
}

plain_arm() {  # concurrency: the plain client, whole-process wall
  local c=$1; local d=$OUT/plain-$c; mkdir -p $d
  flush; monitor_start $d/cpu.json
  local t=$(date +%s.%N)
  python3 bench/plain_client.py --endpoint $EP --model ${MODEL_NAME:-model} --prompts /tmp/speed-prompts.jsonl --samples $SAMPLES \
     --concurrency $c --max-tokens $TOK --reasoning-off > $d/plain.json 2> $d/plain.err
  local w=$(python3 -c "import time; print(round(time.time()-$t,2))")
  monitor_stop $d/cpu.json
  python3 -c "import json,sys; d=json.load(open('$d/plain.json')); d.update(wall_s=$w, tok_s=round(d['tokens']/$w,1)); print(json.dumps(d))" | tee -a "$OUT/speed.log" "$OUT/arms.jsonl"
}

for step in "$@"; do log "BEGIN $step"; case $step in
s1) mkdir -p .stage/sglang-0.5.12; bash bench/gpu/h200.sh stage; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/speed.log" ;;
s2) OUT=$OUT/h200 bash bench/gpu/h200.sh stage install; tail -3 $OUT/h200/main.log | tee -a "$OUT/speed.log" ;;
up1) mkdir -p $OUT/up1
    timeout ${UP_TIMEOUT:-450} fleetgen up --engine sglang --gpus all --replicas 1 --model $M --state $ST -- \
      --attention-backend flashinfer --grammar-backend none --mem-fraction-static ${MEM:-0.6} --reasoning-parser qwen3 --tool-call-parser qwen25 \
      > $OUT/up1/up.log 2>&1; log "up rc=$?"; tail -6 $OUT/up1/up.log | cut -c1-200 | tee -a "$OUT/speed.log"
    t=$(date +%s); curl -s -m 400 $EP/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"model":"model","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0.8,"top_p":0.9}' | cut -c1-200
    log "top_p JIT request took $(( $(date +%s) - t ))s" ;;
prof) prompts
    plain_arm 256
    fg_arm native_auto 200
    fg_arm chat_auto 200 --no-token-ids
    ( for i in $(seq 1 24); do sleep 5; echo "t=$((i*5)) loads=$(curl -s -m 3 $EP/v1/loads | cut -c1-300) conns=$(ss -tn state established "( dport = :30000 )" | wc -l)"; done ) > $OUT/native128-watch.txt 2>&1 &
    W=$!
    fg_arm native_128 110 --concurrency 128
    kill $W 2>/dev/null; tail -12 $OUT/native128-watch.txt | tee -a "$OUT/speed.log"
    cp /tmp/g-native_128/stats.json $OUT/native_128/ 2>/dev/null ;;
race) prompts; : > $OUT/arms.jsonl
    for c in ${PLAIN_LEVELS:-256 512 1024}; do plain_arm $c; done
    PLAIN_C=$(python3 -c "
import json; a=[json.loads(l) for l in open('$OUT/arms.jsonl') if l.strip()]
print(max(a, key=lambda x: x['tok_s'])['arm'].split('=')[1])")
    log "plain's best level: $PLAIN_C"
    for arm in ${ARMS:-A C P P C A}; do case $arm in
      A) fg_arm native_auto_$RANDOM ${ARM_LIMIT:-200} ${FG_ARGS:-} ;;
      C) fg_arm chat_auto_$RANDOM ${ARM_LIMIT:-200} --no-token-ids ${FG_ARGS:-} ;;
      P) plain_arm $PLAIN_C ;;
    esac; done
    [ -n "${FIXED-128}" ] && fg_arm native_fixed_${FIXED-128} ${FIXED_LIMIT:-120} --concurrency ${FIXED-128}
    python3 - $OUT/arms.jsonl "$PLAIN_C" <<'P' | tee -a "$OUT/speed.log" > $OUT/race.json
import json, statistics, sys
arms = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = sys.argv[2]
plain = [a["tok_s"] for a in arms if a["arm"] == f"plain c={best}"]
out = {"plain_best_level": int(best), "plain_tok_s": plain, "arms": arms}
for name in ("native_auto", "chat_auto", "native_fixed"):
    vals = [a["tok_s"] for a in arms if a["arm"].startswith(name)]
    if vals:
        out[name] = {"tok_s": vals, "vs_plain_best": round(statistics.mean(vals) / statistics.mean(plain), 3)}
print(json.dumps({k: v for k, v in out.items() if k != "arms"}))
P
    ;;
big) fleetgen down --state $ST 2>&1 | tail -1
    [ -f ${M4B:-/tmp/model4b}/config.json ] || python3 bench/gpu/make_model.py --tokenizer /tmp/stage-misc/tok --out ${M4B:-/tmp/model4b} \
        --template qwen3-thinking --layers 36 --hidden 2560 --heads 32 --kv-heads 8 --intermediate 9728 > $OUT/make4b.log 2>&1
    log "4B model rc=$? $(du -sh ${M4B:-/tmp/model4b} | cut -f1)"; tail -2 $OUT/make4b.log | tee -a "$OUT/speed.log"
    OUT=$OUT/up4b M=${M4B:-/tmp/model4b} MEM=${MEM:-0.85} bash bench/gpu/speed.sh up1 ;;
*) log "unknown step $step" ;;
esac; log "END $step"; done
(cd "$OUT" && tar czf /tmp/speed.tgz --exclude=speed.log --exclude=arms.jsonl . && find . -mindepth 1 -not -name speed.log -not -name arms.jsonl -delete && mv /tmp/speed.tgz ./speed.tgz)
