"""A stand-in replica program for launcher tests: behaves according to its TF_CONFIG task.

Behaviour per replica label (e.g. ``worker-1``) comes from the env var FAKE_BEHAVIOUR, a JSON object
``{"<label>": BEHAVIOUR or [BEHAVIOUR of attempt 0, of attempt 1, ...]}`` (the last one repeats), where a
BEHAVIOUR is ``"exit:<code>"``, ``"sleep"``, ``"sleep:<seconds>"``, ``"ignore-term"`` (sleep, ignoring SIGTERM),
``"kill"`` / ``"kill:<seconds>"`` (SIGKILL itself, at once or after that long, as the OOM killer would),
``"stall"`` (report progress once, then hang), ``"starting"`` (report ``starting`` every 0.2 s and never a
step, as a replica whose cluster never forms), ``"term:<code>"`` (sleep; on SIGTERM exit with that code, as a
program saving on a preemption notice), ``"await:<label>,<label>"`` (exit 0 once those replicas
wrote their pid files, 30 s at most) or
``"report:<seconds>"`` (report progress every 0.1 s for that long, then exit 0) or ``"train:<seconds>"`` (2 epochs
of 10 steps over that long, a progress report with epoch, steps and examples/sec and a line per step, exit 0). Unlisted replicas exit 0 at
once, except ps and evaluator, which sleep forever (as real parameter servers do).
It prints its TF_CONFIG, its contract variables (``TFK8S_ENV=<json>``: ``TFK8S_*`` and the platform aliases), its proxy exemptions
(``PROXY_ENV=<json>``) and its argv (``ARGV=<json>``) and,
if FAKE_PIDFILE_DIR is set, writes its pid to ``<dir>/<label>.pid`` at once (atomically) and, when it begins to sleep (its signal
handlers in place), an empty ``<dir>/<label>.ready``. Progress goes to ``$TFK8S_PROGRESS_FILE``
(tfk8s.core.progress). The attempt number is counted in ``$FAKE_STATE_DIR/<label>.starts`` (always 0 without it).
"""

import json
import os
import signal
import sys
import time

from tfk8s.core.progress import ProgressReporter

cfg = json.loads(os.environ["TF_CONFIG"])
label = f"{cfg['task']['type']}-{cfg['task']['index']}"
print(f"TF_CONFIG={os.environ['TF_CONFIG']}", flush=True)
print("TFK8S_ENV=" + json.dumps({k: v for k, v in os.environ.items() if k.startswith(("TFK8S_", "AIP_", "SM_", "CLOUD_ML_"))}), flush=True)
print("PROXY_ENV=" + json.dumps({k: os.environ.get(k) for k in ("NO_PROXY", "no_proxy", "no_grpc_proxy")}), flush=True)
print("ARGV=" + json.dumps(sys.argv[1:]), flush=True)
if os.environ.get("FAKE_PIDFILE_DIR"):  # whole or not at all: a test polling for it never reads it empty
    pidfile = os.path.join(os.environ["FAKE_PIDFILE_DIR"], f"{label}.pid")
    with open(f"{pidfile}.{os.getpid()}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"{pidfile}.{os.getpid()}.tmp", pidfile)
attempt = 0
if os.environ.get("FAKE_STATE_DIR"):
    starts = os.path.join(os.environ["FAKE_STATE_DIR"], f"{label}.starts")
    with open(starts, "a+") as f:
        f.seek(0)
        attempt = len(f.read().splitlines())
        f.write(f"{os.getpid()}\n")
print(f"{label} attempt {attempt}", flush=True)
default = "sleep" if cfg["task"]["type"] in ("ps", "evaluator") else "exit:0"
behaviour = json.loads(os.environ.get("FAKE_BEHAVIOUR", "{}")).get(label, default)
if isinstance(behaviour, list):
    behaviour = behaviour[min(attempt, len(behaviour) - 1)]
reporter = ProgressReporter.from_env(label, min_interval_s=0)
if behaviour.startswith("exit:"):
    print(f"{label} line 1", flush=True)
    print(f"{label} finishing with {behaviour}", flush=True)
    sys.exit(int(behaviour.split(":")[1]))
if behaviour.startswith("kill"):
    time.sleep(float(behaviour.split(":")[1]) if ":" in behaviour else 0)
    print(f"{label} is being killed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if behaviour == "stall":
    reporter.update(state="running", epoch=1, epochs=2, step=3, steps=10)
    print(f"{label} reported step 3, now hanging", flush=True)
    behaviour = "sleep"
if behaviour.startswith("report:"):
    end = time.monotonic() + float(behaviour.split(":")[1])
    step = 0
    while time.monotonic() < end:
        step += 1
        reporter.update(state="running", step=step)
        time.sleep(0.1)
    reporter.update(state="done", step=step)
    print(f"{label} done after {step} steps", flush=True)
    sys.exit(0)
if behaviour.startswith("train:"):
    for step in range(1, 21):
        time.sleep(float(behaviour.split(":")[1]) / 20)
        reporter.update(epoch=1 + (step - 1) // 10, epochs=2, step=step, steps=20, examples_per_sec=1000.0 + step,
                        loss=1.0 / step)
        print(f"{label} step {step}/20", flush=True)
    reporter.update(state="done", epoch=2, epochs=2, step=20, steps=20, force=True)
    print(f"{label} done training", flush=True)
    sys.exit(0)
if behaviour.startswith("await:"):
    # wait (30 s at most) until every listed replica has written its pid file (FAKE_PIDFILE_DIR), then exit 0:
    # a coordinator that must not end the job before its peers have started
    deadline = time.monotonic() + 30
    for peer in behaviour.split(":", 1)[1].split(","):
        while not os.path.exists(os.path.join(os.environ["FAKE_PIDFILE_DIR"], f"{peer}.pid")):
            if time.monotonic() > deadline:
                sys.exit(f"{label}: {peer} did not start within 30 s")
            time.sleep(0.02)
    print(f"{label} saw {behaviour.split(':', 1)[1]} start", flush=True)
    sys.exit(0)
if behaviour == "starting":
    while True:
        reporter.update(state="starting")
        time.sleep(0.2)
if behaviour.startswith("term:"):
    code = int(behaviour.split(":")[1])

    def saved(signum, frame):
        print(f"{label} got SIGTERM: saving, then exit {code}", flush=True)
        sys.exit(code)

    signal.signal(signal.SIGTERM, saved)
    behaviour = "sleep"
if behaviour == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    behaviour = "sleep"
seconds = float(behaviour.split(":")[1]) if ":" in behaviour else 3600.0
if os.environ.get("FAKE_PIDFILE_DIR"):  # its signal handlers are in place: a test may signal it (or its launcher)
    open(os.path.join(os.environ["FAKE_PIDFILE_DIR"], f"{label}.ready"), "w").close()
time.sleep(seconds)
print(f"{label} done sleeping", flush=True)
