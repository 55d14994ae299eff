#include "model.hpp"

#include <sstream>

#include "adaprec/error.hpp"

namespace adaprec::trainer {

Model::Model(std::string name, Shape input, int classes) : name_(std::move(name)), input_(input), classes_(classes) {
  ADAPREC_CHECK_ARG(input.size() > 0 && classes >= 2, "model input size " << input.size() << ", classes " << classes);
}

Model& Model::add(std::string layerName, std::unique_ptr<Layer> layer) {
  ADAPREC_CHECK(!finalized_, ErrorCode::kInternal, "layer added after finalize()");
  shapes_.push_back(layer->outputShape());
  layerNames_.push_back(std::move(layerName));
  layers_.push_back(std::move(layer));
  return *this;
}

Shape Model::lastShape() const { return shapes_.empty() ? input_ : shapes_.back(); }

void Model::finalize() {
  ADAPREC_CHECK(!finalized_ && !layers_.empty(), ErrorCode::kInternal, "finalize() on an empty or final model");
  ADAPREC_CHECK_ARG(lastShape().size() == classes_,
                    "model " << name_ << " ends with " << lastShape().size() << " outputs for " << classes_ << " classes");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layerOffsets_.push_back(total);
    std::int64_t layerCount = 0;
    for (const ParamSpec& p : layers_[i]->params()) layerCount += p.count;
    if (layerCount > 0) ranges_.push_back({layerNames_[i], total, layerCount});
    total += layerCount;
  }
  params_.assign(static_cast<std::size_t>(total), 0.0f);
  grads_.assign(static_cast<std::size_t>(total), 0.0f);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->bind(params_.data() + layerOffsets_[i], grads_.data() + layerOffsets_[i]);
  }
  activations_.resize(layers_.size());
  activationGrads_.resize(layers_.size());
  finalized_ = true;
}

void Model::initialize(std::mt19937_64& rng) {
  for (auto& layer : layers_) layer->initialize(rng);
}

void Model::forward(Backend& backend, int batch, const float* images) {
  ADAPREC_CHECK(finalized_, ErrorCode::kInternal, "model used before finalize()");
  const float* in = images;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    activations_[i].resize(static_cast<std::size_t>(batch * shapes_[i].size()));
    layers_[i]->forward(backend, batch, in, activations_[i].data());
    in = activations_[i].data();
  }
}

StepResult Model::trainStep(Backend& backend, int batch, const float* images, const std::int32_t* labels,
                            const std::function<void(std::int64_t)>& gradientsFinalFrom) {
  forward(backend, batch, images);
  StepResult r;
  logitGrad_.resize(static_cast<std::size_t>(batch) * classes_);
  r.loss = backend.softmaxCrossEntropy(batch, classes_, activations_.back().data(), labels, logitGrad_.data(),
                                       &r.correct);
  const float* gradOut = logitGrad_.data();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? images : activations_[i - 1].data();
    float* gradIn = nullptr;
    if (i > 0) {
      activationGrads_[i - 1].resize(activations_[i - 1].size());
      gradIn = activationGrads_[i - 1].data();
    }
    layers_[i]->backward(backend, batch, in, activations_[i].data(), gradOut, gradIn);
    if (gradientsFinalFrom) gradientsFinalFrom(layerOffsets_[i]);
    gradOut = gradIn;
  }
  return r;
}

StepResult Model::evaluate(Backend& backend, int batch, const float* images, const std::int32_t* labels) {
  forward(backend, batch, images);
  StepResult r;
  r.loss = backend.softmaxCrossEntropy(batch, classes_, activations_.back().data(), labels, nullptr, &r.correct) *
           batch;
  return r;
}

std::string Model::summary() const {
  std::ostringstream os;
  std::int64_t total = 0;
  for (const LayerRange& r : ranges_) {
    os << "  " << r.name << ": " << r.count << " parameters\n";
    total += r.count;
  }
  os << "  total: " << total << " parameters";
  return os.str();
}

std::unique_ptr<Model> makeModel(const std::string& name, Shape input, int classes) {
  auto m = std::make_unique<Model>(name, input, classes);
  if (name == "mlp") {
    m->add("fc1", std::make_unique<Dense>(m->lastShape(), 512));
    m->add("relu1", std::make_unique<Relu>(m->lastShape()));
    m->add("fc2", std::make_unique<Dense>(m->lastShape(), 512));
    m->add("relu2", std::make_unique<Relu>(m->lastShape()));
    m->add("fc3", std::make_unique<Dense>(m->lastShape(), classes));
  } else if (name == "cnn") {
    // conv 5x5 "same" + 2x2 pool twice, then one wide FC layer that holds ~97% of the parameters (the
    // shape that matters for communication: CaffeNet's fc6/fc7 dominate it the same way).
    m->add("conv1", std::make_unique<Conv2d>(m->lastShape(), 16, 5, 1, 2));
    m->add("relu1", std::make_unique<Relu>(m->lastShape()));
    m->add("pool1", std::make_unique<MaxPool>(m->lastShape(), 2, 2));
    m->add("conv2", std::make_unique<Conv2d>(m->lastShape(), 32, 5, 1, 2));
    m->add("relu2", std::make_unique<Relu>(m->lastShape()));
    m->add("pool2", std::make_unique<MaxPool>(m->lastShape(), 2, 2));
    m->add("fc1", std::make_unique<Dense>(m->lastShape(), 512));
    m->add("relu3", std::make_unique<Relu>(m->lastShape()));
    m->add("fc2", std::make_unique<Dense>(m->lastShape(), classes));
  } else {
    ADAPREC_FAIL(ErrorCode::kInvalidArgument, "unknown model '" << name << "' (valid: mlp, cnn)");
  }
  m->finalize();
  return m;
}

}  // namespace adaprec::trainer
