#!/usr/bin/env bash
# Builds the real-host driver: proxy-wasm-cpp-host (from a checkout given
# by path, patched for Wasmtime v37 in a copy) on Wasmtime's static C
# library from the wasmtime-go v37 module, with tools/realhost/host.cc.
#
# usage: build.sh CPPHOST OUT
#   CPPHOST holds proxy-wasm-cpp-host/ and proxy-wasm-cpp-sdk/ (README.md
#   says how to clone them); OUT receives the objects and OUT/realhost.
# Prints the driver's path last. Objects are rebuilt only when stale.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cpphost=${1:-}
out=${2:-}
fail() { echo "realhost: $*" >&2; exit 2; }
[ -n "$cpphost" ] && [ -n "$out" ] || fail "usage: build.sh CPPHOST OUT (see tools/realhost/README.md)"
host_src=$cpphost/proxy-wasm-cpp-host
sdk_src=$cpphost/proxy-wasm-cpp-sdk
[ -f "$host_src/src/wasmtime/wasmtime.cc" ] || fail "$host_src is not a proxy-wasm-cpp-host checkout (see tools/realhost/README.md)"
[ -f "$sdk_src/proxy_wasm_common.h" ] || fail "$sdk_src is not a proxy-wasm-cpp-sdk checkout (see tools/realhost/README.md)"
command -v g++ >/dev/null || fail "g++ is missing (apt-get install g++)"
command -v patch >/dev/null || fail "patch is missing (apt-get install patch)"
echo '#include <openssl/evp.h>' | g++ -x c++ -fsyntax-only - 2>/dev/null \
  || fail "OpenSSL headers are missing (apt-get install libssl-dev)"
wasmtime=$(go mod download -json github.com/bytecodealliance/wasmtime-go/v37@v37.0.0 \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
lib=$wasmtime/build/linux-x86_64/libwasmtime.a
[ -f "$lib" ] || fail "no $lib: the wasmtime-go v37 module carries the library for linux-x86_64 only"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# A patched copy of cpp-host's sources, redone (and every object rebuilt)
# when the checkout, the patch or this script changes; the user's checkout
# is never modified.
stamp="$(git -C "$host_src" rev-parse HEAD 2>/dev/null || echo unversioned) $(cat "$here/wasmtime-v37.patch" "$0" | sha256sum)"
if [ "$(cat "$out/cpphost/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$out/cpphost" "$out/obj"
  mkdir -p "$out/cpphost"
  cp -R "$host_src/include" "$host_src/src" "$out/cpphost/"
  patch -s -p1 -d "$out/cpphost" < "$here/wasmtime-v37.patch"
  echo "$stamp" > "$out/cpphost/.stamp"
fi
# cpp-host includes Wasmtime as "crates/c-api/include/wasmtime.h", its
# path inside Wasmtime's repository.
mkdir -p "$out/inc/crates/c-api"
ln -sfn "$wasmtime/build/include" "$out/inc/crates/c-api/include"

cxxflags=(-std=c++20 -O2 -g -I"$out/cpphost" -I"$sdk_src" -I"$here/shim" -I"$out/inc" -I"$wasmtime/build/include"
  -DWASMTIME_VERSION='"37.0.0"' -DPROXY_WASM_PLATFORM='"linux_x86_64"')
srcs=(bytecode_util context exports hash pairs_util shared_data shared_queue signature_util vm_id_handle wasm wasmtime/wasmtime)
mkdir -p "$out/obj"
objs=()
for s in "${srcs[@]}"; do
  src=$out/cpphost/src/$s.cc
  obj=$out/obj/${s//\//_}.o
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    echo "realhost: compiling src/$s.cc" >&2
    g++ "${cxxflags[@]}" -c "$src" -o "$obj"
  fi
  objs+=("$obj")
done
if [ ! -f "$out/obj/host.o" ] || [ "$here/host.cc" -nt "$out/obj/host.o" ]; then
  echo "realhost: compiling tools/realhost/host.cc" >&2
  g++ "${cxxflags[@]}" -Wall -c "$here/host.cc" -o "$out/obj/host.o"
fi
g++ -o "$out/realhost" "$out/obj/host.o" "${objs[@]}" "$lib" -lssl -lcrypto -lpthread -ldl -lm
echo "$out/realhost"
