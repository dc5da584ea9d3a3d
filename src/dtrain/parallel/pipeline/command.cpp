#include "dtrain/parallel/pipeline/command.h"

#include <ATen/ATen.h>

#include "dtrain/comm/small_message.h"

namespace dtrain::parallel::pipeline {
namespace {
constexpr int64_t kMaxCount = 9'000'000'000'000'000;  // where doubles still hold integers
}  // namespace

at::Tensor to_message(const Command& c) {
  comm::MessageWriter w;
  w.count(static_cast<int64_t>(c.kind));
  if (c.kind == CommandKind::kWireCheck)
    w.flag(c.wire_check);
  else
    w.count(c.batch);
  return w.real(c.lr).count(c.epoch).count(c.step).finish();
}

Command from_message(const at::Tensor& message, const std::string& from) {
  comm::MessageReader r(message, kCommandValues, "pipeline command from " + from);
  Command c;
  const int64_t kind = r.count(0, kMaxCount, "kind");
  if (kind < kFirstCommandKind || kind > kLastCommandKind)
    r.fail("kind", std::to_string(kind) + ": an unknown kind");
  c.kind = static_cast<CommandKind>(kind);
  if (c.kind == CommandKind::kWireCheck)
    c.wire_check = r.flag("wire check switch");
  else
    c.batch = r.count(0, kMaxCount, "batch size");
  c.lr = r.real();
  c.epoch = r.count(0, kMaxCount, "epoch");
  c.step = r.count(0, kMaxCount, "step");
  return c;
}

}  // namespace dtrain::parallel::pipeline
