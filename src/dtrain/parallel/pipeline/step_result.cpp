#include "dtrain/parallel/pipeline/step_result.h"

#include "dtrain/comm/small_message.h"

namespace dtrain::parallel::pipeline {

at::Tensor StepResult::to_message() const {
  comm::MessageWriter w;
  w.real(loss_sum).count(correct).count(samples);
  for (const int64_t c : confusion)
    w.count(c);
  return w.finish();
}

StepResult StepResult::from_message(const at::Tensor& message, const std::string& from) {
  comm::MessageReader r(message, kValues, "pipeline result from " + from);
  constexpr int64_t kMaxSamples = int64_t{1} << 52;
  StepResult s;
  s.loss_sum = r.real();
  s.correct = r.count(0, kMaxSamples, "correct");
  s.samples = r.count(0, kMaxSamples, "samples");
  if (s.correct > s.samples) r.fail("correct", "exceeds the samples");
  for (int64_t& c : s.confusion)
    c = r.count(0, s.samples, "confusion count");
  return s;
}

}  // namespace dtrain::parallel::pipeline
