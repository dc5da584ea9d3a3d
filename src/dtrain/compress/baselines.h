// Benchmark baselines (not user codecs) and the independent references the tests compare
// against. Written with plain LibTorch ops, the way reference Python implementations do it, sharing
// nothing with the real codecs but the quantization rule (codecs.h's quantize/dequantize formula).
#pragma once

#include <ATen/core/Tensor.h>

namespace dtrain::compress::baseline {

// Sort Quantization as first written: torch::sort the whole tensor, split the sorted order into
// 2^S equal-count groups (group g = ranks [g*n/G, (g+1)*n/G)), quantize each between its
// own min and max with 2^Q levels, scatter codes back. Returns int32 codes and the
// (min, step) table as a [G, 2] float tensor.
struct SortQuantResult {
  at::Tensor codes;
  at::Tensor table;
};
SortQuantResult sortquant_encode(const at::Tensor& x, int level_bits, int split_bits);
// Decode as the seed does: sort the codes, expand each group's levels, scatter back.
at::Tensor sortquant_decode(const SortQuantResult& encoded, int level_bits);

// Plain Lloyd's k-means over all n values, O(n k) per iteration, from the same quantile
// initialisation as the real codec (means of k equal-count slices of the sorted values).
// Returns the centroids and each value's centroid index.
struct KMeansResult {
  at::Tensor centroids;
  at::Tensor assignment;
};
KMeansResult kmeans(const at::Tensor& x, int k, int iters);
at::Tensor kmeans_decode(const KMeansResult& encoded, at::IntArrayRef shape);

}  // namespace dtrain::compress::baseline
