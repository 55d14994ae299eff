// The block loops of the vector fp8/fp8s/e4m3 codecs, shared by the AVX2 and AVX-512 kernels. A
// fragment included inside the ISA namespace after host_kernels_impl.cpp's includes. `Runs` supplies
// the kernels of one vector width for one SmallFloat `Runs::Math`:
//   encode<kScaled, kTwoFactors>(src, n, factors, dst, next, nextCount) -> finite amax bits of next
//   decode<kAdd, kScaled>(src, n, factors, out)

// fp8/e4m3 encoding; exps == nullptr: raw fp8 (no scales). Each block's amax is scanned while the
// previous block is converted (the first one on its own).
template <class Runs>
void encodeSmallFloatBlocks(const float* src, std::size_t n, std::uint8_t* exps, std::uint8_t* dst) {
  using Math = typename Runs::Math;
  if (exps == nullptr) {
    Runs::template encode<false, false>(src, n, {1.0f, 1.0f}, dst, nullptr, 0);
    return;
  }
  std::uint32_t amax = Runs::template encode<false, false>(nullptr, 0, {}, nullptr, src, std::min(kScaleBlock, n));
  for (std::size_t b = 0, block = 0; b < n; b += kScaleBlock, ++block) {
    const std::size_t len = std::min(kScaleBlock, n - b);
    const std::size_t nextCount = std::min(kScaleBlock, n - b - len);
    const int e = Math::scaleExponent(detail::bitsFloat(amax));
    const std::int16_t e16 = static_cast<std::int16_t>(e);
    std::memcpy(exps + block * sizeof e16, &e16, sizeof e16);
    if (e > Math::kSafeScaleExponent) {
      // amax near FLT_MAX (rare): the block saturates below the largest finite code (scalar loop),
      // then the next block's amax is scanned on its own.
      encodeSaturatedBlock<Math>(src + b, len, e, dst + b);
      amax = Runs::template encode<false, false>(nullptr, 0, {}, nullptr, src + b + len, nextCount);
      continue;
    }
    const detail::ScaleFactors f = detail::encodeFactors(e);
    // f.second == 1 in all but extreme blocks: one multiplication then (x * 1 is exact).
    amax = f.second == 1.0f ? Runs::template encode<true, false>(src + b, len, f, dst + b, src + b + len, nextCount)
                            : Runs::template encode<true, true>(src + b, len, f, dst + b, src + b + len, nextCount);
  }
}

// fp8/e4m3 decoding (kAdd: out = saturatingAdd(out, values)); exps == nullptr: raw fp8 (no scales).
template <class Runs, bool kAdd>
void decodeSmallFloatBlocks(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* out) {
  if (exps == nullptr) return Runs::template decode<kAdd, false>(src, n, {1.0f, 1.0f}, out);
  for (std::size_t b = 0, block = 0; b < n; b += kScaleBlock, ++block) {
    std::int16_t e;
    std::memcpy(&e, exps + block * sizeof e, sizeof e);
    Runs::template decode<kAdd, true>(src + b, std::min(kScaleBlock, n - b), detail::decodeFactors(e), out + b);
  }
}
