#!/usr/bin/env bash
# Install the Debian packages named in bindep.txt that are not installed yet:
#   tools/install-bindep.sh            what the project needs to run (make run)
#   tools/install-bindep.sh test       and what its tests need (make test)
# As bindep reads profiles: a package whose selectors name profiles ([... test])
# is installed only when one of them is given; one with no profile always.
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
profiles=" $* "
# Whether a bindep line's selectors ("platform:dpkg test") pick it here: a
# Debian platform if it names platforms, one of the given profiles if it
# names profiles, none of the !profiles given.
wanted() {
    local sel platforms=0 on_dpkg=0 named=0 given=0
    for sel in $1; do
        case "$sel" in
            platform:*) platforms=1; [[ "$sel" == platform:dpkg ]] && on_dpkg=1 ;;
            !*) [[ "$profiles" == *" ${sel#!} "* ]] && return 1 ;;
            *) named=1; [[ "$profiles" == *" $sel "* ]] && given=1 ;;
        esac
    done
    ((platforms == 0 || on_dpkg)) && ((named == 0 || given))
}
missing=()
while read -r pkg rest; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    selectors=""
    [[ "$rest" == \[*\]* ]] && selectors=${rest#[} && selectors=${selectors%%]*}
    wanted "$selectors" || continue
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
