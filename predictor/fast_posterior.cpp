// fitFast(): the posterior mixture by quadrature over (family, theta, sigma, lambda, tau) with (a_c, b_c)
// of every curve and the shared noise terms s_t integrated in closed form (joint_evidence.cpp).
//
// The quadrature is a midpoint rule on cells of (u0, u1, log sigma), the coordinates in which the prior
// is uniform (u1 only for two-parameter families): grid1d (one-parameter) or grid2d^2 (two-parameter)
// theta cells times noiseGrid sigma cells per family (with sample counts: noiseGridWithCounts sigma
// cells times each binomial scale lambda), times every shared noise sd tau (discrete, like lambda). A
// cell's weight is its prior mass times p(y_1..y_C | centre); all curves share the cell (shared shape
// and noise), each keeps its own (a_c, b_c). Then refineLevels times, the heaviest cells holding
// refineMass of the posterior (at most refineCells of them) are split in three along every continuous
// coordinate and their children evaluated: the grid becomes fine exactly where the posterior is narrow
// (many points, little noise). Finally the lightest cells holding dropMass are dropped and the rest keep
// their per-curve Gaussian posteriors.
//
// Cost: the base grid dominates. Per theta the basis is evaluated once per distinct step (BasisTable,
// shared by the curves). Curves at common steps with equal variances (the branches of one checkpoint)
// take the rotated closed form: per theta, one (noise cells x steps) x (steps x (2 + C)) product gives
// the contrast sums and one (noise cells x tau values x steps) x (steps x 3) product the sums of the
// across-curve mean (without counts, plain column sums scaled per cell); a cell then costs two 2x2
// solves and C normal CDFs, and the CDFs are skipped when the cell's weight without them (an upper
// bound) already rules it out. Other layouts take the dense 2C x 2C regression per cell (slower, exact).
// With a schedule every theta is evaluated once per annealing node c on the observations less c S2;
// the theta-dependent sums are linear in the observations, so one product per theta with the extra
// column g S2 (ThetaProducts) serves every node: sum w g (y - c S2) = sum w g y - c sum w g S2.
// The per-curve Gaussian posteriors of every cell that can still matter (log weight within
// storeMargin() of the heaviest seen so far) are kept (FitPool), so the components need no second pass.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "adaprec/error.hpp"
#include "model.hpp"
#include "weighted_sums.hpp"

namespace adaprec::predictor {

namespace {
using detail::CurveFit;

// Cells lighter than 1e-12 of the heaviest are never refined or kept (heaviest()); a cell more than
// 28 (e^-28 < 1e-12) below the heaviest seen so far is at least that far below the final heaviest.
constexpr double kNegligibleLog = -27.631021115928547;  // log(1e-12)
constexpr double kStoreMargin = 28.0;

// How far below the heaviest cell a cell can be and still survive the final pruning: the lightest
// cells holding dropMass of the total are dropped, so a cell lighter than dropMass / N of the heaviest
// (N: every cell the fit can create) is dropped with all lighter ones (together < dropMass * heaviest).
// Cells beyond this margin need neither their posteriors stored nor their truncation factors.
double storeMargin(const FastOptions& options, std::size_t baseCells) {
  if (options.dropMass <= 0) return kStoreMargin;
  const double maxCells = static_cast<double>(baseCells) + options.refineLevels * options.refineCells * 81.0;
  return std::min(kStoreMargin, std::log(maxCells / options.dropMass));
}

struct ThetaNode {
  Family family;
  double u0, u1, h0, h1;  // cell centre and half-widths in unit coordinates (h1 = 0: one parameter)
  std::array<double, 2> theta;
  double logPrior;
};

// The base grid's theta cells with their prior mass (density at the centre times the cell's volume:
// exact for the uniform prior and for a learned one on the same or a coarser grid). Cells without prior
// mass are left out.
std::vector<ThetaNode> thetaNodes(const ModelOptions& model, const detail::ShapeDensity& shape,
                                  const FastOptions& options) {
  std::vector<ThetaNode> nodes;
  for (Family family : model.families) {
    const bool two = familyParameterCount(family) == 2;
    const int n0 = two ? options.grid2d : options.grid1d;
    const int n1 = two ? options.grid2d : 1;
    const double logVolume = -std::log(static_cast<double>(n0) * n1);
    for (int i = 0; i < n0; ++i) {
      for (int j = 0; j < n1; ++j) {  // alpha innermost: BasisTable reuses the kappa-only work
        const double u0 = (i + 0.5) / n0, u1 = two ? (j + 0.5) / n1 : 0.5;
        const double logPrior = shape.logDensity(family, u0, u1) + logVolume;
        if (!std::isfinite(logPrior)) continue;
        nodes.push_back({family, u0, u1, 0.5 / n0, two ? 0.5 / n1 : 0.0,
                         detail::familyTheta(family, u0, u1), logPrior});
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
  double sharedSd;       // tau: discrete, never split
  std::size_t annealing; // index of the annealing coefficient c (Data::annealingGains): discrete, never split
  double h0, h1, hs;
  double logPrior, logWeight;
  std::ptrdiff_t fit;  // first of its curves' posteriors in the fit pool
};

// The stored per-curve posteriors. A deque grows in blocks without copying and touches only the memory
// it uses: a vector sized for the worst case (every base cell kept, 15 MB for 5 curves) cost more in
// fresh pages than the fit itself, and growing one by copies is no better.
using FitPool = std::deque<CurveFit>;

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The noise nodes of one evaluation: (sigma_j, lambda_j) for j < sd.size(), each combined with every tau_k;
// cell (j, k) is the k-th of node j.
struct NoiseNodes {
  std::vector<double> sd, scale, shared;
  std::vector<double> logSd;  // log of each sd, once: a cell per (theta, sd, tau, c) needs it
  void add(double sigma, double binomialScale) {
    sd.push_back(sigma);
    logSd.push_back(std::log(sigma));
    scale.push_back(binomialScale);
  }
};

// The across-curve mean of the observations at each common step (symmetric layouts).
Eigen::VectorXd stepMeans(const detail::Data& data) {
  const std::vector<double>& firstY = data.curves.front().y;
  Eigen::VectorXd mean(static_cast<Eigen::Index>(firstY.size()));
  for (std::size_t i = 0; i < firstY.size(); ++i) {
    double sum = 0;
    for (const detail::CurveData& d : data.curves) sum += d.y[i];
    mean[static_cast<Eigen::Index>(i)] = sum / static_cast<double>(data.curves.size());
  }
  return mean;
}

// The theta-dependent products of the symmetric layout: per theta, (noise nodes x steps) x (steps x
// (2 + C)) for the columns g, g^2, g y_c, and (noise nodes x tau values x steps) x (steps x 3) for g,
// g^2, g ybar (without counts, plain column sums scaled per node). With `annealingColumn` both get one
// more column, g S2 (the annealing regressor): the sums are linear in the observations, so products of
// the unshifted observations serve every annealing node c, sum w g (y - c S2) = sum w g y - c sum w g S2,
// one product per theta instead of one per node (the base grid's main cost with a schedule).
class ThetaProducts {
 public:
  // yBar: the across-curve mean of `data`'s observations at each step (SymmetricTables has it).
  ThetaProducts(const detail::Data& data, Eigen::VectorXd yBar, RowMatrix weights, RowMatrix meanWeights,
                bool equalWeights, bool annealingColumn)
      : weights_(std::move(weights)), meanWeights_(std::move(meanWeights)), equalWeights_(equalWeights),
        annealingColumn_(annealingColumn), yBar_(std::move(yBar)) {
    const std::size_t curveCount = data.curves.size();
    const detail::CurveData& first = data.curves.front();
    const Eigen::Index steps = static_cast<Eigen::Index>(first.x.size());
    y_.resize(steps, static_cast<Eigen::Index>(curveCount));
    if (annealingColumn_) annealing_.resize(steps);
    for (Eigen::Index i = 0; i < steps; ++i) {
      for (std::size_t c = 0; c < curveCount; ++c)
        y_(i, static_cast<Eigen::Index>(c)) = data.curves[c].y[static_cast<std::size_t>(i)];
      if (annealingColumn_)
        annealing_[i] = data.annealing[static_cast<std::size_t>(first.xIndex[static_cast<std::size_t>(i)])];
    }
  }

  // The products for the theta whose basis (at the common steps) is g.
  void prepare(const std::vector<double>& g) {
    const Eigen::Index steps = yBar_.size();
    const Eigen::Index curves = y_.cols();
    const Eigen::Index extra = annealingColumn_ ? 1 : 0;
    // Zero columns pad both to whole vectors of the kernel (weightedSums); they stay zero.
    basis_.setZero(steps, padded(2 + curves + extra));
    meanBasis_.setZero(steps, padded(3 + extra));
    for (Eigen::Index i = 0; i < steps; ++i) {
      const double gi = g[static_cast<std::size_t>(i)];
      basis_(i, 0) = meanBasis_(i, 0) = gi;
      basis_(i, 1) = meanBasis_(i, 1) = gi * gi;
      meanBasis_(i, 2) = gi * yBar_[i];
      for (Eigen::Index c = 0; c < curves; ++c) basis_(i, 2 + c) = gi * y_(i, c);
      if (annealingColumn_) basis_(i, 2 + curves) = meanBasis_(i, 3) = gi * annealing_[i];
    }
    if (equalWeights_) {
      // Without counts every step of a node has the same weight: scale the plain column sums.
      const Eigen::RowVectorXd plain = basis_.colwise().sum();
      const Eigen::RowVectorXd meanPlain = meanBasis_.colwise().sum();
      sums_.noalias() = weights_.col(0) * plain;
      meanSums_.noalias() = meanWeights_.col(0) * meanPlain;
    } else {
      sums_.resize(weights_.rows(), basis_.cols());
      meanSums_.resize(meanWeights_.rows(), meanBasis_.cols());
      detail::weightedSums(weights_.data(), static_cast<std::size_t>(weights_.rows()), static_cast<std::size_t>(steps),
                           basis_.data(), static_cast<std::size_t>(basis_.cols()), sums_.data());
      detail::weightedSums(meanWeights_.data(), static_cast<std::size_t>(meanWeights_.rows()),
                           static_cast<std::size_t>(steps), meanBasis_.data(),
                           static_cast<std::size_t>(meanBasis_.cols()), meanSums_.data());
    }
    ready_ = true;
  }
  // Shared by several tables (the annealing nodes of the base grid): prepare(g) runs once per theta
  // before its nodes are evaluated, and invalidate() ends the sharing (the basis vector is reused from
  // theta to theta, so readiness is this explicit state, not g's address).
  bool ready() const { return ready_; }
  void invalidate() { ready_ = false; }
  // (noise node, column) and (noise node x tau, column), columns as above.
  const RowMatrix& sums() const { return sums_; }
  const RowMatrix& meanSums() const { return meanSums_; }

 private:
  static Eigen::Index padded(Eigen::Index columns) {
    const auto lanes = static_cast<Eigen::Index>(detail::kWeightedSumsLanes);
    return (columns + lanes - 1) / lanes * lanes;
  }

  RowMatrix weights_, meanWeights_;  // (node, step), (node x tau, step)
  bool equalWeights_, annealingColumn_;
  Eigen::VectorXd yBar_, annealing_;
  Eigen::MatrixXd y_;
  RowMatrix basis_, meanBasis_, sums_, meanSums_;  // row-major, padded columns (weightedSums)
  bool ready_ = false;
};

// Symmetric layout (every curve at the same T steps with the same variances): per noise node, the
// quantities of detail::SymmetricSums that do not depend on theta, and the weight rows that turn the
// theta-dependent columns into sums by one matrix product per theta.
class SymmetricTables {
 public:
  SymmetricTables(const detail::Data& data, NoiseNodes nodes) : nodes_(std::move(nodes)) {
    const std::size_t curveCount = data.curves.size();
    const detail::CurveData& first = data.curves.front();
    const Eigen::Index steps = static_cast<Eigen::Index>(first.x.size());
    const Eigen::Index nodeCount = static_cast<Eigen::Index>(nodes_.sd.size());
    const Eigen::Index sharedCount = static_cast<Eigen::Index>(nodes_.shared.size());
    const double count = static_cast<double>(curveCount);
    equalWeights_ = !first.hasCounts;
    yBar_ = stepMeans(data);
    weights_.resize(nodeCount, steps);
    meanWeights_.resize(nodeCount * sharedCount, steps);
    base_.assign(static_cast<std::size_t>(nodeCount * sharedCount), detail::SymmetricSums{});
    for (Eigen::Index j = 0; j < nodeCount; ++j) {
      detail::SymmetricSums node;
      node.wy.assign(curveCount, 0.0);
      node.wyg.assign(curveCount, 0.0);
      for (Eigen::Index i = 0; i < steps; ++i) {
        const double v = nodes_.sd[j] * nodes_.sd[j] + nodes_.scale[j] * first.tau[static_cast<std::size_t>(i)];
        const double w = 1.0 / v;
        weights_(j, i) = w;
        node.count += 1;
        node.w += w;
        node.logVariance += std::log(v);
        node.wyMeanSq += w * yBar_[i] * yBar_[i];
        for (std::size_t c = 0; c < curveCount; ++c) {
          const double y = data.curves[c].y[static_cast<std::size_t>(i)];
          node.wy[c] += w * y;
          node.wyy += w * y * y;
        }
      }
      for (Eigen::Index k = 0; k < sharedCount; ++k) {
        detail::SymmetricSums cell = node;
        const double extra = count * nodes_.shared[k] * nodes_.shared[k];
        for (Eigen::Index i = 0; i < steps; ++i) {
          const double v = 1.0 / weights_(j, i) + extra;
          const double wm = 1.0 / v;
          meanWeights_(j * sharedCount + k, i) = wm;
          cell.mw += wm;
          cell.mwy += wm * yBar_[i];
          cell.mwyy += wm * yBar_[i] * yBar_[i];
          cell.mLogVariance += std::log(v);
        }
        base_[static_cast<std::size_t>(j * sharedCount + k)] = std::move(cell);
      }
    }
  }

  const NoiseNodes& nodes() const { return nodes_; }
  // Take the theta-dependent sums from `shared` (products of the unshifted observations with the
  // annealing column) whenever it is ready, shifted by this table's annealing coefficient c.
  void share(ThetaProducts* shared, double annealingGain) {
    shared_ = shared;
    annealingGain_ = annealingGain;
  }
  // Products of every annealing node's observations at once (the unshifted `data`), with this table's
  // noise weights (which do not depend on c).
  ThetaProducts sharedProducts(const detail::Data& data) const {
    return ThetaProducts(data, stepMeans(data), weights_, meanWeights_, equalWeights_, true);
  }

  // Sets every cell's theta-dependent sums (wg, wgg; mwg, mwgg, mwyg) for the basis g at
  // Data::distinctX (= the common steps); the rest was set once. Cell (j, k) is at j * tau count + k.
  // The per-curve sums wyg, like wy, do not depend on tau: they are set in each node's first cell
  // (k = 0) only, and the evaluation of cell (j, k) reads them there.
  const std::vector<detail::SymmetricSums>& thetaSums(const detail::Data& data, const std::vector<double>& g) {
    const std::size_t curveCount = data.curves.size();
    const bool shared = shared_ && shared_->ready();
    if (!shared) {
      if (!own_) own_.emplace(data, yBar_, weights_, meanWeights_, equalWeights_, false);
      own_->prepare(g);
    }
    const ThetaProducts& products = shared ? *shared_ : *own_;
    const RowMatrix& p = products.sums();
    const RowMatrix& m = products.meanSums();
    const Eigen::Index annealingColumn = 2 + static_cast<Eigen::Index>(curveCount);
    const Eigen::Index sharedCount = static_cast<Eigen::Index>(nodes_.shared.size());
    for (Eigen::Index j = 0; j < p.rows(); ++j) {
      for (Eigen::Index k = 0; k < sharedCount; ++k) {
        detail::SymmetricSums& s = base_[static_cast<std::size_t>(j * sharedCount + k)];
        const Eigen::Index row = j * sharedCount + k;
        s.wg = p(j, 0);
        s.wgg = p(j, 1);
        s.mwg = m(row, 0);
        s.mwgg = m(row, 1);
        s.mwyg = shared ? m(row, 2) - annealingGain_ * m(row, 3) : m(row, 2);
        if (k > 0) continue;
        if (shared) {
          for (std::size_t c = 0; c < curveCount; ++c)
            s.wyg[c] = p(j, 2 + static_cast<Eigen::Index>(c)) - annealingGain_ * p(j, annealingColumn);
        } else {
          for (std::size_t c = 0; c < curveCount; ++c) s.wyg[c] = p(j, 2 + static_cast<Eigen::Index>(c));
        }
      }
    }
    return base_;
  }

 private:
  NoiseNodes nodes_;
  bool equalWeights_ = false;
  Eigen::VectorXd yBar_;
  RowMatrix weights_, meanWeights_;  // (node, step), (node x tau, step)
  std::vector<detail::SymmetricSums> base_;
  std::optional<ThetaProducts> own_;  // this table's own products (built at its first theta)
  ThetaProducts* shared_ = nullptr;
  double annealingGain_ = 0;
};

// Evaluates every noise cell of one theta: appends the cells and, for those that can matter, their
// curves' posteriors to the pool. Symmetric layouts use the rotated closed form on precomputed sums;
// any other layout the dense joint regression (jointEvidence).
class CellEvaluator {
 public:
  CellEvaluator(const detail::Data& data, const detail::EvidencePrior& prior, double margin)
      : data_(&data), prior_(prior), fits_(data.curves.size()), margin_(margin) {}
  // The data the next cells see (the observations less one annealing node's c * S2).
  void use(const detail::Data& data) { data_ = &data; }

  // The symmetric layout's 2x2 inverses (they do not depend on the observations): computed per cell
  // (kOwn), or kept for the next calls (kKeep) that evaluate the same theta and noise nodes for another
  // annealing node of the base grid (kReuse).
  enum class Inverses { kOwn, kKeep, kReuse };
  void add(const Cell& shape, const NoiseNodes& nodes, SymmetricTables* tables, const std::vector<double>& g,
           std::vector<Cell>& cells, FitPool& pool, Inverses inverses = Inverses::kOwn) {
    const std::vector<detail::SymmetricSums>* sums = tables ? &tables->thetaSums(*data_, g) : nullptr;
    const std::size_t sharedCount = nodes.shared.size();
    const bool stored = inverses != Inverses::kOwn;
    if (sums && inverses == Inverses::kKeep) {
      contrastInverses_.resize(nodes.sd.size());
      meanInverses_.resize(sums->size());
      for (std::size_t j = 0; j < nodes.sd.size(); ++j)
        contrastInverses_[j] = detail::contrastInverse((*sums)[j * sharedCount], prior_);
      for (std::size_t i = 0; i < sums->size(); ++i) meanInverses_[i] = detail::meanInverse((*sums)[i], prior_);
    }
    for (std::size_t j = 0; j < nodes.sd.size(); ++j) {
      detail::SymmetricContrasts contrasts;
      const detail::SymmetricSums* first = sums ? &(*sums)[j * sharedCount] : nullptr;  // wy, wyg: see thetaSums
      if (first)
        contrasts = detail::symmetricContrasts(*first, stored ? contrastInverses_[j] : detail::contrastInverse(*first, prior_));
      for (std::size_t k = 0; k < sharedCount; ++k) {
        // A cell that cannot reach the pool needs neither its truncation factors nor its posteriors.
        const double floor = maxLog_ - margin_ - shape.logPrior;
        const std::size_t index = j * sharedCount + k;
        const double logEvidence =
            !first ? detail::jointEvidence(*data_, prior_, g, nodes.sd[j], nodes.scale[j], nodes.shared[k], &fits_)
                   : detail::symmetricEvidence((*sums)[index], *first, prior_, contrasts,
                                               stored ? meanInverses_[index] : detail::meanInverse((*sums)[index], prior_),
                                               &fits_, floor);
        const double logWeight = shape.logPrior + logEvidence;
        // A cell lighter than the margin below the heaviest so far can never survive pruning: it is
        // not kept at all (its mass is below the pruned mass by construction). Most cells are not
        // (98 % of the base grid's with a schedule): the cell is only built for those that are.
        if (logWeight > maxLog_ - margin_) {
          Cell cell = shape;
          cell.logSigma = nodes.logSd[j];
          cell.binomialScale = nodes.scale[j];
          cell.sharedSd = nodes.shared[k];
          cell.logWeight = logWeight;
          cell.fit = static_cast<std::ptrdiff_t>(pool.size());
          pool.insert(pool.end(), fits_.begin(), fits_.end());
          maxLog_ = std::max(maxLog_, cell.logWeight);
          cells.push_back(cell);
        }
      }
    }
  }

 private:
  const detail::Data* data_;
  const detail::EvidencePrior& prior_;
  std::vector<CurveFit> fits_;
  std::vector<detail::SymmetricInverse> contrastInverses_, meanInverses_;  // per noise node, per cell
  double margin_;
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

// The cells left after dropping the lightest ones holding at most `dropMass` of the total, in cell order.
// A broad posterior keeps tens of thousands of cells, so instead of sorting them the weights are binned
// by log weight (kBinsPerNat bins per nat over the kNegligibleLog range) and whole bins are dropped from
// the light end: at most dropMass goes, at most one bin's worth less than sorting would drop. (Cells
// too light to survive were never kept: CellEvaluator drops them, their total is below dropMass.)
std::vector<std::size_t> withoutLightest(const std::vector<Cell>& cells, double dropMass, std::vector<double>& weight) {
  constexpr double kBinsPerNat = 20.0;
  constexpr int kBins = static_cast<int>(-kNegligibleLog * kBinsPerNat) + 1;
  double maxLog = -std::numeric_limits<double>::infinity();
  for (const Cell& c : cells) maxLog = std::max(maxLog, c.logWeight);
  ADAPREC_CHECK(std::isfinite(maxLog), ErrorCode::kInternal, "no finite posterior weight");
  weight.resize(cells.size());
  std::vector<double> binMass(kBins, 0.0);
  std::vector<int> bin(cells.size(), -1);
  double total = 0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const double relative = cells[i].logWeight - maxLog;
    weight[i] = relative > kNegligibleLog ? std::exp(relative) : 0.0;
    total += weight[i];
    if (weight[i] <= 0) continue;
    bin[i] = std::min(kBins - 1, static_cast<int>(-relative * kBinsPerNat));  // 0: heaviest
    binMass[static_cast<std::size_t>(bin[i])] += weight[i];
  }
  int firstDropped = kBins;
  double dropped = 0;
  while (firstDropped > 1 && dropped + binMass[static_cast<std::size_t>(firstDropped - 1)] <= dropMass * total) {
    dropped += binMass[static_cast<std::size_t>(--firstDropped)];
  }
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (bin[i] >= 0 && bin[i] < firstDropped) out.push_back(i);
  }
  return out;
}

// The regressor of the gain: g itself, or with ModelOptions::gainAtStepScale g / g(1; theta), whose
// coefficient is the gain reached at x = 1 (rescaled to b when the components are stored).
class GainBasis {
 public:
  GainBasis(const detail::Data& data, const ModelOptions& model) : table_(data.basisX), model_(model) {}
  const std::vector<double>& values(Family family, const std::array<double, 2>& theta) {
    const std::vector<double>& g = table_.values(family, theta);
    if (!model_.gainAtStepScale) return g;
    const double scale = 1.0 / detail::priorGainScale(model_, family, theta);
    scaled_.resize(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) scaled_[i] = g[i] * scale;
    return scaled_;
  }

 private:
  detail::BasisTable table_;
  const ModelOptions& model_;
  std::vector<double> scaled_;
};

// Splits a cell in three along each of its coordinates and evaluates the children (the 3 noise levels'
// tables are computed once and shared by the 3 or 9 thetas).
void refine(const Cell& parent, const detail::Data& data, const detail::ShapeDensity& shape,
            GainBasis& basis, CellEvaluator& evaluator, std::vector<Cell>& out, FitPool& pool) {
  const bool two = parent.h1 > 0;
  const int n1 = two ? 3 : 1;
  NoiseNodes nodes;
  for (int k = -1; k <= 1; ++k) {
    nodes.add(std::exp(parent.logSigma + k * 2.0 * parent.hs / 3.0), parent.binomialScale);
  }
  nodes.shared = {parent.sharedSd};
  std::optional<SymmetricTables> tables;
  if (data.symmetric) tables.emplace(data, nodes);
  Cell child = parent;
  child.h0 = parent.h0 / 3.0;
  child.h1 = parent.h1 / 3.0;
  child.hs = parent.hs / 3.0;
  // A child's prior mass: a ninth (sigma and u0) or 27th of its parent's, times the change of the shape
  // density between the centres (none for the uniform prior or within a cell of a learned one).
  const double parentLogVolume = parent.logPrior - std::log(3.0 * 3.0 * n1);
  const double parentDensity = shape.uniform() ? 0.0 : shape.logDensity(parent.family, parent.u0, parent.u1);
  for (int i = -1; i <= 1; ++i) {
    for (int j = two ? -1 : 0; j <= (two ? 1 : 0); ++j) {
      child.u0 = parent.u0 + i * 2.0 * parent.h0 / 3.0;
      child.u1 = parent.u1 + j * 2.0 * parent.h1 / 3.0;
      child.logPrior = parentLogVolume;
      if (!shape.uniform()) child.logPrior += shape.logDensity(child.family, child.u0, child.u1) - parentDensity;
      if (!std::isfinite(child.logPrior)) continue;
      const std::vector<double>& g = basis.values(child.family, detail::familyTheta(child.family, child.u0, child.u1));
      evaluator.add(child, nodes, tables ? &*tables : nullptr, g, out, pool);
    }
  }
}
}  // namespace

namespace detail {
std::shared_ptr<PosteriorState> fastPosteriorState(const std::vector<Curve>& curves, const ModelOptions& requested,
                                                   const FastOptions& options) {
  options.check();
  auto state = std::make_shared<detail::PosteriorState>();
  state->data = detail::prepareData(curves, requested);
  state->model = detail::resolveGainPrior(requested, curves);
  const ModelOptions& model = state->model;
  const detail::Data& data = state->data;
  const detail::ShapeDensity shape(model);
  const std::vector<ThetaNode> thetaGrid = thetaNodes(model, shape, options);
  // Noise nodes: sigma cells times the binomial scales (one scale, 1, without sample counts).
  const bool counts = std::any_of(data.curves.begin(), data.curves.end(), [](const auto& d) { return d.hasCounts; });
  const int sigmaCount = counts ? options.noiseGridWithCounts : options.noiseGrid;
  NoiseNodes nodes;
  const double lo = std::log(model.noiseMin), hi = std::log(model.noiseMax);
  for (double scale : data.binomialScales) {
    for (int j = 0; j < sigmaCount; ++j) {
      nodes.add(std::exp(lo + (hi - lo) * (j + 0.5) / sigmaCount), scale);
    }
  }
  nodes.shared = data.sharedSds;
  const std::size_t cellsPerTheta = nodes.sd.size() * nodes.shared.size();
  const double logNoisePrior = -std::log(static_cast<double>(cellsPerTheta));
  const double noiseHalfWidth = 0.5 * (hi - lo) / sigmaCount;
  // One copy of the data per annealing node c, observations less c * S2 (one node, c = 0, without a
  // schedule: today's model exactly), each with its tables.
  const std::size_t annealingCount = data.annealingGains.size();
  const double logAnnealingPrior = -std::log(static_cast<double>(annealingCount));
  std::vector<detail::Data> shifted;
  std::vector<std::optional<SymmetricTables>> tables(annealingCount);
  for (std::size_t a = 0; a < annealingCount; ++a) {
    shifted.push_back(detail::withoutAnnealing(data, data.annealingGains[a]));
    if (data.symmetric) tables[a].emplace(shifted[a], nodes);
  }
  // Several nodes: one product per theta for all of them (the noise weights do not depend on c).
  std::optional<ThetaProducts> products;
  if (data.symmetric && annealingCount > 1) {
    products.emplace(tables[0]->sharedProducts(data));
    for (std::size_t a = 0; a < annealingCount; ++a) tables[a]->share(&*products, data.annealingGains[a]);
  }

  const detail::EvidencePrior prior = detail::evidencePrior(model);
  GainBasis basis(data, model);
  CellEvaluator evaluator(data, prior, storeMargin(options, thetaGrid.size() * cellsPerTheta));
  FitPool pool;
  // Base grid, with the theta-only work shared across noise cells.
  std::vector<Cell> cells;
  cells.reserve(thetaGrid.size() * cellsPerTheta);
  for (const ThetaNode& node : thetaGrid) {
    const std::vector<double>& g = basis.values(node.family, node.theta);
    if (products) products->prepare(g);
    for (std::size_t a = 0; a < annealingCount; ++a) {
      const Cell shape{node.family, node.u0, node.u1, 0, 1, 0, a, node.h0, node.h1, noiseHalfWidth,
                       node.logPrior + logNoisePrior + logAnnealingPrior, 0, -1};
      evaluator.use(shifted[a]);
      evaluator.add(shape, nodes, tables[a] ? &*tables[a] : nullptr, g, cells, pool,
                    annealingCount == 1 ? CellEvaluator::Inverses::kOwn
                    : a == 0            ? CellEvaluator::Inverses::kKeep
                                        : CellEvaluator::Inverses::kReuse);
    }
  }

  // The basis table's vector is reused for every theta: refined cells compute their own sums.
  if (products) products->invalidate();
  std::vector<double> weight;
  double total = 0;
  for (int level = 0; level < options.refineLevels; ++level) {
    std::vector<std::size_t> split = heaviest(cells, options.refineMass, options.refineCells, weight, total);
    std::sort(split.begin(), split.end(), std::greater<>());  // erase from the back first
    std::vector<Cell> children;
    for (std::size_t i : split) {
      evaluator.use(shifted[cells[i].annealing]);
      refine(cells[i], shifted[cells[i].annealing], shape, basis, evaluator, children, pool);
      cells[i] = cells.back();
      cells.pop_back();
    }
    cells.insert(cells.end(), children.begin(), children.end());
  }

  // Keep the heaviest cells holding 1 - dropMass with their per-curve posteriors.
  const std::vector<std::size_t> kept = withoutLightest(cells, options.dropMass, weight);
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
    state->sharedSd.push_back(cell.sharedSd);
    state->annealingGain.push_back(data.annealingGains[cell.annealing]);
    // With the gain at the step scale the coefficient is b * g(1): back to b.
    const double gain = 1.0 / detail::priorGainScale(model, cell.family, state->theta.back());
    for (std::size_t c = 0; c < curveCount; ++c) {
      const CurveFit& fit = pool[static_cast<std::size_t>(cell.fit) + c];
      state->coef.push_back(detail::coefFromGaussian(fit.meanA, fit.meanB * gain, fit.covAA, fit.covAB * gain,
                                                     fit.covBB * gain * gain));
    }
  }
  return state;
}
}  // namespace detail

Posterior fitFast(const std::vector<Curve>& curves, const ModelOptions& model, const FastOptions& options) {
  return Posterior(detail::fastPosteriorState(curves, model, options));
}

}  // namespace adaprec::predictor
