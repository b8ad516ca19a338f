#!/usr/bin/env bash
# Undoes what an e2e run (tests/realnode/realnode.py, `make test-e2e`) left on this machine, from the state file it
# writes as it goes (/run/tfk8s-e2e/state.json): the processes it started (by pid and start time, and every one
# in its cgroups), the mounts under /run/tfk8s-e2e, the bridge tfk8s0 and the veths on it, the KUBE-*/CNI-*
# iptables chains and the nftables tables that came with them, its cgroups, the kernel settings it recorded, the
# folders it made. Idempotent: with nothing left it says so and exits 0.
#
#   hack/node/cleanup.sh            # clean up (refuses while the run that wrote the state file still runs)
#   hack/node/cleanup.sh --force    # clean up all the same
#   hack/node/cleanup.sh --check    # only list what is left (exit 1 if anything)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python
case "${1:-}" in
  --check) exec "$py" -m tests.realnode.realnode --check ;;
  --force) exec "$py" -m tests.realnode.realnode --cleanup --force ;;
  "") exec "$py" -m tests.realnode.realnode --cleanup ;;
  *) echo "usage: $0 [--force|--check]" >&2; exit 2 ;;
esac
