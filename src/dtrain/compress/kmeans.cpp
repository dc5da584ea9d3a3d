// kmeans:B[:ITERS] — 1-D k-means with k = 2^B centroids; code = centroid index.
//
// Fast Lloyd: one pass builds a histogram over the top 16 bits of the order-preserving key
// (count and exact sum per bucket, so each non-empty bucket is a weighted point at its
// mean). Lloyd iterations then run on those <= 65536 sorted points with prefix sums: each
// iteration finds the k-1 midpoints by binary search, O(k log P), independent of n.
// Initialisation: the means of k equal-count slices (quantiles). The final assignment is
// exact: every value gets its nearest centroid. Error per value = distance to it.
#include <cmath>
#include <numeric>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"

namespace dtrain::compress {
namespace {

constexpr int kDefaultMaxIters = 300;
// Up to this many values, Lloyd runs on the sorted distinct values instead of histogram
// buckets (sorting is cheap there, and tiny tensors then decode exactly).
constexpr int64_t kExactPoints = 1 << 16;

struct WeightedPoints {
  std::vector<double> mean;  // ascending
  std::vector<double> weight;
  std::vector<double> cum_w;  // prefix sums, size P+1
  std::vector<double> cum_wx;
};

WeightedPoints histogram_points(const float* x, int64_t n) {
  constexpr int kShift = 16;
  constexpr size_t kBuckets = size_t{1} << (32 - kShift);
  std::vector<uint32_t> count(kBuckets, 0);
  std::vector<double> sum(kBuckets, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = order_key(x[i]) >> kShift;
    ++count[b];
    sum[b] += x[i];
  }
  if (has_non_finite(count.data(), kShift)) throw_non_finite();
  WeightedPoints p;
  if (n <= kExactPoints) {
    // Small tensors: the distinct values themselves are the points (exact k-means).
    std::vector<float> sorted(x, x + n);
    std::sort(sorted.begin(), sorted.end());
    for (float v : sorted) {
      if (!p.mean.empty() && p.mean.back() == v) {
        p.weight.back() += 1;
      } else {
        p.mean.push_back(v);
        p.weight.push_back(1);
      }
    }
  } else {
    for (size_t b = 0; b < kBuckets; ++b) {
      if (count[b] == 0) continue;
      p.mean.push_back(sum[b] / count[b]);
      p.weight.push_back(count[b]);
    }
  }
  p.cum_w.assign(p.mean.size() + 1, 0.0);
  p.cum_wx.assign(p.mean.size() + 1, 0.0);
  for (size_t i = 0; i < p.mean.size(); ++i) {
    p.cum_w[i + 1] = p.cum_w[i] + p.weight[i];
    p.cum_wx[i + 1] = p.cum_wx[i] + p.weight[i] * p.mean[i];
  }
  return p;
}

// Lloyd on weighted sorted points; returns ascending centroids.
std::vector<double> lloyd(const WeightedPoints& p, int k, int max_iters) {
  const size_t P = p.mean.size();
  const double total = p.cum_w[P];
  // Quantile initialisation: cluster j takes the points whose cumulative weight falls in
  // [j/k, (j+1)/k) of the total.
  std::vector<size_t> cut(static_cast<size_t>(k) + 1, 0);
  cut[static_cast<size_t>(k)] = P;
  for (int j = 1; j < k; ++j) {
    const double target = total * j / k;
    cut[static_cast<size_t>(j)] = static_cast<size_t>(
        std::lower_bound(p.cum_w.begin(), p.cum_w.end(), target) - p.cum_w.begin());
    cut[static_cast<size_t>(j)] =
        std::clamp(cut[static_cast<size_t>(j)], cut[static_cast<size_t>(j) - 1], P);
  }
  std::vector<double> c(static_cast<size_t>(k));
  auto recompute = [&](std::vector<double>& centroids) {
    for (int j = 0; j < k; ++j) {
      const size_t a = cut[static_cast<size_t>(j)], b = cut[static_cast<size_t>(j) + 1];
      const double w = p.cum_w[b] - p.cum_w[a];
      if (w > 0) centroids[static_cast<size_t>(j)] = (p.cum_wx[b] - p.cum_wx[a]) / w;
    }
  };
  // Empty initial clusters (fewer points than k) sit at their neighbours' values.
  std::fill(c.begin(), c.end(), P ? p.mean[0] : 0.0);
  recompute(c);
  for (int j = 1; j < k; ++j)
    c[static_cast<size_t>(j)] = std::max(c[static_cast<size_t>(j)], c[static_cast<size_t>(j) - 1]);

  for (int it = 0; it < max_iters; ++it) {
    bool changed = false;
    for (int j = 1; j < k; ++j) {
      const double mid = 0.5 * (c[static_cast<size_t>(j) - 1] + c[static_cast<size_t>(j)]);
      // Points with mean > mid go right (ties to the lower centroid, as in encoding).
      const size_t at =
          static_cast<size_t>(std::upper_bound(p.mean.begin(), p.mean.end(), mid) - p.mean.begin());
      if (at != cut[static_cast<size_t>(j)]) changed = true;
      cut[static_cast<size_t>(j)] = at;
    }
    if (!changed) break;
    recompute(c);
  }
  std::sort(c.begin(), c.end());
  return c;
}

class KMeansCodec final : public Codec {
 public:
  explicit KMeansCodec(const CodecSpec& spec) : spec_(spec), k_(1 << spec.bits) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t) const override { return 4 * static_cast<size_t>(k_); }
  size_t payload_bytes(int64_t n) const override { return packed_bytes(n, spec_.bits); }

  void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                     int threads) const override {
    std::vector<float> centroids(static_cast<size_t>(k_), 0.f);
    if (n > 0) {
      const auto c =
          lloyd(histogram_points(x, n), k_, spec_.iters > 0 ? spec_.iters : kDefaultMaxIters);
      for (int j = 0; j < k_; ++j)
        centroids[static_cast<size_t>(j)] = static_cast<float>(c[static_cast<size_t>(j)]);
      std::sort(centroids.begin(), centroids.end());
    }
    for (int j = 0; j < k_; ++j)
      put_f32(table + 4 * j, centroids[static_cast<size_t>(j)]);
    for_each_block(n, chunk_count(n, threads, kMinEncodeChunk), [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      int32_t index[kCodeBlock];
      const float* xs = x + start;
      if (k_ <= 32) {
        // Centroid by centroid over the block (vectorizes): count the centroids nearer than
        // their left neighbour; with ascending centroids that count is the index.
        std::fill_n(index, count, 0);
        for (int j = 1; j < k_; ++j) {
          const float left = centroids[static_cast<size_t>(j) - 1];
          const float right = centroids[static_cast<size_t>(j)];
          for (int64_t i = 0; i < count; ++i)
            index[i] += (xs[i] - left) > (right - xs[i]) ? 1 : 0;
        }
        for (int64_t i = 0; i < count; ++i)
          codes[i] = static_cast<uint16_t>(index[i]);
      } else {
        for (int64_t i = 0; i < count; ++i)
          codes[i] = nearest(xs[i], centroids);
      }
      pack_bits(codes, count, spec_.bits, payload, start);
    });
  }

  std::vector<float> code_values(const uint8_t* table) const override {
    std::vector<float> centroids(static_cast<size_t>(k_));
    for (int j = 0; j < k_; ++j) {
      centroids[static_cast<size_t>(j)] = get_f32(table + 4 * j);
      if (!std::isfinite(centroids[static_cast<size_t>(j)])) {
        throw CorruptPacket("kmeans packet: centroid " + std::to_string(j) + " is not finite");
      }
    }
    return centroids;
  }

  void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                     int threads) const override {
    const std::vector<float> centroids = code_values(table);
    decode_by_table(payload, n, spec_.bits, centroids.data(), out,
                    chunk_count(n, threads, kMinDecodeChunk));
  }

 private:
  // Index of the nearest centroid (ascending centroids; a tie goes to the lower one).
  static uint16_t nearest(float v, const std::vector<float>& c) {
    const size_t k = c.size();
    size_t j = static_cast<size_t>(std::lower_bound(c.begin(), c.end(), v) - c.begin());
    if (j == k) return static_cast<uint16_t>(k - 1);
    if (j > 0 && (v - c[j - 1]) <= (c[j] - v)) --j;
    return static_cast<uint16_t>(j);
  }

  CodecSpec spec_;
  int k_;
};

CodecSpec parse_kmeans(const std::vector<std::string>& parameters) {
  require_parameter_count(parameters, 1, 2);
  CodecSpec spec;
  spec.bits = integer_parameter(parameters[0]);
  if (parameters.size() == 2) {
    spec.iters = integer_parameter(parameters[1]);
    if (spec.iters < 1) throw std::invalid_argument("iterations must be >= 1");
  }
  return spec;
}

void check_kmeans(const CodecSpec& spec) {
  if (spec.bits < 1 || spec.bits > 8)
    throw std::invalid_argument("bits must be 1..8 (at most 256 centroids)");
  if (spec.iters < 0 || spec.iters > 100000)
    throw std::invalid_argument("iterations must be 0..100000");
}

std::string kmeans_parameters(const CodecSpec& spec) {
  return ":" + std::to_string(spec.bits) + (spec.iters > 0 ? ":" + std::to_string(spec.iters) : "");
}

std::unique_ptr<Codec> make_kmeans(const CodecSpec& spec) {
  return std::make_unique<KMeansCodec>(spec);
}

}  // namespace

// Encodes through host memory on every device (no encode_tensor): its Lloyd iterations run
// on a CPU histogram, whose float sums CUDA would add in another order.
extern const CodecFamily kKMeansCodecFamily{
    "kmeans",
    "kmeans:B[:I]",
    "1-D k-means with 2^B centroids (B 1..8), I Lloyd iterations (default: until stable)",
    "kmeans:4",
    parse_kmeans,
    check_kmeans,
    kmeans_parameters,
    make_kmeans};

}  // namespace dtrain::compress
