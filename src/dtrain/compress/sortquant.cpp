// sortquant:Q:S — sort quantization (values split by rank order into equal-count groups,
// each quantized uniformly between its own min and max), without the sort.
//
// Ranks are cut into G = 2^S groups of equal count: group g holds ranks [k_g, k_{g+1}),
// k_g = g * n / G. Its range is [value at rank k_g, value at rank k_{g+1} - 1], quantized
// uniformly with 2^Q levels; code = g * 2^Q + level; the table holds (min, step) per group.
// The encoder finds those order statistics by selection (selection.h), then assigns each
// value to the group whose threshold range holds it: value >= t_g = value at rank k_g.
// Values tied with a threshold all land in the upper group, so only ties make group sizes
// differ from equal. Decoding is a table lookup.
#include <ATen/ATen.h>

#include <cmath>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"
#include "dtrain/compress/tensor_kernels.h"

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

  bool encodes_tensors() const override { return true; }

  // The order statistics by a sort of the keys: exact, as the CPU's radix select.
  void encode_tensor(const at::Tensor& values, uint8_t* table, uint8_t* payload) const override {
    const int64_t n = values.numel();
    const at::Tensor sorted = std::get<0>(signed_keys(values).sort());
    std::vector<int64_t> ranks = sortquant_ranks(n, groups_);
    ranks.push_back(0);
    ranks.push_back(n - 1);
    const std::vector<int32_t> keys = keys_at(sorted, ranks);
    require_finite_keys(keys[keys.size() - 2], keys.back());
    std::vector<float> stats;
    for (size_t i = 0; i + 2 < keys.size(); ++i)
      stats.push_back(value_of_signed_key(keys[i]));
    const GroupTable t = sortquant_table(stats, n, groups_, level_bits_);
    t.write(table);

    // The table to the device in one copy: lo, step, then the thresholds.
    std::vector<float> host = t.lo;
    host.insert(host.end(), t.step.begin(), t.step.end());
    host.insert(host.end(), t.thresholds.begin(), t.thresholds.end());
    const at::Tensor table_on_device =
        at::tensor(host, at::TensorOptions().dtype(at::kFloat)).to(values.device());
    const at::Tensor lo = table_on_device.narrow(0, 0, groups_);
    const at::Tensor step = table_on_device.narrow(0, groups_, groups_);
    const at::Tensor thresholds =
        table_on_device.narrow(0, 2 * groups_, static_cast<int64_t>(t.thresholds.size()));
    // Group g holds the values >= t_g: the count of thresholds <= x (bucketize, right).
    const at::Tensor group = t.thresholds.empty()
                                 ? at::zeros({n}, values.options().dtype(at::kInt))
                                 : at::bucketize(values, thresholds, /*out_int32=*/true,
                                                 /*right=*/true);
    const at::Tensor level = quantize_levels(values, lo.index_select(0, group),
                                             step.index_select(0, group), (1 << level_bits_) - 1);
    copy_to_host(pack_codes(group.bitwise_left_shift(level_bits_).bitwise_or(level), spec_.bits),
                 payload);
  }

 private:
  CodecSpec spec_;
  int level_bits_;
  int groups_;
};

// sortquant:Q:S, or sortquant:B for a 3:1 split of B bits.
CodecSpec parse_sortquant(const std::vector<std::string>& parameters) {
  require_parameter_count(parameters, 1, 2);
  CodecSpec spec;
  if (parameters.size() == 2) {
    const int q = integer_parameter(parameters[0]);
    spec.split_bits = integer_parameter(parameters[1]);
    spec.bits = q + spec.split_bits;
    return spec;
  }
  const int b = integer_parameter(parameters[0]);
  if (b < 2 || b > 16 || b % 4 != 0) {
    throw std::invalid_argument(
        "the 3:1 shorthand takes 4, 8, 12 or 16 bits; use sortquant:Q:S otherwise");
  }
  spec.bits = b;
  spec.split_bits = b / 4;
  return spec;
}

void check_sortquant(const CodecSpec& spec) {
  if (spec.split_bits < 0 || spec.bits - spec.split_bits < 1 || spec.bits > 16)
    throw std::invalid_argument("need Q >= 1 level bits, S >= 0 split bits, Q+S <= 16");
}

std::string sortquant_parameters(const CodecSpec& spec) {
  return ":" + std::to_string(spec.bits - spec.split_bits) + ":" + std::to_string(spec.split_bits);
}

std::unique_ptr<Codec> make_sortquant(const CodecSpec& spec) {
  return std::make_unique<SortQuantCodec>(spec);
}

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

extern const CodecFamily kSortQuantCodecFamily{
    "sortquant",
    "sortquant:Q:S",
    "sort quantization: 2^S equal-count groups by rank, 2^Q levels each; sortquant:B is a "
    "3:1 split of B = 4, 8, 12, 16 bits (8 = 6+2)",
    "sortquant:8",
    parse_sortquant,
    check_sortquant,
    sortquant_parameters,
    make_sortquant};

}  // namespace dtrain::compress
