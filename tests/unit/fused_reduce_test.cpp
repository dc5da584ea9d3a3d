// The reduction step fused with the wire check (comm/fused_reduce.h): the same values as the
// unfused steps bit for bit, and the CRC32C of the input and of the result, for every size
// (lanes, pairs, a lone float, nothing, the fold's 64-float rounds and their remainders), op,
// dtype and CRC kernel this CPU has.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/fused_reduce.h"

namespace dtrain::comm {
namespace {

uint32_t crc_of(const at::Tensor& t) {
  return crc32c_with(Crc32cKernel::kTables, t.data_ptr(), static_cast<size_t>(t.nbytes()));
}

TEST(FusedReduceTest, ValuesAreTheUnfusedStepsAndTheCrcsThoseOfTheBytes) {
  at::manual_seed(5);
  const std::vector<Crc32cKernel> kernels = crc32c_kernels();
  for (const int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{6}, int64_t{7}, int64_t{13},
        int64_t{63}, int64_t{64}, int64_t{65}, int64_t{127}, int64_t{4096}, int64_t{100001}}) {
    for (const auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (const int finalize : {0, 3}) {
        for (const auto dtype : {at::kFloat, at::kDouble, at::kInt}) {
          for (const Crc32cKernel kernel : kernels) {
            SCOPED_TRACE(std::to_string(n) + " " + to_string(op) + " finalize " +
                         std::to_string(finalize) + " " + c10::toString(dtype) + " " +
                         to_string(kernel));
            const at::Tensor src = (at::randn({n}) * 100).to(dtype);
            const at::Tensor start = (at::randn({n}) * 100).to(dtype);
            at::Tensor expected = start.clone();
            combine_into(expected, src, op);
            if (finalize > 0) finalize_reduction(expected, op, finalize);
            at::Tensor fused = start.clone();
            const ReduceCrcs crcs = combine_with_crcs(fused, src, op, finalize, kernel);
            EXPECT_TRUE(at::equal(fused, expected));
            EXPECT_EQ(crcs.in, crc_of(src));
            EXPECT_EQ(crcs.out, crc_of(expected));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::comm
