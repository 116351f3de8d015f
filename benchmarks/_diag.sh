set -u
out=${OUT:-/tmp/gpu-out}
python3 - > $out/diag.log 2>&1 <<'PY'
import json, tempfile, time
from pathlib import Path
from benchmarks.bitwise import fixtures, recipe, engine_check
root = Path(tempfile.mkdtemp()); m, d = fixtures(root)
res = {}
t = time.time()
try:
    res["engine"] = engine_check(m)
except Exception as e:
    res["engine"] = repr(e)
print("RESULT engine", json.dumps(res["engine"]), time.time() - t, flush=True)
for tag, extra in (("lr0", ("learner.lr=1e-30",)), ("torch", ("learner.backend=torch",))):
    t = time.time()
    try:
        r = recipe(m, d, root / "runs", True, 3, tag, ("rollout.batch_size=8",) + extra)
    except Exception as e:
        r = repr(e)
    print("RESULT", tag, json.dumps(r), time.time() - t, flush=True)
PY
grep RESULT $out/diag.log
