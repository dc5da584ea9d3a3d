#include <gtest/gtest.h>

#include <cstdlib>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

TEST(ParseTest, AlgorithmsAndOpsRoundTrip) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kButterfly, Algorithm::kDirect,
                      Algorithm::kExchange, Algorithm::kNative, Algorithm::kAuto}) {
    EXPECT_EQ(parse_algorithm(to_string(a)), a);
  }
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  }
  EXPECT_THROW(parse_algorithm("tree"), std::invalid_argument);
  EXPECT_THROW(parse_reduce_op("mean"), std::invalid_argument);
}

TEST(BlockCountTest, BlocksCoverTheVectorAndDifferByAtMostOne) {
  for (int64_t n : {0, 1, 5, 7, 64, 1001}) {
    for (int p = 1; p <= 8; ++p) {
      int64_t total = 0, lo = n, hi = 0;
      for (int i = 0; i < p; ++i) {
        const int64_t c = block_count(n, p, i);
        total += c;
        lo = std::min(lo, c);
        hi = std::max(hi, c);
      }
      EXPECT_EQ(total, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

void clear_rank_env() {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "DTRAIN_TIMEOUT"}) {
    unsetenv(name);
  }
}

// Sets exactly these rank variables for one scope, and clears them after.
class EnvGuard {
 public:
  explicit EnvGuard(const std::vector<std::pair<std::string, std::string>>& vars) {
    clear_rank_env();
    for (const auto& [k, v] : vars)
      setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() { clear_rank_env(); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
};

TEST(WorldFromEnvTest, TorchrunThenOpenMpiThenSlurm) {
  {
    EnvGuard env({{"RANK", "2"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "0"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "1234"},
                  {"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "8"}});
    const WorldConfig c = world_from_env();
    EXPECT_EQ(c.rank, 2);
    EXPECT_EQ(c.world_size, 4);
    EXPECT_EQ(c.local_rank, 0);
    EXPECT_EQ(c.master_addr, "10.0.0.1");
    EXPECT_EQ(c.master_port, 1234);
    EXPECT_TRUE(c.gloo_hostname.empty());  // remote master: Gloo picks this host's address
  }
  {
    EnvGuard env({{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "8"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const WorldConfig c = world_from_env();
    EXPECT_EQ(c.rank, 3);
    EXPECT_EQ(c.world_size, 8);
    EXPECT_EQ(c.local_rank, 1);
    EXPECT_EQ(c.local_world_size, 2);
    EXPECT_EQ(c.gloo_hostname, "127.0.0.1");
  }
  {
    EnvGuard env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
    const WorldConfig c = world_from_env();
    EXPECT_EQ(c.rank, 5);
    EXPECT_EQ(c.world_size, 6);
    EXPECT_EQ(c.local_rank, 1);
  }
  {
    EnvGuard env(std::vector<std::pair<std::string, std::string>>{});
    EXPECT_FALSE(launched_by_environment());
    EXPECT_EQ(world_from_env().world_size, 1);
  }
}

TEST(WorldFromEnvTest, MalformedValuesAreRejectedWithTheVariableName) {
  {
    EnvGuard env({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
    try {
      world_from_env();
      FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos);
    }
  }
  {
    EnvGuard env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    EXPECT_THROW(world_from_env(), std::invalid_argument);
  }
  {
    EnvGuard env({{"MASTER_PORT", "70000"}, {"RANK", "0"}});
    EXPECT_THROW(world_from_env(), std::invalid_argument);
  }
  {
    EnvGuard env(std::vector<std::pair<std::string, std::string>>{});
    WorldOverrides o;
    o.master_port = 4242;
    o.timeout_s = 2.5;
    const WorldConfig c = world_from_env(o);
    EXPECT_EQ(c.master_port, 4242);
    EXPECT_EQ(c.timeout.count(), 2500);
  }
}

}  // namespace
}  // namespace dtrain::comm
