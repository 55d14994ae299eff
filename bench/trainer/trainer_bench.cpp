// Single-rank training throughput of the embedded trainer's models (forward + backward + momentum SGD
// step, no communication) on random images. bench/trainer/compare_pytorch.py runs this next to the
// same model in PyTorch and prints the ratio; run alone it prints one JSON line.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "adaprec/error.hpp"
#include "trainer/backend.hpp"
#include "trainer/model.hpp"
#include "trainer/optimizer.hpp"

int main(int argc, char** argv) {
  std::string modelName = "cnn";
  int batch = 32, steps = 50, warmup = 5;
  CLI::App app{"Single-rank training throughput of adaprec-train's models"};
  app.add_option("--model", modelName, "mlp or cnn")->capture_default_str();
  app.add_option("--batch", batch, "Mini-batch size")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    using namespace adaprec::trainer;
    auto backend = makeBackend("eigen");
    auto model = makeModel(modelName, Shape{1, 28, 28}, 10);
    std::mt19937_64 rng(1);
    model->initialize(rng);
    MomentumSgd sgd(model->parameters().size(), 0.9f, 5e-4f);
    std::normal_distribution<float> pixel(0.0f, 1.0f);
    std::vector<float> images(static_cast<std::size_t>(batch) * 784);
    for (float& p : images) p = pixel(rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
    auto runStep = [&] {
      model->trainStep(*backend, batch, images.data(), labels.data());
      sgd.step(model->parameters(), model->gradients(), 0.01f);
    };
    for (int i = 0; i < warmup; ++i) runStep();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) runStep();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("{\"impl\": \"adaprec-eigen\", \"model\": \"%s\", \"batch\": %d, \"steps\": %d, \"seconds\": %.6f, "
                "\"images_per_s\": %.1f}\n",
                modelName.c_str(), batch, steps, seconds, steps * static_cast<double>(batch) / seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-trainer-bench: error: %s\n", adaprec::messageForUsers(e).c_str());
    return 1;
  }
  return 0;
}
