#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "adaprec/error.hpp"
#include "trainer_collectives.hpp"

namespace adaprec::trainer {
namespace {

constexpr char kMagic[8] = {'A', 'D', 'A', 'P', 'R', 'C', 'K', 'P'};
constexpr std::uint32_t kVersion = kCheckpointVersion;
constexpr std::size_t kHeaderBytes = 8 + 4 + 8;

class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  // A named section: name, u64 length, bytes.
  void section(const std::string& name, const void* p, std::size_t n) {
    u32(static_cast<std::uint32_t>(name.size()));
    raw(name.data(), name.size());
    u64(n);
    raw(p, n);
  }
  std::vector<std::uint8_t> bytes;
};

class Reader {
 public:
  Reader(std::span<const std::uint8_t> b, const std::string& origin) : b_(b), origin_(origin) {}
  void raw(void* p, std::size_t n) {
    ADAPREC_CHECK(n <= b_.size() - at_, ErrorCode::kMalformedInput,
                  "checkpoint " << origin_ << " is truncated: needs " << n << " bytes at offset " << at_ << " of "
                                << b_.size());
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
  }
  std::uint32_t u32() { std::uint32_t v; raw(&v, 4); return v; }
  std::uint64_t u64() { std::uint64_t v; raw(&v, 8); return v; }
  // Reads the next section, which must be called `name`.
  std::vector<std::uint8_t> section(const std::string& name) {
    std::uint32_t len = u32();
    ADAPREC_CHECK(len <= 64, ErrorCode::kMalformedInput, "checkpoint " << origin_ << ": bad section name length");
    std::string got(len, '\0');
    raw(got.data(), len);
    ADAPREC_CHECK(got == name, ErrorCode::kMalformedInput,
                  "checkpoint " << origin_ << ": expected section '" << name << "', found '" << got << "'");
    std::uint64_t n = u64();
    ADAPREC_CHECK(n <= b_.size() - at_, ErrorCode::kMalformedInput,
                  "checkpoint " << origin_ << " is truncated in section '" << name << "'");
    std::vector<std::uint8_t> out(b_.begin() + static_cast<std::ptrdiff_t>(at_),
                                  b_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
    at_ += n;
    return out;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const std::uint8_t> b_;
  std::string origin_;
  std::size_t at_ = 0;
};

template <typename T>
std::vector<T> asVector(const std::vector<std::uint8_t>& bytes, const std::string& origin, const char* what) {
  ADAPREC_CHECK(bytes.size() % sizeof(T) == 0, ErrorCode::kMalformedInput,
                "checkpoint " << origin << ": section '" << what << "' has " << bytes.size() << " bytes");
  std::vector<T> out(bytes.size() / sizeof(T));
  // An empty section has no storage: memcpy from/to a null pointer is undefined even for 0 bytes.
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::uint32_t crc(std::span<const std::uint8_t> bytes) {
  uLong c = crc32(0L, Z_NULL, 0);
  std::size_t at = 0;
  while (at < bytes.size()) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - at, 1u << 30));
    c = crc32(c, bytes.data() + at, n);
    at += n;
  }
  return static_cast<std::uint32_t>(c);
}

std::vector<std::uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ADAPREC_CHECK(in.good(), ErrorCode::kIo, "cannot open checkpoint file " << path);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::vector<std::uint8_t> serializeSnapshot(const TrainerSnapshot& s) {
  Writer payload;
  payload.section("step", &s.step, sizeof s.step);
  payload.section("fingerprint", s.fingerprint.data(), s.fingerprint.size());
  Writer identity;
  identity.u64(s.runId);
  identity.u32(s.rank);
  identity.u32(s.ranks);
  payload.section("identity", identity.bytes.data(), identity.bytes.size());
  payload.section("parameters", s.parameters.data(), s.parameters.size() * sizeof(float));
  payload.section("velocity", s.velocity.data(), s.velocity.size() * sizeof(float));
  payload.section("rng", s.rngState.data(), s.rngState.size());
  payload.section("reducer", s.reducerState.data(), s.reducerState.size());
  payload.section("controller", s.controllerState.data(), s.controllerState.size());
  payload.section("counters", s.counters.data(), s.counters.size());
  payload.section("pending", s.pendingGradients.data(), s.pendingGradients.size() * sizeof(float));
  Writer file;
  file.raw(kMagic, sizeof kMagic);
  file.u32(kVersion);
  file.u64(payload.bytes.size());
  file.raw(payload.bytes.data(), payload.bytes.size());
  file.u32(crc(payload.bytes));
  return std::move(file.bytes);
}

TrainerSnapshot deserializeSnapshot(std::span<const std::uint8_t> bytes, const std::string& origin) {
  ADAPREC_CHECK(bytes.size() >= kHeaderBytes + 4, ErrorCode::kMalformedInput,
                "checkpoint " << origin << " is truncated: " << bytes.size() << " bytes");
  ADAPREC_CHECK(std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0, ErrorCode::kMalformedInput,
                "checkpoint " << origin << " is not an AdaPrec trainer checkpoint (bad magic)");
  Reader header(bytes.subspan(0, kHeaderBytes), origin);
  char magic[8];
  header.raw(magic, 8);
  const std::uint32_t version = header.u32();
  ADAPREC_CHECK(version != 1, ErrorCode::kMalformedInput,
                "checkpoint " << origin << " has format version 1 (an older adaprec-train, without the rank and "
                              << "run identity this build checks); this build reads version " << kVersion
                              << ": restart the run without --resume, or with a new --checkpoint directory");
  ADAPREC_CHECK(version == 2 || version == kVersion, ErrorCode::kMalformedInput,
                "checkpoint " << origin << " has version " << version << ", this build reads 2 and " << kVersion);
  const std::uint64_t payloadBytes = header.u64();
  ADAPREC_CHECK(payloadBytes == bytes.size() - kHeaderBytes - 4, ErrorCode::kMalformedInput,
                "checkpoint " << origin << " is truncated or padded: header says " << payloadBytes
                              << " payload bytes, file holds " << bytes.size() - kHeaderBytes - 4);
  auto payload = bytes.subspan(kHeaderBytes, payloadBytes);
  std::uint32_t stored;
  std::memcpy(&stored, bytes.data() + kHeaderBytes + payloadBytes, 4);
  ADAPREC_CHECK(stored == crc(payload), ErrorCode::kMalformedInput,
                "checkpoint " << origin << " is corrupt: CRC-32 mismatch");
  Reader r(payload, origin);
  TrainerSnapshot s;
  auto step = asVector<std::uint64_t>(r.section("step"), origin, "step");
  ADAPREC_CHECK(step.size() == 1, ErrorCode::kMalformedInput, "checkpoint " << origin << ": bad step section");
  s.step = step[0];
  auto fp = r.section("fingerprint");
  s.fingerprint.assign(fp.begin(), fp.end());
  const auto identity = r.section("identity");
  ADAPREC_CHECK(identity.size() == 16, ErrorCode::kMalformedInput,
                "checkpoint " << origin << ": section 'identity' has " << identity.size() << " bytes, not 16");
  std::memcpy(&s.runId, identity.data(), 8);
  std::memcpy(&s.rank, identity.data() + 8, 4);
  std::memcpy(&s.ranks, identity.data() + 12, 4);
  s.parameters = asVector<float>(r.section("parameters"), origin, "parameters");
  s.velocity = asVector<float>(r.section("velocity"), origin, "velocity");
  auto rng = r.section("rng");
  s.rngState.assign(rng.begin(), rng.end());
  s.reducerState = r.section("reducer");
  s.controllerState = r.section("controller");
  auto counters = r.section("counters");
  s.counters.assign(counters.begin(), counters.end());
  if (version >= 3) s.pendingGradients = asVector<float>(r.section("pending"), origin, "pending");
  ADAPREC_CHECK(r.done(), ErrorCode::kMalformedInput, "checkpoint " << origin << " has trailing sections");
  return s;
}

void writeFileAtomically(const std::string& path, std::span<const std::uint8_t> bytes) {
  const std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ADAPREC_CHECK(fd >= 0, ErrorCode::kIo, "cannot create " << temp << ": " << std::strerror(errno));
  // A failed write leaves no partial temporary behind (on a full disk it holds space others need).
  auto fail = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    ADAPREC_FAIL(ErrorCode::kIo, "cannot " << what << " " << temp << ": " << std::strerror(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    done += static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at unwritten blocks.
  if (::fsync(fd) != 0) fail("fsync", errno);
  ::close(fd);
  ADAPREC_CHECK(std::rename(temp.c_str(), path.c_str()) == 0, ErrorCode::kIo,
                "cannot rename " << temp << " to " << path << ": " << std::strerror(errno));
}

TrainerSnapshot readSnapshotFile(const std::string& path) {
  std::vector<std::uint8_t> bytes = readFile(path);
  return deserializeSnapshot(bytes, path);
}

CheckpointDirectory::CheckpointDirectory(std::string dir, MPI_Comm comm) : dir_(std::move(dir)), comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  std::error_code ec;
  if (rank_ == 0) std::filesystem::create_directories(dir_, ec);
  int ok = !ec;
  timedBroadcast(&ok, 1, MPI_INT, 0, comm_, "the checkpoint directory's creation");
  ADAPREC_CHECK(ok, ErrorCode::kIo, "cannot create checkpoint directory " << dir_);
}

std::string CheckpointDirectory::rankFile(std::uint64_t step, int rank) const {
  std::ostringstream os;
  os << dir_ << "/step-" << std::setw(10) << std::setfill('0') << step << ".rank-" << rank << ".ckpt";
  return os.str();
}

void CheckpointDirectory::save(const TrainerSnapshot& snapshot) {
  // The generation this one replaces, deleted after the new LATEST is written. Best effort: a marker
  // this rank cannot read, a corrupt one or one of another run (a fresh run in a reused directory, whose
  // first checkpoint failed on every rank with "written by 1 ranks; this run has 2", the training up
  // to it lost) only leaves its files behind, which costs space, not correctness.
  std::optional<std::uint64_t> previous;
  try {
    previous = latestStep();
  } catch (const Error&) {
  }
  // A failure on one rank must reach all of them before anyone waits.
  std::string error;
  try {
    writeFileAtomically(rankFile(snapshot.step, rank_), serializeSnapshot(snapshot));
  } catch (const Error& e) {
    error = messageForUsers(e);
  }
  int failed = !error.empty(), anyFailed = 0;
  timedAllreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, comm_, "a checkpoint's agreement");
  ADAPREC_CHECK(!anyFailed, ErrorCode::kIo,
                "checkpoint at step " << snapshot.step << " failed on some rank" << (failed ? ": " + error : ""));
  if (rank_ == 0) {
    std::ostringstream os;
    os << snapshot.step << " " << size_ << "\n";
    const std::string text = os.str();
    try {
      writeFileAtomically(dir_ + "/LATEST", std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
    } catch (const Error& e) {
      error = messageForUsers(e);
    }
  }
  // The marker too: every rank learns whether rank 0 could write it (no rank left in a barrier).
  failed = !error.empty();
  timedBroadcast(&failed, 1, MPI_INT, 0, comm_, "a checkpoint's agreement");
  ADAPREC_CHECK(!failed, ErrorCode::kIo,
                "checkpoint at step " << snapshot.step << ": rank 0 " << (rank_ == 0 ? error : "could not write its marker"));
  std::error_code ignored;  // an old generation left behind costs space, not correctness
  if (previous && *previous != snapshot.step) std::filesystem::remove(rankFile(*previous, rank_), ignored);
  removeStaleTemporaries();
}

void CheckpointDirectory::removeStaleTemporaries() const {
  // This rank's write just completed, so a temporary of its name pattern is a run's that was killed
  // while writing (each one a whole checkpoint: left alone, they piled up over restarts).
  const std::string suffix = ".rank-" + std::to_string(rank_) + ".ckpt.tmp";
  std::vector<std::filesystem::path> stale;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      stale.push_back(it->path());
  }
  for (const auto& path : stale) std::filesystem::remove(path, ec);
}

std::optional<std::uint64_t> CheckpointDirectory::latestStep() const {
  std::ifstream in(dir_ + "/LATEST");
  if (!in.good()) return std::nullopt;
  std::uint64_t step = 0;
  int ranks = 0;
  in >> step >> ranks;
  ADAPREC_CHECK(!in.fail(), ErrorCode::kMalformedInput, "checkpoint marker " << dir_ << "/LATEST is corrupt");
  ADAPREC_CHECK(ranks == size_, ErrorCode::kMismatch,
                "checkpoint in " << dir_ << " was written by " << ranks << " ranks; this run has " << size_);
  return step;
}

TrainerSnapshot CheckpointDirectory::loadLatest() const {
  std::optional<std::uint64_t> step = latestStep();
  ADAPREC_CHECK(step.has_value(), ErrorCode::kIo, "no checkpoint to resume from in " << dir_ << " (no LATEST file)");
  const std::string path = rankFile(*step, rank_);
  TrainerSnapshot s = readSnapshotFile(path);
  ADAPREC_CHECK(s.step == *step, ErrorCode::kMalformedInput,
                "checkpoint " << path << " holds step " << s.step << ", LATEST says " << *step);
  return s;
}

}  // namespace adaprec::trainer
