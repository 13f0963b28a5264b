#!/usr/bin/env bash
# Installs Debian's chromium (and a CJK font, so the Chinese workshop pages
# render in screenshots) for the dashboard's browser test. Idempotent and
# quiet: does nothing when both are already there. Never downloads a
# browser build of its own.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || need+=(fonts-wqy-microhei)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v chromium >/dev/null
