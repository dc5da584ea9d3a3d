// Test support for end-to-end tests: ranks started directly with torchrun-style
// variables (no launcher to stop them), the dead-peer check, JSON-lines results.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "process.h"

namespace dtrain::testing {

// `argv_of(rank)` gives each rank's command line.
inline std::vector<std::unique_ptr<Process>> start_ranks(
    const std::function<std::vector<std::string>(int)>& argv_of, int world, int port) {
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(
        std::make_unique<Process>(argv_of(r), std::vector<std::pair<std::string, std::string>>{
                                                  {"RANK", std::to_string(r)},
                                                  {"WORLD_SIZE", std::to_string(world)},
                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                  {"MASTER_PORT", std::to_string(port)}}));
  }
  return ranks;
}

inline std::vector<std::unique_ptr<Process>> start_ranks(const std::vector<std::string>& argv,
                                                         int world, int port) {
  return start_ranks([&](int) { return argv; }, world, port);
}

// After `warm_up`, every rank must still run; SIGKILLs `victim`; every other rank must then
// exit non-zero on its own within `limit`, with an error naming the victim.
inline void kill_and_expect_clear_failures(std::vector<std::unique_ptr<Process>>& ranks, int victim,
                                           std::chrono::seconds warm_up,
                                           std::chrono::seconds limit) {
  std::this_thread::sleep_for(warm_up);
  for (auto& r : ranks)
    ASSERT_EQ(r->wait_for(std::chrono::seconds(0)), -1) << "a rank ended early: " << r->err();
  kill(ranks[static_cast<size_t>(victim)]->pid(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (static_cast<int>(r) == victim) continue;
    const int code = ranks[r]->wait_for(std::chrono::seconds(60));
    EXPECT_NE(code, -1) << "rank " << r << " hangs";
    EXPECT_NE(code, 0) << "rank " << r;
    const std::string err = ranks[r]->err();
    EXPECT_NE(err.find("dtrain: error:"), std::string::npos) << err;
    EXPECT_NE(err.find("rank " + std::to_string(victim)), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, limit);
}

// The JSON objects among the lines of `text` (other lines are skipped).
inline std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// Reads a JSON-lines file and removes it.
inline std::vector<nlohmann::json> take_json_lines_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::remove(path.c_str());
  return json_lines(s.str());
}

// A new empty directory under /tmp (mkdtemp), for checkpoints.
inline std::string temp_dir(const std::string& stem) {
  std::string templ = "/tmp/" + stem + "-XXXXXX";
  return mkdtemp(templ.data());
}

// A checkpoint directory's manifest.json, parsed.
inline nlohmann::json checkpoint_manifest(const std::string& dir) {
  std::ifstream in(dir + "/manifest.json");
  return nlohmann::json::parse(in);
}

}  // namespace dtrain::testing
