// Momentum SGD with weight decay (PyTorch's formulation, so that the PyTorch benchmark and the
// equivalence tests compare like with like):  v = mu * v + (g + wd * w);  w = w - lr * v.
#pragma once

#include <span>
#include <vector>

namespace adaprec::trainer {

class MomentumSgd {
 public:
  MomentumSgd(std::size_t count, float momentum, float weightDecay);
  void step(std::span<float> params, std::span<const float> grads, float lr);
  std::vector<float>& velocity() { return velocity_; }
  const std::vector<float>& velocity() const { return velocity_; }

 private:
  float momentum_, weightDecay_;
  std::vector<float> velocity_;
};

}  // namespace adaprec::trainer
