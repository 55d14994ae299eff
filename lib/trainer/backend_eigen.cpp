// The CPU backend: GEMM through Eigen, the rest as plain loops. Eigen is single-threaded here (no
// OpenMP): ranks are the unit of parallelism, and one thread per rank keeps every result reproducible.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>

#include "adaprec/error.hpp"
#include "backend.hpp"

namespace adaprec::trainer {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstView = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using View = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename A, typename B>
void gemmInto(View& c, float alpha, const A& a, const B& b, float beta) {
  if (beta == 0.0f) {
    c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    c.noalias() += alpha * (a * b);
  }
}

class EigenBackend final : public Backend {
 public:
  std::string_view name() const override { return "eigen"; }

  void gemm(bool transA, bool transB, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    View cv(c, m, n, Eigen::OuterStride<>(ldc));
    ConstView av(a, transA ? k : m, transA ? m : k, Eigen::OuterStride<>(lda));
    ConstView bv(b, transB ? n : k, transB ? k : n, Eigen::OuterStride<>(ldb));
    if (!transA && !transB) gemmInto(cv, alpha, av, bv, beta);
    else if (transA && !transB) gemmInto(cv, alpha, av.transpose(), bv, beta);
    else if (!transA && transB) gemmInto(cv, alpha, av, bv.transpose(), beta);
    else gemmInto(cv, alpha, av.transpose(), bv.transpose(), beta);
  }

  void addBias(int outer, int channels, int inner, const float* bias, float* out) override {
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        float* row = out + (static_cast<std::int64_t>(o) * channels + c) * inner;
        const float bc = bias[c];
        for (int i = 0; i < inner; ++i) row[i] += bc;
      }
    }
  }

  void biasGradient(int outer, int channels, int inner, const float* grad, float* biasGrad) override {
    std::fill(biasGrad, biasGrad + channels, 0.0f);
    for (int o = 0; o < outer; ++o) {
      for (int c = 0; c < channels; ++c) {
        const float* row = grad + (static_cast<std::int64_t>(o) * channels + c) * inner;
        float s = 0.0f;
        for (int i = 0; i < inner; ++i) s += row[i];
        biasGrad[c] += s;
      }
    }
  }

  void reluForward(std::int64_t count, const float* in, float* out) override {
    for (std::int64_t i = 0; i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  }

  void reluBackward(std::int64_t count, const float* out, const float* gradOut, float* gradIn) override {
    for (std::int64_t i = 0; i < count; ++i) gradIn[i] = out[i] > 0.0f ? gradOut[i] : 0.0f;
  }

  void im2col(const Window& w, int batch, const float* images, float* cols) override {
    const int oh = w.outHeight(), ow = w.outWidth();
    const std::int64_t colCount = static_cast<std::int64_t>(batch) * oh * ow;
    const std::int64_t imageSize = static_cast<std::int64_t>(w.channels) * w.height * w.width;
    for (int c = 0; c < w.channels; ++c) {
      for (int ki = 0; ki < w.kernel; ++ki) {
        for (int kj = 0; kj < w.kernel; ++kj) {
          float* row = cols + ((static_cast<std::int64_t>(c) * w.kernel + ki) * w.kernel + kj) * colCount;
          for (int n = 0; n < batch; ++n) {
            const float* plane = images + n * imageSize + static_cast<std::int64_t>(c) * w.height * w.width;
            float* dst = row + static_cast<std::int64_t>(n) * oh * ow;
            for (int y = 0; y < oh; ++y) {
              const int iy = y * w.stride - w.pad + ki;
              for (int x = 0; x < ow; ++x) {
                const int ix = x * w.stride - w.pad + kj;
                const bool inside = iy >= 0 && iy < w.height && ix >= 0 && ix < w.width;
                dst[y * ow + x] = inside ? plane[iy * w.width + ix] : 0.0f;
              }
            }
          }
        }
      }
    }
  }

  void col2im(const Window& w, int batch, const float* cols, float* images) override {
    const int oh = w.outHeight(), ow = w.outWidth();
    const std::int64_t colCount = static_cast<std::int64_t>(batch) * oh * ow;
    const std::int64_t imageSize = static_cast<std::int64_t>(w.channels) * w.height * w.width;
    std::fill(images, images + batch * imageSize, 0.0f);
    for (int c = 0; c < w.channels; ++c) {
      for (int ki = 0; ki < w.kernel; ++ki) {
        for (int kj = 0; kj < w.kernel; ++kj) {
          const float* row = cols + ((static_cast<std::int64_t>(c) * w.kernel + ki) * w.kernel + kj) * colCount;
          for (int n = 0; n < batch; ++n) {
            float* plane = images + n * imageSize + static_cast<std::int64_t>(c) * w.height * w.width;
            const float* src = row + static_cast<std::int64_t>(n) * oh * ow;
            for (int y = 0; y < oh; ++y) {
              const int iy = y * w.stride - w.pad + ki;
              if (iy < 0 || iy >= w.height) continue;
              for (int x = 0; x < ow; ++x) {
                const int ix = x * w.stride - w.pad + kj;
                if (ix >= 0 && ix < w.width) plane[iy * w.width + ix] += src[y * ow + x];
              }
            }
          }
        }
      }
    }
  }

  void maxPoolForward(const Window& w, int batch, const float* in, float* out, std::int32_t* argmax) override {
    const int oh = w.outHeight(), ow = w.outWidth();
    const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
    for (std::int64_t p = 0; p < planes; ++p) {
      const float* plane = in + p * w.height * w.width;
      for (int y = 0; y < oh; ++y) {
        for (int x = 0; x < ow; ++x) {
          float best = -std::numeric_limits<float>::infinity();
          std::int32_t bestAt = -1;
          for (int ki = 0; ki < w.kernel; ++ki) {
            const int iy = y * w.stride - w.pad + ki;
            if (iy < 0 || iy >= w.height) continue;
            for (int kj = 0; kj < w.kernel; ++kj) {
              const int ix = x * w.stride - w.pad + kj;
              if (ix < 0 || ix >= w.width) continue;
              const float v = plane[iy * w.width + ix];
              if (bestAt < 0 || v > best) {
                best = v;
                bestAt = iy * w.width + ix;
              }
            }
          }
          const std::int64_t o = (p * oh + y) * ow + x;
          out[o] = best;
          argmax[o] = bestAt;
        }
      }
    }
  }

  void maxPoolBackward(const Window& w, int batch, const float* gradOut, const std::int32_t* argmax,
                       float* gradIn) override {
    const std::int64_t outPlane = static_cast<std::int64_t>(w.outHeight()) * w.outWidth();
    const std::int64_t inPlane = static_cast<std::int64_t>(w.height) * w.width;
    const std::int64_t planes = static_cast<std::int64_t>(batch) * w.channels;
    std::fill(gradIn, gradIn + planes * inPlane, 0.0f);
    for (std::int64_t p = 0; p < planes; ++p) {
      for (std::int64_t o = 0; o < outPlane; ++o) {
        gradIn[p * inPlane + argmax[p * outPlane + o]] += gradOut[p * outPlane + o];
      }
    }
  }

  double softmaxCrossEntropy(int batch, int classes, const float* logits, const std::int32_t* labels,
                             float* gradLogits, std::int64_t* correct) override {
    double loss = 0.0;
    std::int64_t hits = 0;
    const float invBatch = 1.0f / static_cast<float>(batch);
    for (int n = 0; n < batch; ++n) {
      const float* z = logits + static_cast<std::int64_t>(n) * classes;
      const int label = labels[n];
      ADAPREC_CHECK_ARG(label >= 0 && label < classes, "label " << label << " outside [0, " << classes << ")");
      int best = 0;
      for (int c = 1; c < classes; ++c) best = z[c] > z[best] ? c : best;
      hits += best == label;
      const float zmax = z[best];
      double sum = 0.0;
      for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
      loss += std::log(sum) - static_cast<double>(z[label] - zmax);
      if (gradLogits != nullptr) {
        float* g = gradLogits + static_cast<std::int64_t>(n) * classes;
        for (int c = 0; c < classes; ++c) {
          const float p = static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) / sum);
          g[c] = (p - (c == label ? 1.0f : 0.0f)) * invBatch;
        }
      }
    }
    if (correct != nullptr) *correct = hits;
    return loss / batch;
  }
};

}  // namespace

std::unique_ptr<Backend> makeBackend(const std::string& name) {
  if (name == "eigen") return std::make_unique<EigenBackend>();
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, "unknown trainer backend '" << name << "' (valid: eigen)");
}

}  // namespace adaprec::trainer
