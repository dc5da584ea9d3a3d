// The packet header: write/read round trip, fields at their named offsets, and those
// offsets equal to the table in docs/wire-format.md (the format's one prose definition).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "dtrain/compress/packet_header.h"

namespace dtrain::compress {
namespace {

using Off = PacketHeader::Offset;

PacketHeader sample() {
  PacketHeader h;
  h.codec_id = 4;
  h.dtype_code = 3;
  h.bits = 8;
  h.split_bits = 2;
  h.table_bytes = 32;
  h.payload_bytes = 0x0102030405ULL;
  h.numel = 6;
  h.shape = {2, 3};
  return h;
}

TEST(PacketHeaderTest, RoundTripsEveryField) {
  const PacketHeader h = sample();
  std::vector<uint8_t> bytes(h.size());
  h.write(bytes.data());
  const PacketHeader r = PacketHeader::read(bytes.data(), bytes.size());
  EXPECT_EQ(r.codec_id, h.codec_id);
  EXPECT_EQ(r.dtype_code, h.dtype_code);
  EXPECT_EQ(r.bits, h.bits);
  EXPECT_EQ(r.split_bits, h.split_bits);
  EXPECT_EQ(r.table_bytes, h.table_bytes);
  EXPECT_EQ(r.payload_bytes, h.payload_bytes);
  EXPECT_EQ(r.numel, h.numel);
  EXPECT_EQ(r.shape, h.shape);
  EXPECT_EQ(r.size(), 32u + 16u);
}

TEST(PacketHeaderTest, FieldsSitAtTheirOffsetsLittleEndian) {
  const PacketHeader h = sample();
  std::vector<uint8_t> b(h.size());
  h.write(b.data());
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "DTCK");
  EXPECT_EQ(b[Off::kVersion], 1);
  EXPECT_EQ(b[Off::kCodec], 4);
  EXPECT_EQ(b[Off::kDtype], 3);
  EXPECT_EQ(b[Off::kNdim], 2);
  EXPECT_EQ(b[Off::kBits], 8);
  EXPECT_EQ(b[Off::kSplitBits], 2);
  EXPECT_EQ(b[Off::kInner] | b[Off::kTileLog2], 0);  // not a rotated packet
  EXPECT_EQ(b[Off::kTableBytes], 32);
  EXPECT_EQ(b[Off::kPayloadBytes], 0x05);
  EXPECT_EQ(b[Off::kPayloadBytes + 4], 0x01);
  EXPECT_EQ(b[Off::kNumel], 6);
  EXPECT_EQ(b[Off::kShape], 2);
  EXPECT_EQ(b[Off::kShape + 8], 3);
}

TEST(PacketHeaderTest, ReaderRejectsWhatTheHeaderAloneShows) {
  const PacketHeader h = sample();
  std::vector<uint8_t> b(h.size());
  h.write(b.data());
  EXPECT_THROW(PacketHeader::read(b.data(), 31), CorruptPacket);
  EXPECT_THROW(PacketHeader::read(b.data(), 40), CorruptPacket);  // truncated shape
  auto broken = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> c = b;
    c[at] = value;
    return c;
  };
  for (const auto& c : {broken(Off::kMagic, 'X'), broken(Off::kVersion, 2), broken(Off::kNdim, 9)})
    EXPECT_THROW(PacketHeader::read(c.data(), c.size()), CorruptPacket);
}

// Rows of the doc's table: "| offset | size | field | rule |", offset and size numeric.
std::map<std::string, std::pair<size_t, size_t>> documented_fields() {
  std::ifstream in(std::string(DTRAIN_SOURCE_DIR) + "/docs/wire-format.md");
  std::map<std::string, std::pair<size_t, size_t>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, '|');) {
      const size_t a = cell.find_first_not_of(' '), z = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, z - a + 1));
    }
    if (cells.size() < 4 || cells[1].empty() || !isdigit(cells[1][0]) || !isdigit(cells[2][0]))
      continue;
    rows[cells[3].substr(0, cells[3].find(' '))] = {std::stoul(cells[1]), std::stoul(cells[2])};
  }
  return rows;
}

TEST(PacketHeaderTest, OffsetsMatchDocsWireFormat) {
  const auto doc = documented_fields();
  const std::map<std::string, std::pair<size_t, size_t>> code = {
      {"magic", {Off::kMagic, 4}},
      {"version", {Off::kVersion, 1}},
      {"codec", {Off::kCodec, 1}},
      {"original", {Off::kDtype, 1}},
      {"ndim", {Off::kNdim, 1}},
      {"bits", {Off::kBits, 1}},
      {"split", {Off::kSplitBits, 1}},
      {"inner", {Off::kInner, 1}},
      {"tile", {Off::kTileLog2, 1}},
      {"table", {Off::kTableBytes, 4}},
      {"payload", {Off::kPayloadBytes, 8}},
      {"numel", {Off::kNumel, 8}},
  };
  ASSERT_FALSE(doc.empty()) << "docs/wire-format.md not found or has no field table";
  for (const auto& [name, where] : code) {
    ASSERT_TRUE(doc.count(name)) << "docs/wire-format.md lacks the field " << name;
    EXPECT_EQ(doc.at(name), where) << name;
  }
  // The shape starts where the fixed fields end.
  ASSERT_TRUE(doc.count("shape"));
  EXPECT_EQ(doc.at("shape").first, Off::kShape);
  size_t end = 0;
  for (const auto& [name, where] : doc)
    if (name != "shape") end = std::max(end, where.first + where.second);
  EXPECT_EQ(end, PacketHeader::kFixedBytes);
}

}  // namespace
}  // namespace dtrain::compress
