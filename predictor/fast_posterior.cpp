// fitFast(): the posterior mixture by quadrature over (family, theta, sigma) with (a_c, b_c) of every
// curve integrated in closed form (evidence.cpp).
//
// The quadrature is a midpoint rule on cells of (u0, u1, log sigma), the coordinates in which the prior
// is uniform (u1 only for two-parameter families): grid1d (one-parameter) or grid2d^2 (two-parameter)
// theta cells times noiseGrid sigma cells per family (with sample counts: noiseGridWithCounts sigma
// cells times each binomial scale lambda). A cell's weight is its prior mass times
// prod_c p(y_c | centre); all curves share the cell (shared shape and noise), each keeps its own
// (a_c, b_c). Then refineLevels times, the heaviest cells holding refineMass of the posterior (at most
// refineCells of them) are split in three along every coordinate and their children evaluated: the
// grid becomes fine exactly where the posterior is narrow (many points, little noise). Finally the
// lightest cells holding dropMass are dropped and the rest keep their per-curve Gaussian posteriors.
//
// Cost: the base grid dominates; without sample counts a cell costs one 2x2 solve per curve (the basis
// sums are computed once per theta and scaled by 1/sigma^2), with counts every point has its own
// variance sigma^2 + tau_i and a cell costs about 6 flops per point.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <utility>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

namespace {
using detail::CurveData;
using detail::Sums;

struct ThetaNode {
  Family family;
  double u0, u1, h0, h1;  // cell centre and half-widths in unit coordinates (h1 = 0: one parameter)
  std::array<double, 2> theta;
  double logPrior;
};

std::vector<ThetaNode> thetaNodes(const ModelOptions& model, const FastOptions& options) {
  std::vector<ThetaNode> nodes;
  const double logFamily = -std::log(static_cast<double>(model.families.size()));
  for (Family family : model.families) {
    const bool two = familyParameterCount(family) == 2;
    const int n0 = two ? options.grid2d : options.grid1d;
    const int n1 = two ? options.grid2d : 1;
    const double logNode = logFamily - std::log(static_cast<double>(n0) * n1);
    for (int i = 0; i < n0; ++i) {
      for (int j = 0; j < n1; ++j) {
        const double u0 = (i + 0.5) / n0, u1 = two ? (j + 0.5) / n1 : 0.5;
        nodes.push_back({family, u0, u1, 0.5 / n0, two ? 0.5 / n1 : 0.0,
                         detail::familyTheta(family, u0, u1), logNode});
      }
    }
  }
  return nodes;
}

// A quadrature cell: centre, half-widths, log prior mass and log (prior mass * evidence).
struct Cell {
  Family family;
  double u0, u1, logSigma;
  double binomialScale;  // lambda: discrete, never split
  double h0, h1, hs;
  double logPrior, logWeight;
};

// Per-curve, per-noise-node quantities that do not depend on theta.
struct NoiseTables {
  std::vector<double> sd, scale;                            // per noise node: sigma, lambda
  std::vector<std::vector<double>> weights, weightedY;      // [curve][node * points + i]: w_i, w_i y_i
  std::vector<std::vector<double>> w, logVariance, wy, wyy;  // [curve][node]
};

NoiseTables noiseTables(const detail::Data& data, std::vector<double> sds, std::vector<double> scales) {
  NoiseTables t;
  t.sd = std::move(sds);
  t.scale = std::move(scales);
  const int noiseGrid = static_cast<int>(t.sd.size());
  for (const CurveData& d : data.curves) {
    const std::size_t n = d.x.size();
    std::vector<double> weights(noiseGrid * n), weightedY(noiseGrid * n);
    std::vector<double> w(noiseGrid), logVar(noiseGrid), wy(noiseGrid), wyy(noiseGrid);
    for (int j = 0; j < noiseGrid; ++j) {
      const double s2 = t.sd[j] * t.sd[j];
      for (std::size_t i = 0; i < n; ++i) {
        const double v = s2 + t.scale[j] * d.tau[i];
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
  s.wg = (w * b.g).sum();
  s.wgg = (w * b.g.square()).sum();
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

// Indices of the heaviest cells, heaviest first, until they hold `mass` of the total (at most `limit`).
std::vector<std::size_t> heaviest(const std::vector<Cell>& cells, double mass, std::size_t limit,
                                  std::vector<double>& weight, double& total) {
  double maxLog = -std::numeric_limits<double>::infinity();
  for (const Cell& c : cells) maxLog = std::max(maxLog, c.logWeight);
  ADAPREC_CHECK(std::isfinite(maxLog), ErrorCode::kInternal, "no finite posterior weight");
  weight.resize(cells.size());
  total = 0;
  std::vector<std::pair<double, std::size_t>> order;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    total += weight[i] = std::exp(cells[i].logWeight - maxLog);
    // Cells below 1e-12 of the heaviest cannot matter (there are far fewer than 1e8): sort the rest.
    if (weight[i] > 1e-12) order.emplace_back(weight[i], i);
  }
  std::sort(order.begin(), order.end(), std::greater<>());
  std::vector<std::size_t> out;
  double cumulative = 0;
  for (const auto& [w, i] : order) {
    if (out.size() >= limit || (!out.empty() && cumulative >= mass * total)) break;
    out.push_back(i);
    cumulative += w;
  }
  return out;
}

// Splits a cell in three along each of its coordinates and evaluates the children (the 3 noise levels'
// tables and the 3 or 9 thetas' basis sums are computed once and combined).
void refine(const Cell& parent, const detail::Data& data, const detail::EvidencePrior& prior, std::vector<Cell>& out) {
  const bool two = parent.h1 > 0;
  const int n1 = two ? 3 : 1;
  const double logChildPrior = parent.logPrior - std::log(3.0 * 3.0 * n1);
  std::vector<double> sds;
  for (int k = -1; k <= 1; ++k) sds.push_back(std::exp(parent.logSigma + k * 2.0 * parent.hs / 3.0));
  const NoiseTables tables = noiseTables(data, sds, std::vector<double>(3, parent.binomialScale));
  std::vector<BasisSums> sums;
  for (int i = -1; i <= 1; ++i) {
    for (int j = two ? -1 : 0; j <= (two ? 1 : 0); ++j) {
      Cell child = parent;
      child.u0 = parent.u0 + i * 2.0 * parent.h0 / 3.0;
      child.u1 = parent.u1 + j * 2.0 * parent.h1 / 3.0;
      child.h0 = parent.h0 / 3.0;
      child.h1 = parent.h1 / 3.0;
      child.hs = parent.hs / 3.0;
      child.logPrior = logChildPrior;
      const ThetaNode node{child.family, child.u0, child.u1, child.h0, child.h1,
                           detail::familyTheta(child.family, child.u0, child.u1), logChildPrior};
      basisValues(node, data, sums);
      for (int k = 0; k < 3; ++k) {
        child.logSigma = std::log(tables.sd[k]);
        child.logWeight = logChildPrior;
        for (std::size_t c = 0; c < data.curves.size(); ++c) {
          child.logWeight += detail::curveEvidence(curveSums(data.curves[c], tables, c, k, sums[c]), prior).logEvidence;
        }
        out.push_back(child);
      }
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
  // Noise nodes: sigma cells times the binomial scales (one scale, 1, without sample counts).
  const bool counts = std::any_of(data.curves.begin(), data.curves.end(), [](const auto& d) { return d.hasCounts; });
  const int sigmaCount = counts ? options.noiseGridWithCounts : options.noiseGrid;
  std::vector<double> sds, scales;
  const double lo = std::log(model.noiseMin), hi = std::log(model.noiseMax);
  for (double scale : data.binomialScales) {
    for (int j = 0; j < sigmaCount; ++j) {
      sds.push_back(std::exp(lo + (hi - lo) * (j + 0.5) / sigmaCount));
      scales.push_back(scale);
    }
  }
  const NoiseTables tables = noiseTables(data, std::move(sds), std::move(scales));
  const int noiseCount = static_cast<int>(tables.sd.size());
  const double logNoisePrior = -std::log(static_cast<double>(noiseCount));
  const double noiseHalfWidth = 0.5 * (hi - lo) / sigmaCount;

  const detail::EvidencePrior prior = detail::evidencePrior(model);
  // Base grid, with the theta-only work shared across noise cells.
  std::vector<Cell> cells;
  cells.reserve(nodes.size() * noiseCount);
  std::vector<BasisSums> sums;
  for (const ThetaNode& node : nodes) {
    basisValues(node, data, sums);
    for (int j = 0; j < noiseCount; ++j) {
      Cell cell{node.family, node.u0, node.u1, std::log(tables.sd[j]), tables.scale[j], node.h0, node.h1, noiseHalfWidth,
                node.logPrior + logNoisePrior, node.logPrior + logNoisePrior};
      for (std::size_t c = 0; c < curveCount; ++c) {
        cell.logWeight += detail::curveEvidence(curveSums(data.curves[c], tables, c, j, sums[c]), prior).logEvidence;
      }
      cells.push_back(cell);
    }
  }

  std::vector<double> weight;
  double total = 0;
  std::vector<std::vector<double>> g;
  for (int level = 0; level < options.refineLevels; ++level) {
    std::vector<std::size_t> split = heaviest(cells, options.refineMass, options.refineCells, weight, total);
    std::sort(split.begin(), split.end(), std::greater<>());  // erase from the back first
    std::vector<Cell> children;
    for (std::size_t i : split) {
      refine(cells[i], data, prior, children);
      cells[i] = cells.back();
      cells.pop_back();
    }
    cells.insert(cells.end(), children.begin(), children.end());
  }

  // Keep the heaviest cells holding 1 - dropMass; store their per-curve posteriors.
  std::vector<std::size_t> kept = heaviest(cells, 1.0 - options.dropMass, cells.size(), weight, total);
  // Group cells of equal theta so that the basis is evaluated once per theta.
  std::sort(kept.begin(), kept.end(), [&](std::size_t x, std::size_t y) {
    return std::tie(cells[x].family, cells[x].u0, cells[x].u1) < std::tie(cells[y].family, cells[y].u0, cells[y].u1);
  });
  double keptTotal = 0;
  for (std::size_t i : kept) keptTotal += weight[i];
  std::vector<detail::CurveFit> fits;
  const Cell* previous = nullptr;
  for (std::size_t i : kept) {
    const Cell& cell = cells[i];
    const std::array<double, 2> theta = detail::familyTheta(cell.family, cell.u0, cell.u1);
    if (!previous || previous->family != cell.family || previous->u0 != cell.u0 || previous->u1 != cell.u1) {
      detail::basisAt(data, cell.family, theta, g);
    }
    previous = &cell;
    detail::evidenceAt(data, model, g, std::exp(cell.logSigma), cell.binomialScale, &fits);
    state->weight.push_back(weight[i] / keptTotal);
    state->family.push_back(cell.family);
    state->theta.push_back(theta);
    state->noiseSd.push_back(std::exp(cell.logSigma));
    state->binomialScale.push_back(cell.binomialScale);
    for (const detail::CurveFit& fit : fits) {
      state->coef.push_back(detail::coefFromGaussian(fit.meanA, fit.meanB, fit.covAA, fit.covAB, fit.covBB));
    }
  }
  return Posterior(std::move(state));
}

}  // namespace adaprec::predictor
