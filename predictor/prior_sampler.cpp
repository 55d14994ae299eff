#include "prior_sampler.hpp"

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor::detail {

PriorDraw samplePrior(const ModelOptions& model, int curveCount, const std::vector<double>& steps,
                      double stepScale, std::mt19937_64& rng) {
  model.check();
  ADAPREC_CHECK_ARG(curveCount > 0 && !steps.empty() && stepScale > 0,
                    "samplePrior: need curves, steps and a positive step scale");
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int attempt = 0; attempt < 100000; ++attempt) {
    PriorDraw draw;
    draw.family = model.families[static_cast<std::size_t>(unit(rng) * model.families.size()) % model.families.size()];
    draw.theta = familyTheta(draw.family, unit(rng), unit(rng));
    draw.noiseSd = model.noiseMin * std::pow(model.noiseMax / model.noiseMin, unit(rng));
    const std::size_t sharedCount = model.sharedNoiseSds.size();
    draw.sharedSd = model.sharedNoiseSds[static_cast<std::size_t>(unit(rng) * sharedCount) % sharedCount];
    std::vector<double> shared;  // s_t, one per step, common to every curve
    for (std::size_t t = 0; t < steps.size(); ++t) shared.push_back(draw.sharedSd * normal(rng));
    bool valid = true;
    for (int c = 0; c < curveCount && valid; ++c) {
      const double a = model.startMean + model.startSd * normal(rng);
      double b = -1;
      while (b < 0) b = model.gainMean + model.gainSd * normal(rng);
      Curve curve;
      for (std::size_t t = 0; t < steps.size(); ++t) {
        const double step = steps[t];
        const double y =
            a + b * basis(draw.family, draw.theta, step / stepScale) + shared[t] + draw.noiseSd * normal(rng);
        if (!(y >= 0 && y <= 1)) valid = false;
        curve.steps.push_back(step);
        curve.values.push_back(y);
      }
      draw.start.push_back(a);
      draw.gain.push_back(b);
      draw.curves.push_back(std::move(curve));
    }
    if (valid) return draw;
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "samplePrior: no draw inside [0, 1] in 100000 attempts");
}

}  // namespace adaprec::predictor::detail
