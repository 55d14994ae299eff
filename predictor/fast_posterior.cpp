// fitFast(): the posterior mixture by quadrature over (family, theta, sigma) with (a_c, b_c) of every
// curve integrated in closed form (evidence.cpp).
//
// Grid: midpoint rule in the unit coordinates u of theta (the prior is uniform there), grid1d nodes for
// one-parameter families and grid2d^2 for two-parameter ones, times noiseGrid midpoints in log sigma.
// Each node's weight is prior * prod_c p(y_c | node); all curves share the node (shared shape and noise),
// each keeps its own (a_c, b_c). Pass 1 only scores nodes; pass 2 keeps the heaviest nodes holding
// 1 - dropMass of the mass and stores their per-curve posteriors.
//
// Cost: nodes * curves * (a 2x2 solve) when no sample counts are given (sums of the basis are computed
// once per theta and scaled by 1/sigma^2), plus nodes * points * 6 flops with counts, where every point
// has its own variance sigma^2 + tau_i.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

namespace {
using detail::CurveData;
using detail::Sums;

struct ThetaNode {
  Family family;
  std::array<double, 2> theta;
  double logPrior;
};

std::vector<ThetaNode> thetaNodes(const ModelOptions& model, const FastOptions& options) {
  std::vector<ThetaNode> nodes;
  const double logFamily = -std::log(static_cast<double>(model.families.size()));
  for (Family family : model.families) {
    const int n0 = familyParameterCount(family) == 2 ? options.grid2d : options.grid1d;
    const int n1 = familyParameterCount(family) == 2 ? options.grid2d : 1;
    const double logNode = logFamily - std::log(static_cast<double>(n0) * n1);
    for (int i = 0; i < n0; ++i) {
      for (int j = 0; j < n1; ++j) {
        nodes.push_back({family, detail::familyTheta(family, (i + 0.5) / n0, (j + 0.5) / n1), logNode});
      }
    }
  }
  return nodes;
}

// Per-curve, per-noise-node quantities that do not depend on theta.
struct NoiseTables {
  std::vector<double> sd;                                   // per noise node
  std::vector<std::vector<double>> weights, weightedY;      // [curve][node * points + i]: w_i, w_i y_i
  std::vector<std::vector<double>> w, logVariance, wy, wyy;  // [curve][node]
};

NoiseTables noiseTables(const detail::Data& data, const ModelOptions& model, int noiseGrid) {
  NoiseTables t;
  const double lo = std::log(model.noiseMin);
  const double hi = std::log(model.noiseMax);
  for (int j = 0; j < noiseGrid; ++j) t.sd.push_back(std::exp(lo + (hi - lo) * (j + 0.5) / noiseGrid));
  for (const CurveData& d : data.curves) {
    const std::size_t n = d.x.size();
    std::vector<double> weights(noiseGrid * n), weightedY(noiseGrid * n);
    std::vector<double> w(noiseGrid), logVar(noiseGrid), wy(noiseGrid), wyy(noiseGrid);
    for (int j = 0; j < noiseGrid; ++j) {
      const double s2 = t.sd[j] * t.sd[j];
      for (std::size_t i = 0; i < n; ++i) {
        const double v = s2 + d.tau[i];
        weights[j * n + i] = 1.0 / v;
        weightedY[j * n + i] = d.y[i] / v;
        w[j] += 1.0 / v;
        logVar[j] += std::log(v);
        wy[j] += d.y[i] / v;
        wyy[j] += d.y[i] * d.y[i] / v;
      }
    }
    t.weights.push_back(std::move(weights));
    t.weightedY.push_back(std::move(weightedY));
    t.w.push_back(std::move(w));
    t.logVariance.push_back(std::move(logVar));
    t.wy.push_back(std::move(wy));
    t.wyy.push_back(std::move(wyy));
  }
  return t;
}

// Basis sums of one curve for one theta: unweighted (enough without counts, where all weights are
// equal) and the basis values themselves for the weighted sums with counts.
struct BasisSums {
  Eigen::ArrayXd g;
  double sg = 0, sgg = 0, syg = 0;
};

// Sufficient statistics of curve c at noise node j.
Sums curveSums(const CurveData& d, const NoiseTables& t, std::size_t c, int j, const BasisSums& b) {
  const Eigen::Index n = static_cast<Eigen::Index>(d.x.size());
  Sums s;
  s.count = static_cast<double>(n);
  s.w = t.w[c][j];
  s.logVariance = t.logVariance[c][j];
  s.wy = t.wy[c][j];
  s.wyy = t.wyy[c][j];
  if (!d.hasCounts) {
    const double w = t.weights[c][j * n];
    s.wg = w * b.sg;
    s.wgg = w * b.sgg;
    s.wyg = w * b.syg;
    return s;
  }
  const Eigen::Map<const Eigen::ArrayXd> w(&t.weights[c][j * n], n);
  const Eigen::Map<const Eigen::ArrayXd> wy(&t.weightedY[c][j * n], n);
  const Eigen::ArrayXd wg = w * b.g;
  s.wg = wg.sum();
  s.wgg = (wg * b.g).sum();
  s.wyg = (wy * b.g).sum();
  return s;
}

void basisValues(const ThetaNode& node, const detail::Data& data, std::vector<BasisSums>& out) {
  out.resize(data.curves.size());
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    const CurveData& d = data.curves[c];
    BasisSums& b = out[c];
    b.g.resize(static_cast<Eigen::Index>(d.x.size()));
    b.sg = b.sgg = b.syg = 0;
    for (std::size_t i = 0; i < d.x.size(); ++i) {
      const double g = detail::basis(node.family, node.theta, d.x[i]);
      b.g[static_cast<Eigen::Index>(i)] = g;
      b.sg += g;
      b.sgg += g * g;
      b.syg += g * d.y[i];
    }
  }
}
}  // namespace

Posterior fitFast(const std::vector<Curve>& curves, const ModelOptions& model, const FastOptions& options) {
  options.check();
  auto state = std::make_shared<detail::PosteriorState>();
  state->data = detail::prepareData(curves, model);
  state->model = model;
  const detail::Data& data = state->data;
  const std::size_t curveCount = data.curves.size();
  const std::vector<ThetaNode> nodes = thetaNodes(model, options);
  const NoiseTables tables = noiseTables(data, model, options.noiseGrid);
  const int noiseCount = options.noiseGrid;
  const double logNoisePrior = -std::log(static_cast<double>(noiseCount));

  // Pass 1: log weight of every (theta node, noise node).
  std::vector<double> logWeight(nodes.size() * noiseCount);
  std::vector<BasisSums> g;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    basisValues(nodes[k], data, g);
    for (int j = 0; j < noiseCount; ++j) {
      double lw = nodes[k].logPrior + logNoisePrior;
      for (std::size_t c = 0; c < curveCount; ++c) {
        lw += detail::curveEvidence(curveSums(data.curves[c], tables, c, j, g[c]), model).logEvidence;
      }
      logWeight[k * noiseCount + j] = lw;
    }
  }

  // Normalise, keep the heaviest nodes holding 1 - dropMass.
  const double maxLog = *std::max_element(logWeight.begin(), logWeight.end());
  ADAPREC_CHECK(std::isfinite(maxLog), ErrorCode::kInternal, "no finite posterior weight");
  std::vector<double> weight(logWeight.size());
  double total = 0;
  for (std::size_t i = 0; i < weight.size(); ++i) total += weight[i] = std::exp(logWeight[i] - maxLog);
  // Nodes below 1e-12 of the heaviest cannot matter (there are far fewer than 1e8 of them): sort the rest.
  std::vector<std::pair<double, std::size_t>> order;
  for (std::size_t i = 0; i < weight.size(); ++i) {
    if (weight[i] > 1e-12) order.emplace_back(weight[i], i);
  }
  std::sort(order.begin(), order.end(), std::greater<>());
  std::vector<std::size_t> kept;
  double cumulative = 0;
  for (const auto& [w, i] : order) {
    if (!kept.empty() && cumulative >= (1.0 - options.dropMass) * total) break;
    kept.push_back(i);
    cumulative += w;
  }
  // Pass 2: per-curve posteriors of the kept nodes, grouped by theta node to evaluate each basis once.
  std::sort(kept.begin(), kept.end());
  std::size_t lastNode = nodes.size();
  for (std::size_t index : kept) {
    const std::size_t k = index / noiseCount;
    const int j = static_cast<int>(index % noiseCount);
    if (k != lastNode) basisValues(nodes[k], data, g);
    lastNode = k;
    state->weight.push_back(weight[index] / cumulative);
    state->family.push_back(nodes[k].family);
    state->theta.push_back(nodes[k].theta);
    state->noiseSd.push_back(tables.sd[j]);
    for (std::size_t c = 0; c < curveCount; ++c) {
      const detail::CurveFit fit = detail::curveEvidence(curveSums(data.curves[c], tables, c, j, g[c]), model);
      state->coef.push_back(detail::coefFromGaussian(fit.meanA, fit.meanB, fit.covAA, fit.covAB, fit.covBB));
    }
  }
  return Posterior(std::move(state));
}

}  // namespace adaprec::predictor
