// Finite-difference gradient checks for every layer, the loss, and whole models.
// For a layer with output y and a fixed random weighting r, L = sum(r * y); backward(gradOut = r)
// must give dL/dparams and dL/dinput. Central differences in float with a step of 1e-2 give about
// three significant digits, so the tolerance is relative 2e-2 (with an absolute floor).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "trainer/backend.hpp"
#include "trainer/layers.hpp"
#include "trainer/model.hpp"

using namespace adaprec::trainer;

namespace {

constexpr std::uint64_t kSeed = 20261121;

std::vector<float> randomVector(std::mt19937_64& rng, std::size_t n, float awayFromZero = 0.0f) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = d(rng);
    while (std::fabs(x) < awayFromZero);
  }
  return v;
}

// Numeric derivative of f with respect to x[i].
double centralDifference(std::vector<float>& x, std::size_t i, const std::function<double()>& f, float step) {
  const float saved = x[i];
  x[i] = saved + step;
  const double up = f();
  x[i] = saved - step;
  const double down = f();
  x[i] = saved;
  return (up - down) / (2.0 * step);
}

void expectClose(double analytic, double numeric, const std::string& what) {
  INFO(what << ": analytic " << analytic << " numeric " << numeric);
  CHECK(std::fabs(analytic - numeric) <= 2e-2 * std::max(std::fabs(numeric), 5e-2));
}

// Checks a single layer: parameters (when it has any) and input gradients, every element.
void checkLayer(Layer& layer, Shape input, int batch, float inputMagnitudeFloor, float step) {
  auto backend = makeBackend("eigen");
  std::mt19937_64 rng(kSeed);
  INFO("seed " << kSeed << ", layer " << layer.kind());
  std::int64_t paramCount = 0;
  for (const auto& p : layer.params()) paramCount += p.count;
  std::vector<float> params(static_cast<std::size_t>(paramCount)), grads(params.size());
  layer.bind(params.data(), grads.data());
  layer.initialize(rng);
  for (auto& p : params) p += std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);  // non-zero biases
  std::vector<float> in = randomVector(rng, static_cast<std::size_t>(batch * input.size()), inputMagnitudeFloor);
  const std::size_t outCount = static_cast<std::size_t>(batch * layer.outputShape().size());
  std::vector<float> weighting = randomVector(rng, outCount);
  std::vector<float> out(outCount), gradIn(in.size());

  auto lossOf = [&]() {
    layer.forward(*backend, batch, in.data(), out.data());
    double s = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) s += static_cast<double>(weighting[i]) * out[i];
    return s;
  };
  lossOf();
  layer.backward(*backend, batch, in.data(), out.data(), weighting.data(), gradIn.data());
  const std::vector<float> analyticParams = grads;

  for (std::size_t i = 0; i < params.size(); ++i) {
    expectClose(analyticParams[i], centralDifference(params, i, lossOf, step), "param " + std::to_string(i));
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    expectClose(gradIn[i], centralDifference(in, i, lossOf, step), "input " + std::to_string(i));
  }
}

}  // namespace

TEST_CASE("dense layer gradients", "[trainer][grad]") {
  Dense layer({7, 1, 1}, 5);
  checkLayer(layer, {7, 1, 1}, 3, 0.0f, 1e-2f);
}

TEST_CASE("relu gradients away from the kink", "[trainer][grad]") {
  Relu layer({4, 3, 3});
  checkLayer(layer, {4, 3, 3}, 2, 0.05f, 1e-2f);
}

TEST_CASE("conv2d gradients, same padding and strided", "[trainer][grad]") {
  SECTION("5x5 same padding") {
    Conv2d layer({2, 6, 6}, 3, 5, 1, 2);
    checkLayer(layer, {2, 6, 6}, 2, 0.0f, 1e-2f);
  }
  SECTION("3x3 stride 2 no padding") {
    Conv2d layer({3, 7, 7}, 2, 3, 2, 0);
    checkLayer(layer, {3, 7, 7}, 2, 0.0f, 1e-2f);
  }
}

TEST_CASE("max-pool gradients (distinct inputs, small step)", "[trainer][grad]") {
  MaxPool layer({2, 6, 6}, 2, 2);
  // Random inputs in [-1, 1] have gaps far larger than the 1e-3 step almost surely; a tie would flip
  // the argmax and show up as a mismatch that names the element.
  checkLayer(layer, {2, 6, 6}, 2, 0.0f, 1e-3f);
}

TEST_CASE("softmax cross-entropy gradient and value", "[trainer][grad]") {
  auto backend = makeBackend("eigen");
  std::mt19937_64 rng(kSeed);
  const int batch = 4, classes = 5;
  std::vector<float> logits = randomVector(rng, batch * classes);
  std::vector<std::int32_t> labels = {0, 3, 4, 1};
  std::vector<float> grad(logits.size());
  std::int64_t correct = 0;
  backend->softmaxCrossEntropy(batch, classes, logits.data(), labels.data(), grad.data(), &correct);
  auto lossOf = [&]() {
    return backend->softmaxCrossEntropy(batch, classes, logits.data(), labels.data(), nullptr, nullptr);
  };
  for (std::size_t i = 0; i < logits.size(); ++i) {
    expectClose(grad[i], centralDifference(logits, i, lossOf, 1e-2f), "logit " + std::to_string(i));
  }
  // Uniform logits: loss is log(classes) exactly.
  std::vector<float> flat(batch * classes, 0.25f);
  CHECK(backend->softmaxCrossEntropy(batch, classes, flat.data(), labels.data(), nullptr, nullptr) ==
        Approx(std::log(5.0)).epsilon(1e-9));
}

TEST_CASE("whole-model gradients (small mlp and cnn on 8x8 inputs)", "[trainer][grad]") {
  auto backend = makeBackend("eigen");
  for (const char* name : {"mlp", "cnn"}) {
    INFO("model " << name << " seed " << kSeed);
    auto model = makeModel(name, {1, 8, 8}, 4);
    std::mt19937_64 rng(kSeed);
    model->initialize(rng);
    const int batch = 3;
    std::vector<float> images = randomVector(rng, batch * 64);
    std::vector<std::int32_t> labels = {1, 0, 3};
    model->trainStep(*backend, batch, images.data(), labels.data());
    std::vector<float> analytic(model->gradients().begin(), model->gradients().end());
    std::span<float> params = model->parameters();
    std::vector<float> paramCopy(params.begin(), params.end());
    auto lossOf = [&]() {
      std::copy(paramCopy.begin(), paramCopy.end(), params.begin());
      return model->evaluate(*backend, batch, images.data(), labels.data()).loss / batch;
    };
    // Every 37th parameter (the full sweep is the single-layer tests' job). Through a whole network
    // a step can cross a ReLU kink or flip a pooling argmax (those elements then legitimately differ),
    // so the criterion is that at least 97% of the sampled elements agree and the rest are rare.
    std::size_t checked = 0, agreeing = 0;
    double analytic2 = 0.0;
    for (std::size_t i = 0; i < paramCopy.size(); i += 37) {
      const double numeric = centralDifference(paramCopy, i, lossOf, 1e-3f);
      agreeing += std::fabs(analytic[i] - numeric) <= 5e-2 * std::max(std::fabs(numeric), 2e-2);
      analytic2 += static_cast<double>(analytic[i]) * analytic[i];
      ++checked;
    }
    INFO(agreeing << " of " << checked << " sampled parameters agree");
    CHECK(agreeing >= 0.97 * checked);
    CHECK(analytic2 > 0.0);
    CHECK(checked > 100);
  }
}
