// Checkpoint manifests (train::Manifest::parse): any text is a manifest or a
// std::runtime_error, and a manifest that parses writes back to one that parses equal.
#include <cstdlib>

#include "dtrain/train/checkpoint.h"
#include "fuzz_support.h"

namespace {

bool same(const dtrain::train::Manifest& a, const dtrain::train::Manifest& b) {
  if (a.layout != b.layout || a.parameters != b.parameters || a.epoch != b.epoch ||
      a.step != b.step || a.shards.size() != b.shards.size())
    return false;
  for (size_t i = 0; i < a.shards.size(); ++i) {
    const auto &x = a.shards[i], &y = b.shards[i];
    if (x.rank != y.rank || x.file != y.file || x.bytes != y.bytes || x.crc32c != y.crc32c ||
        x.state_crc32c != y.state_crc32c)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dtrain::train::Manifest;
  Manifest parsed;
  try {
    parsed = Manifest::parse(std::string(dtrain::fuzz::as_text(data, size)), "fuzz input");
  } catch (const std::runtime_error&) {
    return 0;
  }
  if (!same(parsed, Manifest::parse(parsed.to_json(), "written back"))) std::abort();
  return 0;
}
