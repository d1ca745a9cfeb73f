#!/usr/bin/env bash
# Profiles a plugin's requests in the real host with perf: the driver runs
# the lifecycle benchmark's request (e2e/bench_test.go, benchRequest) on
# one worker, with Wasmtime writing a perf map (/tmp/perf-PID.map) so the
# guest's JIT-compiled functions are named in the profile. What the guest
# spends is then read per Go function, in the host that Envoy embeds,
# rather than guessed from a native profile.
#
# usage: profile.sh CPPHOST WASM CONFIG [REQUESTS] [OUT]
#   CPPHOST  the checkouts (README.md); WASM the module (build/sluice.wasm);
#   CONFIG   the plugin configuration (JSON); REQUESTS after 2,000 of
#   warm-up (default 200000); OUT the perf data file (default
#   build/realhost/profile.data). Prints the top of the flat profile.
# Needs perf (linux-tools) with user-space sampling allowed
# (kernel.perf_event_paranoid at most 2).
set -euo pipefail
export LC_ALL=C # esc walks bytes, not characters
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "realhost profile: $*" >&2; exit 2; }
[ $# -ge 3 ] || fail "usage: profile.sh CPPHOST WASM CONFIG [REQUESTS] [OUT]"
cpphost=$1 wasm=$2 config=$3 requests=${4:-200000} out=${5:-$root/build/realhost/profile.data}
command -v perf >/dev/null || fail "perf is missing (apt-get install linux-perf)"
[ -f "$wasm" ] || fail "no module $wasm (make build)"
driver=$(bash "$here/build.sh" "$cpphost" "$root/build/realhost" | tail -1)

# esc writes one string token of the driver's protocol (README.md).
esc() {
  local s=$1 out='=' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [!\!-~] | %) printf -v c '%%%02X' "'$c" ;;
    esac
    out+=$c
  done
  printf '%s' "$out"
}

# The module and its compiled code go where the Go tests keep them, named
# by the same hash, so a profile reuses what a test compiled and back.
cache=$root/build/realhost/cache
mkdir -p "$cache" "$(dirname "$out")"
name=$(sha256sum "$wasm" | cut -c1-24)
[ -f "$cache/$name.wasm" ] || cp "$wasm" "$cache/$name.wasm"
request="5 $(esc :method) $(esc GET) $(esc :path) $(esc '/api/items?page=2&user=u1') $(esc :authority) $(esc example.com)"
request+=" $(esc :scheme) $(esc http) $(esc x-tenant) $(esc t1) $(esc 10.1.2.3:5000) $(esc backend) $(esc default)"
commands=$(mktemp)
trap 'rm -f "$commands"' EXIT
{
  echo "clock $(date +%s%N)"
  echo "plugin $(esc "$cache/$name.wasm") $(esc "profile-$$") 1 $(esc "$config") 0 $(esc "$cache/$name.cwasm")"
  echo "bench 0 2000 0 $request"
  echo "bench 0 $requests 0 $request"
  echo quit
} > "$commands"
# Compiling the module (seconds, on the first load of this build) is left
# out of the profile: a driver run without perf compiles it into the cache.
[ -f "$cache/$name.cwasm" ] || head -2 "$commands" | "$driver" > /dev/null
REALHOST_PERFMAP=1 perf record -q -F 999 -g -o "$out" -- "$driver" < "$commands" > "$out.replies"
grep -q '^err' "$out.replies" && fail "the driver refused a command: $(grep '^err' "$out.replies")"
last=$(grep '^bench' "$out.replies" | tail -1)
echo "$requests requests, $(awk -v n="$requests" '{printf "%.0f", $4 / n}' <<<"$last") ns of thread CPU each under perf (bench reply: $last)"
echo "flat profile, guest functions named from the perf map ($out):"
perf report -i "$out" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep "%" | cut -c1-150 | head -60
