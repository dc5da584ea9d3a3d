// The pipeline's wire (parallel/pipeline/transport.h) between two real ranks: a packet is
// one message whose size the receiver computes, after the boundary's first activation
// taught both ends its per-sample shape; a tensor that breaks the shape is an error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/parallel/pipeline/transport.h"

namespace dtrain::parallel::pipeline {
namespace {

using testing::run_ranks;

Transfer activation(int micro_batch, int64_t samples) {
  return {0, 1, micro_batch, false, samples};
}

TEST(PipelineTransport, OnlyTheFirstActivationOfABoundaryCarriesALength) {
  EdgeCodecs codecs;
  codecs.activations = compress::parse_codec("sortquant:8");
  codecs.all_edges = true;
  constexpr int kMessages = 4;
  auto tensor = [](int mb) { return at::arange(24, at::kFloat).reshape({3, 8}) * (mb + 1); };
  run_ranks(2, [&](comm::Group& g) {
    StageTransport wire(g, {0, 1}, codecs);
    if (g.rank() == 0) {
      for (int mb = 0; mb < kMessages; ++mb)
        wire.send_tensor(tensor(mb), activation(mb, 3));
      wire.wait_sends();
      const auto packet = compress::packet_size(*compress::make_codec(codecs.activations), {3, 8});
      // The first one's [length, CRC32C] message: 16 bytes.
      EXPECT_EQ(g.link_stats(1).send.bytes, static_cast<int64_t>(16 + kMessages * packet));
      return;
    }
    for (int mb = 0; mb < kMessages; ++mb) {
      for (int ahead = mb; ahead < kMessages; ++ahead)  // posted early, posted once
        wire.expect_tensor(activation(ahead, 3));
      const at::Tensor got = wire.receive_tensor(activation(mb, 3), at::kCPU);
      EXPECT_EQ(got.sizes(), tensor(mb).sizes());
      // sortquant:8 is lossy: close to, not equal to, what was sent.
      EXPECT_LT((got - tensor(mb)).abs().max().item<float>(), 0.5f * (mb + 1));
    }
  });
}

TEST(PipelineTransport, ABoundaryThatChangesShapeIsAnErrorOnTheSender) {
  run_ranks(2, [&](comm::Group& g) {
    StageTransport wire(g, {0, 1}, EdgeCodecs{});
    if (g.rank() == 0) {
      wire.send_tensor(at::ones({2, 8}), activation(0, 2));
      try {
        wire.send_tensor(at::ones({2, 9}), activation(1, 2));
        ADD_FAILURE() << "a changed per-sample shape was sent";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("per-sample shape [9], the boundary's first tensor "
                                             "had [8]"),
                  std::string::npos)
            << e.what();
      }
      try {
        wire.send_tensor(at::ones({3, 8}), activation(1, 2));
        ADD_FAILURE() << "a tensor of 3 samples went out as a micro-batch of 2";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("2 samples as its first dimension"), std::string::npos)
            << e.what();
      }
      wire.wait_sends();
      return;
    }
    EXPECT_TRUE(at::equal(wire.receive_tensor(activation(0, 2), at::kCPU), at::ones({2, 8})));
  });
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
