// Real learning curves for the predictor benchmark: a small MLP trained by SGD on a synthetic
// classification task, validation accuracy measured on held-out samples (binomial noise, count known).
// Several "candidate precisions" branch from one fp32 checkpoint: the gradient is rounded to bf16, a
// 3-bit or 2-bit mantissa, or replaced by its sign times the mean magnitude before the update. This
// generator shares nothing with the predictor's parametric families.
#pragma once

#include <cstdint>
#include <vector>

#include "adaprec/predictor.hpp"

namespace adaprec::bench {

struct SgdCurveSet {
  std::vector<predictor::Curve> curves;  // one per precision, 30 points each, with sample counts
  double learningRate = 0, labelNoise = 0, separation = 0;
  // The shared checkpoint's own evaluation (same validation set): the point every branch starts from,
  // which the precision controller passes to the predictor as each curve's first point.
  double checkpointStep = 0, checkpointAccuracy = 0;
};

SgdCurveSet trainSgdCurves(std::uint64_t seed, int points = 30);

}  // namespace adaprec::bench
