// The fixed part of every codec packet, defined once: the field offsets, the writer and
// the reader (docs/wire-format.md is the same table in prose; a unit test checks the two
// agree). The reader checks what the header alone can show (magic, version, ndim, that the
// shape fits); compress::inspect() checks the fields against the codec and the packet's
// size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace dtrain::compress {

class CorruptPacket : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PacketHeader {
  static constexpr uint8_t kMagic[4] = {'D', 'T', 'C', 'K'};
  static constexpr uint8_t kVersion = 1;
  static constexpr int kMaxDims = 8;

  // Byte offsets of the fields (little-endian integers); the shape follows the fixed part.
  struct Offset {
    static constexpr size_t kMagic = 0;          // 4 bytes
    static constexpr size_t kVersion = 4;        // 1
    static constexpr size_t kCodec = 5;          // 1
    static constexpr size_t kDtype = 6;          // 1
    static constexpr size_t kNdim = 7;           // 1
    static constexpr size_t kBits = 8;           // 1
    static constexpr size_t kSplitBits = 9;      // 1
    static constexpr size_t kInner = 10;         // 1: a rotated packet's value codec, else 0
    static constexpr size_t kTileLog2 = 11;      // 1: a rotated packet's tile, else 0
    static constexpr size_t kTableBytes = 12;    // 4
    static constexpr size_t kPayloadBytes = 16;  // 8
    static constexpr size_t kNumel = 24;         // 8
    static constexpr size_t kShape = 32;         // 8 x ndim, int64
  };
  static constexpr size_t kFixedBytes = Offset::kShape;

  uint8_t codec_id = 0;
  uint8_t dtype_code = 0;
  uint8_t bits = 0;
  uint8_t split_bits = 0;
  uint8_t inner = 0;
  uint8_t tile_log2 = 0;
  uint32_t table_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t numel = 0;
  std::vector<int64_t> shape;

  // Bytes write() produces: the fixed part and the shape.
  size_t size() const { return kFixedBytes + 8 * shape.size(); }
  // Writes size() bytes at `out`.
  void write(uint8_t* out) const;
  // Reads a header from the first bytes of a `size`-byte packet; throws CorruptPacket.
  static PacketHeader read(const uint8_t* data, size_t size);
};

}  // namespace dtrain::compress
