// Hashing for the agreement checks: every rank folds what shapes its allreduce into one 64-bit
// signature, and one max-allreduce of {signature, ~signature} shows whether all ranks agree.
#pragma once

#include <cstdint>
#include <string_view>

namespace adaprec::detail {

inline std::uint64_t mixSignature(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// mixSignature folded over the values from the left: signatureOf(a, b, c) = mix(mix(a, b), c).
template <class... Values>
std::uint64_t signatureOf(std::uint64_t first, Values... rest) {
  std::uint64_t h = first;
  ((h = mixSignature(h, static_cast<std::uint64_t>(rest))), ...);
  return h;
}

// FNV-1a over bytes, continuing from `hash` (kFnv1aStart for none): also the trainer's identity of
// its log and of its state in checkpoints.
inline constexpr std::uint64_t kFnv1aStart = 0xcbf29ce484222325ull;
inline std::uint64_t fnv1a(std::string_view bytes, std::uint64_t hash = kFnv1aStart) {
  for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

inline std::uint64_t hashSignatureText(std::string_view text) { return fnv1a(text); }

}  // namespace adaprec::detail
