// The pipeline's driver commands (parallel::pipeline::from_message): the first byte picks
// the message's dtype (double, float or int64), the rest are its values. Any message is a
// valid command or a std::runtime_error, and a command read writes back to the same one.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdlib>
#include <cstring>

#include "dtrain/parallel/pipeline/command.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrain::parallel::pipeline;
  if (size == 0) return 0;
  const at::ScalarType types[] = {at::kDouble, at::kFloat, at::kLong};
  const at::ScalarType type = types[data[0] % 3];
  const int64_t element = static_cast<int64_t>(c10::elementSize(type));
  const int64_t count = static_cast<int64_t>(size - 1) / element;
  at::Tensor message = at::empty({count}, type);
  if (count > 0) std::memcpy(message.data_ptr(), data + 1, static_cast<size_t>(count * element));
  Command command;
  try {
    command = from_message(message, "fuzz input");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const Command again = from_message(to_message(command), "written back");
  if (again.kind != command.kind || again.batch != command.batch || again.epoch != command.epoch ||
      again.step != command.step || again.wire_check != command.wire_check ||
      std::memcmp(&again.lr, &command.lr, sizeof(double)) != 0)
    std::abort();
  return 0;
}
