#!/usr/bin/env bash
# Install the Debian packages named in bindep.txt that are not installed yet.
# Runs `apt-get update` at most once, and only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
while read -r pkg _; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < bindep.txt
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
