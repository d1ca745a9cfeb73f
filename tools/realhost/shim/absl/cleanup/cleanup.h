// The one piece of Abseil cpp-host uses outside its V8 runtime: a scope
// guard that runs a callable when it goes out of scope (absl::Cleanup, as
// src/hash.cc and src/signature_util.cc use it). Ours, so the build needs
// no Abseil headers.
#pragma once
#include <utility>

namespace absl {
template <typename F> class Cleanup {
public:
  Cleanup(F f) : f_(std::move(f)) {}
  ~Cleanup() { f_(); }
  Cleanup(const Cleanup &) = delete;
  Cleanup &operator=(const Cleanup &) = delete;

private:
  F f_;
};
} // namespace absl
