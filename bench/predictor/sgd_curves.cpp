#include "sgd_curves.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace adaprec::bench {

namespace {
constexpr int kInputs = 10, kHidden = 16, kClasses = 3;
constexpr int kTrain = 4000, kValidation = 500, kBatch = 16;
constexpr int kWarmupSteps = 40, kStepsPerEval = 20;

struct Dataset {
  std::vector<float> x;  // row-major, kInputs per sample
  std::vector<int> label;
};

struct Mlp {
  std::vector<float> w1 = std::vector<float>(kHidden * kInputs), b1 = std::vector<float>(kHidden);
  std::vector<float> w2 = std::vector<float>(kClasses * kHidden), b2 = std::vector<float>(kClasses);
};

Dataset makeData(int count, const std::vector<float>& centers, double labelNoise, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Dataset d;
  for (int i = 0; i < count; ++i) {
    const int cls = static_cast<int>(unit(rng) * kClasses) % kClasses;
    for (int j = 0; j < kInputs; ++j) d.x.push_back(centers[cls * kInputs + j] + normal(rng));
    int label = cls;
    if (unit(rng) < labelNoise) label = static_cast<int>(unit(rng) * kClasses) % kClasses;
    d.label.push_back(label);
  }
  return d;
}

// Forward pass; returns the logits in out (kClasses) and hidden activations in hidden.
void forward(const Mlp& m, const float* x, float* hidden, float* out) {
  for (int h = 0; h < kHidden; ++h) {
    float s = m.b1[h];
    for (int j = 0; j < kInputs; ++j) s += m.w1[h * kInputs + j] * x[j];
    hidden[h] = std::tanh(s);
  }
  for (int k = 0; k < kClasses; ++k) {
    float s = m.b2[k];
    for (int h = 0; h < kHidden; ++h) s += m.w2[k * kHidden + h] * hidden[h];
    out[k] = s;
  }
}

double accuracy(const Mlp& m, const Dataset& d) {
  int correct = 0;
  float hidden[kHidden], out[kClasses];
  for (std::size_t i = 0; i < d.label.size(); ++i) {
    forward(m, &d.x[i * kInputs], hidden, out);
    correct += static_cast<int>(std::max_element(out, out + kClasses) - out) == d.label[i];
  }
  return static_cast<double>(correct) / d.label.size();
}

// Rounds to `mantissaBits` explicit mantissa bits, round-to-nearest-even (exponent range untouched).
float roundMantissa(float v, int mantissaBits) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const int drop = 23 - mantissaBits;
  const std::uint32_t half = 1u << (drop - 1);
  const std::uint32_t lsb = (bits >> drop) & 1u;
  bits = (bits + half - 1 + lsb) & ~((1u << drop) - 1);
  std::memcpy(&v, &bits, 4);
  return v;
}

// The candidate precisions: 0 fp32, 1 bf16, 2 e4m3-like (3 bits), 3 e5m2-like (2 bits), 4 sign*mean|g|.
void compress(std::vector<float>& g, int precision) {
  if (precision == 0) return;
  if (precision == 4) {
    double mean = 0;
    for (float v : g) mean += std::abs(v);
    mean /= g.size();
    for (float& v : g) v = v >= 0 ? static_cast<float>(mean) : -static_cast<float>(mean);
    return;
  }
  const int bits = precision == 1 ? 7 : precision == 2 ? 3 : 2;
  for (float& v : g) v = roundMantissa(v, bits);
}

void sgdStep(Mlp& m, const Dataset& d, double lr, int precision, std::mt19937_64& rng) {
  std::vector<float> gw1(m.w1.size()), gb1(m.b1.size()), gw2(m.w2.size()), gb2(m.b2.size());
  std::uniform_int_distribution<int> pick(0, static_cast<int>(d.label.size()) - 1);
  float hidden[kHidden], out[kClasses];
  for (int s = 0; s < kBatch; ++s) {
    const int i = pick(rng);
    const float* x = &d.x[i * kInputs];
    forward(m, x, hidden, out);
    const float mx = *std::max_element(out, out + kClasses);
    float p[kClasses], sum = 0;
    for (int k = 0; k < kClasses; ++k) sum += p[k] = std::exp(out[k] - mx);
    float dh[kHidden] = {};
    for (int k = 0; k < kClasses; ++k) {
      const float dk = (p[k] / sum - (k == d.label[i] ? 1.0f : 0.0f)) / kBatch;
      gb2[k] += dk;
      for (int h = 0; h < kHidden; ++h) {
        gw2[k * kHidden + h] += dk * hidden[h];
        dh[h] += dk * m.w2[k * kHidden + h];
      }
    }
    for (int h = 0; h < kHidden; ++h) {
      const float dz = dh[h] * (1 - hidden[h] * hidden[h]);
      gb1[h] += dz;
      for (int j = 0; j < kInputs; ++j) gw1[h * kInputs + j] += dz * x[j];
    }
  }
  std::vector<float>* grads[] = {&gw1, &gb1, &gw2, &gb2};
  std::vector<float>* params[] = {&m.w1, &m.b1, &m.w2, &m.b2};
  for (int t = 0; t < 4; ++t) {
    compress(*grads[t], precision);
    for (std::size_t i = 0; i < grads[t]->size(); ++i) (*params[t])[i] -= static_cast<float>(lr) * (*grads[t])[i];
  }
}
}  // namespace

SgdCurveSet trainSgdCurves(std::uint64_t seed, int points) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  SgdCurveSet set;
  set.learningRate = 0.02 * std::pow(20.0, unit(rng));   // 0.02 .. 0.4
  set.labelNoise = 0.25 * unit(rng);
  set.separation = 0.35 + 0.5 * unit(rng);
  std::vector<float> centers(kClasses * kInputs);
  for (float& c : centers) c = static_cast<float>(set.separation) * normal(rng);
  const Dataset train = makeData(kTrain, centers, set.labelNoise, rng);
  const Dataset validation = makeData(kValidation, centers, set.labelNoise, rng);
  Mlp checkpoint;
  for (float& w : checkpoint.w1) w = normal(rng) / std::sqrt(static_cast<float>(kInputs));
  for (float& w : checkpoint.w2) w = normal(rng) / std::sqrt(static_cast<float>(kHidden));
  for (int s = 0; s < kWarmupSteps; ++s) sgdStep(checkpoint, train, set.learningRate, 0, rng);
  set.checkpointStep = kWarmupSteps;
  set.checkpointAccuracy = accuracy(checkpoint, validation);
  for (int precision = 0; precision < 5; ++precision) {
    Mlp m = checkpoint;
    std::mt19937_64 branchRng(seed * 7919 + precision);
    predictor::Curve curve;
    for (int e = 1; e <= points; ++e) {
      for (int s = 0; s < kStepsPerEval; ++s) sgdStep(m, train, set.learningRate, precision, branchRng);
      curve.steps.push_back(kWarmupSteps + e * kStepsPerEval);
      curve.values.push_back(accuracy(m, validation));
      curve.sampleCounts.push_back(kValidation);
    }
    set.curves.push_back(std::move(curve));
  }
  return set;
}

}  // namespace adaprec::bench
