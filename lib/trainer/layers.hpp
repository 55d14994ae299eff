// Layers of the embedded trainer. A layer owns no parameter memory: the Model lays every layer's
// parameters (and gradients) out contiguously in one flat buffer, layer after layer, so that gradient
// reduction can work per layer or on fused buckets without copying. Layers keep the scratch they need
// between forward and backward (im2col columns, pooling argmax).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"

namespace adaprec::trainer {

// Shape of one sample (the batch dimension is separate): channels x height x width; a vector of
// n features is {n, 1, 1}.
struct Shape {
  int channels = 1, height = 1, width = 1;
  std::int64_t size() const { return static_cast<std::int64_t>(channels) * height * width; }
  friend bool operator==(const Shape&, const Shape&) = default;
};

struct ParamSpec {
  std::string name;   // "weight", "bias"
  std::int64_t count;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;
  virtual Shape outputShape() const = 0;
  virtual std::vector<ParamSpec> params() const { return {}; }
  // Points the layer at its slice of the model's flat parameter and gradient buffers.
  virtual void bind(float* /*params*/, float* /*grads*/) {}
  virtual void initialize(std::mt19937_64& /*rng*/) {}
  virtual void forward(Backend& backend, int batch, const float* in, float* out) = 0;
  // Writes this layer's parameter gradients (overwriting) and, when gradIn is not null, the gradient
  // with respect to its input. `in` and `out` are the values of the preceding forward call.
  virtual void backward(Backend& backend, int batch, const float* in, const float* out, const float* gradOut,
                        float* gradIn) = 0;
};

class Dense final : public Layer {
 public:
  Dense(Shape input, int outputs);
  std::string kind() const override { return "dense"; }
  Shape outputShape() const override { return {outputs_, 1, 1}; }
  std::vector<ParamSpec> params() const override;
  void bind(float* params, float* grads) override;
  void initialize(std::mt19937_64& rng) override;
  void forward(Backend& backend, int batch, const float* in, float* out) override;
  void backward(Backend& backend, int batch, const float* in, const float* out, const float* gradOut,
                float* gradIn) override;

 private:
  int inputs_, outputs_;
  float *weight_ = nullptr, *bias_ = nullptr, *weightGrad_ = nullptr, *biasGrad_ = nullptr;
};

class Relu final : public Layer {
 public:
  explicit Relu(Shape input) : shape_(input) {}
  std::string kind() const override { return "relu"; }
  Shape outputShape() const override { return shape_; }
  void forward(Backend& backend, int batch, const float* in, float* out) override;
  void backward(Backend& backend, int batch, const float* in, const float* out, const float* gradOut,
                float* gradIn) override;

 private:
  Shape shape_;
};

// Square kernel, stride 1 by default; "same" padding when pad = kernel / 2.
class Conv2d final : public Layer {
 public:
  Conv2d(Shape input, int outChannels, int kernel, int stride, int pad);
  std::string kind() const override { return "conv2d"; }
  Shape outputShape() const override;
  std::vector<ParamSpec> params() const override;
  void bind(float* params, float* grads) override;
  void initialize(std::mt19937_64& rng) override;
  void forward(Backend& backend, int batch, const float* in, float* out) override;
  void backward(Backend& backend, int batch, const float* in, const float* out, const float* gradOut,
                float* gradIn) override;

 private:
  Window window_;
  int outChannels_;
  std::vector<float> cols_, colGrad_;
  float *weight_ = nullptr, *bias_ = nullptr, *weightGrad_ = nullptr, *biasGrad_ = nullptr;
};

class MaxPool final : public Layer {
 public:
  MaxPool(Shape input, int kernel, int stride);
  std::string kind() const override { return "maxpool"; }
  Shape outputShape() const override;
  void forward(Backend& backend, int batch, const float* in, float* out) override;
  void backward(Backend& backend, int batch, const float* in, const float* out, const float* gradOut,
                float* gradIn) override;

 private:
  Window window_;
  std::vector<std::int32_t> argmax_;
};

}  // namespace adaprec::trainer
