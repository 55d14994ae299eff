// The few collectives the benchmark itself needs (agreeing on timings, summing #wrong, sharing rank
// 0's result for the bit-identity check), written over the Transport so the same code serves MPI
// processes and loopback threads. They run between allreduces, never inside a timed region, on tags
// at the top of the algorithm tag space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "adaprec/transport.hpp"

namespace adaprec::bench {

class RankCollectives {
 public:
  explicit RankCollectives(Transport& transport) : transport_(transport) {}

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }

  void barrier();
  // Element-wise max over ranks of non-negative values, in place.
  void maxOverRanks(std::vector<double>& values);
  double maxOverRanks(double value);
  std::uint64_t sumOverRanks(std::uint64_t value);
  // Whether any rank passed true.
  bool anyRank(bool flag);
  // Rank 0's data[0..count) to every rank.
  void broadcastFromRoot(void* data, std::size_t bytes);
  // nodeId() of every rank, indexed by rank.
  std::vector<int> nodeIds();
  // Number of distinct nodeId() values.
  int nodeCount();

 private:
  Transport& transport_;
};

}  // namespace adaprec::bench
