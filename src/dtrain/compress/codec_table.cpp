// The codec table: one row per family, in wire-id order (a packet's codec id is its row's
// index, so a new family is appended, never inserted). Adding a family: one file holding
// its Codec, its kernels and its CodecFamily row, and one line here.
#include "dtrain/base/parse.h"
#include "dtrain/base/table.h"
#include "dtrain/compress/codec_family.h"

namespace dtrain::compress {

#define DTRAIN_CODEC_TABLE(ROW, T)                     \
  ROW(T, kNoneCodecFamily)      /* 0: cast.cpp */      \
  ROW(T, kFp16CodecFamily)      /* 1: cast.cpp */      \
  ROW(T, kBf16CodecFamily)      /* 2: cast.cpp */      \
  ROW(T, kUniformCodecFamily)   /* 3: uniform.cpp */   \
  ROW(T, kSortQuantCodecFamily) /* 4: sortquant.cpp */ \
  ROW(T, kKMeansCodecFamily)    /* 5: kmeans.cpp */    \
  ROW(T, kRotatedCodecFamily)   /* 6: rotated.cpp */   \
  ROW(T, kTileCodecFamily)      /* 7: tile.cpp */

DTRAIN_TABLE(CodecFamily, codec_families, DTRAIN_CODEC_TABLE)

const CodecFamily* find_codec_family(CodecId id) {
  const auto& table = codec_families();
  const auto index = static_cast<size_t>(id);
  return index < table.size() ? table[index] : nullptr;
}

int integer_parameter(const std::string& text) {
  const auto v = parse_integer(text, -1'000'000, 1'000'000);
  if (!v) throw std::invalid_argument("'" + text + "' is not an integer");
  return static_cast<int>(*v);
}

void require_parameter_count(const std::vector<std::string>& parameters, size_t lo, size_t hi) {
  if (parameters.size() < lo || parameters.size() > hi)
    throw std::invalid_argument("wrong number of ':' parameters");
}

CodecSpec parse_bits_parameter(const std::vector<std::string>& parameters) {
  require_parameter_count(parameters, 1, 1);
  CodecSpec spec;
  spec.bits = integer_parameter(parameters[0]);
  return spec;
}

std::string bits_parameter(const CodecSpec& spec) {
  return ":" + std::to_string(spec.bits);
}

}  // namespace dtrain::compress
