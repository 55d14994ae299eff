#include "layers.hpp"

#include <cmath>

#include "adaprec/error.hpp"

namespace adaprec::trainer {
namespace {

// He initialization (fan-in, ReLU networks): N(0, 2 / fanIn). Biases start at zero.
void heInit(std::mt19937_64& rng, float* w, std::int64_t count, std::int64_t fanIn) {
  std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / static_cast<float>(fanIn)));
  for (std::int64_t i = 0; i < count; ++i) w[i] = dist(rng);
}

}  // namespace

Dense::Dense(Shape input, int outputs) : inputs_(static_cast<int>(input.size())), outputs_(outputs) {
  ADAPREC_CHECK_ARG(inputs_ > 0 && outputs_ > 0, "dense layer " << inputs_ << " -> " << outputs_);
}

std::vector<ParamSpec> Dense::params() const {
  return {{"weight", static_cast<std::int64_t>(inputs_) * outputs_}, {"bias", outputs_}};
}

void Dense::bind(float* params, float* grads) {
  weight_ = params;
  bias_ = params + static_cast<std::int64_t>(inputs_) * outputs_;
  weightGrad_ = grads;
  biasGrad_ = grads + static_cast<std::int64_t>(inputs_) * outputs_;
}

void Dense::initialize(std::mt19937_64& rng) {
  heInit(rng, weight_, static_cast<std::int64_t>(inputs_) * outputs_, inputs_);
  std::fill(bias_, bias_ + outputs_, 0.0f);
}

// weight is outputs x inputs (PyTorch's layout): out = in * W^T + b.
void Dense::forward(Backend& backend, int batch, const float* in, float* out) {
  backend.gemm(false, true, batch, outputs_, inputs_, 1.0f, in, inputs_, weight_, inputs_, 0.0f, out, outputs_);
  backend.addBias(batch, outputs_, 1, bias_, out);
}

void Dense::backward(Backend& backend, int batch, const float* in, const float* /*out*/, const float* gradOut,
                     float* gradIn) {
  // dW (outputs x inputs) = gradOut^T * in; db = column sums; dIn = gradOut * W.
  backend.gemm(true, false, outputs_, inputs_, batch, 1.0f, gradOut, outputs_, in, inputs_, 0.0f, weightGrad_,
               inputs_);
  backend.biasGradient(batch, outputs_, 1, gradOut, biasGrad_);
  if (gradIn != nullptr) {
    backend.gemm(false, false, batch, inputs_, outputs_, 1.0f, gradOut, outputs_, weight_, inputs_, 0.0f, gradIn,
                 inputs_);
  }
}

void Relu::forward(Backend& backend, int batch, const float* in, float* out) {
  backend.reluForward(batch * shape_.size(), in, out);
}

void Relu::backward(Backend& backend, int batch, const float* /*in*/, const float* out, const float* gradOut,
                    float* gradIn) {
  if (gradIn != nullptr) backend.reluBackward(batch * shape_.size(), out, gradOut, gradIn);
}

Conv2d::Conv2d(Shape input, int outChannels, int kernel, int stride, int pad) : outChannels_(outChannels) {
  window_ = Window{input.channels, input.height, input.width, kernel, stride, pad};
  ADAPREC_CHECK_ARG(outChannels > 0 && kernel > 0 && stride > 0 && pad >= 0 && window_.outHeight() > 0 &&
                        window_.outWidth() > 0,
                    "conv2d " << input.channels << "x" << input.height << "x" << input.width << " -> "
                              << outChannels << " kernel " << kernel << " stride " << stride << " pad " << pad);
}

Shape Conv2d::outputShape() const { return {outChannels_, window_.outHeight(), window_.outWidth()}; }

std::vector<ParamSpec> Conv2d::params() const {
  const std::int64_t k = static_cast<std::int64_t>(window_.channels) * window_.kernel * window_.kernel;
  return {{"weight", outChannels_ * k}, {"bias", outChannels_}};
}

void Conv2d::bind(float* params, float* grads) {
  const std::int64_t w = this->params()[0].count;
  weight_ = params;
  bias_ = params + w;
  weightGrad_ = grads;
  biasGrad_ = grads + w;
}

void Conv2d::initialize(std::mt19937_64& rng) {
  const std::int64_t fanIn = static_cast<std::int64_t>(window_.channels) * window_.kernel * window_.kernel;
  heInit(rng, weight_, outChannels_ * fanIn, fanIn);
  std::fill(bias_, bias_ + outChannels_, 0.0f);
}

// One GEMM per image against that image's block of im2col columns: out[n] (O x HW) = W (O x CKK) *
// cols[:, n*HW : (n+1)*HW]. The block is strided (ldb = batch*HW), so no transposition is needed.
void Conv2d::forward(Backend& backend, int batch, const float* in, float* out) {
  const int ckk = window_.channels * window_.kernel * window_.kernel;
  const int hw = window_.outHeight() * window_.outWidth();
  const int ldb = batch * hw;
  cols_.resize(static_cast<std::size_t>(ckk) * ldb);
  backend.im2col(window_, batch, in, cols_.data());
  for (int n = 0; n < batch; ++n) {
    backend.gemm(false, false, outChannels_, hw, ckk, 1.0f, weight_, ckk, cols_.data() + n * hw, ldb, 0.0f,
                 out + static_cast<std::int64_t>(n) * outChannels_ * hw, hw);
  }
  backend.addBias(batch, outChannels_, hw, bias_, out);
}

void Conv2d::backward(Backend& backend, int batch, const float* /*in*/, const float* /*out*/,
                      const float* gradOut, float* gradIn) {
  const int ckk = window_.channels * window_.kernel * window_.kernel;
  const int hw = window_.outHeight() * window_.outWidth();
  const int ldb = batch * hw;
  for (int n = 0; n < batch; ++n) {
    // dW += gradOut[n] (O x HW) * cols_n^T (HW x CKK)
    backend.gemm(false, true, outChannels_, ckk, hw, 1.0f, gradOut + static_cast<std::int64_t>(n) * outChannels_ * hw,
                 hw, cols_.data() + n * hw, ldb, n == 0 ? 0.0f : 1.0f, weightGrad_, ckk);
  }
  backend.biasGradient(batch, outChannels_, hw, gradOut, biasGrad_);
  if (gradIn == nullptr) return;
  colGrad_.resize(cols_.size());
  for (int n = 0; n < batch; ++n) {
    // dCols_n (CKK x HW) = W^T (CKK x O) * gradOut[n] (O x HW)
    backend.gemm(true, false, ckk, hw, outChannels_, 1.0f, weight_, ckk,
                 gradOut + static_cast<std::int64_t>(n) * outChannels_ * hw, hw, 0.0f, colGrad_.data() + n * hw,
                 ldb);
  }
  backend.col2im(window_, batch, colGrad_.data(), gradIn);
}

MaxPool::MaxPool(Shape input, int kernel, int stride) {
  window_ = Window{input.channels, input.height, input.width, kernel, stride, 0};
  ADAPREC_CHECK_ARG(kernel > 0 && stride > 0 && window_.outHeight() > 0 && window_.outWidth() > 0,
                    "maxpool kernel " << kernel << " stride " << stride << " on " << input.height << "x"
                                      << input.width);
}

Shape MaxPool::outputShape() const { return {window_.channels, window_.outHeight(), window_.outWidth()}; }

void MaxPool::forward(Backend& backend, int batch, const float* in, float* out) {
  argmax_.resize(static_cast<std::size_t>(batch) * outputShape().size());
  backend.maxPoolForward(window_, batch, in, out, argmax_.data());
}

void MaxPool::backward(Backend& backend, int batch, const float* /*in*/, const float* /*out*/,
                       const float* gradOut, float* gradIn) {
  if (gradIn != nullptr) backend.maxPoolBackward(window_, batch, gradOut, argmax_.data(), gradIn);
}

}  // namespace adaprec::trainer
