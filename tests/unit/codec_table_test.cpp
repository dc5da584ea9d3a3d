// The codec table (compress/codec_table.cpp): every row parses, codes and decodes under its
// own wire id, --help lists every row, and the first id past the table is a corrupt packet.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "../support/codec_names.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/codec_family.h"

namespace dtrain::compress {
namespace {

TEST(CodecTableTest, EveryRowParsesCodesAndDecodesUnderItsOwnWireId) {
  const auto& families = codec_families();
  ASSERT_GE(families.size(), 6u);  // the six families the packets of version 1 name
  const std::string help = codec_help();
  std::set<std::string> names;
  at::manual_seed(1);
  const at::Tensor x = at::randn({3000});
  for (size_t id = 0; id < families.size(); ++id) {
    const CodecFamily& family = *families[id];
    SCOPED_TRACE(family.example);
    EXPECT_TRUE(names.insert(family.name).second) << "two rows named " << family.name;
    EXPECT_EQ(find_codec_family(static_cast<CodecId>(id)), &family);
    EXPECT_NE(help.find(family.usage), std::string::npos) << help;
    const CodecSpec spec = parse_codec(family.example);
    EXPECT_EQ(static_cast<size_t>(spec.id), id);
    EXPECT_EQ(parse_codec(to_string(spec)), spec) << to_string(spec);
    const auto codec = make_codec(spec);
    const Packet packet = encode(*codec, x);
    EXPECT_EQ(packet[PacketHeader::Offset::kCodec], id);
    const at::Tensor back = decode(packet);
    const double error = (back - x).pow(2).mean().item<double>() / x.var().item<double>();
    // Better than the mean at any width (1-bit Lloyd-Max: 0.36 of the variance); from 4 bits
    // on, within 0.05 (4-bit Lloyd-Max: 0.0095).
    EXPECT_LT(error, spec.bits >= 4 ? 0.05 : 0.5);
  }
  // The ids the packets already name keep their rows.
  EXPECT_EQ(parse_codec("none").id, CodecId::kNone);
  EXPECT_EQ(parse_codec("fp16").id, CodecId::kFp16);
  EXPECT_EQ(parse_codec("bf16").id, CodecId::kBf16);
  EXPECT_EQ(parse_codec("uniform:8").id, CodecId::kUniform);
  EXPECT_EQ(parse_codec("sortquant:8").id, CodecId::kSortQuant);
  EXPECT_EQ(parse_codec("kmeans:4").id, CodecId::kKMeans);
}

TEST(CodecTableTest, TheFirstIdPastTheTableIsACorruptPacket) {
  const auto codec = make_codec("uniform:8");
  Packet packet = encode(*codec, at::randn({10}));
  packet[PacketHeader::Offset::kCodec] = static_cast<uint8_t>(codec_families().size());
  try {
    inspect(packet.data(), packet.size());
    FAIL() << "accepted codec id " << codec_families().size();
  } catch (const CorruptPacket& e) {
    EXPECT_NE(std::string(e.what()).find("unknown codec id"), std::string::npos) << e.what();
  }
}

TEST(CodecTableTest, NamesOutsideTheTableAndBadParametersAreClearErrors) {
  const auto message = dtrain::testing::parse_error;
  EXPECT_NE(message("zstd").find("unknown codec 'zstd'"), std::string::npos);
  EXPECT_NE(message("zstd").find("sortquant:Q:S"), std::string::npos);  // the help follows
  EXPECT_EQ(message("uniform:x"), "codec 'uniform:x': 'x' is not an integer");
  EXPECT_EQ(message("uniform:4:2"), "codec 'uniform:4:2': wrong number of ':' parameters");
  EXPECT_EQ(message("fp16:2"), "codec 'fp16:2': wrong number of ':' parameters");
  EXPECT_EQ(message("uniform:17"), "codec 'uniform:17': bits must be 1..16");
}

}  // namespace
}  // namespace dtrain::compress
