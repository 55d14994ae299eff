// adaprec-predict --plot draws a PNG through tools/plot_prediction.py. Exit 77 (skipped) when Debian's
// python3 has no matplotlib, 0 when the PNG was written, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;

int main() {
  const char* exe = std::getenv("ADAPREC_PREDICT");
  if (exe == nullptr) {
    std::fprintf(stderr, "ADAPREC_PREDICT is not set\n");
    return 1;
  }
  if (std::system("/usr/bin/python3 -c 'import matplotlib' > /dev/null 2>&1") != 0) {
    std::printf("skipped: /usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)\n");
    return 77;
  }
  const fs::path dir = fs::temp_directory_path() / ("adaprec-plot-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.csv") << "curve,step,value\n0,100,0.3\n0,200,0.42\n0,300,0.47\n1,100,0.28\n1,200,0.36\n";
  const fs::path png = dir / "out.png";
  const std::string command = std::string(exe) + " --input " + (dir / "in.csv").string() + " --at 1000 --plot " +
                              png.string() + " > " + (dir / "out.csv").string();
  const int rc = std::system(command.c_str());
  char magic[8] = {};
  std::ifstream(png, std::ios::binary).read(magic, 8);
  const bool ok = rc == 0 && fs::exists(png) && fs::file_size(png) > 1000 && std::string(magic + 1, 3) == "PNG";
  std::printf("%s: status %d, %s\n", ok ? "ok" : "FAILED", rc, png.c_str());
  fs::remove_all(dir);
  return ok ? 0 : 1;
}
