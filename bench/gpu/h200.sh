#!/usr/bin/env bash
# Device-side driver of the H200 runs in BENCHMARKS.md. Run from the repository root on the GPU machine:
#   bash bench/gpu/h200.sh STEP [STEP...]
# Steps (each writes $OUT/STEP/ and appends to $OUT/main.log; /tmp survives between calls of one warm machine):
#   stage      copy the chunk(s) carried by this call into /tmp/stage (carry .stage/sglang-X/chunk-*.tar)
#   install    scripts/gpu_stage.py install of /tmp/stage (SGLANG=0.5.12|0.5.17 picks /tmp/site or /tmp/site17),
#              the random Qwen3 with a thinking template (/tmp/model), prompt files
#   up1        fleetgen up: 1 replica, reasoning parser qwen3, tool-call parser qwen25
#   capture    bench/gpu/capture_native.py against replica 0 (fixtures for tests/fleet/sglang)
#   gen        four jobs over the fleet (sampled, greedy, thinking on, tools) + id checks + tokens export
#   bench1     bench/client_vs_plain.py on replica 0: fleetgen vs plain (ABBA), native vs chat path (ACCA)
#   run8       fleetgen run: 8 replicas on the one GPU (warm-first, --mem-fraction-static 0.1 each), 6,000 prompts x 2
#              at top_p 0.9, kill -9 of replica 3 mid-generate, export, report; --keep-fleet; exactly-once check
#   bench8     bench/client_vs_plain.py over the 8 replicas: fleetgen (native) / plain / fleetgen --no-token-ids
#   down       fleetgen down, GPU memory after (ST=/tmp/run8/fleet for the 8-replica fleet)
#   upauto     two 1-replica fleets for bench/auto_concurrency.py: /tmp/fS (short answers: the batch binds) and
#              /tmp/fL on port 40000 (long answers: --max-total-tokens $AUTO_KV tokens of KV cache binds)
#   autoshort  bench/auto_concurrency.py --fleet short=/tmp/fS: auto vs 8..512 in flight, 128-token answers
#   autolong   the same on /tmp/fL, 1024-token answers (AUTO_LEVELS, AUTO_WARM, AUTO_MEASURE, AUTO_ARGS: e.g. --repeats 2)
#   downauto   fleetgen down of both
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SGLANG=${SGLANG:-0.5.12}
SITE=/tmp/site; [ "$SGLANG" = 0.5.17 ] && SITE=/tmp/site17
REPO=$PWD
export PYTHONPATH=$REPO/src:$SITE PATH=/tmp/bin:$SITE/bin:/usr/local/cuda-13.0/bin:$PATH CUDA_HOME=/usr/local/cuda-13.0
export PYTHONUNBUFFERED=1 COLUMNS=160
mkdir -p /tmp/bin
printf '#!/usr/bin/env bash\nexec python3 -c "import sys; from fleetgen.cli.app import main; sys.exit(main())" "$@"\n' > /tmp/bin/fleetgen
chmod +x /tmp/bin/fleetgen
M=/tmp/model; ST=/tmp/fleet; EP=http://127.0.0.1:30000
FLAGS=(--attention-backend flashinfer --grammar-backend none --mem-fraction-static 0.5 --reasoning-parser qwen3 --tool-call-parser qwen25)
T0=$(date +%s)
log() { echo "[$(date +%T) t+$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/main.log"; }
timed() { local t=$(date +%s.%N); "$@"; local rc=$?; log "rc=$rc in $(python3 -c "import time; print(round(time.time()-$t,1))")s: $*"; return $rc; }
gpu() { nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; }

stage() {
  mkdir -p /tmp/stage-$SGLANG
  for f in .stage/sglang-$SGLANG/chunk-*.tar; do [ -f "$f" ] && cp "$f" /tmp/stage-$SGLANG/ && log "staged $f"; done
  [ -d .stage/misc ] && cp -r .stage/misc /tmp/stage-misc
  ls -la /tmp/stage-$SGLANG | tee -a "$OUT/main.log"
}

install() {
  local d=$OUT/install; mkdir -p $d
  [ -x $SITE/bin/python3 ] || [ -d $SITE/sglang ] || timed python3 scripts/gpu_stage.py install --from /tmp/stage-$SGLANG --target $SITE > $d/env.txt 2> $d/install.log || { tail -20 $d/install.log; return 1; }
  python3 -c "import sglang, transformers, flashinfer, torch, fleetgen; print('sglang', sglang.__version__, 'transformers', transformers.__version__, 'flashinfer', flashinfer.__version__, 'torch', torch.__version__, 'fleetgen', fleetgen.__file__)" 2>&1 | tail -2 | tee -a "$OUT/main.log"
  if [ ! -f $M/config.json ]; then
    timed python3 bench/gpu/make_model.py --tokenizer /tmp/stage-misc/tok --out $M --template qwen3-thinking > $d/make_model.log 2>&1 || { tail -20 $d/make_model.log; return 1; }
  fi
  python3 - <<'EOF'
import json
T = ["the sea", "a robot", "autumn", "a city at night", "bread", "a violin", "mountains", "a cat", "rain", "trains"]
with open("/tmp/prompts.jsonl", "w") as f:
    for i in range(500):
        f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Write a short paragraph about {T[i % 10]}. ({i})"}]}) + "\n")
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
with open("/tmp/tools.jsonl", "w") as f:
    for i in range(40):
        city = ["Paris", "Rome", "Oslo", "Lima"][i % 4]
        f.write(json.dumps({"id": f"t{i}", "tools": tools, "messages": [
            {"role": "user", "content": f"What is the weather in {city}? ({i})"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21 C"},
            {"role": "assistant", "content": f"It is sunny in {city}."}]}) + "\n")
EOF
  log "prompts: $(wc -l < /tmp/prompts.jsonl) plain, $(wc -l < /tmp/tools.jsonl) tool rows"
}

up1() {
  local d=$OUT/up1; mkdir -p $d
  timed timeout ${UP_TIMEOUT:-420} fleetgen up --engine sglang --gpus all --replicas 1 --model $M --state $ST -- "${FLAGS[@]}" > $d/up.log 2>&1
  tail -8 $d/up.log | tee -a "$OUT/main.log"
  gpu > $d/gpu.txt 2>&1; cat $d/gpu.txt | tee -a "$OUT/main.log"
  cp $ST/logs/replica-0.log $d/ 2>/dev/null
}

capture() {
  local d=$OUT/capture; mkdir -p $d
  timed timeout 120 python3 bench/gpu/capture_native.py $EP $d/fixtures > $d/capture.log 2>&1
  cat $d/capture.log | cut -c1-220 | tee -a "$OUT/main.log"
}

gen_job() {  # name, prompts, extra flags...
  local name=$1 prompts=$2; shift 2
  local d=$OUT/gen/$name; mkdir -p $d
  rm -rf /tmp/gen-$name
  timed timeout 200 fleetgen generate $prompts -o /tmp/gen-$name --fleet $ST "$@" > $d/generate.log 2>&1
  grep -E "generation path|note:|error" $d/generate.log | head -5 | tee -a "$OUT/main.log"
  cp /tmp/gen-$name/stats.json $d/ 2>/dev/null; head -c 3000 /tmp/gen-$name/errors.jsonl > $d/errors-head.jsonl 2>/dev/null
  head -c 6000 /tmp/gen-$name/results.jsonl > $d/results-head.jsonl 2>/dev/null
}

gen() {
  local d=$OUT/gen; mkdir -p $d
  gen_job sampled /tmp/prompts.jsonl --samples 2 --max-tokens 128 --temperature 0.8 --top-p 0.9 --reasoning off
  python3 bench/gpu/check_rows.py /tmp/gen-sampled | tee -a "$OUT/main.log"
  gen_job greedy /tmp/prompts.jsonl --samples 1 --max-tokens 64 --temperature 0 --reasoning off
  python3 bench/gpu/check_rows.py /tmp/gen-greedy --endpoint $EP --greedy 100 --max-tokens 64 | tee -a "$OUT/main.log"
  head -100 /tmp/prompts.jsonl > /tmp/p100.jsonl
  gen_job thinking /tmp/p100.jsonl --samples 1 --max-tokens 64 --temperature 0.6
  python3 bench/gpu/check_rows.py /tmp/gen-thinking | tee -a "$OUT/main.log"
  gen_job tools /tmp/tools.jsonl --samples 1 --max-tokens 64 --temperature 0.7 --reasoning off
  python3 bench/gpu/check_rows.py /tmp/gen-tools | tee -a "$OUT/main.log"
  timed timeout 120 fleetgen export /tmp/gen-sampled --format tokens --tokenizer $M -o /tmp/tokens.parquet \
      --finish-reason stop --finish-reason length --overwrite > $d/export.log 2>&1
  tail -4 $d/export.log | tee -a "$OUT/main.log"
}

bench1() {
  local d=$OUT/bench1; mkdir -p $d
  local mn; mn=$(curl -s $EP/v1/models | python3 -c "import json,sys; print(json.load(sys.stdin)['data'][0]['id'])")
  timed timeout 280 python3 bench/client_vs_plain.py --endpoint $EP --model "$mn" --prompts 2000 --max-tokens 128 \
      --concurrency 256 --arms ABBA --fleetgen fleetgen --out $d/abba.json > $d/abba.log 2>&1
  tail -6 $d/abba.log | cut -c1-400 | tee -a "$OUT/main.log"
  timed timeout 250 python3 bench/client_vs_plain.py --endpoint $EP --model "$mn" --prompts 2000 --max-tokens 128 \
      --concurrency 256 --arms ACCA --fleetgen fleetgen --out $d/acca.json > $d/acca.log 2>&1
  tail -6 $d/acca.log | cut -c1-400 | tee -a "$OUT/main.log"
}

run8() {
  local d=$OUT/run8; mkdir -p $d
  python3 - <<'EOF2'
import json
T = ["the sea", "a robot", "autumn", "a city at night", "bread", "a violin", "mountains", "a cat", "rain", "trains"]
with open("/tmp/prompts6k.jsonl", "w") as f:
    for i in range(6000):
        f.write(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"Tell me about {T[i % 10]}, part {i}."}]}) + "\n")
EOF2
  cat > /tmp/job8.yaml <<'EOF2'
workdir: /tmp/run8
fleet:
  engine: sglang
  model: /tmp/model
  replicas: 8
  gpus: all
  replicas_per_gpu: 8
  engine_args: [--attention-backend, flashinfer, --grammar-backend, none, --mem-fraction-static, "0.1",
                --reasoning-parser, qwen3, --tool-call-parser, qwen25]
generate:
  prompts: /tmp/prompts6k.jsonl
  samples: 2
  max_tokens: 256
  temperature: 0.8
  top_p: 0.9
  reasoning: "off"
export:
  format: tokens
  tokenizer: /tmp/model
  output: export/tokens.parquet
  finish_reasons: [stop, length]
report:
  html: false
EOF2
  rm -rf /tmp/run8
  (  # kill -9 one replica once the job is a third done
    for _ in $(seq 1 1100); do
      n=$(cat /tmp/run8/generate/results.jsonl 2>/dev/null | wc -l)
      if [ "$n" -ge 4000 ]; then
        pid=$(python3 -c "from pathlib import Path; from fleetgen.fleet.state import read_state; print(read_state(Path('/tmp/run8/fleet')).replicas[3].pid)")
        kill -9 "$pid" && log "killed replica 3 (pid $pid) with $n rows written"; break
      fi
      sleep 0.5
    done ) &
  local killer=$!
  timed timeout ${RUN8_TIMEOUT:-560} fleetgen run /tmp/job8.yaml --keep-fleet > $d/run.log 2>&1
  kill $killer 2>/dev/null
  grep -v -E "^\s*$" $d/run.log | grep -i -E "replica|ready|warm|compil|restart|dead|path|rows|export|error|note|tok/s" | cut -c1-220 | tail -45 | tee -a "$OUT/main.log"
  python3 - <<'EOF2' | tee -a "$OUT/main.log"
import json, glob, collections
keys = collections.Counter()
for f in glob.glob("/tmp/run8/generate/results*.jsonl") + glob.glob("/tmp/run8/generate/errors*.jsonl"):
    for line in open(f):
        if line.strip():
            r = json.loads(line); keys[(r["id"], r["sample"])] += 1
dup = sum(1 for v in keys.values() if v > 1)
print(json.dumps({"distinct_id_sample": len(keys), "expected": 12000, "duplicated": dup, "missing": 12000 - len(keys)}))
EOF2
  python3 bench/gpu/check_rows.py /tmp/run8/generate | tee -a "$OUT/main.log"
  python3 -c "import json; s=json.load(open('/tmp/run8/generate/stats.json')); print(json.dumps({k: s.get(k) for k in ('warmup', 'wall_s', 'tokens', 'rows')})[:1500])" | tee -a "$OUT/main.log"
  fleetgen status --state /tmp/run8/fleet --json > $d/status.json 2>&1
  python3 -c "
import json; s = json.load(open('$d/status.json'))
for r in s.get('replicas', []):
    print(r.get('index'), r.get('alive'), r.get('healthy'), r.get('memory_mib') or r.get('gpu_memory_mib'), (r.get('startup_timings') or r.get('timings')))
" 2>&1 | tee -a "$OUT/main.log"
  for f in /tmp/run8/fleet/logs/replica-*.log; do echo "$(basename $f): $(grep -o -E 'Capture cuda graph end. Time elapsed: [0-9.]+ s|Capture (piecewise )?cuda graph.*elapsed[^,]*' $f | tr '\n' ';' | cut -c1-200)"; done | tee -a "$OUT/main.log"
  cp /tmp/run8/fleet/logs/replica-0.log /tmp/run8/fleet/logs/replica-3.log $d/ 2>/dev/null
  gpu | tee -a "$OUT/main.log"
}

bench8() {
  local d=$OUT/bench8; mkdir -p $d
  local eps=(); for i in 0 1 2 3 4 5 6 7; do eps+=(--endpoint http://127.0.0.1:$((30000 + i))); done
  timed timeout 400 python3 bench/client_vs_plain.py "${eps[@]}" --model model --prompts 8000 --max-tokens 128 \
      --concurrency 128 --arms ABCCBA --fleetgen fleetgen --out $d/abccba.json > $d/bench.log 2>&1
  tail -8 $d/bench.log | cut -c1-400 | tee -a "$OUT/main.log"
}

down() {
  timed fleetgen down --state ${DOWN_STATE:-$ST} 2>&1 | tail -2 | tee -a "$OUT/main.log"
  sleep 2; gpu 2>&1 | tee -a "$OUT/main.log"
}

AUTO_FLAGS=(--attention-backend flashinfer --grammar-backend none)
AUTO_KV=${AUTO_KV:-65536}
upauto() { upS; upL; }
upS() {
  local d=$OUT/upauto; mkdir -p $d
  timed timeout 400 fleetgen up --engine sglang --gpus all --replicas 1 --model $M --state /tmp/fS \
      -- "${AUTO_FLAGS[@]}" --mem-fraction-static 0.35 > $d/upS.log 2>&1
  tail -4 $d/upS.log | tee -a "$OUT/main.log"
}
upL() {  # (SGLang's scheduler takes ports just above its own: the second fleet keeps well clear)
  local d=$OUT/upauto; mkdir -p $d
  timed timeout 300 fleetgen up --engine sglang --gpus all --replicas 1 --model $M --state /tmp/fL --port-base 40000 \
      -- "${AUTO_FLAGS[@]}" --mem-fraction-static 0.2 --max-total-tokens $AUTO_KV > $d/upL.log 2>&1
  tail -4 $d/upL.log | tee -a "$OUT/main.log"
  grep -h -E "max_total_num_tokens|max_running_requests" /tmp/fS/logs/replica-0.log /tmp/fL/logs/replica-0.log | cut -c1-300 | tail -4 | tee -a "$OUT/main.log"
  gpu | tee -a "$OUT/main.log"
}
auto_sweep() {  # name fleet tokens
  local d=$OUT/auto-$1; mkdir -p $d
  timed timeout ${AUTO_TIMEOUT:-560} python3 bench/auto_concurrency.py --fleet $1=$2 --workloads $1 --$1-tokens $3 \
      --levels ${AUTO_LEVELS:-8,16,32,64,128,256,512} --warm-s ${AUTO_WARM:-8} --measure-s ${AUTO_MEASURE:-20} \
      ${AUTO_ARGS:-} --out $d/auto.json > $d/auto.log 2>&1
  grep -v '^{' $d/auto.log | tail -25 | cut -c1-260 | tee -a "$OUT/main.log"
}
autoshort() { auto_sweep short /tmp/fS ${SHORT_TOKENS:-128}; }
autolong() { auto_sweep long /tmp/fL ${LONG_TOKENS:-1024}; }
downauto() { fleetgen down --state /tmp/fS 2>&1 | tail -1; fleetgen down --state /tmp/fL 2>&1 | tail -1; sleep 2; gpu | tee -a "$OUT/main.log"; }

for step in "$@"; do log "BEGIN $step"; $step; log "END $step"; done
# What comes back from a device call is limited in file count: one archive of everything but the log.
(cd "$OUT" && tar czf /tmp/all.tgz --exclude=main.log . && find . -mindepth 1 -not -name main.log -delete && mv /tmp/all.tgz ./all.tgz)
