// The layer math a trainer backend provides. Layers and the model call only these kernels, so a CUDA
// backend (cuBLAS GEMM + a few elementwise kernels) can replace the Eigen one without touching the
// layers' bookkeeping or the training loop. All matrices are row-major; all pointers are to memory the
// backend owns the layout of (host memory for the Eigen backend).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace adaprec::trainer {

// Geometry of one 2-D convolution or pooling window over a batch of NCHW images.
struct Window {
  int channels = 0, height = 0, width = 0;  // input
  int kernel = 1, stride = 1, pad = 0;
  int outHeight() const { return (height + 2 * pad - kernel) / stride + 1; }
  int outWidth() const { return (width + 2 * pad - kernel) / stride + 1; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // C (m x n) = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) is k x n; lda/ldb/ldc are the
  // row strides of the stored (untransposed) matrices.
  virtual void gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) = 0;

  // out[o][c][i] += bias[c] for an outer x channels x inner array (dense: inner = 1; conv: inner = H*W);
  // biasGrad[c] = sum over o and i of grad[o][c][i].
  virtual void addBias(int outer, int channels, int inner, const float* bias, float* out) = 0;
  virtual void biasGradient(int outer, int channels, int inner, const float* grad, float* biasGrad) = 0;

  virtual void reluForward(std::int64_t count, const float* in, float* out) = 0;
  // gradIn = gradOut where out > 0, else 0.
  virtual void reluBackward(std::int64_t count, const float* out, const float* gradOut, float* gradIn) = 0;

  // Columns for a batch of images: cols is (C*k*k) x (batch*outH*outW), column j = output pixel j.
  virtual void im2col(const Window& w, int batch, const float* images, float* cols) = 0;
  // The adjoint of im2col: images (batch x C x H x W) = sum of the columns' contributions.
  virtual void col2im(const Window& w, int batch, const float* cols, float* images) = 0;

  // Max pooling; argmax receives the input offset of each output's maximum (for the backward pass).
  virtual void maxPoolForward(const Window& w, int batch, const float* in, float* out, std::int32_t* argmax) = 0;
  virtual void maxPoolBackward(const Window& w, int batch, const float* gradOut, const std::int32_t* argmax,
                               float* gradIn) = 0;

  // Mean softmax cross-entropy over the batch; gradLogits = (softmax - onehot) / batch. Returns the
  // loss; `correct` receives how many rows' argmax equals the label.
  virtual double softmaxCrossEntropy(int batch, int classes, const float* logits, const std::int32_t* labels,
                                     float* gradLogits, std::int64_t* correct) = 0;
};

// Names accepted by makeBackend: "eigen".
std::unique_ptr<Backend> makeBackend(const std::string& name);

}  // namespace adaprec::trainer
