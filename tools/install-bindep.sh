#!/usr/bin/env bash
# Install the Debian packages named in bindep.txt that are not installed yet.
# Runs `apt-get update` at most once, and only when something is missing.
# Another apt-get holding the package locks (unattended-upgrades right after
# a cloud VM boots) is waited for, up to APT_LOCK_TIMEOUT seconds (300).
set -euo pipefail
cd "$(dirname "$0")/.."
wait_s=${APT_LOCK_TIMEOUT:-300}
if [[ ! "$wait_s" =~ ^[0-9]+$ ]]; then
    echo "install-bindep: APT_LOCK_TIMEOUT=$wait_s: expected whole seconds (e.g. 300)" >&2
    exit 2
fi
missing=()
while read -r pkg _; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < bindep.txt
if ((${#missing[@]})); then
    echo "installing Debian packages: ${missing[*]}"
    apt=(apt-get -o "DPkg::Lock::Timeout=$wait_s")
    # NOTE: `apt-get update` fails at once on a held lists lock whatever
    # DPkg::Lock::Timeout says on older apt: retry it until the deadline.
    deadline=$((SECONDS + wait_s))
    until out=$("${apt[@]}" update -qq 2>&1); do
        if [[ "$out" != *"Could not get lock"* ]] || ((SECONDS >= deadline)); then
            echo "$out" >&2
            exit 1
        fi
        echo "waiting for another apt-get to finish (up to ${wait_s}s)" >&2
        sleep 5
    done
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
