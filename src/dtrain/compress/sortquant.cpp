// sortquant:Q:S — seed 001's Sort Quantization without the sort.
//
// Ranks are cut into G = 2^S groups of equal count: group g holds ranks [k_g, k_{g+1}),
// k_g = g * n / G. Its range is [value at rank k_g, value at rank k_{g+1} - 1], quantized
// uniformly with 2^Q levels; code = g * 2^Q + level; the table holds (min, step) per group.
// The encoder finds those order statistics by selection (selection.h), then assigns each
// value to the group whose threshold range holds it: value >= t_g = value at rank k_g.
// Values tied with a threshold all land in the upper group, so only ties make group sizes
// differ from equal. Decoding is a table lookup.
#include <cmath>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"

namespace dtrain::compress {
namespace {

class SortQuantCodec final : public Codec {
 public:
  explicit SortQuantCodec(const CodecSpec& spec)
      : spec_(spec), level_bits_(spec.bits - spec.split_bits), groups_(1 << spec.split_bits) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t) const override { return 8 * static_cast<size_t>(groups_); }
  size_t payload_bytes(int64_t n) const override { return packed_bytes(n, spec_.bits); }

  void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                     int threads) const override {
    GroupTable groups = GroupTable::empty(groups_);
    if (n > 0) {
      groups = sortquant_table(order_statistics(x, n, sortquant_ranks(n, groups_), threads), n,
                               groups_, level_bits_);  // order_statistics checks finiteness
    }
    groups.write(table);
    const std::vector<float>& thresholds = groups.thresholds;
    const std::vector<float>& lo = groups.lo;
    const std::vector<float>& step = groups.step;

    const int max_level = (1 << level_bits_) - 1;
    const int chunks = chunk_count(n, threads, kMinEncodeChunk);
    if (thresholds.size() <= static_cast<size_t>(kMaxInlineThresholds)) {
      for_each_block(n, chunks, [&](int64_t start, int64_t count) {
        uint16_t codes[kCodeBlock];
        quantize_grouped(x + start, count, thresholds.data(), static_cast<int>(thresholds.size()),
                         lo.data(), step.data(), level_bits_, max_level, codes);
        pack_bits(codes, count, spec_.bits, payload, start);
      });
      return;
    }
    for_each_block(n, chunks, [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      for (int64_t i = 0; i < count; ++i) {
        const float v = x[start + i];
        const auto g = static_cast<size_t>(
            std::upper_bound(thresholds.begin(), thresholds.end(), v) - thresholds.begin());
        codes[i] =
            static_cast<uint16_t>((g << level_bits_) | quantize(v, lo[g], step[g], max_level));
      }
      pack_bits(codes, count, spec_.bits, payload, start);
    });
  }

  std::vector<float> code_values(const uint8_t* table) const override {
    std::vector<float> lo(static_cast<size_t>(groups_)), step(static_cast<size_t>(groups_));
    for (int g = 0; g < groups_; ++g) {
      lo[static_cast<size_t>(g)] = get_f32(table + 8 * g);
      step[static_cast<size_t>(g)] = get_f32(table + 8 * g + 4);
      if (!std::isfinite(lo[static_cast<size_t>(g)]) ||
          !std::isfinite(step[static_cast<size_t>(g)]) || step[static_cast<size_t>(g)] < 0.f) {
        throw CorruptPacket("sortquant packet: invalid (min, step) for group " + std::to_string(g));
      }
    }
    // value[code] = lo[g] + level * step[g].
    const int levels = 1 << level_bits_;
    std::vector<float> value(static_cast<size_t>(groups_) * static_cast<size_t>(levels));
    for (int g = 0; g < groups_; ++g) {
      for (int l = 0; l < levels; ++l) {
        value[static_cast<size_t>(g * levels + l)] = dequantize(
            static_cast<uint16_t>(l), lo[static_cast<size_t>(g)], step[static_cast<size_t>(g)]);
      }
    }
    return value;
  }

  void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                     int threads) const override {
    const std::vector<float> value = code_values(table);  // decoding is a table lookup
    decode_by_table(payload, n, spec_.bits, value.data(), out,
                    chunk_count(n, threads, kMinDecodeChunk));
  }

 private:
  CodecSpec spec_;
  int level_bits_;
  int groups_;
};

}  // namespace

std::vector<int64_t> sortquant_ranks(int64_t n, int groups) {
  std::vector<int64_t> ranks;
  for (int g = 0; g < groups; ++g) {
    const int64_t begin = g * n / groups, end = (g + 1) * n / groups;
    if (begin < end) {
      ranks.push_back(begin);
      ranks.push_back(end - 1);
    } else {
      ranks.push_back(std::min(begin, n - 1));
      ranks.push_back(std::min(begin, n - 1));
    }
  }
  return ranks;
}

GroupTable GroupTable::empty(int groups) {
  GroupTable t;
  t.lo.assign(static_cast<size_t>(groups), 0.f);
  t.step.assign(static_cast<size_t>(groups), 0.f);
  return t;
}

GroupTable sortquant_table(const std::vector<float>& stats, int64_t n, int groups, int level_bits) {
  GroupTable t = GroupTable::empty(groups);
  const int levels = 1 << level_bits;
  for (int g = 0; g < groups; ++g) {
    const int64_t begin = g * n / groups, end = (g + 1) * n / groups;
    const float group_min = stats[2 * static_cast<size_t>(g)];
    const float group_max = stats[2 * static_cast<size_t>(g) + 1];
    if (g > 0) t.thresholds.push_back(group_min);
    if (begin < end) {  // empty groups keep (0, 0): no value maps to them
      t.lo[static_cast<size_t>(g)] = group_min;
      t.step[static_cast<size_t>(g)] = level_step(group_min, group_max, levels);
    }
  }
  return t;
}

void GroupTable::write(uint8_t* table) const {
  for (size_t g = 0; g < lo.size(); ++g) {
    put_f32(table + 8 * g, lo[g]);
    put_f32(table + 8 * g + 4, step[g]);
  }
}

std::unique_ptr<Codec> make_sortquant_codec(const CodecSpec& spec) {
  return std::make_unique<SortQuantCodec>(spec);
}

}  // namespace dtrain::compress
