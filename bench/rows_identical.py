"""Two source trees, the same prompts, the NULL SERVER: are the rows identical (but timing and replica)?

A check that a client change leaves the data alone: 600 prompts x 2 samples (single-turn, system +
multi-turn, a recorded tool call the null server does not repeat: a cut, and a trailing assistant turn).

    .venv/bin/python bench/rows_identical.py BASE_SRC BRANCH_SRC
"""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path
import orjson
def free():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
ports=[free() for _ in range(4)]
srv=subprocess.Popen([sys.executable,str(Path(__file__).resolve().parent / "null_server.py"),"--ports",*map(str,ports)])
eps=[f"http://127.0.0.1:{p}" for p in ports]
for _ in range(100):
    try: urllib.request.urlopen(eps[-1]+"/health"); break
    except OSError: time.sleep(0.1)
CHILD = '''
import sys; from pathlib import Path
from fleetgen.generate import GenerateConfig, generate
cfg = GenerateConfig(prompts=Path(sys.argv[1]), output_dir=Path(sys.argv[2]), endpoints=sys.argv[3:], model="null", max_tokens=16,
                     concurrency=8, samples=2, seed=7, hedge=True)
print(generate(cfg, handle_signals=False).ok)
'''
try:
    with tempfile.TemporaryDirectory() as d:
        p=Path(d)/"p.jsonl"
        tool = {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}
        with open(p,"wb") as f:
            for i in range(600):
                k=i%4
                if k==0: row={"id":f"p{i}","messages":[{"role":"user","content":f"color {i}"}]}
                elif k==1: row={"id":f"p{i}","messages":[{"role":"system","content":"be brief"},{"role":"user","content":f"q {i}"},{"role":"assistant","content":"a"},{"role":"user","content":"again"}]}
                elif k==2: row={"id":f"p{i}","tools":[tool],"messages":[{"role":"user","content":f"weather {i}"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"},{"role":"assistant","content":"It is sunny."}]}
                else: row={"id":f"p{i}","messages":[{"role":"user","content":f"x {i}"},{"role":"assistant","content":"y"}],"meta":{"domain":"chat"}}
                f.write(orjson.dumps(row)+b"\n")
        outs={}
        for name, src in (("main", sys.argv[1]), ("branch", sys.argv[2])):
            o=Path(d)/name
            r=subprocess.run([sys.executable,"-c",CHILD,str(p),str(o),*eps],env=dict(os.environ,PYTHONPATH=src),capture_output=True,text=True)
            assert r.returncode==0, r.stderr[-2000:]
            rows=[orjson.loads(l) for l in open(o/"results.jsonl","rb")]
            for x in rows: x.pop("timing"); x.pop("replica")
            outs[name]=sorted(orjson.dumps(x, option=orjson.OPT_SORT_KEYS) for x in rows)
            errs=(o/"errors.jsonl").read_bytes() if (o/"errors.jsonl").exists() else b""
            print(name, "ok", r.stdout.strip(), "rows", len(rows), "error bytes", len(errs))
        print("identical (but timing, replica):", outs["main"]==outs["branch"])
        print("cuts:", sum(1 for x in outs["main"] if b'"reason":"answered_without_call"' in x))
finally:
    srv.kill()
