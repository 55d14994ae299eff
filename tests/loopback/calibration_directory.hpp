// For the auto sweeps: ADAPREC_CALIBRATION names a fresh directory for the scope, so the first case of
// each (transport, ranks, nodes) probes and every later case reloads that calibration (the directory
// form of docs/algorithms.md, "Calibration"). Probing every case's new communicator again made the auto
// sweeps the longest tests (160 s, over 260 s under ASan). Set and unset between cases, while no rank
// threads run (setenv is not thread-safe).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace adaprec::test {

class ScopedCalibrationDirectory {
 public:
  explicit ScopedCalibrationDirectory(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ::setenv("ADAPREC_CALIBRATION", dir_.c_str(), 1);
  }
  ~ScopedCalibrationDirectory() {
    ::unsetenv("ADAPREC_CALIBRATION");
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScopedCalibrationDirectory(const ScopedCalibrationDirectory&) = delete;
  ScopedCalibrationDirectory& operator=(const ScopedCalibrationDirectory&) = delete;

 private:
  std::filesystem::path dir_;
};

}  // namespace adaprec::test
