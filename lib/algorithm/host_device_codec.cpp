// HostDeviceCodec: the host codec behind the device seam, exactly as Steps ran it before the seam.
#include <cstring>
#include <memory>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

void HostDeviceCodec::encode(Format format, const float* src, std::size_t n, std::byte* chunk, std::size_t bytes) {
  adaprec::encode(format, src, n, chunk, bytes);
}

void HostDeviceCodec::encodeWithResidual(Format format, const float* src, float* residual, std::size_t n,
                                         std::byte* chunk, std::size_t bytes) {
  withResidual_.resize(n);
  decoded_.resize(n);
  // Saturating, as decodeAdd: a finite value near FLT_MAX plus its residual stays finite.
  for (std::size_t i = 0; i < n; ++i) withResidual_[i] = saturatingAdd(src[i], residual[i]);
  adaprec::encode(format, withResidual_.data(), n, chunk, bytes);
  adaprec::decode(format, chunk, bytes, decoded_.data(), n);
  for (std::size_t i = 0; i < n; ++i) residual[i] = feedbackResidual(withResidual_[i], decoded_[i]);
}

void HostDeviceCodec::decode(Format format, const std::byte* chunk, std::size_t bytes, float* dst, std::size_t n) {
  adaprec::decode(format, chunk, bytes, dst, n);
}

void HostDeviceCodec::decodeAdd(Format format, const std::byte* chunk, std::size_t bytes, float* acc,
                                std::size_t n) {
  adaprec::decodeAdd(format, chunk, bytes, acc, n);
}

void HostDeviceCodec::add(float* acc, const float* in, std::size_t n, bool saturating) {
  if (saturating) {
    for (std::size_t i = 0; i < n; ++i) acc[i] = saturatingAdd(acc[i], in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
  }
}

void HostDeviceCodec::forgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) residual[i] = residualAfterSum(result[i], residual[i]);
}

void HostDeviceCodec::divide(float* buf, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) buf[i] /= divisor;
}

void HostDeviceCodec::canonicalizeNans(float* buf, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) buf[i] = canonicalNan(buf[i]);
}

void* HostDeviceCodec::allocate(std::size_t bytes) { return ::operator new(bytes == 0 ? 1 : bytes); }
void HostDeviceCodec::release(void* device) { ::operator delete(device); }
void* HostDeviceCodec::allocateHost(std::size_t bytes) { return ::operator new(bytes == 0 ? 1 : bytes); }
void HostDeviceCodec::releaseHost(void* host) { ::operator delete(host); }
void HostDeviceCodec::fillZero(void* device, std::size_t bytes) {
  if (bytes != 0) std::memset(device, 0, bytes);
}
void HostDeviceCodec::copyToHost(void* host, const void* device, std::size_t bytes) {
  if (bytes != 0) std::memmove(host, device, bytes);
}
void HostDeviceCodec::copyToDevice(void* device, const void* host, std::size_t bytes) {
  if (bytes != 0) std::memmove(device, host, bytes);
}
void HostDeviceCodec::copyOnDevice(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memmove(dst, src, bytes);
}

}  // namespace adaprec::detail
