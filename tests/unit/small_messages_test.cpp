// The small messages ranks exchange (comm/small_message.h): each struct round-trips through
// its message, the layout is the documented one, and a message out of range is refused with
// the field named instead of being acted on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "dtrain/comm/small_message.h"
#include "dtrain/parallel/ddp_tuner_messages.h"
#include "dtrain/parallel/pipeline/step_result.h"
#include "dtrain/train/model_shape.h"

namespace dtrain {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(SmallMessageTest, ReaderChecksCountTypeAndRanges) {
  const at::Tensor m = comm::MessageWriter().count(3).real(0.5).flag(true).finish();
  comm::MessageReader r(m, 3, "test message");
  EXPECT_EQ(r.count(0, 5, "a"), 3);
  EXPECT_EQ(r.real(), 0.5);
  EXPECT_TRUE(r.flag("b"));
  EXPECT_NE(error_of([&] { comm::MessageReader(m, 4, "test message"); }).find("expected 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              comm::MessageReader(m.to(at::kFloat), 3, "test message");
            }).find("float64 or int64"),
            std::string::npos);
  comm::MessageReader fractional(at::tensor({2.5}, at::kDouble), 1, "test message");
  EXPECT_NE(error_of([&] { fractional.count(0, 5, "size"); }).find("test message: size"),
            std::string::npos);
  comm::MessageReader nan(at::tensor({std::nan("")}, at::kDouble), 1, "test message");
  EXPECT_NE(error_of([&] { nan.real(); }).find("not finite"), std::string::npos);
  // int64 messages read alike.
  comm::MessageReader ints(comm::MessageWriter().count(-7).finish(at::kLong), 1, "ints");
  EXPECT_EQ(ints.count(-10, 10, "x"), -7);
}

TEST(SmallMessageTest, PipelineStepResultRoundTripsAndRefusesImpossibleCounts) {
  parallel::pipeline::StepResult r;
  r.loss_sum = 12.375;
  r.correct = 40;
  r.samples = 64;
  r.confusion = {30, 2, 4, 28};
  const at::Tensor m = r.to_message();
  EXPECT_TRUE(at::equal(m, at::tensor({12.375, 40.0, 64.0, 30.0, 2.0, 4.0, 28.0}, at::kDouble)));
  const auto back = parallel::pipeline::StepResult::from_message(m, "rank 1");
  EXPECT_EQ(back.loss_sum, r.loss_sum);
  EXPECT_EQ(back.correct, r.correct);
  EXPECT_EQ(back.samples, r.samples);
  EXPECT_EQ(back.confusion, r.confusion);
  at::Tensor bad = m.clone();
  bad[1] = 65;  // more correct than samples
  EXPECT_NE(error_of([&] {
              parallel::pipeline::StepResult::from_message(bad, "rank 1");
            }).find("pipeline result from rank 1: correct"),
            std::string::npos);
}

TEST(SmallMessageTest, ModelShapeRoundTripsAsInt64AndCarriesAFailure) {
  train::ModelShape s;
  s.num_classes = 10;
  s.vocab = 50265;
  s.pad_id = 1;
  s.input_shape = {3, 32, 32};
  const at::Tensor m = s.to_message();
  EXPECT_EQ(m.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(m, at::tensor({10, 50265, 1, 3, 3, 32, 32}, at::kLong)));
  auto back = train::ModelShape::from_message(m, "rank 0");
  EXPECT_TRUE(back.loaded);
  EXPECT_EQ(back.num_classes, 10);
  EXPECT_EQ(back.vocab, 50265);
  EXPECT_EQ(back.input_shape, s.input_shape);
  s.input_shape = {128};  // text: one dimension, zero-padded on the wire
  s.loaded = false;
  back = train::ModelShape::from_message(s.to_message(), "rank 0");
  EXPECT_FALSE(back.loaded);
  EXPECT_EQ(back.input_shape, (std::vector<int64_t>{128}));
  EXPECT_THROW(train::ModelShape::from_message(at::tensor({10, 5, 1, 4, 1, 1, 1}, at::kLong), "x"),
               std::runtime_error);  // four dimensions
}

TEST(SmallMessageTest, TunerDecisionRoundTripsAndRefusesUnknownCodecs) {
  const parallel::TunerDecision d{2, 1, 5};
  EXPECT_TRUE(at::equal(d.to_message(), at::tensor({2, 1, 5}, at::kLong)));
  const auto back = parallel::TunerDecision::from_message(d.to_message(), 4, 3, 16, "rank 0");
  EXPECT_EQ(back.chosen, 2);
  EXPECT_EQ(back.runoff_other, 1);
  EXPECT_EQ(back.runoff_pairs, 5);
  const parallel::TunerDecision no_runoff{0, -1, -1};
  EXPECT_EQ(
      parallel::TunerDecision::from_message(no_runoff.to_message(), 4, 3, 16, "r").runoff_other,
      -1);
  EXPECT_THROW(parallel::TunerDecision::from_message(
                   parallel::TunerDecision{4, -1, -1}.to_message(), 4, 3, 16, "r"),
               std::runtime_error);  // only 4 candidates
  EXPECT_THROW(parallel::TunerDecision::from_message(parallel::TunerDecision{1, 2, 1}.to_message(),
                                                     4, 3, 16, "r"),
               std::runtime_error);  // a runoff of 1 pair
}

TEST(SmallMessageTest, StepTrafficRoundTripsItsRowsInOrder) {
  parallel::StepTraffic t;
  t.links.resize(3);
  t.links[1] = {{1000, 0.5}, {2000, 0.25}};
  t.links[2] = {{3000, 1.5}, {4000, 2.0}};
  const at::Tensor m = t.to_message();
  EXPECT_TRUE(at::equal(
      m, at::tensor({0.0, 0.0, 0.0, 0.0, 1000.0, 0.5, 2000.0, 0.25, 3000.0, 1.5, 4000.0, 2.0},
                    at::kDouble)));
  const auto back = parallel::StepTraffic::from_message(m, 3, "sum");
  EXPECT_EQ(back.links[2].to_rank0.bytes, 4000);
  EXPECT_EQ(back.links[1].from_rank0.busy_s, 0.5);
  at::Tensor bad = m.clone();
  bad[5] = -1;
  EXPECT_THROW(parallel::StepTraffic::from_message(bad, 3, "sum"), std::runtime_error);
}

}  // namespace
}  // namespace dtrain
