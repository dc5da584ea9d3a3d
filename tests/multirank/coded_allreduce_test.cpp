// The coded means (the scatter-gather and the all-gather) against a float64 reference: with
// an exact coding (raw float bytes) each is the mean; with a lossy one every rank still ends
// with identical values, and a peer's piece of the wrong length is an error, not a silent
// misread.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>
#include <functional>
#include <mutex>

#include "../support/ranks.h"
#include "dtrain/comm/coded_allreduce.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

std::vector<uint8_t> raw_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.numel()) * 4);
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr<float>(), out.size());
  return out;
}

at::Tensor from_raw(const std::vector<uint8_t>& bytes) {
  auto t = at::empty({static_cast<int64_t>(bytes.size() / 4)}, at::kFloat);
  if (!bytes.empty()) std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
  return t;
}

at::Tensor input_of(int rank, int64_t n) {
  return at::arange(n, at::kFloat).mul(0.37).add(rank * 1.5).sin();
}

using CodedMean = std::function<int64_t(Group&, at::Tensor&, const PieceCoding&)>;

struct NamedMean {
  const char* name;
  CodedMean run;
};

const std::vector<NamedMean>& both_means() {
  static const std::vector<NamedMean> means = {
      {"scatter-gather",
       [](Group& g, at::Tensor& flat, const PieceCoding& c) {
         return coded_all_reduce_mean(g, flat, c, 11, 12);
       }},
      {"all-gather", [](Group& g, at::Tensor& flat, const PieceCoding& c) {
         return coded_all_gather_mean(g, flat, c, 12);
       }}};
  return means;
}

TEST(CodedAllReduceTest, ExactCodingGivesTheMean) {
  for (const auto& mean : both_means())
    for (const int p : {2, 3}) {
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
        at::Tensor expected = at::zeros({n}, at::kDouble);
        for (int r = 0; r < p; ++r)
          expected += input_of(r, n).to(at::kDouble);
        expected /= p;
        testing::run_ranks(p, [&](Group& g) {
          at::Tensor flat = input_of(g.rank(), n);
          PieceCoding coding;
          coding.encode = [](CodedPhase, int, const at::Tensor& piece, at::Tensor& decoded) {
            decoded = piece.clone();
            return raw_bytes(piece);
          };
          coding.decode = from_raw;
          const int64_t sent = mean.run(g, flat, coding);
          EXPECT_GT(sent, 0);
          EXPECT_TRUE(at::allclose(flat.to(at::kDouble), expected, 1e-6, 1e-6))
              << mean.name << " p=" << p << " n=" << n;
        });
      }
    }
}

at::Tensor coarse(const at::Tensor& t) {
  return t.mul(8).round().div(8);
}

TEST(CodedAllReduceTest, LossyCodingLeavesIdenticalValuesEverywhere) {
  for (const auto& mean : both_means()) {
    for (const int p : {2, 3}) {
      std::mutex mu;
      std::vector<at::Tensor> results;
      testing::run_ranks(p, [&](Group& g) {
        at::Tensor flat = input_of(g.rank(), 100);
        PieceCoding coding;
        coding.encode = [](CodedPhase, int, const at::Tensor& piece, at::Tensor& decoded) {
          decoded = coarse(piece);
          return raw_bytes(decoded);
        };
        coding.decode = from_raw;
        mean.run(g, flat, coding);
        std::lock_guard<std::mutex> lock(mu);
        results.push_back(flat.clone());
      });
      ASSERT_EQ(results.size(), static_cast<size_t>(p));
      for (int r = 1; r < p; ++r)
        EXPECT_TRUE(at::equal(results[0], results[static_cast<size_t>(r)]))
            << mean.name << " p=" << p << " rank " << r;
    }
  }
}

// The all-gather codes each rank's vector once: the result is the mean of the decoded
// vectors, summed in rank order, and each rank sends its coded vector to every other.
TEST(CodedAllReduceTest, TheAllGatherAveragesEachVectorCodedOnce) {
  const int p = 3;
  const int64_t n = 100;
  at::Tensor expected = coarse(input_of(0, n)).clone();
  for (int r = 1; r < p; ++r)
    expected.add_(coarse(input_of(r, n)));
  expected.div_(p);
  testing::run_ranks(p, [&](Group& g) {
    at::Tensor flat = input_of(g.rank(), n);
    PieceCoding coding;
    int calls = 0;
    coding.encode = [&](CodedPhase phase, int peer, const at::Tensor& piece, at::Tensor& decoded) {
      ++calls;
      EXPECT_EQ(phase, CodedPhase::kGather);
      EXPECT_EQ(peer, g.rank());
      decoded = coarse(piece);
      return raw_bytes(decoded);
    };
    coding.decode = from_raw;
    coding.packet_bytes = [](int64_t values) { return values * 4; };
    const int64_t sent = coded_all_gather_mean(g, flat, coding, 12);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(sent, (p - 1) * n * 4);
    EXPECT_TRUE(at::equal(flat, expected)) << "rank " << g.rank();
  });
}

TEST(CodedAllReduceTest, WrongLengthFromAPeerIsAnError) {
  for (const auto& mean : both_means()) {
    std::mutex mu;
    int errors = 0;
    testing::run_ranks(2, [&](Group& g) {
      at::Tensor flat = input_of(g.rank(), g.rank() == 0 ? 10 : 12);
      PieceCoding coding;
      coding.encode = [](CodedPhase, int, const at::Tensor& piece, at::Tensor& decoded) {
        decoded = piece.clone();
        return raw_bytes(piece);
      };
      coding.decode = from_raw;
      try {
        mean.run(g, flat, coding);
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("from rank"), std::string::npos) << e.what();
        std::lock_guard<std::mutex> lock(mu);
        ++errors;
      }
    });
    EXPECT_EQ(errors, 2) << mean.name;
  }
}

}  // namespace
}  // namespace dtrain::comm
