#include "prior_sampler.hpp"

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor::detail {

PriorDraw samplePrior(const ModelOptions& model, int curveCount, const std::vector<double>& steps,
                      double stepScale, std::mt19937_64& rng) {
  model.check();
  ADAPREC_CHECK_ARG(!model.lrSchedule, "samplePrior: a learning-rate schedule is not supported");
  ADAPREC_CHECK_ARG(curveCount > 0 && !steps.empty() && stepScale > 0,
                    "samplePrior: need curves, steps and a positive step scale");
  ADAPREC_CHECK_ARG(!model.shapePrior || stepScale == model.shapePrior->stepScale,
                    "samplePrior: a shape prior's shapes are in its own step scale " << model.shapePrior->stepScale);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const ShapeDensity shape(model);
  for (int attempt = 0; attempt < 100000; ++attempt) {
    PriorDraw draw;
    double u0 = 0, u1 = 0;
    shape.sample(rng, draw.family, u0, u1);
    draw.theta = familyTheta(draw.family, u0, u1);
    draw.noiseSd = model.noiseMin * std::pow(model.noiseMax / model.noiseMin, unit(rng));
    const std::size_t sharedCount = model.sharedNoiseSds.size();
    draw.sharedSd = model.sharedNoiseSds[static_cast<std::size_t>(unit(rng) * sharedCount) % sharedCount];
    std::vector<double> shared;  // s_t, one per step, common to every curve
    for (std::size_t t = 0; t < steps.size(); ++t) shared.push_back(draw.sharedSd * normal(rng));
    // Starts first: the headroom gain prior scales with the curves' mean first value, which does not
    // depend on the gains when the first step is 0 (g(0) = 0); otherwise the mean start stands in for it.
    std::vector<double> firstNoise;
    double first = 0;
    for (int c = 0; c < curveCount; ++c) {
      draw.start.push_back(model.startMean + model.startSd * normal(rng));
      firstNoise.push_back(draw.noiseSd * normal(rng));
      first += (draw.start.back() + (steps[0] == 0 ? shared[0] + firstNoise.back() : 0.0)) / curveCount;
    }
    const double gainMean = model.gainHeadroomSd > 0 ? 0.0 : model.gainMean;
    const double gainSd = model.gainHeadroomSd > 0 ? headroomGainSd(model.gainHeadroomSd, first) : model.gainSd;
    // The gain prior is on b, or with gainAtStepScale on b g(1; theta).
    const double toGain = 1.0 / priorGainScale(model, draw.family, draw.theta);
    bool valid = true;
    for (int c = 0; c < curveCount && valid; ++c) {
      const double a = draw.start[static_cast<std::size_t>(c)];
      double b = -1;
      while (b < 0) b = gainMean + gainSd * normal(rng);
      b *= toGain;
      Curve curve;
      for (std::size_t t = 0; t < steps.size(); ++t) {
        const double step = steps[t];
        const double noise = t == 0 ? firstNoise[static_cast<std::size_t>(c)] : draw.noiseSd * normal(rng);
        const double y = a + b * basis(draw.family, draw.theta, step / stepScale) + shared[t] + noise;
        if (!(y >= 0 && y <= 1)) valid = false;
        curve.steps.push_back(step);
        curve.values.push_back(y);
      }
      draw.gain.push_back(b);
      draw.curves.push_back(std::move(curve));
    }
    if (valid) return draw;
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "samplePrior: no draw inside [0, 1] in 100000 attempts");
}

}  // namespace adaprec::predictor::detail
