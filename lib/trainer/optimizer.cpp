#include "optimizer.hpp"

#include "adaprec/error.hpp"

namespace adaprec::trainer {

MomentumSgd::MomentumSgd(std::size_t count, float momentum, float weightDecay)
    : momentum_(momentum), weightDecay_(weightDecay), velocity_(count, 0.0f) {
  ADAPREC_CHECK_ARG(momentum >= 0.0f && momentum < 1.0f, "momentum " << momentum << " outside [0, 1)");
  ADAPREC_CHECK_ARG(weightDecay >= 0.0f, "weight decay " << weightDecay << " is negative");
}

void MomentumSgd::step(std::span<float> params, std::span<const float> grads, float lr) {
  ADAPREC_CHECK(params.size() == velocity_.size() && grads.size() == velocity_.size(), ErrorCode::kMismatch,
                "optimizer sized for " << velocity_.size() << " parameters got " << params.size() << "/"
                                       << grads.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i] + weightDecay_ * params[i];
    velocity_[i] = momentum_ * velocity_[i] + g;
    params[i] -= lr * velocity_[i];
  }
}

}  // namespace adaprec::trainer
