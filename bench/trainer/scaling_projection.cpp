// Issue 21's scaling report beyond the emulated cluster: adaprec-train's images/s and scaling
// efficiency on N nodes x 1 rank, projected with the engine's own cost model (lib/algorithm/cost_model)
// from a calibration measured on the emulated nodes (ADAPREC_CALIBRATION=FILE written by any AdaPrec
// run there) and the per-step compute time measured on one node.
//
// Per step the trainer makes one allreduce per layer (--bucketing layer); the model's seconds for each
// layer's size at N ranks add up to the communication time C. Without overlap a step takes
// compute + C; with overlap the ideal is max(compute, C) (issue 21's reference: the last layer's
// reduction can still only start when the backward pass ends, so the real overlap is at most this
// good). The same link speed per node is assumed at every N (a non-blocking switch).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "algorithm/cost_model.hpp"
#include "trainer/model.hpp"

int main(int argc, char** argv) {
  std::string calibrationPath, modelName = "cnn", algoName = "twoshot";
  std::vector<std::string> formats{"fp32", "table4"};
  std::vector<int> nodes{1, 2, 4, 8, 16, 32, 64};
  double computeMs = 0;
  int batch = 32;
  CLI::App app{"Project adaprec-train's images/s to N nodes with the engine's cost model"};
  app.add_option("--calibration", calibrationPath, "Calibration file from the emulated nodes")->required();
  app.add_option("--compute-ms", computeMs, "Measured compute per step on one node (ms)")->required();
  app.add_option("--model", modelName, "mlp or cnn")->capture_default_str();
  app.add_option("--batch", batch, "Mini-batch per rank")->capture_default_str();
  app.add_option("--algo", algoName, "Algorithm the trainer runs")->capture_default_str();
  app.add_option("--formats", formats, "Wire formats")->delimiter(',')->capture_default_str();
  app.add_option("--nodes", nodes, "Node counts (one rank each)")->delimiter(',')->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    using namespace adaprec;
    std::ifstream in(calibrationPath);
    if (!in) throw std::runtime_error("cannot read " + calibrationPath);
    std::stringstream text;
    text << in.rdbuf();
    // Any topology: the projection re-targets it below.
    std::string why;
    std::optional<detail::Calibration> calibration = detail::parseCalibrationText(text.str(), why);
    if (!calibration) throw std::runtime_error(calibrationPath + ": " + why);
    if (calibration->topology.ranksPerNode != 1)
      throw std::runtime_error("the projection needs a calibration measured with one rank per node");
    const Algorithm algorithm = parseAlgorithm(algoName);
    auto model = trainer::makeModel(modelName, trainer::Shape{1, 28, 28}, 10);
    std::printf("# %s, batch %d per rank, compute %.1f ms per step (measured on one node), %s, calibration "
                "from %d nodes: inter-node alpha %.1f us, loaded bandwidth %.1f MB/s per rank\n",
                modelName.c_str(), batch, computeMs, algoName.c_str(), calibration->topology.nodes,
                calibration->inter.alphaSeconds * 1e6, calibration->loaded.bytesPerSecond / 1e6);
    std::printf("| nodes | format | comm ms (model) | step ms, no overlap | images/s | efficiency | "
                "step ms, ideal overlap | images/s | efficiency |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const double single = batch / (computeMs / 1e3);
    for (const std::string& name : formats) {
      const Format format = parseFormatSpec(name).format;
      if (calibration->codec.count(format) == 0)
        throw std::runtime_error(calibrationPath + " has no codec speed for " + name +
                                 " (calibrate with adaprec-bench --model --formats including it)");
      for (int n : nodes) {
        detail::Calibration c = *calibration;
        c.topology.ranks = n;
        c.topology.nodes = n;
        double commMs = 0;
        for (const trainer::LayerRange& layer : model->layerRanges())
          commMs += 1e3 * detail::predictSeconds(c, algorithm, format, static_cast<std::size_t>(layer.count));
        const double plain = computeMs + commMs;
        const double overlapped = std::max(computeMs, commMs);
        const double ipsPlain = n * batch / (plain / 1e3);
        const double ipsOverlap = n * batch / (overlapped / 1e3);
        std::printf("| %d | %s | %.1f | %.1f | %.0f | %.2f | %.1f | %.0f | %.2f |\n", n, name.c_str(), commMs, plain,
                    ipsPlain, ipsPlain / (n * single), overlapped, ipsOverlap, ipsOverlap / (n * single));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-scaling-projection: %s\n", adaprec::messageForUsers(e).c_str());
    return 1;
  }
  return 0;
}
