#include "trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <iomanip>
#include <sstream>
#include <string_view>

#include "adaprec/error.hpp"
#include "trainer_collectives.hpp"

namespace adaprec::trainer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr std::size_t kEvalChunk = 500;

// FNV-1a over bytes, continuing from `hash` (kLogHashStart for none): the log's identity in checkpoints.
std::uint64_t hashLogBytes(std::uint64_t hash, std::string_view bytes) { return detail::fnv1a(bytes, hash); }

// An MPI-wide verdict: every rank learns whether any rank failed, so nobody waits for a failed peer.
void agreeOrThrow(MPI_Comm comm, const std::string& localError, const std::string& what,
                  ErrorCode localCode = ErrorCode::kMalformedInput) {
  int failed = !localError.empty(), anyFailed = 0;
  timedAllreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, comm, what.c_str());
  if (!anyFailed) return;
  if (failed) throw AgreedError(localCode, localError);  // already formatted: keep it as it was
  try {
    ADAPREC_FAIL(ErrorCode::kMismatch, what << " failed on another rank");
  } catch (const Error& e) {
    throw AgreedError(e.code(), e.what());
  }
}

}  // namespace

Trainer::Trainer(TrainerConfig config, MPI_Comm comm, Dataset train, Dataset test,
                 std::unique_ptr<GradientReducer> reducer)
    : config_(std::move(config)), comm_(comm), train_(std::move(train)), test_(std::move(test)),
      reducer_(std::move(reducer)), rng_(config_.seed) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  ADAPREC_CHECK_ARG(config_.batch > 0 && config_.epochs > 0, "batch " << config_.batch << ", epochs " << config_.epochs);
  ADAPREC_CHECK_ARG(train_.pixelsPerImage() == test_.pixelsPerImage() && train_.classes == test_.classes,
                    "training and test sets differ in image size or classes");
  const std::uint64_t global = static_cast<std::uint64_t>(config_.batch) * size_;
  stepsPerEpoch_ = train_.count() / global;
  ADAPREC_CHECK_ARG(stepsPerEpoch_ > 0, "global batch " << global << " (" << size_ << " ranks x " << config_.batch
                                                         << ") exceeds the " << train_.count() << " training images");
  config_.schedule.globalBatch = static_cast<double>(global);
  // --lr-batch 0: --lr is the rate of one rank's batch, so the peak scales with the rank count.
  if (config_.schedule.referenceBatch <= 0) config_.schedule.referenceBatch = config_.batch;
  config_.schedule.totalEpochs = config_.epochs;
  config_.schedule.check();
  backend_ = makeBackend(config_.backend);
  model_ = makeModel(config_.model, Shape{1, train_.rows, train_.cols}, train_.classes);
  model_->initialize(rng_);
  int threadLevel = MPI_THREAD_SINGLE;
  MPI_Query_thread(&threadLevel);
  // auto without a communication thread, or with nothing to overlap (one rank): sequential.
  const bool tune = config_.reduction == ReductionMode::kAuto && threadLevel >= MPI_THREAD_SERIALIZED && size_ > 1;
  const ReductionMode pipelineMode = config_.reduction == ReductionMode::kAuto && !tune ? ReductionMode::kSequential
                                                                                       : config_.reduction;
  pipeline_ = std::make_unique<ReductionPipeline>(*reducer_, pipelineMode);
  if (tune) tuner_ = std::make_unique<ReductionTuner>();
  // An explicit overlap or double buffering needs the thread level; auto has fallen back above.
  ADAPREC_CHECK_ARG(pipelineMode == ReductionMode::kSequential || pipelineMode == ReductionMode::kAuto ||
                        threadLevel >= MPI_THREAD_SERIALIZED,
                    "--reduction " << toString(config_.reduction)
                                   << " reduces on a communication thread and needs MPI_THREAD_SERIALIZED; MPI was "
                                      "initialized with a lower thread level (MPI_Init_thread)");
  sgd_ = std::make_unique<MomentumSgd>(model_->parameters().size(), config_.momentum, config_.weightDecay);
  if (!config_.checkpointDir.empty()) checkpoints_ = std::make_unique<CheckpointDirectory>(config_.checkpointDir, comm_);
  // This run's identity in its checkpoints: drawn on rank 0, the same on every rank; a resume replaces
  // it with the checkpoint's. Not derived from the seed, so two runs of one command differ.
  if (rank_ == 0) {
    std::random_device device;
    runId_ = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }
  timedBroadcast(&runId_, 1, MPI_UINT64_T, 0, comm_, "the run id's broadcast");
  images_.resize(static_cast<std::size_t>(config_.batch) * train_.pixelsPerImage());
  labels_.resize(static_cast<std::size_t>(config_.batch));
  startTime_ = progressTime_ = now();
}

Trainer::~Trainer() = default;

std::uint64_t Trainer::totalSteps() const {
  const std::uint64_t all = stepsPerEpoch_ * static_cast<std::uint64_t>(config_.epochs);
  return config_.maxSteps > 0 ? std::min(all, config_.maxSteps) : all;
}

double Trainer::wallSeconds() const { return wallBefore_ + (now() - startTime_); }

std::string Trainer::fingerprint() const {
  std::ostringstream os;
  os << "model=" << config_.model << " batch=" << config_.batch << " ranks=" << size_ << " seed=" << config_.seed
     << " train=" << train_.count() << " params=" << model_->parameters().size();
  return os.str();
}

void Trainer::prepareEpochOrder(std::uint64_t epoch) {
  if (orderEpoch_ == epoch) return;
  // Fisher-Yates with an explicit generator: std::shuffle's algorithm is unspecified, this is not.
  std::mt19937_64 gen(config_.seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
  order_.resize(train_.count());
  for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<std::uint32_t>(i);
  for (std::size_t i = order_.size(); i-- > 1;) std::swap(order_[i], order_[gen() % (i + 1)]);
  orderEpoch_ = epoch;
}

void Trainer::checkFinite(const StepResult& r) const {
  if (std::isfinite(r.loss)) return;
  const double at = static_cast<double>(step_) / stepsPerEpoch_;
  std::ostringstream os;
  // "nan" whatever its sign bit (printf's "-nan" reads like a negative number); the epoch to 3 digits.
  os << std::setprecision(3) << "training diverged: the training loss is "
     << (std::isnan(r.loss) ? std::string("nan") : r.loss > 0 ? std::string("inf") : std::string("-inf"))
     << " at step " << step_ << " (epoch " << at
     << ", learning rate " << learningRate() << ") on rank " << rank_
     << "; lower --lr, lengthen --warmup or use a less lossy --format";
  throw TrainingDiverged(os.str());
}

void Trainer::pauseReductionTuning(bool paused) {
  if (tuner_) tuner_->pause(paused);
}

void Trainer::tuneReduction() {
  if (!tuner_ || tuner_->decided()) return;
  if (tuner_->readyToDecide()) {
    // Every rank has run the same steps, so every rank is here at the same step; the pipeline is idle
    // (sequential and overlap steps finish their reductions).
    std::vector<double> pairs = tuner_->logRatios();
    timedAllreduce(MPI_IN_PLACE, pairs.data(), static_cast<int>(pairs.size()), MPI_DOUBLE, MPI_SUM, comm_,
                   "--reduction auto's decision");
    for (double& p : pairs) p /= size_;
    tuner_->decide(pairs);
    if (rank_ == 0)  // once, whatever --no-progress says (docs/trainer.md)
      std::fprintf(stderr,
                   "adaprec-train: --reduction auto: %s (overlapped steps took %.3f of the sequential ones, "
                   "at most %.3f at 90 %%: %zu pairs, each the mean over ranks; overlap only below %.2f)\n",
                   toString(*tuner_->decided()).c_str(), *tuner_->agreedRatio(), *tuner_->agreedRatioBound(),
                   ReductionTuner::kPairs, 1 - ReductionTuner::kMinOverlapGain);
  }
  pipeline_->setStepMode(tuner_->nextMode(config_.formatLabel));
}

void Trainer::step() {
  tuneReduction();
  const double stepStart = now();
  const std::uint64_t epoch = step_ / stepsPerEpoch_;
  const std::uint64_t inEpoch = step_ % stepsPerEpoch_;
  prepareEpochOrder(epoch);
  const std::size_t b = static_cast<std::size_t>(config_.batch);
  const std::size_t first = (inEpoch * size_ + rank_) * b;
  train_.gather(std::span(order_).subspan(first, b), images_.data(), labels_.data());
  const std::span<float> grads = model_->gradients();
  const std::vector<LayerRange>& layers = model_->layerRanges();
  StepResult r;
  ReduceStats rs;
  std::span<const float> update = grads;
  switch (pipeline_->mode()) {
    case ReductionMode::kSequential:
      pipeline_->begin(grads, layers);
      r = model_->trainStep(*backend_, config_.batch, images_.data(), labels_.data());
      checkFinite(r);
      rs = pipeline_->finish();
      break;
    case ReductionMode::kOverlap:
      pipeline_->begin(grads, layers);
      r = model_->trainStep(*backend_, config_.batch, images_.data(), labels_.data(),
                            [this](std::int64_t offset) { pipeline_->gradientsFinalFrom(offset); });
      // After the reductions already posted: every rank has posted the same ones, so none is left
      // waiting inside a collective when a rank stops here.
      rs = pipeline_->finish();
      checkFinite(r);
      break;
    case ReductionMode::kAuto:  // never the pipeline's mode of a step
      ADAPREC_FAIL(ErrorCode::kInternal, "a step without a resolved reduction mode");
    case ReductionMode::kDoubleBuffering: {
      r = model_->trainStep(*backend_, config_.batch, images_.data(), labels_.data());
      checkFinite(r);
      update = pipeline_->exchange(grads, layers);  // empty at the first step: nothing to apply yet
      rs = pipeline_->takeStats();
      break;
    }
  }
  wireBytes_ += rs.wireBytes;
  fp32Bytes_ += rs.fp32Bytes;
  commSeconds_ += rs.seconds;
  exposedCommSeconds_ += rs.exposedSeconds;
  if (!update.empty()) sgd_->step(model_->parameters(), update, static_cast<float>(learningRate()));
  const double stepTime = now() - stepStart;
  stepSeconds_ += stepTime;
  if (tuner_) tuner_->record(stepTime, config_.formatLabel);
  lossSum_ += r.loss;
  ++lossSteps_;
  ++step_;
}

void Trainer::quiesce() const {
  pipeline_->drain();
  // A drained double-buffered reduction is counted now, so that a snapshot's counters hold it.
  const ReduceStats rs = pipeline_->takeStats();
  wireBytes_ += rs.wireBytes;
  fp32Bytes_ += rs.fp32Bytes;
  commSeconds_ += rs.seconds;
  exposedCommSeconds_ += rs.exposedSeconds;
}

MPI_Comm Trainer::comm() const {
  quiesce();
  return comm_;
}

GradientReducer& Trainer::reducer() {
  quiesce();
  return *reducer_;
}

Evaluation Trainer::evaluate(std::size_t maxSamples) { return evaluateOn(test_, maxSamples); }

Evaluation Trainer::evaluateValidation(std::size_t maxSamples) {
  ADAPREC_CHECK(validation_.count() > 0, ErrorCode::kInvalidArgument, "no validation set was held out");
  return evaluateOn(validation_, maxSamples);
}

void Trainer::setValidationSet(Dataset validation) {
  ADAPREC_CHECK_ARG(validation.pixelsPerImage() == train_.pixelsPerImage(), "validation images differ in size");
  validation_ = std::move(validation);
}

void Trainer::logLine(const std::string& json) {
  if (rank_ == 0) writeLogLine(json);
}

void Trainer::writeLogLine(const std::string& line) {
  // Every record is flushed at once (decisions and evaluations are what a killed or crashed run leaves
  // behind) and the stream checked; the first failure is kept and reported collectively by checkLog().
  if (!log_.is_open() || !logError_.empty()) return;
  errno = 0;
  log_ << line << "\n";
  log_.flush();
  if (!log_) {
    logError_ = logWriteError("write");
    return;
  }
  logBytes_ += line.size() + 1;
  logHash_ = hashLogBytes(hashLogBytes(logHash_, line), "\n");
}

std::string Trainer::logWriteError(const char* what) const {
  const int err = errno;
  try {
    ADAPREC_FAIL(ErrorCode::kIo, "cannot " << what << " log " << config_.logPath << ": "
                                           << (err != 0 ? std::strerror(err) : "the stream reported a failure"));
  } catch (const Error& e) {
    return e.what();
  }
}

void Trainer::checkLog() {
  quiesce();
  // Collective: a log rank 0 cannot write fails the job on every rank, not only rank 0.
  agreeOrThrow(comm_, logError_, "writing the log", ErrorCode::kIo);
}

Evaluation Trainer::evaluateOn(const Dataset& data, std::size_t maxSamples) {
  quiesce();
  const std::size_t n = maxSamples > 0 ? std::min(maxSamples, data.count()) : data.count();
  const std::size_t begin = n * rank_ / size_, end = n * (rank_ + 1) / size_;
  std::vector<std::uint32_t> idx;
  std::vector<float> images(kEvalChunk * data.pixelsPerImage());
  std::vector<std::int32_t> labels(kEvalChunk);
  double sums[3] = {0, 0, 0};  // loss, correct, images
  for (std::size_t at = begin; at < end; at += kEvalChunk) {
    const std::size_t count = std::min(kEvalChunk, end - at);
    idx.resize(count);
    for (std::size_t i = 0; i < count; ++i) idx[i] = static_cast<std::uint32_t>(at + i);
    data.gather(idx, images.data(), labels.data());
    StepResult r = model_->evaluate(*backend_, static_cast<int>(count), images.data(), labels.data());
    sums[0] += r.loss;
    sums[1] += static_cast<double>(r.correct);
    sums[2] += static_cast<double>(count);
  }
  timedAllreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm_, "an evaluation's sums");
  Evaluation e;
  e.images = static_cast<std::uint64_t>(sums[2]);
  e.loss = sums[0] / std::max(1.0, sums[2]);
  e.accuracy = sums[1] / std::max(1.0, sums[2]);
  return e;
}

std::uint64_t Trainer::stateHash() const {
  const auto bytes = [](const auto* p, std::size_t n) {
    return std::string_view(reinterpret_cast<const char*>(p), n);
  };
  const std::uint64_t h = detail::fnv1a(bytes(model_->parameters().data(), model_->parameters().size_bytes()));
  return detail::fnv1a(bytes(sgd_->velocity().data(), sgd_->velocity().size() * sizeof(float)), h);
}

void Trainer::checkConsistency() {
  quiesce();
  std::uint64_t local = stateHash(), lo = 0, hi = 0;
  timedAllreduce(&local, &lo, 1, MPI_UINT64_T, MPI_MIN, comm_, "the cross-rank weight-hash check");
  timedAllreduce(&local, &hi, 1, MPI_UINT64_T, MPI_MAX, comm_, "the cross-rank weight-hash check");
  ADAPREC_CHECK(lo == hi, ErrorCode::kMismatch,
                "ranks DIVERGED at step " << step_ << ": weight+momentum hash on rank " << rank_ << " is " << std::hex
                                         << local << ", ranks range from " << lo << " to " << hi);
}

TrainerSnapshot Trainer::snapshot() const {
  quiesce();
  TrainerSnapshot s;
  s.step = step_;
  s.fingerprint = fingerprint();
  s.runId = runId_;
  s.rank = static_cast<std::uint32_t>(rank_);
  s.ranks = static_cast<std::uint32_t>(size_);
  s.parameters.assign(model_->parameters().begin(), model_->parameters().end());
  s.velocity = sgd_->velocity();
  std::ostringstream rng;
  rng << rng_;
  s.rngState = rng.str();
  s.reducerState = reducer_->saveState();
  s.pendingGradients = pipeline_->pending();
  s.controllerState = controllerState_;
  nlohmann::json c;
  c["wall_s"] = wallSeconds();
  c["bytes_sent"] = wireBytes_;
  c["bytes_fp32"] = fp32Bytes_;
  c["comm_s"] = commSeconds_;
  c["exposed_comm_s"] = exposedCommSeconds_;
  c["step_s"] = stepSeconds_;
  c["loss_sum"] = lossSum_;
  c["loss_steps"] = lossSteps_;
  c["log_bytes"] = logBytes_;
  c["log_hash"] = logHash_;
  c["log_path"] = logIdentity_;
  s.counters = c.dump();
  return s;
}

void Trainer::restore(const TrainerSnapshot& s, RestoreMode mode) {
  quiesce();
  ADAPREC_CHECK(s.fingerprint == fingerprint(), ErrorCode::kMismatch,
                "checkpoint is for a different run: it has '" << s.fingerprint << "', this run is '" << fingerprint()
                                                             << "'");
  ADAPREC_CHECK(s.ranks == static_cast<std::uint32_t>(size_), ErrorCode::kMismatch,
                "checkpoint state was written by a run of " << s.ranks << " ranks; this run has " << size_);
  ADAPREC_CHECK(s.rank == static_cast<std::uint32_t>(rank_), ErrorCode::kMismatch,
                "checkpoint state is rank " << s.rank << "'s, this is rank " << rank_
                                            << " (rank files swapped or renamed?)");
  ADAPREC_CHECK(s.parameters.size() == model_->parameters().size() && s.velocity.size() == s.parameters.size(),
                ErrorCode::kMalformedInput, "checkpoint parameter count does not match the model");
  std::copy(s.parameters.begin(), s.parameters.end(), model_->parameters().begin());
  sgd_->velocity() = s.velocity;
  std::istringstream rng(s.rngState);
  rng >> rng_;
  ADAPREC_CHECK(!rng.fail(), ErrorCode::kMalformedInput, "checkpoint RNG state is unreadable");
  ADAPREC_CHECK(s.pendingGradients.empty() || pipeline_->mode() == ReductionMode::kDoubleBuffering,
                ErrorCode::kMismatch,
                "the state holds reduced gradients waiting for the next update (written with --reduction "
                "double-buffering); continue it with --reduction double-buffering");
  ADAPREC_CHECK(s.pendingGradients.empty() || s.pendingGradients.size() == s.parameters.size(),
                ErrorCode::kMalformedInput, "checkpoint pending gradient count does not match the model");
  reducer_->loadState(s.reducerState);
  pipeline_->setPending(s.pendingGradients);
  controllerState_ = s.controllerState;
  nlohmann::json c = nlohmann::json::parse(s.counters);
  step_ = s.step;
  runId_ = s.runId;
  lossSum_ = c.at("loss_sum").get<double>();
  lossSteps_ = c.at("loss_steps").get<std::uint64_t>();
  if (mode == RestoreMode::kBranch) return;
  wallBefore_ = c.at("wall_s").get<double>();
  startTime_ = now();
  wireBytes_ = c.at("bytes_sent").get<std::uint64_t>();
  fp32Bytes_ = c.at("bytes_fp32").get<std::uint64_t>();
  commSeconds_ = c.at("comm_s").get<double>();
  exposedCommSeconds_ = c.value("exposed_comm_s", commSeconds_);  // older checkpoints: sequential
  stepSeconds_ = c.value("step_s", 0.0);
  resumeLogBytes_ = c.contains("log_bytes") ? std::optional(c.at("log_bytes").get<std::uint64_t>()) : std::nullopt;
  resumeLogHash_ = c.contains("log_hash") ? std::optional(c.at("log_hash").get<std::uint64_t>()) : std::nullopt;
  resumeLogIdentity_ = c.contains("log_path") ? std::optional(c.at("log_path").get<std::string>()) : std::nullopt;
}

void Trainer::resumeFromCheckpoint() {
  ADAPREC_CHECK_ARG(checkpoints_ != nullptr, "--resume needs --checkpoint DIR");
  std::string error;
  bool have = false;
  TrainerSnapshot s;
  try {
    have = checkpoints_->latestStep().has_value();
    if (have) s = checkpoints_->loadLatest();
  } catch (const Error& e) {
    error = e.what();
  }
  agreeOrThrow(comm_, error, "loading the checkpoint");
  // Every rank must find the same checkpoint (or none): with a --checkpoint directory on each node's own
  // disk only rank 0's node holds LATEST, and the ranks took different paths from here (one resumed,
  // the others started afresh): a hang with nothing printed.
  const std::uint64_t found = have ? s.step + 1 : 0;  // 0: none
  std::uint64_t lowest = 0, highest = 0;
  timedAllreduce(&found, &lowest, 1, MPI_UINT64_T, MPI_MIN, comm_, "--resume's agreement");
  timedAllreduce(&found, &highest, 1, MPI_UINT64_T, MPI_MAX, comm_, "--resume's agreement");
  if (lowest != highest) {
    std::ostringstream os;
    os << "adaprec: --resume: this rank finds " << (have ? "the checkpoint of step " + std::to_string(s.step) : "no checkpoint")
       << " in " << config_.checkpointDir << ", other ranks find "
       << (!have ? "one" : lowest == 0 ? "none" : "another step")
       << ": every rank must see the same --checkpoint directory (a file system all nodes share)";
    throw AgreedError(ErrorCode::kMismatch, os.str());
  }
  if (!have) {
    if (rank_ == 0) std::fprintf(stderr, "no checkpoint in %s yet: starting from step 0\n", config_.checkpointDir.c_str());
    return;
  }
  // Each rank must hold its own state of one and the same run: a swapped pair of rank files, or a file
  // of another run copied in, would otherwise resume with exchanged or foreign error-feedback residuals.
  const std::string path = checkpoints_->rankFile(s.step, rank_);
  if (s.ranks != static_cast<std::uint32_t>(size_) || s.rank != static_cast<std::uint32_t>(rank_)) {
    std::ostringstream os;
    os << "adaprec: checkpoint " << path << " holds the state of rank " << s.rank << " of a " << s.ranks
       << "-rank run, but is read by rank " << rank_ << " of " << size_
       << " (rank files swapped, renamed or copied from another job?)";
    error = os.str();
  }
  agreeOrThrow(comm_, error, "checking the checkpoint's rank", ErrorCode::kMismatch);
  std::uint64_t lowId = 0, highId = 0;
  timedAllreduce(&s.runId, &lowId, 1, MPI_UINT64_T, MPI_MIN, comm_, "--resume's agreement");
  timedAllreduce(&s.runId, &highId, 1, MPI_UINT64_T, MPI_MAX, comm_, "--resume's agreement");
  if (lowId != highId) {
    std::ostringstream os;
    os << "adaprec: checkpoint files of step " << s.step << " in " << config_.checkpointDir
       << " come from different runs: " << path << " (rank " << rank_ << ") has run id " << std::hex << s.runId
       << ", the ranks' files range from " << lowId << " to " << highId << " (a rank file copied in from another run?)";
    throw AgreedError(ErrorCode::kMismatch, os.str());
  }
  try {
    restore(s);
  } catch (const Error& e) {
    error = e.what();
  }
  agreeOrThrow(comm_, error, "restoring the checkpoint");
  checkConsistency();
  if (rank_ == 0) std::fprintf(stderr, "resumed from %s at step %llu\n", config_.checkpointDir.c_str(),
                               static_cast<unsigned long long>(step_));
}

void Trainer::trimLogForResume(bool nothingLeft) {
  // The killed run may have logged evaluations and decisions after its last checkpoint; the resumed
  // run redoes those steps and logs them again, so the log is cut back to what it held at the
  // checkpoint. Only a log that begins with the checkpointed run's records is cut: one that is not
  // this run's (missing, shorter than recorded, or other bytes: a --log naming another file) is
  // appended to. A checkpoint at the end of training redoes nothing, so its log keeps everything.
  logBytes_ = 0;
  logHash_ = kLogHashStart;
  if (!resumeLogBytes_) return;
  std::ifstream in(config_.logPath, std::ios::binary);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(config_.logPath, ec);
  if (ec || !in.good()) {
    std::fprintf(stderr, "adaprec-train: log %s is not the checkpointed run's (missing): appending to it\n",
                 config_.logPath.c_str());
    return;
  }
  // The hash of the first n bytes, then of the rest: both are needed whatever the verdict.
  auto hashNext = [&in](std::uint64_t hash, std::uintmax_t n) {
    std::string buffer(1 << 16, '\0');
    while (n > 0 && in.good()) {
      in.read(buffer.data(), static_cast<std::streamsize>(std::min<std::uintmax_t>(n, buffer.size())));
      hash = hashLogBytes(hash, std::string_view(buffer.data(), static_cast<std::size_t>(in.gcount())));
      n -= static_cast<std::uintmax_t>(in.gcount());
    }
    return hash;
  };
  const std::uint64_t prefixHash = hashNext(kLogHashStart, std::min<std::uintmax_t>(size, *resumeLogBytes_));
  const bool samePath = !resumeLogIdentity_ || *resumeLogIdentity_ == logIdentity_;
  const bool ours = samePath && size >= *resumeLogBytes_ && (!resumeLogHash_ || prefixHash == *resumeLogHash_);
  if (!ours || nothingLeft) {
    if (!ours) {
      const std::string why = !samePath ? "the checkpointed run logged to " +
                                              (resumeLogIdentity_->empty() ? std::string("no file") : *resumeLogIdentity_)
                              : size < *resumeLogBytes_ ? std::string("shorter than the checkpoint recorded")
                                                        : std::string("it begins with other records");
      std::fprintf(stderr, "adaprec-train: log %s is not the checkpointed run's (%s): appending to it\n",
                   config_.logPath.c_str(), why.c_str());
    }
    logBytes_ = size;
    logHash_ = hashNext(prefixHash, size - std::min<std::uintmax_t>(size, *resumeLogBytes_));
    return;
  }
  in.close();
  std::filesystem::resize_file(config_.logPath, *resumeLogBytes_, ec);
  ADAPREC_CHECK(!ec, ErrorCode::kIo, "cannot cut log " << config_.logPath << " back to the checkpoint: " << ec.message());
  logBytes_ = *resumeLogBytes_;
  logHash_ = prefixHash;
}

void Trainer::saveCheckpoint() {
  if (!checkpoints_) return;
  // A checkpoint records how many log bytes belong to it: those bytes must have been written.
  checkLog();
  try {
    checkpoints_->save(snapshot());
  } catch (const Error& e) {
    // save() throws on every rank alike: end as for any agreed error, so that each rank's line is
    // printed (MPI_Abort cut all but one of them).
    throw AgreedError(e.code(), e.what());
  }
}

void Trainer::logEvaluation(const Evaluation& eval, const std::string& extraJson) {
  quiesce();
  double loss[2] = {lossSum_, static_cast<double>(lossSteps_)};
  timedAllreduce(MPI_IN_PLACE, loss, 2, MPI_DOUBLE, MPI_SUM, comm_, "a log record's sums");
  std::uint64_t bytes[2] = {wireBytes_, fp32Bytes_};
  timedAllreduce(MPI_IN_PLACE, bytes, 2, MPI_UINT64_T, MPI_SUM, comm_, "a log record's sums");
  lossSum_ = 0;
  lossSteps_ = 0;
  if (rank_ != 0) return;
  nlohmann::json j;
  j["event"] = "eval";
  j["epoch"] = epoch();
  j["step"] = step_;
  j["wall_s"] = wallSeconds();
  j["train_loss"] = loss[1] > 0 ? nlohmann::json(loss[0] / loss[1]) : nlohmann::json(nullptr);
  j["test_loss"] = eval.loss;
  j["test_accuracy"] = eval.accuracy;
  j["test_images"] = eval.images;
  j["lr"] = learningRate();
  nlohmann::json formats = nlohmann::json::object();
  const auto used = reducer_->layerFormats();
  for (std::size_t i = 0; i < model_->layerRanges().size() && i < used.size(); ++i) {
    formats[model_->layerRanges()[i].name] = used[i];
  }
  j["formats"] = formats;
  j["bytes_sent"] = bytes[0];   // all ranks together
  j["bytes_fp32"] = bytes[1];
  j["comm_s"] = commSeconds_;   // rank 0's
  j["exposed_comm_s"] = exposedCommSeconds_;  // the part of comm_s the training thread waited for
  j["step_s"] = stepSeconds_;   // rank 0's time inside training steps (compute + exposed communication)
  if (config_.reduction == ReductionMode::kAuto) {
    // Timing-dependent: what auto chose (before its decision, or without a tuner: "auto").
    j["reduction"] = tuner_ && tuner_->decided() ? "auto:" + toString(*tuner_->decided()) : std::string("auto");
    if (tuner_ && tuner_->agreedRatio()) {
      j["reduction_ratio"] = *tuner_->agreedRatio();
      j["reduction_ratio_bound"] = *tuner_->agreedRatioBound();  // overlap only below 1 - kMinOverlapGain
    }
  } else {
    j["reduction"] = toString(pipeline_->mode());
  }
  j.update(nlohmann::json::parse(extraJson));
  writeLogLine(j.dump());
}

void Trainer::printProgress(bool force) {
  if (rank_ != 0 || !config_.progress) return;
  const double t = now();
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  // On a terminal the line is redrawn a few times a second; in a log file one line per ~10 s.
  if (!force && t - progressTime_ < (tty ? 0.5 : 10.0)) return;
  if (t > progressTime_ && step_ > progressStep_) {
    lastThroughput_ = static_cast<double>(step_ - progressStep_) * config_.batch * size_ / (t - progressTime_);
  }
  progressTime_ = t;
  progressStep_ = step_;
  const std::uint64_t epochIndex = std::min<std::uint64_t>(step_ / stepsPerEpoch_ + (step_ % stepsPerEpoch_ ? 1 : 0),
                                                           static_cast<std::uint64_t>(config_.epochs));
  const double frac = static_cast<double>(step_ % stepsPerEpoch_ == 0 && step_ > 0 ? stepsPerEpoch_
                                                                                   : step_ % stepsPerEpoch_) /
                      stepsPerEpoch_;
  char bar[21];
  const int filled = static_cast<int>(frac * 20.0);
  for (int i = 0; i < 20; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[20] = '\0';
  const double meanLoss = lossSteps_ > 0 ? lossSum_ / lossSteps_ : 0.0;
  std::fprintf(stderr, "%sepoch %llu/%d [%s] %5.1f%% step %llu  %.0f img/s  loss %.4f  format %s%s",
               tty ? "\r" : "", static_cast<unsigned long long>(std::max<std::uint64_t>(epochIndex, 1)),
               config_.epochs, bar, frac * 100.0, static_cast<unsigned long long>(step_), lastThroughput_, meanLoss,
               config_.formatLabel.c_str(), tty ? "\033[K" : "\n");
  std::fflush(stderr);
}

Evaluation Trainer::train(StepHook* hook) {
  if (config_.resume) {
    resumeFromCheckpoint();
  } else if (checkpoints_ && rank_ == 0 && std::filesystem::exists(config_.checkpointDir + "/LATEST")) {
    // Said once, before the work: a run that should have been resumed replaces the earlier one's
    // checkpoint at its first own.
    std::fprintf(stderr, "adaprec-train: %s holds a checkpoint of an earlier run; this run (no --resume) starts "
                         "from step 0 and replaces it at its first checkpoint\n", config_.checkpointDir.c_str());
  }
  const std::uint64_t end = totalSteps();
  // Resumed from the checkpoint at the end of training: the run is complete and its log too (a second
  // final evaluation and a fresh controller summary with none of its decisions were appended before).
  const bool nothingLeft = step_ > 0 && step_ >= end;
  if (rank_ == 0 && !config_.logPath.empty()) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::weakly_canonical(config_.logPath, ec);
    logIdentity_ = ec ? std::filesystem::absolute(config_.logPath, ec).string() : absolute.string();
    try {
      if (step_ > 0) trimLogForResume(nothingLeft);
      errno = 0;
      log_.open(config_.logPath, step_ > 0 ? std::ios::app : std::ios::trunc);
      if (!log_.good()) logError_ = logWriteError("open");
    } catch (const Error& e) {
      logError_ = e.what();
    }
  }
  if (!config_.logPath.empty()) checkLog();
  Evaluation last;
  bool haveLast = false;
  while (step_ < end) {
    const std::uint64_t before = step_;
    if (hook != nullptr) hook->beforeStep(*this);
    // The hook may have advanced by a whole speculative branch (even to the end): periodic work is
    // due when a period boundary was crossed, not only when it is hit exactly.
    if (step_ < end) step();
    printProgress(false);
    auto crossed = [&](std::uint64_t period) { return period > 0 && step_ / period > before / period; };
    const bool epochEnd = crossed(stepsPerEpoch_);
    const bool evalNow = (config_.evalEvery > 0 ? crossed(config_.evalEvery) : epochEnd) || step_ == end;
    if (evalNow || crossed(config_.hashEvery)) checkConsistency();
    if (evalNow) {
      printProgress(true);
      Evaluation e = evaluate(step_ == end ? 0 : config_.evalSamples);
      logEvaluation(e);
      checkLog();
      last = e;
      haveLast = step_ == end;
      if (rank_ == 0 && config_.progress) {
        std::fprintf(stderr, "%sepoch %.2f step %llu: test accuracy %.4f, test loss %.4f (%llu images)\n",
                     ::isatty(STDERR_FILENO) ? "\n" : "", epoch(), static_cast<unsigned long long>(step_),
                     e.accuracy, e.loss, static_cast<unsigned long long>(e.images));
      }
    }
    // After the evaluation, so that a resumed run neither repeats it nor mixes its training loss in.
    const bool checkpointNow = config_.checkpointEvery > 0 ? crossed(config_.checkpointEvery) : epochEnd;
    if (checkpoints_ && (checkpointNow || step_ == end)) saveCheckpoint();
  }
  if (nothingLeft) {
    if (rank_ == 0)
      std::fprintf(stderr, "adaprec-train: the checkpoint is at the end of training (step %llu): nothing left to train\n",
                   static_cast<unsigned long long>(step_));
    last = evaluate(0);  // what the run returns, not logged again
  } else {
    if (hook != nullptr) hook->finish(*this);
    if (!haveLast) {
      last = evaluate(0);
      logEvaluation(last);
    }
  }
  closeLog();
  return last;
}

void Trainer::closeLog() {
  if (rank_ == 0 && log_.is_open() && logError_.empty()) {
    errno = 0;
    log_.close();
    if (log_.fail()) logError_ = logWriteError("write");
  }
  checkLog();
}

}  // namespace adaprec::trainer
