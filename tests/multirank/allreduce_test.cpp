// Every algorithm x op x dtype x world size 1..8 x awkward counts, against an expected
// result computed independently in float64 (integer-valued inputs make it exact).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/allreduce_tuner.h"
#include "dtrain/comm/exact_oracle.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

at::Tensor make_input(int rank, int64_t count, ReduceOp op) {
  return exact_input(rank, 0, count, op);
}

// The oracle computes in float64, independently of every algorithm under test.
at::Tensor expected_result(int world, int64_t count, ReduceOp op, at::ScalarType dtype) {
  return exact_reduction(world, 0, count, op, dtype).to(dtype);
}

std::vector<int64_t> awkward_counts(int world) {
  std::vector<int64_t> counts{0, 1, 2, 37, 1000, 4099};
  if (world > 2) counts.push_back(world - 1);
  counts.push_back(world + 1);
  return counts;
}

class AllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceTest, EveryAlgoOpDtypeCountIsExact) {
  const int world = GetParam();
  // Every dtype up to 4 ranks; from 5 ranks (more ranks than this 2-core CI machine has
  // cores by far, and most of the suite's time) one float, one narrow and one integer type.
  const std::vector<at::ScalarType> dtypes =
      world <= 4 ? std::vector<at::ScalarType>{at::kFloat,    at::kDouble, at::kHalf,
                                               at::kBFloat16, at::kInt,    at::kLong}
                 : std::vector<at::ScalarType>{at::kFloat, at::kBFloat16, at::kLong};
  const std::vector<ReduceOp> ops{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                  ReduceOp::kProduct};
  // auto runs one of these (allreduce_tuner.h); AllReduceTunerTest covers it.
  const std::vector<Algorithm> algos = concrete_algorithms();
  testing::run_ranks(world, [&](Group& g) {
    for (Algorithm algo : algos) {
      for (ReduceOp op : ops) {
        for (at::ScalarType dtype : dtypes) {
          for (int64_t count : awkward_counts(world)) {
            for (int64_t segment : {int64_t{24}, int64_t{512 * 1024}}) {
              if (segment != 512 * 1024 && algo != Algorithm::kRing) continue;
              at::Tensor x = make_input(g.rank(), count, op).to(dtype);
              AllReduceOptions opts;
              opts.op = op;
              opts.algorithm = algo;
              opts.segment_bytes = segment;
              all_reduce(g, x, opts);
              const at::Tensor want = expected_result(world, count, op, dtype);
              const int64_t wrong = x.ne(want).sum().item<int64_t>();
              EXPECT_EQ(wrong, 0) << "rank " << g.rank() << "/" << world << " algo "
                                  << to_string(algo) << " op " << to_string(op) << " dtype "
                                  << dtype << " count " << count << " segment " << segment;
            }
          }
        }
      }
    }
  });
}

TEST_P(AllReduceTest, LargeFloatVectorWithNonIntegerValuesIsIdenticalOnAllRanks) {
  const int world = GetParam();
  const int64_t count = (1 << 18) + 3;  // > 1 MiB: ring segments, butterfly halving
  const size_t algos = concrete_algorithms().size();
  std::vector<at::Tensor> results(static_cast<size_t>(world) * algos);
  std::vector<at::Tensor> inputs;
  at::Tensor reference = at::zeros({count}, at::kDouble);
  at::manual_seed(100);  // the global generator is not per thread: draw inputs up front
  for (int r = 0; r < world; ++r) {
    inputs.push_back(at::randn({count}, at::kFloat));
    reference += inputs.back().to(at::kDouble);
  }
  testing::run_ranks(world, [&](Group& g) {
    size_t slot = 0;
    for (Algorithm algo : concrete_algorithms()) {
      at::Tensor x = inputs[static_cast<size_t>(g.rank())].clone();
      AllReduceOptions opts;
      opts.algorithm = algo;
      all_reduce(g, x, opts);
      results[static_cast<size_t>(g.rank()) * algos + slot++] = x;
    }
  });
  for (size_t slot = 0; slot < algos; ++slot) {
    const std::string algo = to_string(concrete_algorithms()[slot]);
    const double diff = (results[slot].to(at::kDouble) - reference).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5 * world) << algo;
    for (int r = 1; r < world; ++r) {
      EXPECT_TRUE(at::equal(results[slot], results[static_cast<size_t>(r) * algos + slot]))
          << algo << ": rank " << r << " differs from rank 0";
    }
  }
}

// auto by measurement: exact results, the same choice on every rank (the slowest rank's
// times decide), kinds calibrated apart (another size class, another channel), and the
// re-check after kRecheckCalls calls of a kind passing without a hang.
TEST(AllReduceTunerTest, AutoIsExactAndEveryRankChoosesAlike) {
  const int world = 3;
  std::vector<std::vector<Algorithm>> chosen(world);
  testing::run_ranks(world, [&](Group& g) {
    for (const int64_t count : {int64_t{37}, int64_t{70000}}) {
      for (const auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
        at::Tensor x = make_input(g.rank(), count, op).to(at::kFloat);
        AllReduceOptions opts;
        opts.op = op;
        all_reduce(g, x, opts);
        EXPECT_EQ(x.ne(expected_result(world, count, op, at::kFloat)).sum().item<int64_t>(), 0)
            << count << " " << to_string(op);
        const auto* choice = g.all_reduce_tuner().choice(opts.tag, at::kFloat, op, count * 4);
        ASSERT_NE(choice, nullptr);
        EXPECT_EQ(choice->candidates.size(), concrete_algorithms().size());
        EXPECT_NE(choice->algorithm, Algorithm::kAuto);
        chosen[static_cast<size_t>(g.rank())].push_back(choice->algorithm);
      }
    }
    // Another channel's calls are another kind: calibrated apart, not read from the first.
    AllReduceOptions other;
    other.tag = collective_tag(CollectiveChannel::kSyncBatchNorm);
    EXPECT_EQ(g.all_reduce_tuner().choice(other.tag, at::kFloat, ReduceOp::kSum, 37 * 4), nullptr);
    at::Tensor y = make_input(g.rank(), 37, ReduceOp::kSum).to(at::kFloat);
    all_reduce(g, y, other);
    EXPECT_NE(g.all_reduce_tuner().choice(other.tag, at::kFloat, ReduceOp::kSum, 37 * 4), nullptr);
    // Past the re-check: every rank takes part in it, and the results stay exact.
    for (int call = 0; call < AllReduceTuner::kRecheckCalls + 5; ++call) {
      at::Tensor z = make_input(g.rank(), 37, ReduceOp::kSum).to(at::kFloat);
      all_reduce(g, z, other);
      ASSERT_EQ(z.ne(expected_result(world, 37, ReduceOp::kSum, at::kFloat)).sum().item<int64_t>(),
                0)
          << "call " << call;
    }
  });
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(chosen[static_cast<size_t>(r)], chosen[0]) << "rank " << r;
}

// One call of `floats` floats through auto on g, whose candidates stand in for the
// algorithms by sleeping ms(algorithm, the candidate called before it) milliseconds and
// count their calls in `calls`: calibrates the kind and returns its choice.
Algorithm choice_among_sleepers(
    Group& g, int64_t floats, std::map<Algorithm, int>& calls,
    const std::function<double(Algorithm, std::optional<Algorithm>)>& ms) {
  std::optional<Algorithm> last;
  const auto fake = [&](Algorithm a, at::Tensor&) {
    ++calls[a];
    const double sleep_ms = ms(a, last);
    last = a;
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(sleep_ms * 1000)));
  };
  at::Tensor x = at::zeros({floats});
  AllReduceOptions opts;
  g.all_reduce_tuner().all_reduce(g, x, opts, fake);
  return g.all_reduce_tuner().choice(opts.tag, at::kFloat, opts.op, floats * 4)->algorithm;
}

// The runoff: candidates that stand in for the algorithms by sleeping (ring and butterfly
// 20 ms each: a tie, within kRunoffMargin; the rest 32 ms). The two close ones run
// kRunoffTurns more turns than the others and one of them is chosen; where nothing is close
// (butterfly 32 ms too), every candidate runs equally often and the ring wins. A loaded
// machine's late wake-ups can still push the tied two apart (2.4 ms in a CI run), so a tie
// that was not run off is tried again, up to three times; it must be run off once.
TEST(AllReduceTunerTest, ANearTieIsRunOffBetweenTheTwoFastest) {
  for (const bool close : {true, false}) {
    bool as_expected = false;
    for (int attempt = 0; attempt < (close ? 3 : 1) && !as_expected; ++attempt) {
      std::vector<std::map<Algorithm, int>> calls(2);
      std::vector<Algorithm> chosen(2);
      testing::run_ranks(2, [&](Group& g) {
        const auto r = static_cast<size_t>(g.rank());
        chosen[r] = choice_among_sleepers(g, 1000, calls[r], [&](Algorithm a, auto) {
          return a == Algorithm::kRing ? 20.0 : a == Algorithm::kButterfly && close ? 20.0 : 32.0;
        });
      });
      // Each turn of the runoff is a block: one untimed call and kBlockTimedCalls timed.
      const int extra =
          close ? AllReduceTuner::kRunoffTurns * (1 + AllReduceTuner::kBlockTimedCalls) : 0;
      as_expected = true;
      for (int r = 0; r < 2; ++r) {
        auto& c = calls[static_cast<size_t>(r)];
        const Algorithm choice = chosen[static_cast<size_t>(r)];
        // The call itself runs the choice once more.
        const int ring_call = choice == Algorithm::kRing ? 1 : 0;
        // Tied: either may win; nothing else may.
        as_expected = as_expected &&
                      (close ? choice == Algorithm::kRing || choice == Algorithm::kButterfly
                             : choice == Algorithm::kRing) &&
                      c[Algorithm::kRing] == c[Algorithm::kDirect] + extra + ring_call &&
                      c[Algorithm::kButterfly] == c[Algorithm::kDirect] + extra + 1 - ring_call;
      }
    }
    EXPECT_TRUE(as_expected) << (close ? "the tie was never run off" : "no runoff was expected");
  }
}

// The warm call: candidates stand in by sleeps, and ring's first call after another
// candidate is slow (20 ms, as a cold connection or cache is), its repeats fast (2 ms);
// butterfly always takes 6 ms, the rest 12. Calibration times each candidate in a block of
// calls in a row, the first untimed, and chooses ring: on a long link (the ranks' round trips
// set to 30 ms) one untimed and 2 timed calls at any size, on a short one one untimed and
// kBlockTimedCalls timed up to kBlockMaxBytes (so each candidate runs a multiple of the block
// in calibration). Above kBlockMaxBytes on a short link each candidate is timed after
// another, ring reads 20 ms, and butterfly wins.
TEST(AllReduceTunerTest, EachTimedCallFollowsAnUntimedOneOfTheSameCandidate) {
  struct Case {
    bool long_link;
    int64_t floats;
    Algorithm expected;
    int block;  // calls a turn (0: not in blocks)
  };
  const int64_t large = AllReduceTuner::kBlockMaxBytes / 4 + 1;
  for (const Case& k : {Case{true, 1000, Algorithm::kRing, 3},
                        Case{false, 1000, Algorithm::kRing, 1 + AllReduceTuner::kBlockTimedCalls},
                        Case{false, large, Algorithm::kButterfly, 0}}) {
    std::vector<std::map<Algorithm, int>> calls(2);
    std::vector<Algorithm> chosen(2);
    testing::run_ranks(2, [&](Group& g) {
      if (k.long_link) g.set_round_trip(1 - g.rank(), 0.030);
      const auto r = static_cast<size_t>(g.rank());
      chosen[r] = choice_among_sleepers(g, k.floats, calls[r], [](Algorithm a, auto last) {
        return a == Algorithm::kRing        ? (last == a ? 2.0 : 20.0)
               : a == Algorithm::kButterfly ? 6.0
                                            : 12.0;
      });
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(chosen[static_cast<size_t>(r)], k.expected) << k.long_link << " " << k.floats;
      if (k.block == 0) continue;
      auto c = calls[static_cast<size_t>(r)];
      --c[chosen[static_cast<size_t>(r)]];  // the call itself, after the calibration
      for (const auto& [algorithm, n] : c)
        EXPECT_EQ(n % k.block, 0) << to_string(algorithm) << " " << k.long_link;
    }
  }
}

// Ranks taking turns to finish first (as with openings on a long link): exchange's calls
// alternate 2 and 10 ms, rank 0 starting slow and rank 1 fast, so they run at 6 ms a call;
// butterfly takes 8, the rest 20. Timed one call at a time the slowest rank reads exchange
// at 10 ms and butterfly would win; a long link's calibration times calls in pairs and
// chooses exchange.
TEST(AllReduceTunerTest, OnALongLinkCallsAreTimedInPairsSoRanksTakingTurnsReadTheirPeriod) {
  std::vector<std::map<Algorithm, int>> calls(2);
  std::vector<Algorithm> chosen(2);
  testing::run_ranks(2, [&](Group& g) {
    g.set_round_trip(1 - g.rank(), 0.030);
    const auto r = static_cast<size_t>(g.rank());
    chosen[r] = choice_among_sleepers(g, 1000, calls[r], [&](Algorithm a, auto) {
      if (a == Algorithm::kExchange)
        return (calls[r][a] + static_cast<int>(r)) % 2 == 1 ? 10.0 : 2.0;
      return a == Algorithm::kButterfly ? 8.0 : 20.0;
    });
  });
  EXPECT_EQ(chosen[0], Algorithm::kExchange);
  EXPECT_EQ(chosen[1], Algorithm::kExchange);
}

// The first call: ring's first call of all is slow (40 ms, as one that allocates its
// buffers is), its later ones fast (2 ms); butterfly takes 10 ms, the rest 20. A call of
// more than 16 MiB is calibrated in 2 turns, so a timed first call would be half of ring's
// median (21 ms) and butterfly would win; calibration leaves every candidate's first call
// untimed and chooses ring.
TEST(AllReduceTunerTest, ACandidatesFirstCallIsNotTimed) {
  std::vector<Algorithm> chosen(2);
  std::vector<std::map<Algorithm, int>> calls(2);
  testing::run_ranks(2, [&](Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    chosen[r] = choice_among_sleepers(g, (int64_t{17} << 20) / 4, calls[r], [&](Algorithm a, auto) {
      return a == Algorithm::kRing ? (calls[r][a] == 1 ? 40.0 : 2.0)  // its first call of all
             : a == Algorithm::kButterfly ? 10.0
                                          : 20.0;
    });
  });
  EXPECT_EQ(chosen[0], Algorithm::kRing);
  EXPECT_EQ(chosen[1], Algorithm::kRing);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllReduceTest, ::testing::Range(1, 9),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace dtrain::comm
