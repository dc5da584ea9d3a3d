#include "dtrain/compress/packet_header.h"

#include <cstring>
#include <string>

namespace dtrain::compress {
namespace {

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

void PacketHeader::write(uint8_t* out) const {
  std::memcpy(out + Offset::kMagic, kMagic, sizeof(kMagic));
  out[Offset::kVersion] = kVersion;
  out[Offset::kCodec] = codec_id;
  out[Offset::kDtype] = dtype_code;
  out[Offset::kNdim] = static_cast<uint8_t>(shape.size());
  out[Offset::kBits] = bits;
  out[Offset::kSplitBits] = split_bits;
  out[Offset::kInner] = inner;
  out[Offset::kTileLog2] = tile_log2;
  put<uint32_t>(out + Offset::kTableBytes, table_bytes);
  put<uint64_t>(out + Offset::kPayloadBytes, payload_bytes);
  put<uint64_t>(out + Offset::kNumel, numel);
  for (size_t d = 0; d < shape.size(); ++d)
    put<int64_t>(out + Offset::kShape + 8 * d, shape[d]);
}

PacketHeader PacketHeader::read(const uint8_t* data, size_t size) {
  if (size < kFixedBytes) {
    throw CorruptPacket("packet: " + std::to_string(size) + " bytes is shorter than the header");
  }
  if (std::memcmp(data + Offset::kMagic, kMagic, sizeof(kMagic)) != 0) {
    throw CorruptPacket("packet: bad magic");
  }
  if (data[Offset::kVersion] != kVersion) {
    throw CorruptPacket("packet: version " + std::to_string(data[Offset::kVersion]) +
                        " (this build reads " + std::to_string(kVersion) + ")");
  }
  const int ndim = data[Offset::kNdim];
  if (ndim > kMaxDims) throw CorruptPacket("packet: " + std::to_string(ndim) + " dimensions");
  PacketHeader h;
  h.codec_id = data[Offset::kCodec];
  h.dtype_code = data[Offset::kDtype];
  h.bits = data[Offset::kBits];
  h.split_bits = data[Offset::kSplitBits];
  h.inner = data[Offset::kInner];
  h.tile_log2 = data[Offset::kTileLog2];
  h.table_bytes = get<uint32_t>(data + Offset::kTableBytes);
  h.payload_bytes = get<uint64_t>(data + Offset::kPayloadBytes);
  h.numel = get<uint64_t>(data + Offset::kNumel);
  if (size < kFixedBytes + 8 * static_cast<size_t>(ndim)) {
    throw CorruptPacket("packet: truncated shape");
  }
  for (int d = 0; d < ndim; ++d)
    h.shape.push_back(get<int64_t>(data + Offset::kShape + 8 * d));
  return h;
}

}  // namespace dtrain::compress
