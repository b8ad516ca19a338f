#!/usr/bin/env bash
# Headless Chromium for tests/realnode/test_kfp_ui.py (make test-kfp): Debian's package, what the test drives
# through Playwright. Nothing when one is on PATH (chromium, chromium-browser or google-chrome, as the test looks);
# else installed with apt-get (make test-kfp runs as root, as test-e2e does); where that is not possible, exit 1
# with one line saying what to install, so that a newcomer's make test-kfp never passes without looking at the UI.
set -uo pipefail
found() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
  || command -v google-chrome >/dev/null 2>&1; }
found && exit 0
if command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1
  found && { echo "test-kfp: installed Debian's chromium (the KFP UI test's browser)"; exit 0; }
fi
echo "test-kfp: the KFP UI test (tests/realnode/test_kfp_ui.py) needs Chromium, and it could not be installed:" \
  "run apt-get install -y chromium (as root), or put chromium on PATH, then make test-kfp again" >&2
exit 1
