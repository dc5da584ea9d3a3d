#include "dtrain/parallel/ddp_tuner_messages.h"

#include "dtrain/comm/small_message.h"

namespace dtrain::parallel {

at::Tensor TunerDecision::to_message() const {
  return comm::MessageWriter()
      .count(chosen)
      .count(runoff_other)
      .count(runoff_pairs)
      .finish(at::kLong);
}

TunerDecision TunerDecision::from_message(const at::Tensor& message, int64_t candidates,
                                          int64_t min_pairs, int64_t max_pairs,
                                          const std::string& from) {
  comm::MessageReader r(message, kValues, "codec decision from " + from);
  TunerDecision d;
  d.chosen = r.count(0, candidates - 1, "chosen codec");
  d.runoff_other = r.count(-1, candidates - 1, "runoff rival");
  d.runoff_pairs = d.runoff_other < 0 ? r.count(-1, max_pairs, "runoff pairs")
                                      : r.count(min_pairs, max_pairs, "runoff pairs");
  return d;
}

at::Tensor StepTraffic::to_message() const {
  comm::MessageWriter w;
  for (const Link& l : links)
    w.real(l.from_rank0.bytes)
        .real(l.from_rank0.busy_s)
        .real(l.to_rank0.bytes)
        .real(l.to_rank0.busy_s);
  return w.finish();
}

StepTraffic StepTraffic::from_message(const at::Tensor& message, int64_t ranks,
                                      const std::string& from) {
  comm::MessageReader r(message, 4 * ranks, "step traffic from " + from);
  StepTraffic t;
  t.links.resize(static_cast<size_t>(ranks));
  for (Link& l : t.links) {
    for (Way* way : {&l.from_rank0, &l.to_rank0}) {
      way->bytes = r.real();
      way->busy_s = r.real();
      if (way->bytes < 0 || way->busy_s < 0) r.fail("link", "has a negative count");
    }
  }
  return t;
}

}  // namespace dtrain::parallel
