#!/usr/bin/env bash
# Debian tools the test suite runs for real: a Pushgateway, promtool, PgBouncer, systemd-analyze, nft (the partition
# tests drop packets with it) and Chromium (the browser tests drive it with Playwright, whose own browser download is
# not used). Idempotent: installs only what is missing and refreshes the package index only then. Needs root and
# apt-get (CI has both); without them it says so, and the tests that need a missing tool skip with that reason.
set -euo pipefail

declare -A PACKAGE_OF_TOOL=(
    [prometheus-pushgateway]=prometheus-pushgateway [promtool]=prometheus [pgbouncer]=pgbouncer [systemd-analyze]=systemd
    [nft]=nftables [chromium]=chromium
)

missing=()
for tool in "${!PACKAGE_OF_TOOL[@]}"; do
    command -v "$tool" >/dev/null || missing+=("${PACKAGE_OF_TOOL[$tool]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install_test_tools: cannot install ${missing[*]} (needs root and apt-get); the tests that need them skip (fail in CI)" >&2
    exit 0
fi

# The packages would start their daemons on the default ports; the tests start their own on free ports.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
# A failed install is reported, not fatal: the tests that need the tool then say so themselves.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "install_test_tools: installing ${missing[*]} failed; the tests that need them skip (fail in CI)" >&2
fi
