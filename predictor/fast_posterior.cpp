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
// Cost: the base grid dominates. Per theta the basis is evaluated once per distinct step (BasisTable,
// shared by the curves), and each curve's basis sums for all noise cells come from one small matrix
// product (with counts every point has its own variance sigma^2 + lambda tau_i; without, the sums are
// the unweighted ones scaled by 1/sigma^2). A cell then costs one closed-form 2x2 solve per curve.
// The per-curve Gaussian posteriors of every cell that can still matter (log weight within
// kStoreMargin of the heaviest seen so far) are kept from that solve, so the components need no
// second pass over the data.
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
using detail::CurveFit;
using detail::Sums;

// Cells lighter than 1e-12 of the heaviest are never refined or kept (heaviest()); a cell more than
// 28 (e^-28 < 1e-12) below the heaviest seen so far is at least that far below the final heaviest.
constexpr double kNegligibleLog = -27.631021115928547;  // log(1e-12)
constexpr double kStoreMargin = 28.0;

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
      for (int j = 0; j < n1; ++j) {  // alpha innermost: BasisTable reuses the kappa-only work
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
  std::ptrdiff_t fit;  // first of its curves' posteriors in the fit pool; -1: negligible, not stored
};

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Columns3 = Eigen::Matrix<double, Eigen::Dynamic, 3>;

// Per-curve, per-noise-node quantities that do not depend on theta.
struct NoiseTables {
  std::vector<double> sd, scale;               // per noise node: sigma, lambda
  std::vector<RowMatrix> weights;              // [curve](node, point): w = 1 / variance (counts only)
  std::vector<Eigen::ArrayXd> w, logVariance, wy, wyy;  // [curve](node)
};

NoiseTables noiseTables(const detail::Data& data, std::vector<double> sds, std::vector<double> scales) {
  NoiseTables t;
  t.sd = std::move(sds);
  t.scale = std::move(scales);
  const Eigen::Index noiseCount = static_cast<Eigen::Index>(t.sd.size());
  for (const CurveData& d : data.curves) {
    const Eigen::Index n = static_cast<Eigen::Index>(d.x.size());
    RowMatrix weights(d.hasCounts ? noiseCount : 0, n);
    Eigen::ArrayXd w = Eigen::ArrayXd::Zero(noiseCount), logVar = w, wy = w, wyy = w;
    for (Eigen::Index j = 0; j < noiseCount; ++j) {
      const double s2 = t.sd[j] * t.sd[j];
      if (!d.hasCounts) {
        double sy = 0, syy = 0;
        for (Eigen::Index i = 0; i < n; ++i) sy += d.y[i], syy += d.y[i] * d.y[i];
        w[j] = n / s2;
        logVar[j] = n * std::log(s2);
        wy[j] = sy / s2;
        wyy[j] = syy / s2;
        continue;
      }
      for (Eigen::Index i = 0; i < n; ++i) {
        const double v = s2 + t.scale[j] * d.tau[i];
        weights(j, i) = 1.0 / v;
        w[j] += 1.0 / v;
        logVar[j] += std::log(v);
        wy[j] += d.y[i] / v;
        wyy[j] += d.y[i] * d.y[i] / v;
      }
    }
    t.weights.push_back(std::move(weights));
    t.w.push_back(std::move(w));
    t.logVariance.push_back(std::move(logVar));
    t.wy.push_back(std::move(wy));
    t.wyy.push_back(std::move(wyy));
  }
  return t;
}

// The theta-dependent sums of every curve at every noise node: columns sum w g, sum w g^2, sum w y g.
struct ThetaSums {
  std::vector<Columns3> basis;  // [curve](point): g, g^2, y g
  std::vector<Columns3> sums;   // [curve](node)
};

void thetaSums(const detail::Data& data, const std::vector<double>& g, const NoiseTables& t, ThetaSums& out) {
  out.basis.resize(data.curves.size());
  out.sums.resize(data.curves.size());
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    const CurveData& d = data.curves[c];
    const Eigen::Index n = static_cast<Eigen::Index>(d.x.size());
    Columns3& b = out.basis[c];
    b.resize(n, 3);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double gi = g[static_cast<std::size_t>(d.xIndex[i])];
      b(i, 0) = gi;
      b(i, 1) = gi * gi;
      b(i, 2) = gi * d.y[i];
    }
    if (d.hasCounts) {
      out.sums[c].noalias() = t.weights[c].lazyProduct(b);
    } else {
      // Equal weights n / sigma^2 / n per point: scale the plain column sums.
      const Eigen::RowVector3d plain = b.colwise().sum();
      out.sums[c].noalias() = (t.w[c] / static_cast<double>(n)).matrix() * plain;
    }
  }
}

// Sufficient statistics of curve c at noise node j.
Sums curveSums(const CurveData& d, const NoiseTables& t, std::size_t c, Eigen::Index j, const ThetaSums& b) {
  Sums s;
  s.count = static_cast<double>(d.x.size());
  s.w = t.w[c][j];
  s.logVariance = t.logVariance[c][j];
  s.wy = t.wy[c][j];
  s.wyy = t.wyy[c][j];
  s.wg = b.sums[c](j, 0);
  s.wgg = b.sums[c](j, 1);
  s.wyg = b.sums[c](j, 2);
  return s;
}

// Evaluates every noise node of one theta: appends the cells and, for those that can matter, their
// curves' posteriors to the pool.
class CellEvaluator {
 public:
  CellEvaluator(const detail::Data& data, const detail::EvidencePrior& prior)
      : data_(data), prior_(prior), fits_(data.curves.size()) {}

  void add(const Cell& shape, const NoiseTables& t, const ThetaSums& sums, std::vector<Cell>& cells,
           std::vector<CurveFit>& pool) {
    const std::size_t curveCount = data_.curves.size();
    for (Eigen::Index j = 0; j < static_cast<Eigen::Index>(t.sd.size()); ++j) {
      Cell cell = shape;
      cell.logSigma = std::log(t.sd[j]);
      cell.binomialScale = t.scale[j];
      cell.logWeight = cell.logPrior;
      for (std::size_t c = 0; c < curveCount; ++c) {
        fits_[c] = detail::curveEvidence(curveSums(data_.curves[c], t, c, j, sums), prior_);
        cell.logWeight += fits_[c].logEvidence;
      }
      cell.fit = -1;
      if (cell.logWeight > maxLog_ - kStoreMargin) {
        cell.fit = static_cast<std::ptrdiff_t>(pool.size());
        pool.insert(pool.end(), fits_.begin(), fits_.end());
        maxLog_ = std::max(maxLog_, cell.logWeight);
      }
      cells.push_back(cell);
    }
  }

 private:
  const detail::Data& data_;
  const detail::EvidencePrior& prior_;
  std::vector<CurveFit> fits_;
  double maxLog_ = -std::numeric_limits<double>::infinity();
};

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
    // Cells below 1e-12 of the heaviest cannot matter (there are far fewer than 1e8): sort the rest.
    const double relative = cells[i].logWeight - maxLog;
    weight[i] = relative > kNegligibleLog ? std::exp(relative) : 0.0;
    total += weight[i];
    if (weight[i] > 0) order.emplace_back(weight[i], i);
  }
  const std::size_t sorted = std::min(limit, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(sorted), order.end(),
                    std::greater<>());
  std::vector<std::size_t> out;
  double cumulative = 0;
  for (std::size_t k = 0; k < sorted; ++k) {
    if (!out.empty() && cumulative >= mass * total) break;
    out.push_back(order[k].second);
    cumulative += order[k].first;
  }
  return out;
}

// Splits a cell in three along each of its coordinates and evaluates the children (the 3 noise levels'
// tables are computed once and shared by the 3 or 9 thetas).
void refine(const Cell& parent, const detail::Data& data, detail::BasisTable& basis, CellEvaluator& evaluator,
            std::vector<Cell>& out, std::vector<CurveFit>& pool, ThetaSums& sums) {
  const bool two = parent.h1 > 0;
  const int n1 = two ? 3 : 1;
  std::vector<double> sds;
  for (int k = -1; k <= 1; ++k) sds.push_back(std::exp(parent.logSigma + k * 2.0 * parent.hs / 3.0));
  const NoiseTables tables = noiseTables(data, sds, std::vector<double>(3, parent.binomialScale));
  Cell child = parent;
  child.h0 = parent.h0 / 3.0;
  child.h1 = parent.h1 / 3.0;
  child.hs = parent.hs / 3.0;
  child.logPrior = parent.logPrior - std::log(3.0 * 3.0 * n1);
  for (int i = -1; i <= 1; ++i) {
    for (int j = two ? -1 : 0; j <= (two ? 1 : 0); ++j) {
      child.u0 = parent.u0 + i * 2.0 * parent.h0 / 3.0;
      child.u1 = parent.u1 + j * 2.0 * parent.h1 / 3.0;
      thetaSums(data, basis.values(child.family, detail::familyTheta(child.family, child.u0, child.u1)), tables, sums);
      evaluator.add(child, tables, sums, out, pool);
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
  detail::BasisTable basis(data.distinctX);
  CellEvaluator evaluator(data, prior);
  std::vector<CurveFit> pool;
  // A broad posterior (few points) stores nearly every base cell: size the pool once instead of
  // growing it by copies (and fresh pages) while the grid is walked.
  pool.reserve(nodes.size() * static_cast<std::size_t>(noiseCount) * data.curves.size());
  ThetaSums sums;
  // Base grid, with the theta-only work shared across noise cells.
  std::vector<Cell> cells;
  cells.reserve(nodes.size() * noiseCount);
  for (const ThetaNode& node : nodes) {
    thetaSums(data, basis.values(node.family, node.theta), tables, sums);
    const Cell shape{node.family, node.u0, node.u1, 0, 1, node.h0, node.h1, noiseHalfWidth,
                     node.logPrior + logNoisePrior, 0, -1};
    evaluator.add(shape, tables, sums, cells, pool);
  }

  std::vector<double> weight;
  double total = 0;
  for (int level = 0; level < options.refineLevels; ++level) {
    std::vector<std::size_t> split = heaviest(cells, options.refineMass, options.refineCells, weight, total);
    std::sort(split.begin(), split.end(), std::greater<>());  // erase from the back first
    std::vector<Cell> children;
    for (std::size_t i : split) {
      refine(cells[i], data, basis, evaluator, children, pool, sums);
      cells[i] = cells.back();
      cells.pop_back();
    }
    cells.insert(cells.end(), children.begin(), children.end());
  }

  // Keep the heaviest cells holding 1 - dropMass with their per-curve posteriors.
  const std::vector<std::size_t> kept = heaviest(cells, 1.0 - options.dropMass, cells.size(), weight, total);
  double keptTotal = 0;
  for (std::size_t i : kept) keptTotal += weight[i];
  const std::size_t curveCount = data.curves.size();
  state->coef.reserve(kept.size() * curveCount);
  for (std::size_t i : kept) {
    const Cell& cell = cells[i];
    ADAPREC_CHECK(cell.fit >= 0, ErrorCode::kInternal, "a kept cell has no stored posterior");
    state->weight.push_back(weight[i] / keptTotal);
    state->family.push_back(cell.family);
    state->theta.push_back(detail::familyTheta(cell.family, cell.u0, cell.u1));
    state->noiseSd.push_back(std::exp(cell.logSigma));
    state->binomialScale.push_back(cell.binomialScale);
    for (std::size_t c = 0; c < curveCount; ++c) {
      const CurveFit& fit = pool[static_cast<std::size_t>(cell.fit) + c];
      state->coef.push_back(detail::coefFromGaussian(fit.meanA, fit.meanB, fit.covAA, fit.covAB, fit.covBB));
    }
  }
  return Posterior(std::move(state));
}

}  // namespace adaprec::predictor
