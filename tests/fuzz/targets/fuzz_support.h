// What the fuzz targets share: a scratch directory for decoders that read files, input
// splitting, and libFuzzer's initializer. Light on headers: each target compiles alone.
#pragma once

#include <ATen/Parallel.h>

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::fuzz {

// A directory of this process's own, removed at exit; files are rewritten per input.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/dtrain-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("dtrain fuzz: mkdtemp");
      std::abort();
    }
    return pattern;
  }();
  return dir;
}

inline void remove_scratch_dir() {
  const std::string command = "rm -rf '" + scratch_dir() + "'";
  if (std::system(command.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", command.c_str());
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_input(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    std::perror(("dtrain fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits at NUL bytes into at most `parts` pieces (the last keeps any further NULs).
inline std::vector<std::string_view> split_parts(std::string_view all, size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t cut = all.find('\0');
    if (cut == std::string_view::npos) break;
    out.push_back(all.substr(0, cut));
    all.remove_prefix(cut + 1);
  }
  out.push_back(all);
  return out;
}

// One intra-op thread and the scratch directory cleaned up: every target's initializer.
inline void init_target() {
  at::set_num_threads(1);
  scratch_dir();
  std::atexit(remove_scratch_dir);
}

}  // namespace dtrain::fuzz

// libFuzzer's initializer, the same for every target: defined here, not inline (libFuzzer
// looks it up as a symbol), so each binary includes this header from one file only.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dtrain::fuzz::init_target();
  return 0;
}
