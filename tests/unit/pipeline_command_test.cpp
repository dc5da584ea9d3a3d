// The driver/follower command is one definition: every kind round-trips, and a message
// that is not a valid command is rejected with a reason instead of being acted on.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <limits>

#include "dtrain/parallel/pipeline/command.h"

namespace dtrain::parallel::pipeline {
namespace {

TEST(PipelineCommandTest, EveryKindRoundTrips) {
  for (int k = kFirstCommandKind; k <= kLastCommandKind; ++k) {
    const auto kind = static_cast<CommandKind>(k);
    const int64_t batch = kind == CommandKind::kWireCheck ? 1 : 37;  // a switch: 0 or 1
    const Command c{kind, batch, 0.125, 4, 1200};
    const Command back = from_message(to_message(c), "test");
    EXPECT_EQ(back.kind, c.kind);
    EXPECT_EQ(back.batch, batch);
    EXPECT_EQ(back.lr, 0.125);
    EXPECT_EQ(back.epoch, 4);
    EXPECT_EQ(back.step, 1200);
  }
}

TEST(PipelineCommandTest, InvalidMessagesAreRejected) {
  const auto message = [](double kind, double batch, double lr, double epoch = 0, double step = 0) {
    return at::tensor({kind, batch, lr, epoch, step}, at::kDouble);
  };
  EXPECT_THROW(from_message(message(0, 1, 0.1), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(kLastCommandKind + 1, 1, 0.1), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(1.5, 1, 0.1), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(1, -1, 0.1), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(1, 2.5, 0.1), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(1, 1, std::numeric_limits<double>::quiet_NaN()), "rank 0"),
               std::runtime_error);
  EXPECT_THROW(from_message(message(6, 0, 0, -1, 0), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(message(6, 0, 0, 1, 0.5), "rank 0"), std::runtime_error);
  const double wire_check = static_cast<double>(CommandKind::kWireCheck);
  EXPECT_NO_THROW(from_message(message(wire_check, 0, 0), "rank 0"));
  EXPECT_THROW(from_message(message(wire_check, 2, 0), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(at::zeros({3}, at::kDouble), "rank 0"), std::runtime_error);
  EXPECT_THROW(from_message(at::zeros({5}, at::kFloat), "rank 0"), std::runtime_error);
  try {
    from_message(message(9, 1, 0.1), "rank 0");
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown kind"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
