#!/usr/bin/env bash
# Install Debian's headless Chromium and its WebDriver for tests/test_report_browser.py.
# Idempotent and quiet: does nothing when /usr/bin/chromium and /usr/bin/chromedriver exist;
# otherwise installs them with apt-get (as root, or through sudo) and prints one line.
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    exit 0
fi

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "browser_deps: need root or sudo to install chromium" >&2
        exit 1
    fi
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && \
       $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "browser_deps: apt-get install chromium chromium-driver failed" >&2
    exit 1
fi
echo "browser_deps: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
