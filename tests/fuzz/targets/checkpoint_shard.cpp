// Checkpoint shards (train::read_shard): any bytes, given a manifest entry that matches
// their size and CRC (so the check in front does not stop them), load into the model and
// optimizer or throw std::runtime_error. The bytes reach LibTorch's archive reader, which
// the fuzzer drives but does not instrument.
#include "dtrain/base/crc32c.h"
#include "dtrain/train/checkpoint.h"
#include "fuzz_support.h"
#include "tiny_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrain::train::ShardEntry entry;
  entry.file = "shard-r0-e0-s0.safetensors";
  entry.bytes = static_cast<int64_t>(size);
  entry.crc32c = dtrain::crc32c(data, size);
  dtrain::fuzz::write_input(entry.file, dtrain::fuzz::as_text(data, size));
  dtrain::fuzz::TinyState state;
  try {
    dtrain::train::read_shard(dtrain::fuzz::scratch_dir(), entry, {state.module, state.optimizer});
  } catch (const std::runtime_error&) {
  }
  return 0;
}
