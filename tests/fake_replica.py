"""A stand-in replica program for launcher tests: behaves according to its TF_CONFIG task.

Behaviour per replica label (e.g. ``worker-1``) comes from the env var FAKE_BEHAVIOUR, a JSON object
``{"<label>": "exit:<code>" | "sleep" | "sleep:<seconds>" | "ignore-term"}``; unlisted replicas exit 0 at
once, except ps and evaluator, which sleep forever (as real parameter servers do).
It prints its TF_CONFIG, its contract variables (``TFK8S_ENV=<json>``) and its argv (``ARGV=<json>``) and,
if FAKE_PIDFILE_DIR is set, writes its pid to ``<dir>/<label>.pid``.
"""

import json
import os
import signal
import sys
import time

cfg = json.loads(os.environ["TF_CONFIG"])
label = f"{cfg['task']['type']}-{cfg['task']['index']}"
print(f"TF_CONFIG={os.environ['TF_CONFIG']}", flush=True)
print("TFK8S_ENV=" + json.dumps({k: v for k, v in os.environ.items() if k.startswith("TFK8S_")}), flush=True)
print("ARGV=" + json.dumps(sys.argv[1:]), flush=True)
if os.environ.get("FAKE_PIDFILE_DIR"):
    with open(os.path.join(os.environ["FAKE_PIDFILE_DIR"], f"{label}.pid"), "w") as f:
        f.write(str(os.getpid()))
default = "sleep" if cfg["task"]["type"] in ("ps", "evaluator") else "exit:0"
behaviour = json.loads(os.environ.get("FAKE_BEHAVIOUR", "{}")).get(label, default)
if behaviour.startswith("exit:"):
    print(f"{label} line 1", flush=True)
    print(f"{label} finishing with {behaviour}", flush=True)
    sys.exit(int(behaviour.split(":")[1]))
if behaviour == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    behaviour = "sleep"
seconds = float(behaviour.split(":")[1]) if ":" in behaviour else 3600.0
time.sleep(seconds)
print(f"{label} done sleeping", flush=True)
