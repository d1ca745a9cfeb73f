#!/usr/bin/env bash
# The Debian packages the tests need, listed here and nowhere else: `make
# test` and .ci/run both run this first. Missing packages are installed
# when that is possible (root, with apt-get); otherwise it stops and prints
# the command that installs them, because a test whose server is missing
# would otherwise be skipped, and a skipped test proves nothing.
set -euo pipefail

packages=(redis-server webdis docker-registry skopeo wrk wabt prometheus)

missing=()
for p in "${packages[@]}"; do
  # dpkg -s also succeeds for a removed package whose config files remain.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || status=
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi

{
  echo "deps: the tests need these Debian packages, missing here: ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "deps: there is no apt-get here; on Debian or Ubuntu they install with:"
  else
    echo "deps: install them with:"
  fi
  echo
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
  echo
} >&2
exit 1
