// --backend: which backend reduces a rank's CUDA tensors, decided from the device and how
// many local ranks share the host's GPUs; and every rank must have decided the same.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <future>
#include <string>

#include "dtrain/comm/collective_backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/rendezvous.h"

namespace dtrain::comm {
namespace {

const c10::Device kCpu(c10::kCPU);
const c10::Device kGpu1(c10::kCUDA, 1);

std::string error_of(CollectiveBackend asked, const c10::Device& device, int ranks, int gpus) {
  try {
    resolve_backend(asked, device, ranks, gpus);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CollectiveBackendTest, NamesRoundTrip) {
  for (auto b : {CollectiveBackend::kAuto, CollectiveBackend::kGloo, CollectiveBackend::kNccl})
    EXPECT_EQ(parse_collective_backend(to_string(b)), b);
  EXPECT_THROW(parse_collective_backend("mpi"), std::invalid_argument);
}

TEST(CollectiveBackendTest, AutoTakesNcclOnlyWhereEveryLocalRankHasItsOwnGpu) {
  EXPECT_EQ(resolve_backend(CollectiveBackend::kAuto, kGpu1, 2, 2).backend,
            CollectiveBackend::kNccl);
  EXPECT_EQ(resolve_backend(CollectiveBackend::kAuto, kGpu1, 2, 8).backend,
            CollectiveBackend::kNccl);
  const auto shared = resolve_backend(CollectiveBackend::kAuto, kGpu1, 4, 2);
  EXPECT_EQ(shared.backend, CollectiveBackend::kGloo);
  EXPECT_NE(shared.why.find("4 local ranks, 2 GPU(s)"), std::string::npos) << shared.why;
  EXPECT_EQ(resolve_backend(CollectiveBackend::kAuto, kCpu, 1, 0).backend,
            CollectiveBackend::kGloo);
  EXPECT_EQ(resolve_backend(CollectiveBackend::kGloo, kGpu1, 2, 2).backend,
            CollectiveBackend::kGloo);
}

TEST(CollectiveBackendTest, NcclWhereItCannotRunIsAnErrorSayingWhy) {
  EXPECT_EQ(resolve_backend(CollectiveBackend::kNccl, kGpu1, 2, 2).backend,
            CollectiveBackend::kNccl);
  EXPECT_NE(error_of(CollectiveBackend::kNccl, kCpu, 2, 2).find("needs --device cuda"),
            std::string::npos);
  const std::string shared = error_of(CollectiveBackend::kNccl, kGpu1, 2, 1);
  EXPECT_NE(shared.find("needs a GPU per local rank (2 local ranks, 1 GPU(s) visible"),
            std::string::npos)
      << shared;
  EXPECT_NE(shared.find("--backend gloo"), std::string::npos) << shared;
}

// A rank that would run its GPU collectives on NCCL while another runs them on Gloo would
// wait in its first collective forever: the rendezvous refuses the job, on both ranks.
TEST(CollectiveBackendTest, RanksThatChoseDifferentBackendsAreRefused) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto join = [&](int rank, const std::string& backend) {
    return std::async(std::launch::async, [=] {
      try {
        agree_on_settings(*store, rank, 2,
                          {{"gpu_collectives", backend, "the backend of GPU collectives",
                            "give every rank the same --backend"}},
                          std::chrono::seconds(10));
      } catch (const CommError& e) {
        return std::string(e.what());
      }
      return std::string();
    });
  };
  auto a = join(0, "nccl");
  auto b = join(1, "gloo");
  const std::string on_a = a.get(), on_b = b.get();
  EXPECT_NE(on_a.find("the backend of GPU collectives is nccl here and gloo on rank 1"),
            std::string::npos)
      << on_a;
  EXPECT_NE(on_b.find("is gloo here and nccl on rank 0"), std::string::npos) << on_b;
}

}  // namespace
}  // namespace dtrain::comm
