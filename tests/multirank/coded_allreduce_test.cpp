// The coded all-reduce against a float64 reference: with an exact coding (raw float bytes)
// it is the mean; with a lossy one every rank still ends with identical values, and a
// peer's piece of the wrong length is an error, not a silent misread.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>
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

TEST(CodedAllReduceTest, ExactCodingGivesTheMean) {
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
        const int64_t sent = coded_all_reduce_mean(g, flat, coding, 11, 12);
        EXPECT_GT(sent, 0);
        EXPECT_TRUE(at::allclose(flat.to(at::kDouble), expected, 1e-6, 1e-6))
            << "p=" << p << " n=" << n;
      });
    }
  }
}

TEST(CodedAllReduceTest, LossyCodingLeavesIdenticalValuesEverywhere) {
  std::mutex mu;
  std::vector<at::Tensor> results;
  testing::run_ranks(3, [&](Group& g) {
    at::Tensor flat = input_of(g.rank(), 100);
    PieceCoding coding;
    coding.encode = [](CodedPhase, int, const at::Tensor& piece, at::Tensor& decoded) {
      decoded = piece.mul(8).round().div(8);  // a coarse quantizer
      return raw_bytes(decoded);
    };
    coding.decode = from_raw;
    coded_all_reduce_mean(g, flat, coding, 11, 12);
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(flat.clone());
  });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(at::equal(results[0], results[1]));
  EXPECT_TRUE(at::equal(results[0], results[2]));
}

TEST(CodedAllReduceTest, WrongLengthFromAPeerIsAnError) {
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
      coded_all_reduce_mean(g, flat, coding, 11, 12);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("from rank"), std::string::npos) << e.what();
      std::lock_guard<std::mutex> lock(mu);
      ++errors;
    }
  });
  EXPECT_EQ(errors, 2);
}

}  // namespace
}  // namespace dtrain::comm
