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
    for (const bool wire_check : {false, true}) {
      const auto kind = static_cast<CommandKind>(k);
      const bool switch_command = kind == CommandKind::kWireCheck;
      Command c{kind, switch_command ? 0 : 37, 0.125, 4, 1200};
      c.wire_check = switch_command && wire_check;  // only the switch carries it
      const Command back = from_message(to_message(c), "test");
      EXPECT_EQ(back.kind, c.kind);
      EXPECT_EQ(back.batch, c.batch);
      EXPECT_EQ(back.wire_check, c.wire_check);
      EXPECT_EQ(back.lr, 0.125);
      EXPECT_EQ(back.epoch, 4);
      EXPECT_EQ(back.step, 1200);
    }
  }
}

// The wire layout (docs/wire-format.md): [kind, batch or the switch, lr, epoch, step].
TEST(PipelineCommandTest, TheMessageHoldsItsFiveValuesInTheDocumentedOrder) {
  const Command train{CommandKind::kTrain, 64, 0.05, 2, 17};
  EXPECT_TRUE(at::equal(to_message(train), at::tensor({1.0, 64.0, 0.05, 2.0, 17.0}, at::kDouble)));
  Command on;
  on.kind = CommandKind::kWireCheck;
  on.wire_check = true;
  EXPECT_TRUE(at::equal(to_message(on), at::tensor({7.0, 1.0, 0.0, 0.0, 0.0}, at::kDouble)));
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
