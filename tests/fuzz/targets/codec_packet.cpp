// Codec packets (compress::decode): any bytes either decode or throw CorruptPacket, and a
// packet inspect() rejects is never decoded; what decodes matches inspect()'s description.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/compress/codec.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrain::compress;
  bool described = false;
  PacketInfo info;
  try {
    info = inspect(data, size);
    described = true;
    if (info.header_bytes + info.table_bytes + info.payload_bytes != size) std::abort();
  } catch (const CorruptPacket&) {
  }
  try {
    const at::Tensor t = decode(data, size);
    if (!described || t.sizes() != at::IntArrayRef(info.shape) || t.numel() != info.numel ||
        t.scalar_type() != info.dtype)
      std::abort();
  } catch (const CorruptPacket&) {
  }
  return 0;
}
