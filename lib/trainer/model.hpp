// A sequential classifier: named layers, one flat parameter buffer and one flat gradient buffer laid
// out layer by layer (so each layer's gradients are one contiguous range), softmax cross-entropy on top.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend.hpp"
#include "layers.hpp"

namespace adaprec::trainer {

// The contiguous range of the flat buffers holding one layer's parameters (weight then bias).
struct LayerRange {
  std::string name;  // "conv1", "fc1", ...
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

struct StepResult {
  double loss = 0.0;         // mean over the batch
  std::int64_t correct = 0;  // argmax hits in the batch
};

class Model {
 public:
  Model(std::string name, Shape input, int classes);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Building: layers are appended with a name; call finalize() once before use.
  Model& add(std::string layerName, std::unique_ptr<Layer> layer);
  Shape lastShape() const;
  void finalize();
  // Draws every layer's initial parameters from rng.
  void initialize(std::mt19937_64& rng);

  // Forward + backward on one mini-batch: gradients() then holds d(mean loss)/d(params). Backward runs
  // from the last layer to the first; after each layer, `gradientsFinalFrom(offset)` (when given) is
  // told that the gradients at flat offsets >= offset are final (a reducer may start on them while
  // backward goes on below: nothing later writes there).
  StepResult trainStep(Backend& backend, int batch, const float* images, const std::int32_t* labels,
                       const std::function<void(std::int64_t)>& gradientsFinalFrom = {});
  // Forward only; returns the summed (not mean) loss so that evaluators can add across batches/ranks.
  StepResult evaluate(Backend& backend, int batch, const float* images, const std::int32_t* labels);

  const std::string& name() const { return name_; }
  Shape inputShape() const { return input_; }
  int classes() const { return classes_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> gradients() { return grads_; }
  const std::vector<LayerRange>& layerRanges() const { return ranges_; }
  // "fc1.weight 1568x512 ..." one line per parameterized layer.
  std::string summary() const;
  std::size_t layerCount() const { return layers_.size(); }
  Layer& layer(std::size_t i) { return *layers_[i]; }

 private:
  void forward(Backend& backend, int batch, const float* images);

  std::string name_;
  Shape input_;
  int classes_;
  bool finalized_ = false;
  std::vector<std::string> layerNames_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> shapes_;  // output shape of each layer
  std::vector<LayerRange> ranges_;
  std::vector<std::int64_t> layerOffsets_;
  std::vector<float> params_, grads_;
  std::vector<std::vector<float>> activations_, activationGrads_;
  std::vector<float> logitGrad_;
};

// Names accepted by makeModel: "mlp" (784-512-512-10 for 28x28 inputs) and "cnn" (two 5x5 conv +
// pool stages, then a large fully-connected layer holding most of the parameters, CaffeNet's shape).
std::unique_ptr<Model> makeModel(const std::string& name, Shape input, int classes);

}  // namespace adaprec::trainer
