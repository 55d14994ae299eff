// Checkpoints of the trainer. One file per rank and step, written atomically (temp file, fsync,
// rename), then a LATEST marker written the same way by rank 0 once every rank's file exists; older
// generations are removed only after that. A rank killed at any moment leaves either the previous
// complete generation or the new one behind.
//
// File layout (little-endian): "ADAPRCKP" magic, u32 version, u64 payload bytes, payload, u32 CRC-32
// of the payload. The payload is a sequence of length-prefixed named sections (TrainerSnapshot).
// A truncated or corrupted file fails with Error(kMalformedInput) naming the file and what is wrong.
// Version 2 added the "identity" section (u64 run id, u32 rank, u32 rank count) after "fingerprint":
// every rank's file of one generation must carry the same run id, and each rank must read its own
// file, so swapped or mixed-in files are refused. Version 1 files are refused with a message.
// Version 3 added the "pending" section after "counters": the reduced gradients a double-buffered run
// applies at its next step (empty otherwise); version 2 files are read with none.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace adaprec::trainer {

// Everything a bit-identical continuation needs; also used in memory for speculative branches.
struct TrainerSnapshot {
  std::uint64_t step = 0;             // optimizer steps done
  std::string fingerprint;            // model, batch, ranks, seed, data: resume refuses a mismatch
  // Identity: which run and which of its ranks wrote this state. The run id is drawn once per fresh
  // run (rank 0, broadcast) and carried on across resumes; resume refuses another rank's state or a
  // generation whose files disagree on the run id.
  std::uint64_t runId = 0;
  std::uint32_t rank = 0;
  std::uint32_t ranks = 1;
  std::vector<float> parameters;
  std::vector<float> velocity;        // momentum buffer
  std::string rngState;               // std::mt19937_64 text form
  std::vector<std::uint8_t> reducerState;     // error-feedback residuals (per rank)
  std::vector<std::uint8_t> controllerState;  // opaque blob owned by the precision controller
  std::string counters;               // JSON: wall seconds, bytes sent so far, ...
  // Double buffering: the last step's gradients, reduced, that the next update applies (empty: none).
  std::vector<float> pendingGradients;
};

// The checkpoint format version this build writes and reads.
inline constexpr std::uint32_t kCheckpointVersion = 3;

std::vector<std::uint8_t> serializeSnapshot(const TrainerSnapshot& snapshot);
// `origin` names the source in error messages (a path, "memory").
TrainerSnapshot deserializeSnapshot(std::span<const std::uint8_t> bytes, const std::string& origin);

// Atomic single-file write / validated read.
void writeFileAtomically(const std::string& path, std::span<const std::uint8_t> bytes);
TrainerSnapshot readSnapshotFile(const std::string& path);

class CheckpointDirectory {
 public:
  CheckpointDirectory(std::string dir, MPI_Comm comm);
  // Collective: every rank writes its snapshot for snapshot.step. A failure on any rank (a file, or
  // rank 0's LATEST marker) throws Error(kIo) on every rank, after all of them have learnt of it.
  void save(const TrainerSnapshot& snapshot);  // also removes this rank's temporaries of killed writes
  // The step LATEST points to, or none when the directory holds no checkpoint yet.
  std::optional<std::uint64_t> latestStep() const;
  // This rank's snapshot of the latest generation; throws (kIo / kMalformedInput) naming the file.
  TrainerSnapshot loadLatest() const;
  std::string rankFile(std::uint64_t step, int rank) const;

 private:
  void removeStaleTemporaries() const;
  std::string dir_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace adaprec::trainer
