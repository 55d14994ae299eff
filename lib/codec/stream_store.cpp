#include "codec/stream_store.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace adaprec::codec {

void streamFloats(float* dst, const float* src, std::size_t n) {
#if defined(__SSE2__)
  std::size_t i = 0;
  // Ordinary stores up to the first 16-byte boundary of dst (floats are 4-byte aligned).
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 15) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();  // order the streamed stores before anything that follows
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

}  // namespace adaprec::codec
