// Multi-rank checks of the trainer, run under mpirun (and as a single process): learning on a fixed
// problem, N ranks x batch b == 1 rank x batch N*b, bit-identical resume, rejected corrupt checkpoints,
// divergence detection, and the multi-rank evaluator. Every check's verdict is agreed across ranks
// (MPI_Allreduce) before it is reported; the program exits 0 only if every check passed everywhere.
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../loopback/timeline_file.hpp"
#include "adaprec/error.hpp"
#include "trainer/run_options.hpp"

using namespace adaprec;
using namespace adaprec::trainer;

namespace {

constexpr std::uint64_t kSeed = 424242;
int gRank = 0, gSize = 1;
int gFailures = 0;

// Runs one named check on every rank; the check returns an empty string on success or a reason.
void check(const std::string& name, const std::function<std::string()>& body) {
  std::string reason;
  try {
    reason = body();
  } catch (const std::exception& e) {
    reason = std::string("exception: ") + e.what();
  }
  int failed = !reason.empty(), anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed) std::fprintf(stderr, "rank %d: %s FAILED: %s\n", gRank, name.c_str(), reason.c_str());
  if (gRank == 0) std::printf("%-58s %s\n", name.c_str(), anyFailed ? "FAIL" : "ok");
  std::fflush(stdout);
  gFailures += anyFailed;
}

RunOptions smallRun(const std::string& model, int batch, std::size_t images) {
  RunOptions o;
  o.synthetic = images;
  o.trainer.model = model;
  o.trainer.batch = batch;
  o.trainer.seed = kSeed;
  o.trainer.schedule.baseLr = 0.02;
  o.trainer.progress = false;
  o.trainer.hashEvery = 5;
  o.reducer = "mpi";
  return o;
}

// runTraining with ADAPREC_TIMELINE=path for its duration (unset again whatever happens).
RunResult runWithTimeline(const RunOptions& o, const std::string& path) {
  ::setenv("ADAPREC_TIMELINE", path.c_str(), 1);
  try {
    RunResult r = runTraining(o, MPI_COMM_WORLD);
    ::unsetenv("ADAPREC_TIMELINE");
    return r;
  } catch (...) {
    ::unsetenv("ADAPREC_TIMELINE");
    throw;
  }
}

std::string tempDir(const std::string& stem) {
  // Same path on every rank (rank 0's pid), fresh per run.
  int pid = gRank == 0 ? static_cast<int>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string dir = std::filesystem::temp_directory_path() / ("adaprec-trainer-" + stem + "-" + std::to_string(pid));
  if (gRank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

void removeDir(const std::string& dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (gRank == 0) std::filesystem::remove_all(dir);
}

double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b, double* worstAbs) {
  double num = 0, den = 0, worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
    worst = std::max(worst, std::fabs(d));
  }
  *worstAbs = worst;
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  if (gRank == 0) std::printf("trainer MPI checks on %d rank(s), seed %llu\n", gSize, static_cast<unsigned long long>(kSeed));

  check("loss decreases and accuracy rises on a fixed synthetic problem", [] {
    RunOptions o = smallRun("mlp", 16, 1200);
    o.trainer.epochs = 2;
    o.trainer.maxSteps = 1;
    const RunResult start = runTraining(o, MPI_COMM_WORLD);
    o.trainer.maxSteps = 0;
    const RunResult end = runTraining(o, MPI_COMM_WORLD);
    std::string why;
    if (!(end.final.loss < 0.5 * start.final.loss)) {
      why += "test loss " + std::to_string(end.final.loss) + " not below half of " + std::to_string(start.final.loss) + "; ";
    }
    if (!(end.final.accuracy > 0.9)) why += "accuracy " + std::to_string(end.final.accuracy) + " <= 0.9";
    return why;
  });

  std::vector<std::string> reducers = {"mpi"};
  if (kHaveCommunicatorReducer) reducers.push_back("adaprec");
  for (const std::string& reducer : reducers) {
    for (const char* model : {"mlp", "cnn"}) {
      check("fp32 via " + reducer + ": " + std::to_string(gSize) + " ranks x batch b == 1 rank x batch " +
                std::to_string(gSize) + "b (" + model + ")",
            [model, reducer] {
              const int b = 4;
              RunOptions o = smallRun(model, b, 960);
              o.reducer = reducer;
              o.trainer.schedule.referenceBatch = b * gSize;  // the same rate for both runs
              o.trainer.maxSteps = std::string(model) == "mlp" ? 30 : 8;
              o.trainer.evalSamples = 40;
              o.testLimit = 40;
              const RunResult distributed = runTraining(o, MPI_COMM_WORLD);
              RunOptions single = o;
              single.trainer.batch = b * gSize;
              single.reducer = "mpi";
              const RunResult reference = runTraining(single, MPI_COMM_SELF);
              double worst = 0;
              const double rel = maxRelativeDifference(distributed.parameters, reference.parameters, &worst);
              if (gRank == 0) std::printf("  relative L2 difference %.3g, max abs %.3g\n", rel, worst);
              // Only the summation order differs: a few float roundings per step, accumulated.
              if (rel > 1e-5) return "relative L2 difference " + std::to_string(rel) + " > 1e-5";
              if (gSize == 1 && rel != 0.0) return std::string("one rank must reproduce itself exactly");
              return std::string();
            });
    }
  }

  if (kHaveCommunicatorReducer) {
    check("lossy formats (fp16 fused, table2+ef per layer) still learn, ranks stay identical", [] {
      std::string why;
      for (const auto& [format, bucketing] : {std::pair{"fp16", "fused"}, std::pair{"table2+ef", "layer"}}) {
        RunOptions o = smallRun("mlp", 16, 1200);
        o.reducer = "adaprec";
        o.format = format;
        o.bucketing = bucketing;
        o.trainer.epochs = 2;
        o.trainer.hashEvery = 1;  // a divergence would throw at the step it happens
        const RunResult r = runTraining(o, MPI_COMM_WORLD);
        if (!(r.final.accuracy > 0.85)) why += std::string(format) + ": accuracy " + std::to_string(r.final.accuracy) + "; ";
        // The requested format must really be on the wire (an engine fallback to fp32 would void the test).
        for (const std::string& used : r.layerFormats) {
          if (gSize > 1 && used != format) why += std::string(format) + ": a layer was sent as " + used + "; ";
        }
      }
      return why;
    });
  }

  if (kHaveController) {
    check("--format adaptive: phases run, decisions are logged, the model learns", [] {
      const std::string dir = tempDir("adaptive");
      RunOptions o = smallRun("mlp", 16, 1600);
      o.reducer = "adaprec";
      o.format = "adaptive";
      o.candidates = "fp32,fp16,fp8s";  // all of them learn this problem: the check is about the mechanism
      o.prune = false;  // on shared memory pruning would skip every phase (no candidate is faster): below
      o.holdout = 200;
      o.specSteps = 6;
      o.specEvals = 2;
      o.phaseSteps = 12;
      o.maxOverhead = 1;  // fixed 12-step continuations, so the number of phases does not follow timing
      o.validationImages = 200;
      o.specStart = 3;    // the first phase after 3 steps in fp32
      o.trainer.epochs = 2;
      o.trainer.logPath = dir + "/log.jsonl";
      // Every rank's timeline gets the decisions as instant events (docs/timeline.md).
      const RunResult r = runWithTimeline(o, dir + "/tl");
      std::string why;
      if (!(r.final.accuracy > 0.85)) why += "accuracy " + std::to_string(r.final.accuracy) + "; ";
      // Every rank reads rank 0's log (written before the run returned) and checks its own timeline.
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<nlohmann::json> decisions;
      int summaries = 0;
      {
        std::ifstream in(o.trainer.logPath);
        for (std::string line; std::getline(in, line);) {
          const nlohmann::json j = nlohmann::json::parse(line);
          if (j.at("event") == "decision") decisions.push_back(j);
          summaries += j.at("event") == "controller_summary";
        }
      }
      // 1400 images / (16 x ranks) steps per epoch x 2 epochs; a phase every 6 + 12 steps from step 3.
      if (decisions.size() < 2) why += "only " + std::to_string(decisions.size()) + " decisions logged; ";
      if (summaries != 1) why += "controller summary missing; ";
      if (!decisions.empty() && decisions[0].at("step") != 3) why += "first decision not at --spec-start; ";
      const nlohmann::json events = test::parseTimelineText(test::readTextFile(dir + "/tl.rank" + std::to_string(gRank) + ".json"));
      std::size_t instants = 0, calls = 0;
      for (const nlohmann::json& e : events) {
        calls += e.at("name") == "allreduce";
        if (e.at("ph") != "i") continue;
        if (e.at("name") != "decision" || e.at("s") != "t" || e.at("pid") != gRank || !e.at("ts").is_number()) {
          why += "malformed instant event " + e.dump() + "; ";
          continue;
        }
        if (instants >= decisions.size()) {
          ++instants;
          continue;
        }
        // The same numbers as the log's decision line, one chosen candidate: the logged choice.
        const nlohmann::json& args = e.at("args");
        const nlohmann::json& logged = decisions[instants++];
        if (args.at("step") != logged.at("step") || args.at("choice") != logged.at("choice") ||
            args.at("candidates").size() != logged.at("candidates").size()) {
          why += "instant " + args.dump() + " disagrees with the log; ";
          continue;
        }
        int chosen = 0;
        for (std::size_t c = 0; c < args.at("candidates").size(); ++c) {
          const nlohmann::json& a = args.at("candidates")[c];
          const nlohmann::json& l = logged.at("candidates")[c];
          if (a.at("name") != l.at("name") || a.at("predicted_mean") != l.at("predicted_mean") ||
              a.at("predicted_sd") != l.at("predicted_sd")) {
            why += "candidate " + a.dump() + " disagrees with the log; ";
          }
          if (a.at("chosen").get<bool>()) chosen += a.at("name") == logged.at("choice") ? 1 : 100;
        }
        if (chosen != 1) why += "instant " + args.dump() + " does not mark the choice once; ";
      }
      if (instants != decisions.size()) {
        why += std::to_string(instants) + " decision instants on the timeline, " + std::to_string(decisions.size()) +
               " decisions logged; ";
      }
      if (calls == 0) why += "no allreduce on the timeline; ";
      MPI_Barrier(MPI_COMM_WORLD);
      removeDir(dir);
      return why;
    });
  }

  if (kHaveController) {
    check("--format adaptive with pruning: every candidate probed, every phase logged, ranks agree", [] {
      // Which candidates are pruned follows measured step times (on shared memory usually all but
      // fp32); what must hold whatever they measure is checked.
      const std::string dir = tempDir("pruning");
      RunOptions o = smallRun("mlp", 16, 1600);
      o.reducer = "adaprec";
      o.format = "adaptive";
      o.candidates = "fp32,fp16,table4+ef";
      o.holdout = 200;
      o.specSteps = 6;
      o.specEvals = 2;
      o.phaseSteps = 12;
      o.validationImages = 200;
      o.probeSteps = 2;
      o.trainer.epochs = 2;
      o.trainer.logPath = dir + "/log.jsonl";
      // With the timeline on: a phase with pruned candidates must land on it too (reading a pruned
      // candidate's prediction ended such runs on every rank).
      const RunResult r = runWithTimeline(o, dir + "/tl");
      std::string why;
      if (!(r.final.accuracy > 0.85)) why += "accuracy " + std::to_string(r.final.accuracy) + "; ";
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<nlohmann::json> phases;
      nlohmann::json summary;
      {
        std::ifstream in(o.trainer.logPath);
        for (std::string line; std::getline(in, line);) {
          const nlohmann::json j = nlohmann::json::parse(line);
          if (j.at("event") == "decision" || j.at("event") == "speculation_skipped") phases.push_back(j);
          if (j.at("event") == "controller_summary") summary = j;
        }
      }
      if (phases.empty() || phases[0].at("step") != 0) why += "no phase at step 0; ";
      for (const nlohmann::json& p : phases) {
        int speculated = 0;
        for (const nlohmann::json& c : p.at("candidates")) {
          if (!(c.at("step_s").get<double>() > 0)) why += "a candidate without a step time: " + c.dump() + "; ";
          speculated += !c.contains("pruned");
          if (c.contains("pruned") && c.at("pruned") != "not_faster" && c.at("pruned") != "dominated" &&
              c.at("pruned") != "stood_in" && c.at("pruned") != "bounded") {
            why += "unknown pruning reason " + c.dump() + "; ";
          }
          // A bounded candidate names the branch that bounded it, and only it does.
          if (c.contains("pruned") && (c.at("pruned") == "bounded") != c.contains("bounded_by")) {
            why += "a bounded record without its bound (or a bound without the reason): " + c.dump() + "; ";
          }
          // fp32 stood in for by a speculated candidate: the record names which one.
          if (c.contains("pruned") && c.at("pruned") == "stood_in" &&
              (!c.contains("stand_in") || c.at("name") != "fp32")) {
            why += "a stand-in record without its stand-in (or not for fp32): " + c.dump() + "; ";
          }
        }
        // A skipped phase leaves one candidate: fp32, or one that stands in for fp32.
        if (p.at("event") == "speculation_skipped") {
          bool chosenLeft = false, fp32Accounted = p.at("choice") == "fp32";
          for (const nlohmann::json& c : p.at("candidates")) {
            chosenLeft |= c.at("name") == p.at("choice") && !c.contains("pruned");
            fp32Accounted |= c.at("name") == "fp32" && c.value("pruned", "") == "stood_in" && c.value("stand_in", "") == p.at("choice");
          }
          if (speculated != 1 || !chosenLeft || !fp32Accounted) why += "a skipped phase that leaves a choice: " + p.dump() + "; ";
        }
      }
      if (summary.is_null() || summary.at("decisions").get<std::size_t>() + summary.at("skipped_phases").get<std::size_t>() !=
                                   phases.size()) {
        why += "the summary does not count the phases; ";
      }
      // One instant per phase on this rank's timeline, naming the same choice and pruning reasons.
      std::vector<nlohmann::json> instants;
      for (const nlohmann::json& e : test::parseTimelineText(test::readTextFile(dir + "/tl.rank" + std::to_string(gRank) + ".json"))) {
        if (e.at("ph") == "i") instants.push_back(e);
      }
      if (instants.size() != phases.size()) {
        why += std::to_string(instants.size()) + " instants for " + std::to_string(phases.size()) + " phases; ";
      }
      for (std::size_t i = 0; i < std::min(instants.size(), phases.size()); ++i) {
        const nlohmann::json& args = instants[i].at("args");
        const bool skipped = phases[i].at("event") == "speculation_skipped";
        if (instants[i].at("name") != (skipped ? "speculation skipped" : "decision") ||
            args.at("choice") != phases[i].at("choice") || args.at("candidates").size() != phases[i].at("candidates").size()) {
          why += "instant " + instants[i].dump() + " disagrees with the log; ";
          continue;
        }
        for (std::size_t c = 0; c < args.at("candidates").size(); ++c) {
          if (args.at("candidates")[c].value("pruned", "") != phases[i].at("candidates")[c].value("pruned", "")) {
            why += "instant candidate " + args.at("candidates")[c].dump() + " disagrees with the log; ";
          }
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
      removeDir(dir);
      return why;
    });
  }

  // fp32 through MPI; an error-feedback format, whose residuals must travel in the checkpoint; and the
  // controller with an error-feedback candidate, which must not clear them when it reloads its state.
  std::vector<std::pair<std::string, std::string>> resumeCases = {{"mpi", "fp32"}};
  if (kHaveCommunicatorReducer) resumeCases.emplace_back("adaprec", "table2+ef");
  if (kHaveController) resumeCases.emplace_back("adaprec", "adaptive");
  for (const auto& resumeCase : resumeCases) {
    // Copies, not a structured binding: clang 14 cannot capture bindings.
    const std::string reducer = resumeCase.first, format = resumeCase.second;
    check("resume (" + format + " via " + reducer + ") is bit-identical to an uninterrupted run", [reducer, format] {
      const std::string dir = tempDir("resume");
      RunOptions o = smallRun("mlp", 8, 640);
      o.reducer = reducer;
      o.format = format;
      o.bucketing = "layer";
      o.trainer.epochs = 2;
      o.trainer.momentum = 0.9f;
      o.trainer.schedule.kind = "poly";
      o.trainer.schedule.warmupEpochs = 0.5;
      if (format == "adaptive") {
        // One +ef candidate: the decisions (which follow measured step times) cannot differ between
        // runs, and its residuals must survive the controller's state being reloaded.
        o.candidates = "table2+ef";
        o.holdout = 64;
        o.specSteps = 4;
        o.specEvals = 1;
        o.phaseSteps = 20;  // the checkpoint of step 14 falls inside a continuation, with residuals
        o.maxOverhead = 1;  // phase lengths must not follow measured time either
        o.prune = false;    // nor whether a phase speculates
        o.validationImages = 64;
      }
      const RunResult uninterrupted = runTraining(o, MPI_COMM_WORLD);
      o.trainer.checkpointDir = dir;
      o.trainer.checkpointEvery = 7;
      o.trainer.maxSteps = 14;  // stops after the checkpoint of step 14, as a kill at steps 15..20 would leave it
      runTraining(o, MPI_COMM_WORLD);
      std::string why;
      if (!std::filesystem::exists(CheckpointDirectory(dir, MPI_COMM_WORLD).rankFile(14, gRank))) {
        why = "no checkpoint file for step 14; ";
      }
      if (std::filesystem::exists(CheckpointDirectory(dir, MPI_COMM_WORLD).rankFile(7, gRank))) {
        why += "the superseded checkpoint of step 7 was not removed; ";
      }
      o.trainer.maxSteps = 0;
      o.trainer.resume = true;
      const RunResult resumed = runTraining(o, MPI_COMM_WORLD);
      if (resumed.stateHash != uninterrupted.stateHash) why += "state hash differs after resume";
      if (resumed.parameters != uninterrupted.parameters) why += "; parameters differ";
      if (resumed.final.loss != uninterrupted.final.loss) why += "; final test loss differs";
      // The lossy format must really be on the wire with more than one rank, or the case proves nothing.
      for (const std::string& used : resumed.layerFormats) {
        const std::string expected = format == "adaptive" ? o.candidates : format;
        if (gSize > 1 && used != expected) why += "; a layer was sent as " + used;
      }
      removeDir(dir);
      return why;
    });
  }

  check("truncated and corrupted checkpoints are rejected naming the file", [] {
    const std::string dir = tempDir("corrupt");
    RunOptions o = smallRun("mlp", 8, 320);
    o.trainer.checkpointDir = dir;
    o.trainer.maxSteps = 4;
    runTraining(o, MPI_COMM_WORLD);
    const std::string victim = CheckpointDirectory(dir, MPI_COMM_WORLD).rankFile(4, 0);
    std::string why;
    std::vector<char> original;
    if (gRank == 0) {
      std::ifstream in(victim, std::ios::binary);
      original.assign(std::istreambuf_iterator<char>(in), {});
    }
    for (const std::string damage : {"truncate", "flip"}) {
      if (gRank == 0) {
        std::vector<char> bytes = original;
        if (damage == "truncate") bytes.resize(bytes.size() - 100);
        else bytes[bytes.size() / 2] ^= 0x40;
        std::ofstream(victim, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      }
      MPI_Barrier(MPI_COMM_WORLD);
      RunOptions r = o;
      r.trainer.resume = true;
      r.trainer.maxSteps = 8;
      try {
        runTraining(r, MPI_COMM_WORLD);
        why += damage + ": resume did not fail; ";
      } catch (const Error& e) {
        const std::string msg = e.what();
        const std::string expect = damage == "truncate" ? "truncated" : "CRC";
        if (gRank == 0 && (msg.find(victim) == std::string::npos || msg.find(expect) == std::string::npos)) {
          why += damage + ": message does not name the file and '" + expect + "': " + msg + "; ";
        }
        if (gRank != 0 && msg.find("another rank") == std::string::npos) why += damage + ": peer message: " + msg;
      }
    }
    removeDir(dir);
    return why;
  });

  check("a rank whose weights diverge is detected on every rank", [] {
    RunOptions o = smallRun("mlp", 8, 320);
    Trainer t(o.trainer, MPI_COMM_WORLD, makeSyntheticDataset(320, 28, 28, 10, kSeed),
              makeSyntheticDataset(40, 28, 28, 10, kSeed + 1), makeMpiReducer(MPI_COMM_WORLD, 3));
    t.step();
    t.checkConsistency();
    if (gSize == 1) return std::string();  // nothing to diverge from
    if (gRank == gSize - 1) t.model().parameters()[12345] += 1e-6f;
    try {
      t.checkConsistency();
    } catch (const Error& e) {
      return std::string(e.what()).find("DIVERGED") == std::string::npos ? std::string("wrong message: ") + e.what()
                                                                          : std::string();
    }
    return std::string("divergence not detected");
  });

  check("the multi-rank evaluator equals a single-rank evaluation", [] {
    RunOptions o = smallRun("cnn", 4, 320);
    Dataset test = makeSyntheticDataset(203, 28, 28, 10, kSeed + 7);  // not divisible by the rank count
    Trainer all(o.trainer, MPI_COMM_WORLD, makeSyntheticDataset(320, 28, 28, 10, kSeed), test,
                makeMpiReducer(MPI_COMM_WORLD, 4));
    Trainer one(o.trainer, MPI_COMM_SELF, makeSyntheticDataset(320, 28, 28, 10, kSeed), test,
                makeMpiReducer(MPI_COMM_SELF, 4));
    const Evaluation a = all.evaluate(0), b = one.evaluate(0);
    if (a.images != 203 || b.images != 203) return std::string("image counts ") + std::to_string(a.images);
    if (a.accuracy != b.accuracy) return "accuracy " + std::to_string(a.accuracy) + " vs " + std::to_string(b.accuracy);
    if (std::fabs(a.loss - b.loss) > 1e-9 * std::fabs(b.loss)) return "loss " + std::to_string(a.loss) + " vs " + std::to_string(b.loss);
    return std::string();
  });

  MPI_Finalize();
  return gFailures == 0 ? 0 : 1;
}
