#include "dtrain/parallel/pipeline/command.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "dtrain/base/parse.h"

namespace dtrain::parallel::pipeline {

at::Tensor to_message(const Command& c) {
  return at::tensor({static_cast<double>(c.kind), static_cast<double>(c.batch), c.lr,
                     static_cast<double>(c.epoch), static_cast<double>(c.step)},
                    at::kDouble);
}

Command from_message(const at::Tensor& message, const std::string& from) {
  auto corrupt = [&](const std::string& why) {
    return std::runtime_error("corrupt pipeline command from " + from + ": " + why);
  };
  if (message.scalar_type() != at::kDouble || message.numel() != kCommandValues)
    throw corrupt("expected " + std::to_string(kCommandValues) + " doubles");
  const at::Tensor m = message.contiguous();
  const double* v = m.data_ptr<double>();
  if (!(v[0] >= kFirstCommandKind && v[0] <= kLastCommandKind) || v[0] != std::floor(v[0]))
    throw corrupt("unknown kind " + std::to_string(v[0]));
  const auto count = [](double x) { return count_in_double(x).has_value(); };
  if (!count(v[1])) throw corrupt("bad batch size " + std::to_string(v[1]));
  if (!count(v[3]) || !count(v[4]))
    throw corrupt("bad position " + std::to_string(v[3]) + "/" + std::to_string(v[4]));
  if (!std::isfinite(v[2])) throw corrupt("non-finite learning rate");
  Command c;
  c.kind = static_cast<CommandKind>(static_cast<int>(v[0]));
  if (c.kind == CommandKind::kWireCheck && v[1] != 0 && v[1] != 1)
    throw corrupt("a wire check switch must be 0 or 1, got " + std::to_string(v[1]));
  c.batch = static_cast<int64_t>(v[1]);
  c.lr = v[2];
  c.epoch = static_cast<int64_t>(v[3]);
  c.step = static_cast<int64_t>(v[4]);
  return c;
}

}  // namespace dtrain::parallel::pipeline
